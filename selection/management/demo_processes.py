"""The processes `make demo` runs beside the web server (simulated engines, a Celery worker), and what a
restart changes for the candidates that point at them.

- Children die with the demo: SIGTERM (kill, a container stop) and SIGHUP (the terminal closed) stop the
  demo as Ctrl+C does, so its `finally` stops every child; on Linux each child also gets SIGTERM from the
  kernel when the demo process dies any other way (even SIGKILL), so no simulator keeps its port.
- The simulators' commands are built here from one description, so the README's hand-start block can
  be checked against what the demo really starts (tests/test_readme.py).
- After a restart on other ports (a port was taken), every candidate that pointed at the previous
  simulators follows them (audited), and candidates on this machine whose endpoint answers nothing are
  named, instead of failing at their next run.
"""

from __future__ import annotations

import ctypes
import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from django.db import transaction

from selection.audit import audit
from selection.models import Candidate

PR_SET_PDEATHSIG = 1
URL_FIELDS = ("endpoint_url", "metrics_url", "prefix_off_endpoint_url", "prefix_off_metrics_url")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def die_with_parent() -> None:
    """Popen's preexec_fn: the kernel sends the child SIGTERM when the demo dies (Linux; elsewhere the
    demo's own `finally` is all there is)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP end the demo as Ctrl+C does: the exception unwinds to the `finally` that stops
    the children (the exit status says which signal, 128 + its number)."""

    def terminate(signum: int, _frame) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminate)


def start_child(argv: list[str], children: list[subprocess.Popen], **kwargs) -> subprocess.Popen:
    child = subprocess.Popen(argv, preexec_fn=die_with_parent, **kwargs)  # no threads yet
    children.append(child)
    return child


def stop_children(children: list[subprocess.Popen], timeout: float = 10) -> None:
    """SIGTERM to every child still running, then wait; SIGKILL what does not stop in `timeout` seconds.
    A second SIGTERM meanwhile does not interrupt the stopping; the caller's SIGTERM handling is
    restored afterwards (an ignored SIGTERM is inherited by every process started later, which then
    no longer stops when asked: the test runner's simulators did not). Signal handlers belong to the
    main thread: the demo's steps run in another one in the page crawler's test, where none is set."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN) if main else None
    try:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def simulator_command(port: int, profile: str, extra: list[str], python: str = sys.executable) -> list[str]:
    """One simulated engine (the model and GPU the demo's constraints name)."""
    return [
        python,
        "-m",
        "benchmarks.simulator",
        "--profile",
        profile,
        "--port",
        str(port),
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "H100",
        *extra,
    ]


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def free_port(preferred: int) -> int:
    """The preferred port when nothing listens there, else one the kernel picks."""
    if port_is_free(preferred):
        return preferred
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------- after a restart


def load_started(path: Path) -> dict[str, str]:
    """The simulators' URLs the previous demo start wrote (key -> URL); empty the first time."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def save_started(path: Path, started: dict[str, str]) -> None:
    path.write_text(json.dumps(started, indent=2, sort_keys=True), encoding="utf-8")


@transaction.atomic
def follow_moved_simulators(previous: dict[str, str], started: dict[str, str]) -> list[Candidate]:
    """Point every candidate (of any selection) that used a simulator of the previous start at the same
    simulator's new URL, audited on its selection; returns the candidates changed."""
    moved = {previous[key]: url for key, url in started.items() if previous.get(key) and previous[key] != url}
    changed = []
    for candidate in Candidate.objects.select_related("selection", "engine"):
        old = {field: getattr(candidate, field) for field in URL_FIELDS}
        new = {field: _moved(value, moved) for field, value in old.items()}
        if new == old:
            continue
        for field, value in new.items():
            setattr(candidate, field, value)
        candidate.save(update_fields=list(URL_FIELDS))
        audit(
            candidate.selection,
            None,
            "candidate.changed",
            field=f"candidate:{candidate.pk}",
            old={k: v for k, v in old.items() if v != new[k]},
            new={k: v for k, v in new.items() if v != old[k]},
            justification="make demo restarted its simulated engines on other ports",
        )
        changed.append(candidate)
    return changed


def _moved(url: str, moved: dict[str, str]) -> str:
    for old, new in moved.items():
        if url == old or url.startswith(old + "/"):
            return new + url[len(old) :]
    return url


def silent_local_endpoints(answers: Callable[[str, int], bool] | None = None) -> list[Candidate]:
    """Compared candidates whose endpoint is on this machine and answers nothing (a stopped simulator or
    engine): named when the demo starts, not discovered when a run fails."""
    answers = answers or _answers
    silent = []
    for candidate in (
        Candidate.objects.filter(archived_at__isnull=True)
        .exclude(endpoint_url="")
        .select_related("selection", "engine")
    ):
        parts = urlsplit(candidate.endpoint_url)
        if parts.hostname in LOOPBACK and parts.port and not answers(parts.hostname, parts.port):
            silent.append(candidate)
    return silent


def _answers(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0
