"""The Celery app. Queues and routes are declared here, in one place.

Queues: `default` (parsing uploads, scoring), `gpu` (validation runs; one worker per GPU node or
pool, each also consuming `gpu.<label>`), `render` (decision-record PDFs).
"""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("kvselect")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_time_limit=6 * 3600,
    task_soft_time_limit=6 * 3600 - 60,
    task_default_queue="default",
    task_queues=(Queue("default"), Queue("gpu"), Queue("render")),
    task_routes={
        "benchmarks.tasks.run_validation": {"queue": "gpu"},
        "selection.tasks.render_record": {"queue": "render"},
        "selection.tasks.recompute_scores": {"queue": "default"},
        "selection.tasks.resend_rescoring": {"queue": "default"},
    },
    broker_connection_retry_on_startup=True,
    beat_schedule={
        "reap-stale-runs": {
            "task": "benchmarks.tasks.reap_stale_runs",
            "schedule": settings.KVSELECT_REAPER_INTERVAL_S,
        },
        # signed decisions whose review-by date passed, whose engine has a newer major version in the
        # catalog or whose hardware changed: marked, listed on the dashboard, owners emailed
        "flag-reevaluations": {"task": "selection.tasks.flag_reevaluations", "schedule": 6 * 3600.0},
        # rescoring requests whose task the broker refused or a dying worker lost
        "resend-rescoring": {"task": "selection.tasks.resend_rescoring", "schedule": 60.0},
    },
    worker_hijack_root_logger=False,
)
if not str(app.conf.broker_url or "").startswith("sqla+"):
    # Redis: an unacked task is redelivered after this long; longer than any validation run.
    app.conf.broker_transport_options = {"visibility_timeout": settings.KVSELECT_BROKER_VISIBILITY_TIMEOUT_S}
app.autodiscover_tasks()


def gpu_queue(label: str | None) -> str:
    """The queue a validation run for a GPU pool goes to (`gpu` or `gpu.<label>`)."""
    return f"gpu.{label}" if label else "gpu"
