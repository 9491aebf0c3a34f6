"""Tasks through a database outage (issue 38 item 3): they wait with back-off and run again, and the
worker's log says so once per outage. Before, a 6-s PostgreSQL stop failed 612 queued rescorings at
once, each with a full traceback (~50,000 log lines)."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest
from django.db import OperationalError

from config import outage
from config.outage import DATABASE, backoff_delays, retry_database
from selection import tasks
from selection.models import Selection
from tests.support.builders import decided_selection

pytestmark = pytest.mark.reliability


class FlakyDatabase:
    """Raises OperationalError, as a restarting PostgreSQL does, until `up()`."""

    def __init__(self) -> None:
        self.back = threading.Event()
        self.failures = 0
        self.lock = threading.Lock()

    def check(self) -> None:
        if not self.back.is_set():
            with self.lock:
                self.failures += 1
            raise OperationalError("server closed the connection unexpectedly")

    def up(self) -> None:
        self.back.set()


@pytest.fixture
def decided(architect, team, owners, engines):
    return decided_selection(architect, team, owners, engines)


def outage_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kvselect.outage" and r.levelno >= logging.WARNING]


def test_back_off_doubles_from_a_quarter_second_to_eight_with_jitter():
    delays = list(itertools.islice(backoff_delays(), 8))
    for delay, base in zip(delays, (0.25, 0.5, 1, 2, 4, 8, 8, 8), strict=True):
        assert base <= delay <= base * 1.2


def test_twenty_tasks_meeting_one_outage_wait_it_out_and_log_it_once(caplog):
    database = FlakyDatabase()
    results: list[str] = []

    def task(number: int) -> None:
        def body() -> str:
            database.check()
            return f"done {number}"

        results.append(retry_database(body, f"task {number}", budget_s=30))

    threads = [threading.Thread(target=task, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)  # the database restarts
    assert results == [] and DATABASE.down
    database.up()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == sorted(f"done {n}" for n in range(20))  # every task ran once the database was back
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines  # one when it went, one when it came back: not one per task or retry
    assert lines[0].startswith("database unavailable") and "retry with back-off" in lines[0]
    assert lines[1].startswith("database back after") and f"{database.failures} failed attempt(s)" in lines[1]
    assert database.failures >= 20 and not DATABASE.down


def test_a_query_the_database_will_never_accept_is_not_waited_for():
    """SQLite reports a missing table as an OperationalError: a schema problem, raised at once."""
    calls = []

    def body() -> None:
        calls.append(1)
        raise OperationalError("no such table: benchmarks_benchmarkrun")

    with pytest.raises(OperationalError):
        retry_database(body, "a task", budget_s=30)
    assert calls == [1] and not DATABASE.down


def test_a_task_gives_up_after_its_budget_with_the_last_error(caplog):
    database = FlakyDatabase()

    def body() -> None:
        database.check()

    started = time.monotonic()
    with pytest.raises(OperationalError):
        retry_database(body, "a task", budget_s=1.0)
    assert time.monotonic() - started < 1.5 and database.failures >= 2
    assert len(outage_lines(caplog)) == 1


@pytest.mark.django_db(transaction=True)
def test_a_rescoring_task_waits_for_the_database_and_keeps_its_claim(decided, monkeypatch, caplog):
    selection = decided
    Selection.objects.filter(pk=selection.pk).update(
        scores_requested_at=selection.updated_at, rescoring_queued_at=selection.updated_at
    )
    database = FlakyDatabase()
    real = tasks.refresh_scores
    claims = []

    def refresh(selection_id: int) -> str:
        claims.append(Selection.objects.values_list("rescoring_queued_at", flat=True).get(pk=selection_id))
        if len(claims) == 3:
            database.up()
        database.check()
        return real(selection_id)

    monkeypatch.setattr(tasks, "refresh_scores", refresh)
    monkeypatch.setattr(outage, "BACKOFF_FIRST_S", 0.05)
    assert tasks.recompute_scores(selection.pk) == ""  # the task body, as the worker calls it
    assert len(claims) == 3 and all(claims)  # run again after each failure, its claim kept throughout
    stored = Selection.objects.get(pk=selection.pk)
    assert stored.scores_requested_at is None and stored.rescoring_queued_at is None
    assert len(outage_lines(caplog)) == 2
