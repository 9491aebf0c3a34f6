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
