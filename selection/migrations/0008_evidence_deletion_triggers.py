"""Evidence behind a record in review, approved, signed or superseded cannot be deleted.

`RecordCitation` rows (written when review starts; backfilled here for existing records from each
snapshot's manifest and score) tie a record to the candidates it compared and the runs it lists.
The foreign keys are PROTECT for the ORM; these triggers refuse everything else (raw SQL, a
shell, a cascade the ORM did not plan): deleting a cited run, one of its artifacts or load points,
a cited candidate, or a citation of a record that left draft.
"""

import re

from django.db import migrations

CITED = "SELECT 1 FROM selection_recordcitation c JOIN selection_decisionrecord r ON r.id = c.record_id " \
        "WHERE r.status <> 'draft' AND {condition}"
GUARDS = {  # table -> the citation that protects a row of it (OLD is the row being deleted)
    "benchmarks_benchmarkrun": "c.run_id = OLD.id",
    "benchmarks_artifact": "c.run_id = OLD.run_id",
    "benchmarks_runpoint": "c.run_id = OLD.run_id",
    "selection_candidate": "c.candidate_id = OLD.id",
}
MESSAGE = "evidence cited by a decision record that left draft cannot be deleted: archive instead"

SQLITE = [
    f"""CREATE TRIGGER kvselect_evidence_{table} BEFORE DELETE ON {table}
    WHEN EXISTS ({CITED.format(condition=condition)})
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;"""
    for table, condition in GUARDS.items()
] + [
    """CREATE TRIGGER kvselect_citation_nodelete BEFORE DELETE ON selection_recordcitation
    WHEN (SELECT status FROM selection_decisionrecord WHERE id = OLD.record_id) <> 'draft'
    BEGIN SELECT RAISE(ABORT, 'a citation of a record that left draft cannot be removed'); END;""",
    """CREATE TRIGGER kvselect_citation_frozen BEFORE UPDATE ON selection_recordcitation
    WHEN (SELECT status FROM selection_decisionrecord WHERE id = OLD.record_id) <> 'draft'
    BEGIN SELECT RAISE(ABORT, 'a citation of a record that left draft cannot be changed'); END;""",
]
SQLITE_REVERSE = [f"DROP TRIGGER IF EXISTS kvselect_evidence_{table};" for table in GUARDS] + [
    "DROP TRIGGER IF EXISTS kvselect_citation_nodelete;",
    "DROP TRIGGER IF EXISTS kvselect_citation_frozen;",
]

POSTGRES = []
for _table, _condition in GUARDS.items():
    POSTGRES += [
        f"""CREATE OR REPLACE FUNCTION kvselect_evidence_guard_{_table}() RETURNS trigger AS $$
        BEGIN
          IF EXISTS ({CITED.format(condition=_condition)}) THEN RAISE EXCEPTION '{MESSAGE}'; END IF;
          RETURN OLD;
        END; $$ LANGUAGE plpgsql;""",
        f"""CREATE TRIGGER kvselect_evidence_{_table} BEFORE DELETE ON {_table}
        FOR EACH ROW EXECUTE FUNCTION kvselect_evidence_guard_{_table}();""",
    ]
POSTGRES += [
    """CREATE OR REPLACE FUNCTION kvselect_citation_guard() RETURNS trigger AS $$
    BEGIN
      IF (SELECT status FROM selection_decisionrecord WHERE id = OLD.record_id) <> 'draft' THEN
        RAISE EXCEPTION 'a citation of a record that left draft cannot be removed or changed';
      END IF;
      IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
      RETURN NEW;
    END; $$ LANGUAGE plpgsql;""",
    """CREATE TRIGGER kvselect_citation_guard BEFORE UPDATE OR DELETE ON selection_recordcitation
    FOR EACH ROW EXECUTE FUNCTION kvselect_citation_guard();""",
]
POSTGRES_REVERSE = []
for _table in GUARDS:
    POSTGRES_REVERSE += [
        f"DROP TRIGGER IF EXISTS kvselect_evidence_{_table} ON {_table};",
        f"DROP FUNCTION IF EXISTS kvselect_evidence_guard_{_table}();",
    ]
POSTGRES_REVERSE += [
    "DROP TRIGGER IF EXISTS kvselect_citation_guard ON selection_recordcitation;",
    "DROP FUNCTION IF EXISTS kvselect_citation_guard();",
]

RUN_NAME = re.compile(r"^run-(\d+) ")


def backfill(apps, schema_editor):
    """Citations for records that left draft before citations existed: the runs their manifest
    lists and the candidates their score compared (those that still exist)."""
    DecisionRecord = apps.get_model("selection", "DecisionRecord")
    RecordCitation = apps.get_model("selection", "RecordCitation")
    Candidate = apps.get_model("selection", "Candidate")
    Score = apps.get_model("selection", "Score")
    BenchmarkRun = apps.get_model("benchmarks", "BenchmarkRun")
    for record in DecisionRecord.objects.exclude(status="draft"):
        snapshot = record.snapshot or {}
        run_ids = {
            int(match.group(1))
            for entry in snapshot.get("manifest") or []
            if (match := RUN_NAME.match(str(entry.get("name", ""))))
        }
        runs = list(BenchmarkRun.objects.filter(pk__in=run_ids))
        candidate_ids = {run.candidate_id for run in runs}
        score = Score.objects.filter(pk=(snapshot.get("score") or {}).get("id")).first()
        if score is not None:
            candidate_ids |= {
                int(c["candidate"]) for c in (score.result or {}).get("candidates", []) if str(c.get("candidate")).isdigit()
            }
        candidate_ids &= set(Candidate.objects.filter(selection_id=record.selection_id).values_list("pk", flat=True))
        for candidate_id in sorted(candidate_ids):
            RecordCitation.objects.get_or_create(record=record, candidate_id=candidate_id, run=None)
        for run in runs:
            RecordCitation.objects.get_or_create(record=record, candidate_id=run.candidate_id, run=run)


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return
    for sql in POSTGRES if vendor == "postgresql" else SQLITE:
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return
    for sql in POSTGRES_REVERSE if vendor == "postgresql" else SQLITE_REVERSE:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("selection", "0007_record_citations")]
    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RunPython(forwards, backwards),
    ]
