"""SQLite only: put back the evidence triggers of 0008 that a later table rebuild dropped.

SQLite cannot add a NOT NULL column with a default in place, so Django rebuilds the table (create,
copy, drop, rename) and the old table's triggers go with it: 0010's two URL fields on
selection_candidate removed `kvselect_evidence_selection_candidate`, and a cited candidate could be
deleted through SQL on the embedded default database. PostgreSQL adds columns in place and kept its
triggers. Re-creating every 0008 trigger (drop if present, create) leaves each database with the
full set whichever were lost.
"""

import importlib

from django.db import migrations

evidence = importlib.import_module("selection.migrations.0008_evidence_deletion_triggers")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for drop, create in zip(evidence.SQLITE_REVERSE, evidence.SQLITE, strict=True):
        schema_editor.execute(drop)
        schema_editor.execute(create)


class Migration(migrations.Migration):
    dependencies = [("selection", "0010_candidate_prefix_off_endpoint")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
