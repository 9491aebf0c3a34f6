"""Fixtures for fault tests: a Celery worker this test may SIGKILL, a candidate on a live engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings

from tests.support.builders import mock_engine_candidate
from tests.support.environment import ROOT, database_url_for_worker


class KillableWorker:
    """A `celery worker` subprocess consuming one private queue, started and killed by the test."""

    def __init__(self, queue: str, log_path) -> None:
        self.queue, self.log_path = queue, log_path
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> "KillableWorker":
        env = dict(os.environ)
        env["DATABASE_URL"] = database_url_for_worker()
        env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
        self._log = open(self.log_path, "ab")
        offset = self.log_path.stat().st_size
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                self.queue,
                "--pool",
                "threads",
                "-c",
                "2",
                "-n",
                f"kill-{uuid.uuid4().hex[:8]}@%h",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"worker exited early:\n{self.log()[-3000:]}")
            if b"ready." in self.log_path.read_bytes()[offset:]:
                return self
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"worker did not become ready:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node loss would: no shutdown handlers run."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        if getattr(self, "_log", None):
            self._log.close()


def purge(queue: str) -> None:
    from config.celery import app

    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=3)
            with connection.channel() as channel:
                try:
                    channel.queue_purge(queue)
                except Exception:  # the queue may not exist yet
                    pass
    except Exception as exc:  # an unreachable broker fails the test; it is never skipped
        pytest.fail(f"Celery broker {settings.CELERY_BROKER_URL!r} unreachable: {exc}")


@pytest.fixture
def gpu_pool_label():
    return f"rel{uuid.uuid4().hex[:10]}"


@pytest.fixture
def killable_worker(tmp_path, gpu_pool_label):
    from config.celery import gpu_queue

    queue = gpu_queue(gpu_pool_label)
    purge(queue)
    worker = KillableWorker(queue, tmp_path / "worker.log")
    yield worker
    worker.kill()
    purge(queue)


@pytest.fixture
def engine_candidate(selection_with_constraints, architect, engines, mock_engine, gpu_pool_label):
    """A vLLM candidate pointing at the in-process mock engine, on a private GPU pool queue."""
    return mock_engine_candidate(
        selection_with_constraints, architect, engines["vllm"], mock_engine.url, gpu_pool=gpu_pool_label
    )
