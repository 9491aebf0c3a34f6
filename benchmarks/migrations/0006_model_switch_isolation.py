# The model_switch and isolation validation tests (benchmarks/suite.py): two new BenchmarkRun.test
# choices. Depends on 0004; the integrator re-points it after 0005_overload_test.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0004_run_enqueued_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="benchmarkrun",
            name="test",
            field=models.CharField(
                choices=[
                    ("concurrency_stress", "concurrency_stress"),
                    ("long_context", "long_context"),
                    ("swap_recovery", "swap_recovery"),
                    ("prefix_reuse", "prefix_reuse"),
                    ("stability", "stability"),
                    ("model_switch", "model_switch"),
                    ("isolation", "isolation"),
                    ("trace_replay", "trace_replay"),
                    ("custom", "custom"),
                ],
                max_length=32,
            ),
        ),
    ]
