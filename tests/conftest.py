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

from config.celery import BROKER
from config.outage import DATABASE
from selection.candidates.services import add_candidate, load_engine_catalog
from selection.models import Engine, Membership, Team
from selection.setup.services import create_selection, save_constraints
from tests.support.builders import SAMPLE_CONSTRAINTS
from tests.support.environment import ROOT, database_url_for_worker
from tests.support.servers import ThreadedServer


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
def owners(make_user, team):
    """The business, platform and security owners: reviewers of the team."""
    return {role: make_user(role, team, Membership.Role.REVIEWER) for role in ("business", "platform", "security")}


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


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real `celery worker` process on the test database and the configured broker."""
    from config.celery import QUEUES, app

    with django_db_blocker.unblock():
        env = dict(os.environ)
        env["DATABASE_URL"] = database_url_for_worker()
        env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
        # A task the worker runs after its test ended must never block the next teardown's flush: on
        # PostgreSQL, the worker gives up a lock wait first (a flush deadlocked with a late rescoring).
        env["PGOPTIONS"] = "-c lock_timeout=800"
        try:
            with app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=3)
                for queue in QUEUES:
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
                ",".join(QUEUES),
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
        process.log_path = log  # tests read what the worker did (e.g. how many tasks it received)
        yield process
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        handle.close()


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    """A vLLM 0.11.0 candidate on the sample selection (no endpoint: uploads only)."""
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )


@pytest.fixture
def media(settings, tmp_path) -> Path:
    """Uploaded files and artifacts under this test's own directory."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return Path(settings.MEDIA_ROOT)


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


@pytest.fixture(autouse=True)
def _no_outage_carried_over():
    """Each test starts with the broker and the database up as far as this process knows: a test that
    made the broker refuse a task leaves `publish` paused for a few seconds (config.celery)."""
    BROKER.reset()
    DATABASE.reset()
    yield
