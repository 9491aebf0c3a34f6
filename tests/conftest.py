"""Shared fixtures: users and teams, a sample selection, and a real Celery worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import translation

from selection.candidates.services import load_engine_catalog
from selection.models import Engine, Membership, Team
from selection.setup.services import create_selection, save_constraints

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"

SAMPLE_CONSTRAINTS = {
    "peak_concurrency": 200,
    "request_rate": 20.0,
    "avg_input_tokens": 800,
    "p95_input_tokens": 2000,
    "max_input_tokens": 4096,
    "avg_output_tokens": 200,
    "max_output_tokens": 1024,
    "multi_turn": False,
    "ttft_p95_ms": 800.0,
    "tpot_p95_ms": 60.0,
    "e2e_p95_ms": 15000.0,
    "gpu_model": "H100",
    "gpu_memory_gib": 80.0,
    "gpu_count_budget": 4,
    "cost_per_gpu_hour": "2.50",
    "ops_team_size": 3,
    "target_model": "Llama-3.1-8B",
    "kv_precisions_allowed": ["bf16", "fp8"],
}


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, team: Team | None = None, role: str = Membership.Role.ARCHITECT):
        user = django_user_model.objects.create_user(username=username, password="pw-" + username + "-Long1")
        if team is not None:
            Membership.objects.create(team=team, user=user, role=role)
        return user

    return make


@pytest.fixture
def team(db):
    return Team.objects.create(name="platform")


@pytest.fixture
def architect(make_user, team):
    return make_user("alice", team)


@pytest.fixture
def reviewer(make_user, team):
    return make_user("rita", team, Membership.Role.REVIEWER)


@pytest.fixture
def outsider(make_user, db):
    other = Team.objects.create(name="other-team")
    return make_user("mallory", other)


@pytest.fixture
def engines(db):
    load_engine_catalog()
    return {e.slug: e for e in Engine.objects.all()}


@pytest.fixture
def selection_owners(make_user, team):
    """The three owners of the sample selection: three different people (separation of duties),
    reviewers of the team; the architect drafts, they approve and sign."""
    return {
        role: make_user(name, team, Membership.Role.REVIEWER)
        for role, name in (("business", "bea"), ("platform", "pat"), ("security", "sid"))
    }


@pytest.fixture
def selection(architect, team, selection_owners):
    return create_selection(
        user=architect,
        team=team,
        name="Support bot",
        business_owner=selection_owners["business"],
        platform_owner=selection_owners["platform"],
        security_owner=selection_owners["security"],
    )


@pytest.fixture
def selection_with_constraints(selection, architect):
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS))
    selection.refresh_from_db()
    return selection


def _database_url_for_worker() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real `celery worker` process on the test database and the configured broker."""
    from config.celery import app

    with django_db_blocker.unblock():
        env = dict(os.environ)
        env["DATABASE_URL"] = _database_url_for_worker()
        env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
        # A task the worker runs after its test ended must never block the next teardown's flush: on
        # PostgreSQL, the worker gives up a lock wait first (a flush deadlocked with a late rescoring).
        env["PGOPTIONS"] = "-c lock_timeout=800"
        try:
            with app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=3)
                for queue in ("default", "gpu", "render"):
                    with connection.channel() as channel:
                        try:
                            channel.queue_purge(queue)
                        except Exception:  # the queue may not exist yet
                            pass
        except Exception as exc:  # an unreachable broker fails the run; it is never skipped
            pytest.fail(f"Celery broker {settings.CELERY_BROKER_URL!r} unreachable: {exc}")
        log = tmp_path_factory.mktemp("worker") / "worker.log"
        handle = open(log, "wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "default,gpu,render",
                "--pool",
                "threads",
                "-c",
                "4",
                "-n",
                f"test-{os.getpid()}@%h",
                "--loglevel",
                "INFO",
            ],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"Celery worker exited early:\n{log.read_text()[-3000:]}")
            if b"ready." in log.read_bytes():
                break
            time.sleep(0.2)
        else:
            process.kill()
            pytest.fail(f"Celery worker did not become ready:\n{log.read_text()[-3000:]}")
        yield process
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        handle.close()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


class ThreadedServer:
    """Run an async server context manager (MockServer, the simulator) on its own loop in a thread."""

    def __init__(self, make_server):
        import asyncio
        import threading

        self._make = make_server
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop = None
        self.server = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import asyncio

        asyncio.set_event_loop(self._loop)

        async def main():
            self._stop = asyncio.Event()
            async with self._make() as server:
                self.server = server
                self._ready.set()
                await self._stop.wait()

        self._loop.run_until_complete(main())

    def __enter__(self):
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("server did not start")
        return self.server

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture
def mock_engine():
    from benchmarks.simulator.mock_server import MockConfig, MockServer

    with ThreadedServer(lambda: MockServer(MockConfig(ttft_s=0.005, itl_s=0.001, metrics_style="vllm"))) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with an empty cache: primary keys repeat across tests after rollbacks."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the default language: a request through LocaleMiddleware (a Chinese page, say)
    leaves its language active in the thread, and the next test would render in it."""
    yield
    translation.activate(settings.LANGUAGE_CODE)
