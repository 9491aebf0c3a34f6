"""Faults in validation runs: the worker is SIGKILLed mid-run, the engine dies mid-test."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from benchmarks import tasks
from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.validation.dispatch import start_validation
from benchmarks.validation.worker import claim, execute, stale_after
from selection.candidates.services import add_candidate
from tests.support.servers import stop_process, wait_for, wait_until_ready

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

LONG = {
    "concurrency": 2,
    "duration_s": 120.0,
    "warmup_s": 0.0,
    "input_tokens": 16,
    "output_tokens": 8,
    "settle_s": 0.0,
    "abort_fraction": 0.0,
    # closed loop at fixed lengths: one point per run (the constraints' request rate would make it
    # open loop, and drawn lengths add a point per traffic group)
    "rate": None,
    "input_distribution": None,
    "output_distribution": None,
}


def _status(run_id: int) -> BenchmarkRun:
    return BenchmarkRun.objects.get(pk=run_id)


@pytest.mark.django_db(transaction=True)
def test_worker_sigkill_mid_run_is_reaped_failed_and_never_run_twice(engine_candidate, architect, killable_worker):
    killable_worker.start()
    run = start_validation(candidate=engine_candidate, test="concurrency_stress", user=architect, params=LONG)
    # The worker claims it and the load is flowing (progress written by the reporter thread).
    wait_for(
        lambda: _status(run.pk).status == "running" and (_status(run.pk).progress or {}).get("requests_done"),
        timeout=60,
        interval=0.2,
    )
    claimed = _status(run.pk)
    assert claimed.attempt == 1 and claimed.worker

    killable_worker.kill()
    # Killed: the row still says running, with a heartbeat that will stop advancing.
    assert _status(run.pk).status == "running"
    # While the heartbeat is fresh nobody else may take it (no concurrent execution).
    assert claim(run.pk, "intruder") is None
    assert tasks.reap_stale_runs() == []

    # Once the heartbeat is older than stale_after() the reaper fails it with the cause.
    later = timezone.now() + stale_after() + timedelta(seconds=5)
    assert tasks.reap_stale_runs(now=later) == [run.pk]
    reaped = _status(run.pk)
    assert reaped.status == "failed" and not reaped.partial  # nothing was stored: no data, not "partial"
    assert "worker lost" in reaped.error and "killed or crashed" in reaped.error and "no data" in reaped.error
    assert reaped.progress == {"phase": "failed", "percent": 0}  # not the dead worker's last percentage
    assert reaped.finished_at is not None
    assert RunPoint.objects.filter(run=reaped).count() == 0
    assert Artifact.objects.filter(run=reaped).count() == 0

    # A redelivered message (acks_late + reject_on_worker_lost) finds a terminal run: not claimed, nothing written.
    assert tasks.run_validation.apply(args=(run.pk,)).get() == "not claimed"
    assert _status(run.pk).status == "failed"
    assert BenchmarkRun.objects.filter(candidate=engine_candidate).count() == 1
    assert RunPoint.objects.filter(run_id=run.pk).count() == 0


@pytest.mark.django_db(transaction=True)
def test_redelivery_after_a_silent_worker_restarts_clean_once(engine_candidate, architect):
    """A stale running run redelivered before the reaper: one new worker restarts it from a clean state."""
    short = dict(LONG, duration_s=1.0, settle_s=0.2)
    run = start_validation(candidate=engine_candidate, test="concurrency_stress", user=architect, params=short)
    first = claim(run.pk, "w1")
    # The first worker wrote some partial rows, then died silently.
    RunPoint.objects.create(run=first, index=0, label="stale")
    BenchmarkRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - stale_after() * 2)
    second = claim(run.pk, "w2")
    assert second is not None and second.attempt == 2 and second.worker == "w2"
    assert not RunPoint.objects.filter(run_id=run.pk).exists()  # clean start: the dead attempt's rows are gone
    assert claim(run.pk, "w3") is None  # w2 is live: never two executions at once
    done = execute(second)
    assert done.status == "succeeded", done.error
    assert list(done.points.values_list("index", flat=True)) == [0]  # exactly one point, not two


@pytest.mark.django_db(transaction=True)
def test_engine_crash_knob_mid_test_fails_the_run_keeping_partial_data(
    selection_with_constraints, architect, engines, gpu_pool_label
):
    from benchmarks.simulator.config import SimConfig
    from benchmarks.simulator.server import ServerThread

    config = SimConfig(time_scale=50.0, fault_crash_after_requests=30, max_model_len=8192)
    with ServerThread(config) as server:
        candidate = add_candidate(
            selection=selection_with_constraints,
            user=architect,
            data={
                "engine": engines["vllm"],
                "engine_version": "0.11.0",
                "endpoint_url": server.url,
                "metrics_url": server.url + "/metrics",
                "model_name": config.served_model_name,
                "gpu_pool": gpu_pool_label,  # a queue no worker listens to: this test claims the run itself
            },
        )
        params = dict(LONG, concurrency=4, duration_s=4.0, settle_s=0.2)
        run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=params)
        run = execute(claim(run.pk, "w1"))
    # The simulated crash answers 503 on /health but still lists its models: that is not "alive".
    assert run.status == "failed"
    assert "engine stopped answering" in run.error
    point = run.points.get()  # data gathered before the crash is kept and labelled partial
    assert point.requests_completed >= 1 and point.requests_failed >= 1
    assert run.partial and any("partial" in note for note in run.notes)
    assert run.evidence == "SIMULATED"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.django_db(transaction=True)
def test_engine_process_dies_mid_test_fails_the_run_keeping_partial_data(
    selection_with_constraints, architect, engines, gpu_pool_label
):
    """The simulator as its own process with the hard crash knob (os._exit), like a killed llama-server."""
    import subprocess
    import sys
    import urllib.request

    from tests.support.environment import ROOT

    port = _free_port()
    script = (
        "import asyncio\nfrom benchmarks.simulator.config import SimConfig\n"
        "from benchmarks.simulator.server import serve_forever\n"
        f"asyncio.run(serve_forever(SimConfig(time_scale=50.0, fault_crash_after_requests=8, max_model_len=8192),"
        f" '127.0.0.1', {port}))\n"
    )
    engine = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up():
            try:
                return urllib.request.urlopen(url + "/health", timeout=1).status == 200
            except OSError:
                return False

        wait_until_ready(engine, up, what="simulator")
        candidate = add_candidate(
            selection=selection_with_constraints,
            user=architect,
            data={
                "engine": engines["vllm"],
                "engine_version": "0.11.0",
                "endpoint_url": url,
                "metrics_url": url + "/metrics",
                "model_name": "kvsim-llama-3.1-8b",
                "gpu_pool": gpu_pool_label,  # a queue no worker listens to: this test claims the run itself
            },
        )
        # the crash comes after the 8th completion however slowly a loaded machine serves them: the run
        # is stopped early by it, never by its duration (a run that outlasts 8 requests' worth of load)
        params = dict(LONG, concurrency=4, duration_s=60.0, settle_s=0.2)
        run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=params)
        run = execute(claim(run.pk, "w1"))
        assert engine.wait(30) == 70  # the engine really died
    finally:
        stop_process(engine)
    assert run.status == "failed"
    # the load stops at the 50th refused connection instead of hammering the dead port to the end
    assert "stopped early" in run.error and "could not connect" in run.error
    point = run.points.get()  # the data gathered before the crash is kept...
    assert point.requests_completed >= 1
    assert run.partial and any("partial" in note for note in run.notes)  # ...and labelled partial
    assert run.artifacts.filter(kind="native").exists()
    assert run.evidence == "SIMULATED"


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_of_one_run_have_exactly_one_winner(engine_candidate, architect):
    """Redelivery races (two workers get the same message): the database decides, one wins."""
    import threading

    from django.db import connection

    run = start_validation(
        candidate=engine_candidate, test="concurrency_stress", user=architect, params=dict(LONG, duration_s=1.0)
    )
    barrier, results, errors = threading.Barrier(6), [], []

    def worker(name):
        try:
            barrier.wait(10)
            results.append((name, claim(run.pk, name)))
        except Exception as exc:  # a lock timeout would be a bug too: report it
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if connection.vendor == "sqlite":
        # SQLite's deferred transactions refuse the read-to-write upgrade at once ("database is
        # locked") instead of waiting: a loser errors out, which is still not a second execution.
        # (OPTIONS transaction_mode=IMMEDIATE would make them wait and return None instead.)
        assert all("database is locked" in str(exc) for exc in errors), errors
    else:
        assert not errors, errors
    winners = [name for name, claimed in results if claimed is not None]
    assert len(results) + len(errors) == 6 and len(winners) == 1
    final = _status(run.pk)
    assert final.status == "running" and final.attempt == 1 and final.worker == winners[0]
