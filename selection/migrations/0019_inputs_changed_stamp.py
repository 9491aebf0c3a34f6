"""Freshness as a stamp (issue 39 item 3) and one pending rescoring per selection (issue 38 item 1).

Snapshots stored before the stamp existed carry none, so no page can call them current: every
selection with snapshots is marked for rescoring, and beat's `resend-rescoring` job brings each up to
date once (an unchanged inputs hash keeps its row and only stamps it).
"""

from django.db import migrations, models
from django.utils import timezone


def stamp(apps, schema_editor):
    Selection = apps.get_model("selection", "Selection")
    now = timezone.now()
    Selection.objects.update(inputs_changed_at=now)
    Selection.objects.filter(scores__isnull=False).update(scores_requested_at=now)


class Migration(migrations.Migration):
    dependencies = [("selection", "0018_candidate_endpoint_probe")]

    operations = [
        migrations.AddField(
            model_name="selection",
            name="inputs_changed_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="selection",
            name="rescoring_queued_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="score",
            name="inputs_changed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(stamp, migrations.RunPython.noop),
    ]
