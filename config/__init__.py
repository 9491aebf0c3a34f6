"""The project's configuration package.

The Celery app (`config.celery`) is not imported here, unlike Django's usual Celery recipe, which
imports it so that `@shared_task` binds to it: every task module here imports `config.celery` itself
(its `publish`, `DatabaseTask`, the queues), so the app exists wherever a task does, and a command
that runs no task (`verify-record`, `migrate`) does not pay Celery's start-up (issue 39).
`celery -A config` finds the app in `config.celery`; `config.celery_app` still gives it.
"""

__all__ = ("celery_app",)


def __getattr__(name: str):
    if name == "celery_app":
        from config.celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
