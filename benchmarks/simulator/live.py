"""Live driver: runs the engine state machine against the asyncio clock.

The engine's virtual clock advances in step durations; the driver sleeps until the wall clock
catches up (virtual seconds / `time_scale`), then hands the step's tokens to the waiting
requests. Requests that arrive during a step are scheduled in the next one, as in a real engine.
Reported latencies (metrics, usage) are in simulated seconds.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

from benchmarks.simulator.block_keys import TokenStream
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.engine import Engine
from benchmarks.simulator.sequence import Sequence

DONE = object()


class LiveRequest:
    """A request's handle for the server: an async queue of token lists, then DONE."""

    def __init__(self, seq: Sequence) -> None:
        self.seq = seq
        self.queue: asyncio.Queue = asyncio.Queue()
        self.killed = False  # the engine stopped under it (an abrupt restart): the connection must drop

    @property
    def stream(self) -> TokenStream:
        return self.seq.stream  # type: ignore[return-value]

    async def tokens(self):
        """Yield lists of new token ids until the request finishes."""
        while True:
            item = await self.queue.get()
            if item is DONE:
                return
            yield item


class LiveEngine:
    def __init__(self, config: SimConfig, observer: Any = None) -> None:
        self.config = config
        self.engine = Engine(config, coalesce=False)
        self.observer = observer  # metrics: first_token(seq, t), token_step(n, dt), finished(seq)
        self._ids = itertools.count(1)
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._vclock = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = self._loop.create_task(self._run())
        self._handles: dict[int, LiveRequest] = {}
        self.on_step: Callable[[], None] | None = None

    def now(self) -> float:
        """Simulated seconds since start (wall seconds x time_scale)."""
        return max(self._vclock, (self._loop.time() - self._t0) * self.config.time_scale)

    def submit(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        request_id: Any = None,
        cache_prompt: bool = True,
        priority: int = 0,
    ) -> LiveRequest:
        """Queue a request; raises the engine's errors (RequestTooLarge, RequestRejected, EngineOOM).
        `cache_prompt=False` (llama.cpp's per-request field): the request shares no cached prefix."""
        ident = request_id or next(self._ids)
        stream = TokenStream(prompt_ids, self.config.seed, private_to=None if cache_prompt else ident)
        now = self.now()
        seq = Sequence(ident, len(prompt_ids), max_tokens, now, stream, stream, priority=priority)
        handle = LiveRequest(seq)
        self.engine.add(seq, now)
        self._handles[id(seq)] = handle
        self._wake.set()
        return handle

    def abort(self, handle: LiveRequest) -> None:
        self.engine.abort(handle.seq, self.now())
        self._handles.pop(id(handle.seq), None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for handle in list(self._handles.values()):
            handle.killed = True
            handle.queue.put_nowait(DONE)
        self._handles.clear()

    @property
    def in_flight(self) -> int:
        """Requests the engine still owes tokens to."""
        return len(self._handles)

    async def _run(self) -> None:
        engine, loop, scale = self.engine, self._loop, self.config.time_scale
        while True:
            if not engine.has_work():
                self._wake.clear()
                await self._wake.wait()
                continue
            start = self.now()
            outcome = engine.step(start)
            end = start + outcome.duration
            delay = self._t0 + end / scale - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let clients run even when the engine is behind
            self._vclock = end
            self._deliver(outcome, outcome.duration)

    def _deliver(self, outcome: Any, duration: float) -> None:
        engine, observer, handles = self.engine, self.observer, self._handles
        for seq in outcome.first_token:
            handle = handles.get(id(seq))
            if handle is None:
                continue
            new = seq.stream.extend_outputs(engine.out_done(seq))
            if new:
                handle.queue.put_nowait(new)
                if observer is not None and seq.emitted == 0:
                    observer.first_token(seq)
                seq.emitted += len(new)
        for seq in outcome.decoded:
            handle = handles.get(id(seq))
            if handle is None:
                continue
            new = seq.stream.extend_outputs(engine.out_done(seq))
            if new:
                handle.queue.put_nowait(new)
                seq.emitted += len(new)
        if observer is not None and outcome.decoded:
            observer.token_step(len(outcome.decoded), duration)
        for seq in outcome.finished:
            handle = handles.pop(id(seq), None)
            if handle is None:
                continue
            handle.queue.put_nowait(DONE)
            if observer is not None:
                observer.finished(seq)
        if self.on_step is not None:
            self.on_step()
