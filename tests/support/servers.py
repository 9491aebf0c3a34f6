"""Helpers for tests that talk to a live server: wait for a condition, run an async server on its own thread."""

from __future__ import annotations

import time


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


# Under CI load (a Postgres, a Redis, a Celery worker and the suite on a few cores) a Python process
# takes seconds just to import: wait for readiness itself, never a fixed sleep or a tight deadline.
PROCESS_READY_S = 120.0


def wait_until_ready(process, ready, timeout: float = PROCESS_READY_S, interval: float = 0.2, what: str = "process"):
    """Poll `ready()` until it is true; fail at once, naming the exit status, if `process` exits first,
    and after `timeout` seconds (load-tolerant) otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the {what} exited with status {process.returncode} before it was ready")
        if ready():
            return
        time.sleep(interval)
    raise AssertionError(f"the {what} was not ready within {timeout:.0f} s")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0


def stop_process(process, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL what has not exited within `timeout` seconds: a teardown never hangs or
    errors on a slow (or SIGTERM-deaf) child."""
    import subprocess

    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(timeout=timeout)
