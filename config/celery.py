"""The Celery app. Queues and routes are declared here, in one place, with how work is handed to the broker.

Queues: `default` (scoring, the beat jobs), `parse` (parsing large uploads: never behind a backlog of
rescorings), `gpu` (validation runs; one worker per GPU node or pool, each consuming `gpu.<label>`),
`render` (decision-record PDFs). The production topology (one worker per queue, beat on its own) is
in the README.

Producers never wait on a broker that is down: `publish` sends over its own pool of connections with
a short connect and socket timeout and no connection retry (Redis), and after a refusal sends nothing
for BROKER_PAUSE_S, so a request that queues work answers at once (the caller records that the work
waits; beat's jobs send it again). Workers' consumers and `celery inspect` keep Celery's connections.
Tasks built on `DatabaseTask` wait out a database outage with back-off (`config.outage`), one log line
per outage.
"""

from __future__ import annotations

import logging
import os
import time

from celery import Celery, Task
from django.conf import settings
from kombu import Queue

from config.outage import Outage, retry_database

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

logger = logging.getLogger(__name__)

QUEUES = ("default", "parse", "gpu", "render")  # a worker for all of them: `-Q default,parse,gpu,render`
# Producer side (Redis): fail within this long when the broker does not answer, instead of kombu's
# default retries (~6 s a request while Redis was down).
PRODUCER_CONNECT_TIMEOUT_S = 0.2
PRODUCER_TRANSPORT_OPTIONS = {"max_retries": 0, "socket_connect_timeout": 0.2, "socket_timeout": 0.3}
BROKER_PAUSE_S = 3.0  # after a refusal, publish nothing for this long (the work is marked as waiting)
BROKER = Outage("job queue (broker)", "work is marked as waiting and beat sends it again")


def is_redis(url: str | None) -> bool:
    return str(url or "").startswith(("redis://", "rediss://", "redis+socket://"))


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
    task_queues=tuple(Queue(name) for name in QUEUES),
    task_routes={
        "benchmarks.tasks.run_validation": {"queue": "gpu"},
        "benchmarks.tasks.parse_upload": {"queue": "parse"},
        "selection.tasks.render_record": {"queue": "render"},
        "selection.tasks.recompute_scores": {"queue": "default"},
        "selection.tasks.resend_rescoring": {"queue": "default"},
    },
    broker_connection_retry_on_startup=True,
    # Each beat job expires after its interval: jobs beat sent while the workers waited out an outage
    # are dropped, not run back to back when it ends (the next one covers them).
    beat_schedule={
        "reap-stale-runs": {
            "task": "benchmarks.tasks.reap_stale_runs",
            "schedule": settings.KVSELECT_REAPER_INTERVAL_S,
            "options": {"expires": settings.KVSELECT_REAPER_INTERVAL_S},
        },
        # signed decisions whose review-by date passed, whose engine has a newer major version in the
        # catalog or whose hardware changed: marked, listed on the dashboard, owners emailed
        "flag-reevaluations": {
            "task": "selection.tasks.flag_reevaluations",
            "schedule": 6 * 3600.0,
            "options": {"expires": 6 * 3600.0},
        },
        # rescoring requests whose task the broker refused or a dying worker lost
        "resend-rescoring": {
            "task": "selection.tasks.resend_rescoring",
            "schedule": 60.0,
            "options": {"expires": 60.0},
        },
    },
    worker_hijack_root_logger=False,
)
if not str(app.conf.broker_url or "").startswith("sqla+"):
    # Redis: an unacked task is redelivered after this long; longer than any validation run.
    app.conf.broker_transport_options = {"visibility_timeout": settings.KVSELECT_BROKER_VISIBILITY_TIMEOUT_S}
app.autodiscover_tasks()


class DatabaseTask(Task):
    """A task that waits out a database outage (a restart, a failover) with back-off and runs again,
    instead of failing (and logging) once per queued message. Only for tasks safe to run twice."""

    def __call__(self, *args, **kwargs):
        return retry_database(lambda: Task.__call__(self, *args, **kwargs), f"task {self.name}")


_producer_pools: dict[tuple[int, str], object] = {}


def producer_connections():
    """This process's pool of publishing connections: short timeouts and no retry on Redis."""
    url = str(app.conf.broker_write_url or app.conf.broker_url)
    key = (os.getpid(), url)  # a forked process (gunicorn, a worker) never shares its parent's sockets
    if key not in _producer_pools:
        options = {}
        if is_redis(url):
            transport = {**(app.conf.broker_transport_options or {}), **PRODUCER_TRANSPORT_OPTIONS}
            options = {"connect_timeout": PRODUCER_CONNECT_TIMEOUT_S, "transport_options": transport}
        _producer_pools[key] = app.connection_for_write(**options).Pool(limit=app.conf.broker_pool_limit or 10)
    return _producer_pools[key]


def publish(task: Task, args: tuple, *, queue: str | None = None) -> bool:
    """Hand a task to the broker now; False when it is down (or refused one less than BROKER_PAUSE_S
    ago): the caller marks the work as waiting and a beat job sends it again. Never raises, never
    blocks for long; one log line per broker outage."""
    if BROKER.down and time.monotonic() - BROKER.last_failure < BROKER_PAUSE_S:
        return False
    options = {"retry": False}
    if queue:
        options["queue"] = queue
    try:
        with producer_connections().acquire(block=True, timeout=1.0) as connection:
            task.apply_async(args, connection=connection, **options)
    except Exception as exc:  # kombu raises OperationalError and friends when the broker is down
        BROKER.failed(exc, task.name)
        logger.debug("could not queue %s%r: %s", task.name, args, exc)
        return False
    BROKER.recovered()
    return True


def gpu_queue(label: str | None) -> str:
    """The queue a validation run for a GPU pool goes to (`gpu` or `gpu.<label>`)."""
    return f"gpu.{label}" if label else "gpu"
