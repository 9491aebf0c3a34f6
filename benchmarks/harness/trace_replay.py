"""Replay a trace against an endpoint, open loop on the trace's own clock (plan: `benchmarks.traces.replay`).

Why its own scheduler: `load.run_load` draws arrivals from a distribution; a replay has fixed
send times for first turns and send times that depend on answers for later turns. Every send is
a timer of the event loop (`loop.call_at`) set ahead of time (first turns, fed LOOKAHEAD_S
before they are due) or when the previous turn's answer ends (later turns: answer end + recorded
gap). Lateness is measured per send (the timer firing minus its due time, on perf_counter), so a
report says how faithful the arrival times were (`send_lateness_ms_p99`).

Prompts (`PromptBuilder`): exact token counts through the engine's tokenizer when it has one
(`harness.prompts`), less the tokens its chat template (or BOS) adds, measured on the engine
(`measure_template`), so the engine counts exactly the trace's input; a request of a prefix group
starts with its group's text; a Mooncake request
is the concatenation of its blocks' texts (equal hash id, equal text); a later turn of a session
sends the earlier turns and the engine's real answer to them (chat messages, or the text
concatenated for completions), then its new text.

The scheduler takes a `make_spec(turn, prompt)` hook and an optional `on_record(turn, record)`
hook, and answers per turn, so other tests (a model switch under the trace's load, a second
tenant's flood) can drive it and read the records by traffic group or by tenant.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.prompts import PromptFactory
from benchmarks.harness.request_record import Api, RequestRecord, RequestSpec
from benchmarks.traces.formats import detect, file_sha256, format_named, read_trace
from benchmarks.traces.replay import ReplayPlan, Turn, build_plan

LOOKAHEAD_S = 0.5  # first turns get their timer this long before they are due
START_DELAY_S = 0.2  # the replay's time zero, after the scheduler is up
BLOCK_SEED = 1_000_003
PREFIX_SEED = 7_000_001
BLOCK_CACHE = 4096


def load_plan(path: str | Path, fmt: str | None = None, speedup: float = 1.0, sample: int | None = None) -> ReplayPlan:
    """The replay plan of a trace file (its format detected unless given), with its SHA-256 recorded."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    trace_format = detect(path) if fmt is None else format_named(fmt)
    source = {"file": path.name, "format": trace_format.name, "sha256": file_sha256(path)}
    return build_plan(read_trace(path, trace_format), speedup=float(speedup), sample=sample, source=source)


def lengths_from_trace(path: str | Path, fmt: str | None = None, sample: int = 10_000, seed: int = 0):
    """(input, output) tokens of request i drawn from the trace's first `sample` requests (deterministic).

    For the tests that take the trace's length distribution instead of fixed lengths."""
    plan = load_plan(path, fmt, sample=sample)
    pairs = [(turn.input_tokens, turn.output_tokens) for turn in plan.turns]
    if not pairs:
        raise ValueError("the trace has no request with an output")
    order = np.random.default_rng(seed).permutation(len(pairs)).tolist()

    def lengths(index: int) -> tuple[int, int]:
        return pairs[order[index % len(order)]]

    lengths.source = {**plan.source, "requests": len(pairs)}  # type: ignore[attr-defined]
    return lengths


@dataclass
class Prompt:
    """What one turn sends: a text (completions, or chat with one user message) or chat messages."""

    text: str | None = None
    messages: list[dict[str, str]] | None = None


class PromptBuilder:
    """Turns of a plan into prompts of the recorded lengths, with the trace's sharing (module docstring)."""

    def __init__(self, prompts: PromptFactory, api: Api = "chat", block_tokens: int = 512) -> None:
        self.prompts = prompts
        self.api = api
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, list[str]] = OrderedDict()
        self._prefixes: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._history: dict[int, Prompt] = {}  # session -> the last prompt sent (with its answer added later)
        self._vocabulary = np.asarray(prompts.words, dtype=object)

    def _words(self, tokens: int, seed: int) -> str:
        """`tokens` tokens of words (the factory's vocabulary and word count), a pure function of the seed."""
        count = self.prompts.word_count(tokens)
        picks = np.random.default_rng(seed).integers(0, len(self._vocabulary), count)
        return " " + " ".join(self._vocabulary[picks].tolist())

    def _prefix(self, key: str, tokens: int) -> str:
        cached = self._prefixes.get((key, tokens))
        if cached is None:
            cached = self._words(tokens, PREFIX_SEED + zlib.crc32(key.encode()))
            self._prefixes[(key, tokens)] = cached
            if len(self._prefixes) > BLOCK_CACHE:
                self._prefixes.popitem(last=False)
        return cached

    def _block(self, block_id: int, tokens: int) -> str:
        words = self._blocks.get(block_id)
        if words is None:
            words = self._words(self.block_tokens, BLOCK_SEED + block_id).split()
            self._blocks[block_id] = words
            if len(self._blocks) > BLOCK_CACHE:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(block_id)
        count = min(self.prompts.word_count(tokens), len(words))
        return " " + " ".join(words[:count])

    def _fresh(self, turn: Turn) -> str:
        """A first turn: the words of `input_tokens` less the template's tokens, taken off the end (the
        shared blocks and prefixes keep their full text)."""
        tokens = turn.input_tokens - (self.prompts.template_tokens or 0)
        if turn.hash_ids:
            last = tokens - self.block_tokens * (len(turn.hash_ids) - 1)
            parts = [self._block(b, self.block_tokens) for b in turn.hash_ids[:-1]]
            parts.append(self._block(turn.hash_ids[-1], max(last, 1)))
            return "".join(parts)
        if turn.prefix_key is not None and turn.prefix_tokens > 0:
            rest = tokens - turn.prefix_tokens
            prefix = self._prefix(turn.prefix_key, turn.prefix_tokens)
            return prefix + (self._words(rest, turn.line) if rest > 0 else "")
        return self._words(tokens, turn.line)

    def prompt(self, turn: Turn) -> Prompt:
        previous = self._history.get(turn.session) if turn.history_tokens else None
        if previous is None:
            text = self._fresh(turn)
            prompt = Prompt(text=text) if self.api != "chat" else Prompt(messages=[{"role": "user", "content": text}])
        else:
            new = self._words(max(turn.new_tokens - (self.prompts.turn_template_tokens or 0), 1), turn.line)
            if self.api == "chat":
                prompt = Prompt(messages=[*(previous.messages or []), {"role": "user", "content": new}])
            else:
                prompt = Prompt(text=(previous.text or "") + new)
        self._history[turn.session] = prompt
        return prompt

    def answered(self, turn: Turn, record: RequestRecord, last_turn: bool) -> None:
        """Add the engine's answer to the session's history (forgotten after the last turn)."""
        if last_turn:
            self._history.pop(turn.session, None)
            return
        prompt = self._history.get(turn.session)
        if prompt is None:
            return
        if self.api == "chat":
            prompt.messages = [*(prompt.messages or []), {"role": "assistant", "content": record.text}]
        else:  # a word boundary between the prompt and an answer that starts mid-word would merge two tokens
            text, answer = prompt.text or "", record.text or ""
            joint = " " if text and answer and not text[-1].isspace() and not answer[0].isspace() else ""
            prompt.text = text + joint + answer


@dataclass
class ReplayOutcome:
    """What a replay produced: every turn's record, the send lateness and what the client held."""

    records: list[tuple[Turn, RequestRecord]] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)
    loop_lag_ms: list[float] = field(default_factory=list)
    start: float = 0.0  # perf_counter of the replay's time zero
    end: float = 0.0
    peak_in_flight: int = 0
    in_flight_area: float = 0.0  # request-seconds in flight (achieved concurrency = area / duration)
    cancelled: bool = False
    unsent: int = 0  # turns never sent (cancelled, or their session stopped)

    @property
    def duration_s(self) -> float:
        return max(self.end - self.start, 0.0)

    def lateness_p99_ms(self) -> float | None:
        return percentile(self.lateness_ms, 99)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (the load client's definition)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q / 100.0 * len(ordered)) - 1, 0), len(ordered) - 1)]


def _cancel_requested(cancel: Any) -> bool:
    if cancel is None:
        return False
    return bool(cancel.is_set() if hasattr(cancel, "is_set") else cancel())


async def run_replay(
    client: OpenAIClient,
    plan: ReplayPlan,
    make_spec: Callable[[Turn, Prompt], RequestSpec],
    builder: PromptBuilder,
    cancel: Any = None,
    progress: Callable[[dict[str, Any]], Any] | None = None,
    on_record: Callable[[Turn, RequestRecord], Any] | None = None,
    progress_interval_s: float = 1.0,
    drain_timeout_s: float = 120.0,
) -> ReplayOutcome:
    """Send every turn of `plan` at its time (module docstring); returns when all are answered or cancelled."""
    replay = _Replay(client, plan, make_spec, builder, cancel, progress, on_record, progress_interval_s)
    if replay.total == 0:
        replay.outcome.end = replay.outcome.start
        return replay.outcome
    feed = replay.loop.create_task(replay.feeder())
    watch = replay.loop.create_task(replay.watcher())
    try:
        await replay.wait_and_drain(drain_timeout_s)
    finally:
        await replay.close(feed, watch)
    return replay.outcome


class _Replay:
    """One replay's state: the outcome, the counters, the turns' timers and tasks. Turns are sent by
    loop timers (launch), each answer schedules its session's next turn (one); the feeder schedules
    first turns a little ahead of their time, the watcher measures loop lag, cancels and reports."""

    def __init__(
        self,
        client: OpenAIClient,
        plan: ReplayPlan,
        make_spec: Callable[[Turn, Prompt], RequestSpec],
        builder: PromptBuilder,
        cancel: Any,
        progress: Callable[[dict[str, Any]], Any] | None,
        on_record: Callable[[Turn, RequestRecord], Any] | None,
        progress_interval_s: float,
    ) -> None:
        self.client, self.plan, self.make_spec, self.builder = client, plan, make_spec, builder
        self.cancel, self.progress, self.on_record = cancel, progress, on_record
        self.progress_interval_s = progress_interval_s
        self.loop = asyncio.get_running_loop()
        self.outcome = ReplayOutcome()
        self.total = plan.requests
        self.sessions = plan.sessions
        self.done = asyncio.Event()
        self.sent = 0
        self.finished = 0
        self.in_flight = 0
        self.tasks: set[asyncio.Task] = set()
        self.handles: set[asyncio.TimerHandle] = set()
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvselect-replay")
        self.loop_minus_perf = self.loop.time() - time.perf_counter()
        self.outcome.start = time.perf_counter() + START_DELAY_S
        self.last_change = self.outcome.start

    def account(self, now: float, delta: int) -> None:
        outcome = self.outcome
        if now > self.last_change:
            outcome.in_flight_area += self.in_flight * (now - self.last_change)
        self.last_change = max(now, self.last_change)
        self.in_flight += delta
        outcome.peak_in_flight = max(outcome.peak_in_flight, self.in_flight)

    def finish_one(self) -> None:
        self.finished += 1
        if self.finished >= self.total:
            self.done.set()

    def schedule(self, turn: Turn, due: float) -> None:
        handle = self.loop.call_at(due + self.loop_minus_perf, self.launch, turn, due)
        self.handles.add(handle)

    def launch(self, turn: Turn, due: float) -> None:
        if self.done.is_set():
            return
        now = time.perf_counter()
        self.outcome.lateness_ms.append((now - due) * 1000.0)
        self.sent += 1
        self.account(now, +1)
        task = self.loop.create_task(self.one(turn))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def one(self, turn: Turn) -> None:
        record = RequestRecord()
        session = self.sessions[turn.session]
        last = turn.index + 1 >= len(session.turns)
        try:
            spec = self.make_spec(turn, self.builder.prompt(turn))
            await self.client.send(spec, record)
        except asyncio.CancelledError:
            record.error_class = record.error_class or "cancelled"
            raise
        finally:
            now = time.perf_counter()
            self.account(now, -1)
            self.outcome.records.append((turn, record))
            if self.on_record is not None:
                self.on_record(turn, record)
            if not self.done.is_set():
                self.builder.answered(turn, record, last)
                if not last:
                    following = session.turns[turn.index + 1]
                    self.schedule(following, max(record.end_time or now, now) + following.gap_s)
            self.finish_one()

    async def feeder(self) -> None:
        done = self.done
        for turn in self.plan.first_turns():
            due = self.outcome.start + turn.offset_s
            wait = due - time.perf_counter() - LOOKAHEAD_S
            if wait > 0:
                try:
                    await asyncio.wait_for(done.wait(), timeout=wait)
                    return
                except asyncio.TimeoutError:
                    pass
            if done.is_set():
                return
            self.schedule(turn, due)

    async def call_progress(self, payload: dict[str, Any]) -> None:
        progress = self.progress
        if progress is None:
            return
        if inspect.iscoroutinefunction(progress):
            await progress(payload)
        else:
            await self.loop.run_in_executor(self.executor, progress, payload)

    def payload(self, now: float) -> dict[str, Any]:
        return {
            "phase": "replay",
            "percent": round(100.0 * self.finished / max(self.total, 1), 1),
            "requests_done": self.finished,
            "in_flight": self.in_flight,
            "elapsed_s": round(now - self.outcome.start, 3),
            "send_lateness_ms_p99": percentile(self.outcome.lateness_ms[-2000:], 99),
        }

    async def watcher(self) -> None:
        perf = time.perf_counter
        tick = 0.2
        expected = perf() + tick
        next_progress = perf()
        pending: asyncio.Task | None = None
        while not self.done.is_set():
            await asyncio.sleep(tick)
            now = perf()
            self.outcome.loop_lag_ms.append(max(now - expected, 0.0) * 1000.0)
            expected = now + tick
            if _cancel_requested(self.cancel):
                self.outcome.cancelled = True
                self.done.set()
                break
            if self.progress is not None and now >= next_progress and (pending is None or pending.done()):
                pending = self.loop.create_task(self.call_progress(self.payload(now)))
                next_progress = now + self.progress_interval_s

    async def wait_and_drain(self, drain_timeout_s: float) -> None:
        """Until every turn is answered (or the replay is cancelled), then the requests in flight."""
        await self.done.wait()
        if self.outcome.cancelled:
            for handle in self.handles:
                handle.cancel()
            for task in list(self.tasks):
                task.cancel()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=drain_timeout_s if not self.outcome.cancelled else 5.0)

    async def close(self, feed: asyncio.Task, watch: asyncio.Task) -> None:
        """Stop the timers and tasks, close the books and send the final progress."""
        outcome = self.outcome
        for handle in self.handles:
            handle.cancel()
        for task in (feed, watch, *self.tasks):
            task.cancel()
        for task in (feed, watch):
            try:
                await task
            except asyncio.CancelledError:
                pass
        outcome.end = (
            max((r.end_time or r.send_time or outcome.start) for _t, r in outcome.records)
            if outcome.records
            else time.perf_counter()
        )
        self.account(max(outcome.end, self.last_change), 0)
        outcome.unsent = self.total - self.sent
        final = self.payload(time.perf_counter())
        final["phase"] = "replay:cancelled" if outcome.cancelled else "replay:done"
        try:
            await self.call_progress(final)
        finally:
            self.executor.shutdown(wait=False)
