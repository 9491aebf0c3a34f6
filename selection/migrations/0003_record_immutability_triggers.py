"""Database-level immutability of decision records.

- Once review starts (status != draft) the snapshot and the draft fields cannot change.
- Once signed (or superseded) the PDFs and hashes cannot change, and the only status change
  allowed is signed -> superseded.
- A record that left draft cannot be deleted.
The service layer enforces the same rules with friendly errors; these triggers stop everything
else (the admin, a shell, raw SQL through the ORM).
"""

from django.db import migrations

FROZEN = ("snapshot", "snapshot_sha256", "decision", "rationale", "applies_to", "does_not_apply_to", "review_by",
          "version", "selection_id", "supersedes_id", "include_simulated")
SEALED = ("pdf", "pdf_sha256", "signed_pdf", "signed_sha256", "signed_at")


def _changed(columns, op):
    return " OR ".join(f"NEW.{c} {op} OLD.{c}" for c in columns)


SQLITE = [
    f"""CREATE TRIGGER kvselect_record_frozen BEFORE UPDATE ON selection_decisionrecord
    WHEN OLD.status <> 'draft' AND ({_changed(FROZEN, 'IS NOT')})
    BEGIN SELECT RAISE(ABORT, 'decision record is frozen: create a new version'); END;""",
    f"""CREATE TRIGGER kvselect_record_sealed BEFORE UPDATE ON selection_decisionrecord
    WHEN OLD.status IN ('signed', 'superseded') AND (({_changed(SEALED, 'IS NOT')})
         OR (NEW.status <> OLD.status AND NOT (OLD.status = 'signed' AND NEW.status = 'superseded')))
    BEGIN SELECT RAISE(ABORT, 'decision record is signed and immutable'); END;""",
    """CREATE TRIGGER kvselect_record_nodelete BEFORE DELETE ON selection_decisionrecord
    WHEN OLD.status <> 'draft'
    BEGIN SELECT RAISE(ABORT, 'decision record left draft and cannot be deleted'); END;""",
]
SQLITE_REVERSE = ["DROP TRIGGER IF EXISTS kvselect_record_frozen;", "DROP TRIGGER IF EXISTS kvselect_record_sealed;",
                  "DROP TRIGGER IF EXISTS kvselect_record_nodelete;"]

POSTGRES = [
    f"""CREATE OR REPLACE FUNCTION kvselect_record_guard() RETURNS trigger AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN RAISE EXCEPTION 'decision record left draft and cannot be deleted'; END IF;
        RETURN OLD;
      END IF;
      IF OLD.status <> 'draft' AND ({_changed(FROZEN, 'IS DISTINCT FROM')}) THEN
        RAISE EXCEPTION 'decision record is frozen: create a new version';
      END IF;
      IF OLD.status IN ('signed', 'superseded') AND (({_changed(SEALED, 'IS DISTINCT FROM')})
         OR (NEW.status <> OLD.status AND NOT (OLD.status = 'signed' AND NEW.status = 'superseded'))) THEN
        RAISE EXCEPTION 'decision record is signed and immutable';
      END IF;
      RETURN NEW;
    END; $$ LANGUAGE plpgsql;""",
    """CREATE TRIGGER kvselect_record_guard BEFORE UPDATE OR DELETE ON selection_decisionrecord
    FOR EACH ROW EXECUTE FUNCTION kvselect_record_guard();""",
]
POSTGRES_REVERSE = ["DROP TRIGGER IF EXISTS kvselect_record_guard ON selection_decisionrecord;",
                    "DROP FUNCTION IF EXISTS kvselect_record_guard();"]


def forwards(apps, schema_editor):
    statements = POSTGRES if schema_editor.connection.vendor == "postgresql" else SQLITE
    if schema_editor.connection.vendor not in ("postgresql", "sqlite"):
        return
    for sql in statements:
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    statements = POSTGRES_REVERSE if schema_editor.connection.vendor == "postgresql" else SQLITE_REVERSE
    for sql in statements:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("selection", "0002_records_and_scores")]
    operations = [migrations.RunPython(forwards, backwards)]
