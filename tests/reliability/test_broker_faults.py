"""The broker down while requests queue work (issue 38 item 3): producers fail fast, the work says it
waits, the log says so once. Before, every request that queued work blocked ~6 s on a dead Redis
(kombu's connection retries), capping the site at ~2 such requests a second, one warning each."""

from __future__ import annotations

import logging
import socket
import threading
import time
from contextlib import contextmanager
from unittest import mock

import pytest

from benchmarks.models import BenchmarkRun
from benchmarks.tasks import parse_upload
from benchmarks.validation.dispatch import start_validation
from config import celery as celery_config
from config.celery import BROKER, app, publish
from selection.candidates.services import add_candidate

pytestmark = pytest.mark.reliability

SHORT = {"concurrency": 1, "duration_s": 1.0, "warmup_s": 0.0, "input_tokens": 8, "output_tokens": 4}


@pytest.fixture
def candidate(selection_with_constraints, architect, engines, mock_engine):
    """A candidate on the mock engine: validations can start (the broker is what fails)."""
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "endpoint_url": mock_engine.url},
    )


@contextmanager
def broker_at(url: str, monkeypatch):
    """Point the Celery app's producers at `url` (Celery reads the variable before its own setting)."""
    original = app.conf.broker_url
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    monkeypatch.delenv("CELERY_BROKER_WRITE_URL", raising=False)
    app.conf.broker_url = url
    try:
        with mock.patch.object(app, "_pool", None), mock.patch.object(app.amqp, "_producer_pool", None):
            yield
    finally:
        app.conf.broker_url = original
        monkeypatch.undo()


@pytest.fixture
def hung_broker():
    """A TCP server that accepts connections and never answers: a Redis that hangs (or a black hole
    behind a proxy), where only a socket timeout ends the wait."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    thread.join(2)
    for connection in accepted:
        connection.close()
    server.close()


def timed(operation) -> tuple[object, float]:
    started = time.monotonic()
    result = operation()
    return result, time.monotonic() - started


@pytest.mark.parametrize("broker", ["refused", "hung"])
def test_a_producer_gives_up_within_half_a_second_and_then_pauses(broker, hung_broker, monkeypatch, caplog):
    url = "redis://127.0.0.1:1/0" if broker == "refused" else hung_broker
    with broker_at(url, monkeypatch):
        publish(parse_upload, (0,))  # the transport's first import is not the broker's fault
        BROKER.reset()
        caplog.clear()
        sent, first = timed(lambda: publish(parse_upload, (1,)))
        assert sent is False and first < 0.5, f"{first:.2f} s"
        results, paused = timed(lambda: [publish(parse_upload, (n,)) for n in range(20)])
        assert results == [False] * 20 and paused < 0.05  # within BROKER_PAUSE_S: not even tried
        monkeypatch.setattr(celery_config, "BROKER_PAUSE_S", 0.0)
        sent, again = timed(lambda: publish(parse_upload, (2,)))
        assert sent is False and again < 0.5  # tried again after the pause, still failing fast
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING and "broker" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]  # one line for the outage, not one per request
    assert "unavailable" in lines[0].getMessage()


@pytest.mark.django_db(transaction=True)
def test_a_validation_started_while_redis_is_down_answers_at_once_and_says_it_waits(
    candidate, architect, monkeypatch, caplog
):
    with broker_at("redis://127.0.0.1:1/0", monkeypatch):
        start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)  # warm up
        BROKER.reset()
        caplog.clear()
        runs = []
        for _ in range(5):
            run, seconds = timed(
                lambda: start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
            )
            runs.append((run.pk, seconds))
    assert max(seconds for _, seconds in runs) < 1.0, runs  # the broker's share of it is under 0.5 s
    for run_id, _ in runs:
        run = BenchmarkRun.objects.get(pk=run_id)
        assert run.status == "queued" and run.enqueued_at is None
        assert run.progress["phase"] == "waiting for the job queue"
    assert sum("broker) unavailable" in r.getMessage() for r in caplog.records) == 1
