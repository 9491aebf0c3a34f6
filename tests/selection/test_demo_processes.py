"""`make demo`'s processes (issue 37 item 5): SIGTERM stops every child as Ctrl+C does, and a child dies
with the demo even when it is killed outright; after a restart on other ports the candidates that used
the previous simulators follow them (audited) and silent local endpoints are named; a second candidate
of an engine in the demo selection no longer breaks the restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from selection.candidates.services import add_candidate
from selection.management.commands.demo import demo_candidate
from selection.management.demo_processes import follow_moved_simulators, silent_local_endpoints, stop_children
from selection.models import AuditEntry

ROOT = Path(__file__).resolve().parents[2]

# a stand-in for the demo: two children started as the demo starts them, stopped in its `finally`
DEMO_LIKE = textwrap.dedent(
    """
    import os, sys, subprocess, time
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "x")
    import django
    django.setup()
    from selection.management.demo_processes import start_child, stop_children, stop_on_signals
    children = []
    stop_on_signals()
    try:
        for _ in range(2):
            start_child([sys.executable, "-c", "import time; time.sleep(120)"], children)
        print(" ".join(str(c.pid) for c in children), flush=True)
        time.sleep(120)
    finally:
        stop_children(children)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not reaped by its new parent yet) is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def wait_gone(pids: list[int], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(0.2)
    return False


def test_stopping_children_leaves_the_callers_sigterm_handling_as_it_was():
    """In-process callers (the demo's tests) must not come out ignoring SIGTERM: every process started
    later would inherit it and no longer stop when asked (a simulator fixture's teardown then hung)."""
    before = signal.getsignal(signal.SIGTERM)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop_children([child], timeout=30)
    assert child.returncode == -signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before
    after = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    after.terminate()
    assert after.wait(timeout=30) == -signal.SIGTERM  # a later child still stops on SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_the_demos_children_stop_with_it(sig):
    demo = subprocess.Popen(
        [sys.executable, "-c", DEMO_LIKE], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        pids = [int(pid) for pid in demo.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        demo.send_signal(sig)
        code = demo.wait(timeout=30)
        assert code in (128 + sig, -sig)  # SystemExit(128 + n) from the handler, or killed outright
        assert wait_gone(pids), "a child outlived the demo"
    finally:
        demo.kill()


@pytest.mark.django_db
def test_candidates_follow_their_simulator_to_its_new_port(selection_with_constraints, architect, engines):
    selection = selection_with_constraints
    data = {"engine": engines["vllm"], "engine_version": "0.11.0"}
    mine = add_candidate(
        selection=selection,
        user=architect,
        data={
            **data,
            "label": "my vLLM",
            "endpoint_url": "http://127.0.0.1:52337",
            "metrics_url": "http://127.0.0.1:52337/metrics",
            "prefix_off_endpoint_url": "http://127.0.0.1:52338",
        },
    )
    other = add_candidate(
        selection=selection, user=architect, data={**data, "label": "elsewhere", "endpoint_url": "http://127.0.0.1:9"}
    )
    previous = {"vllm": "http://127.0.0.1:52337", "vllm-off": "http://127.0.0.1:52338", "sglang": "http://x:1"}
    started = {"vllm": "http://127.0.0.1:8101", "vllm-off": "http://127.0.0.1:8111", "sglang": "http://x:1"}
    assert follow_moved_simulators(previous, started) == [mine]
    mine.refresh_from_db()
    other.refresh_from_db()
    assert (mine.endpoint_url, mine.metrics_url) == ("http://127.0.0.1:8101", "http://127.0.0.1:8101/metrics")
    assert mine.prefix_off_endpoint_url == "http://127.0.0.1:8111" and other.endpoint_url == "http://127.0.0.1:9"
    entry = AuditEntry.objects.filter(action="candidate.changed", field=f"candidate:{mine.pk}").latest("pk")
    assert entry.new["endpoint_url"] == "http://127.0.0.1:8101" and "make demo" in entry.justification
    assert follow_moved_simulators(started, started) == []  # the same ports: nothing moves

    answering = {("127.0.0.1", 8101)}
    silent = silent_local_endpoints(lambda host, port: (host, port) in answering)
    assert silent == [other]


@pytest.mark.django_db
def test_a_second_candidate_of_an_engine_does_not_confuse_the_demo(selection_with_constraints, architect, engines):
    selection = selection_with_constraints
    data = {"engine": engines["vllm"], "engine_version": "0.11.0"}
    demos = add_candidate(selection=selection, user=architect, data={**data, "label": "vLLM (simulated paged-offload)"})
    add_candidate(
        selection=selection, user=architect, data={**data, "label": "vLLM TP3"}
    )  # was MultipleObjectsReturned
    assert demo_candidate(selection, "vllm", "paged-offload") == demos
    assert demo_candidate(selection, "vllm", "another-profile") == demos  # the oldest compared one


@pytest.mark.django_db
def test_an_archived_demo_candidate_gives_way_to_the_compared_one(selection_with_constraints, architect, engines):
    from selection.candidates.services import archive_candidate

    selection = selection_with_constraints
    data = {"engine": engines["vllm"], "engine_version": "0.11.0"}
    old = add_candidate(selection=selection, user=architect, data={**data, "label": "vLLM (simulated paged-offload)"})
    archive_candidate(candidate=old, user=architect)
    new = add_candidate(selection=selection, user=architect, data={**data, "label": "vLLM (simulated paged-offload)"})
    assert demo_candidate(selection, "vllm", "paged-offload") == new
