"""A trace's own statistics, in one streaming pass with memory bounded by what is live, not by rows.

`TraceStats.add(chunk)` takes the chunks of `benchmarks.traces.formats.read_trace` in arrival
order (`trace_statistics` puts them in order, merge-sorting through disk when the file is not;
`out_of_order_rows` counts the rows found behind an earlier one); `TraceStats.result()` returns
plain data (JSON-ready). What it measures, and how:

- lengths: input and output tokens, exact mean, p50, p95, p99 and max (integer counts per token
  length, so the quantiles are exact whatever the number of rows). Output lengths leave out the
  failed rows (no output).
- arrivals: requests per second, exact per second of the trace (mean, p95 and peak), the busiest
  minute (minutes counted from the first request), the share of seconds without a request, and
  the rate over time for the chart. Times are rebased on the first request.
- concurrency, replayed: every request is in flight from its arrival for its observed `e2e_ms`,
  or, when the trace did not record it, for the service-time model's TTFT + (output - 1) x TPOT
  (`ServiceModel`, stated in the result). A sweep over the arrival and end events gives the exact
  peak and the time-weighted distribution (p95: the level not exceeded 95 % of the time). Carried
  between chunks: only the requests still in flight. When the trace recorded latencies, the same
  sweep with every request held for the model alone (`at_service_model`) says what the latency
  budget would imply instead.
- sessions: the turns of a `session_id` in arrival order; the idle gap before a turn is its
  arrival minus the end of the previous turn (observed or modelled), never negative. A session
  silent for more than `session_timeout_s` (30 min, as web analytics close a visit) is closed:
  its turns are counted and a later turn starts a new session. Concurrent sessions: open from
  their first arrival to their last answer, counted per second.
- prefix sharing: the share of input tokens that repeat a prefix already sent: Mooncake blocks
  whose hash id was seen before (512 tokens each, the last block partial), `prefix_tokens` of a
  `prefix_group`/`prefix_hash` seen before, and a turn's earlier turns (previous prompt + answer).
  When a repeated prefix group has no `prefix_tokens`, the requests are counted instead.
- traffic groups (the first article's short, long and multi-turn sessions): multi-turn = a turn
  of a session with at least two turns; long = any other request with at least
  `long_input_tokens` input tokens (16K, scenario B's p95 line); short = the rest.
- tenants: requests per tenant (the 20 largest named).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from benchmarks.traces.cache import BlockKeys, LruBlocks
from benchmarks.traces.formats import MOONCAKE_BLOCK_TOKENS, TraceChunk, TraceError
from benchmarks.traces.ordering import Disorder, OutOfOrder, in_order, sorted_chunks
from benchmarks.traces.service_model import ServiceModel

LONG_INPUT_TOKENS = 16_384  # scenario B's p95 line (selection.domain.scenarios.THRESHOLDS)
SESSION_TIMEOUT_S = 1800.0
MAX_SPAN_S = 400 * 86400.0  # a year of logs and some: per-second counts stay a few tens of MiB
TOP_TENANTS = 20
MAX_TENANTS = 100_000  # distinct tenants counted by name; more are "other"
HASH_BITMAP_MAX = 1 << 28  # hash ids below this live in a bitmap; larger ones in a set
CHART_BINS = 40
ARRIVAL_CHART_POINTS = 600
# Observed latencies (ms) are counted in log-spaced bins (1.2 % wide): quantiles within that.
LATENCY_EDGES = np.geomspace(0.01, 1e8, 1601)


class _Counts:
    """Integer counts per non-negative integer value (a growable bincount): exact quantiles."""

    def __init__(self) -> None:
        self.counts = np.zeros(1024, dtype=np.int64)

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        if values.size == 0:
            return
        top = int(values.max())
        if top >= self.counts.size:
            grown = np.zeros(max(top + 1, self.counts.size * 2), dtype=np.int64)
            grown[: self.counts.size] = self.counts
            self.counts = grown
        self.counts += np.bincount(values, weights=weights, minlength=self.counts.size).astype(np.int64)[
            : self.counts.size
        ]

    def summary(self) -> dict[str, float | int | None]:
        total = int(self.counts.sum())
        if total == 0:
            return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
        values = np.arange(self.counts.size)
        cumulative = np.cumsum(self.counts)
        return {
            "count": total,
            "mean": float((values * self.counts).sum() / total),
            "p50": _quantile(cumulative, 0.50),
            "p95": _quantile(cumulative, 0.95),
            "p99": _quantile(cumulative, 0.99),
            "max": int(np.flatnonzero(self.counts)[-1]),
        }

    def histogram(self, bins: int = CHART_BINS) -> dict[str, list]:
        """Counts in log-spaced bins from 1 to the maximum (for the length chart)."""
        nonzero = np.flatnonzero(self.counts)
        if nonzero.size == 0:
            return {"edges": [], "counts": []}
        top = int(nonzero[-1])
        edges = np.unique(np.round(np.geomspace(1, max(top + 1, 2), bins + 1)).astype(np.int64))
        cumulative = np.concatenate([[0], np.cumsum(self.counts)])
        counts = cumulative[np.minimum(edges[1:], cumulative.size - 1)] - cumulative[edges[:-1]]
        counts[-1] += int(self.counts[edges[-1] :].sum()) if edges[-1] < self.counts.size else 0
        return {"edges": edges.tolist(), "counts": counts.tolist()}


def _quantile(cumulative: np.ndarray, q: float) -> int:
    """The smallest value with at least q of the counts at or below it (nearest rank)."""
    rank = max(math.ceil(q * int(cumulative[-1])), 1)
    return int(np.searchsorted(cumulative, rank))


class _LogHistogram:
    """Counts of positive floats in LATENCY_EDGES bins (observed latencies, idle gaps)."""

    def __init__(self, edges: np.ndarray = LATENCY_EDGES) -> None:
        self.edges = edges
        self.counts = np.zeros(edges.size - 1, dtype=np.int64)
        self.total = 0.0
        self.n = 0
        self.zeros = 0

    def add(self, values: np.ndarray) -> None:
        values = values[np.isfinite(values)]
        if values.size == 0:
            return
        self.n += int(values.size)
        self.total += float(values.sum())
        positive = values[values > 0]
        self.zeros += int(values.size - positive.size)
        index = np.clip(np.searchsorted(self.edges, positive, side="right") - 1, 0, self.counts.size - 1)
        self.counts += np.bincount(index, minlength=self.counts.size)

    def quantile(self, q: float) -> float | None:
        if self.n == 0:
            return None
        rank = max(math.ceil(q * self.n), 1)
        if rank <= self.zeros:
            return 0.0
        index = int(np.searchsorted(np.cumsum(self.counts), rank - self.zeros))
        return float(self.edges[min(index + 1, self.edges.size - 1)])

    def summary(self) -> dict[str, float | int | None]:
        if self.n == 0:
            return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None}
        return {
            "count": self.n,
            "mean": self.total / self.n,
            "p50": self.quantile(0.50),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
        }


class _PerSecond:
    """A growable array indexed by whole seconds since the first request."""

    def __init__(self, dtype=np.int64) -> None:
        self.values = np.zeros(4096, dtype=dtype)

    def _grow(self, top: int) -> None:
        if top >= self.values.size:
            grown = np.zeros(max(top + 1, self.values.size * 2), dtype=self.values.dtype)
            grown[: self.values.size] = self.values
            self.values = grown

    def add(self, seconds: np.ndarray, weights: np.ndarray | None = None) -> None:
        if seconds.size == 0:
            return
        self._grow(int(seconds.max()))
        np.add.at(self.values, seconds, 1 if weights is None else weights)

    def add_counts(self, seconds: np.ndarray) -> None:
        if seconds.size == 0:
            return
        counts = np.bincount(seconds)
        self._grow(counts.size - 1)
        self.values[: counts.size] += counts.astype(self.values.dtype)


class _Sweep:
    """Requests in flight over time, from arrival/end intervals fed in arrival order: exact peak and
    time-weighted distribution. Carried between chunks: only the requests still in flight."""

    def __init__(self) -> None:
        self.pending_ends = np.empty(0)
        self.t: float | None = None
        self.level = 0
        self.peak = 0
        self.level_time = np.zeros(256)

    def advance(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Sweep up to the last start of these (sorted) arrivals; later ends wait for the next chunk."""
        if starts.size == 0:
            return
        horizon = float(starts[-1])
        all_ends = np.concatenate([self.pending_ends, ends])
        final = all_ends <= horizon
        self._events(starts, all_ends[final])
        self.pending_ends = all_ends[~final]

    def finish(self) -> None:
        if self.pending_ends.size:
            self._events(np.empty(0), np.sort(self.pending_ends))
            self.pending_ends = np.empty(0)

    def _events(self, starts: np.ndarray, ends: np.ndarray) -> None:
        times = np.concatenate([ends, starts])
        deltas = np.concatenate([np.full(ends.size, -1, dtype=np.int64), np.ones(starts.size, dtype=np.int64)])
        if times.size == 0:
            return
        order = np.lexsort((deltas, times))  # at equal times, ends before starts
        times, deltas = times[order], deltas[order]
        levels = self.level + np.cumsum(deltas)
        previous_t = np.concatenate([[times[0] if self.t is None else self.t], times[:-1]])
        previous_level = np.concatenate([[self.level], levels[:-1]])
        spans = np.maximum(times - previous_t, 0.0)
        top = int(max(previous_level.max(), levels.max()))
        if top >= self.level_time.size:
            grown = np.zeros(max(top + 1, self.level_time.size * 2))
            grown[: self.level_time.size] = self.level_time
            self.level_time = grown
        self.level_time[: top + 1] += np.bincount(previous_level, weights=spans, minlength=top + 1)
        self.peak = max(self.peak, int(levels.max()))
        self.t = float(times[-1])
        self.level = int(levels[-1])

    def summary(self) -> dict[str, Any]:
        total = float(self.level_time.sum())
        levels = np.arange(self.level_time.size)
        return {
            "peak": self.peak,
            "p95": _weighted_quantile(self.level_time, 0.95) if total > 0 else None,
            "mean": float((levels * self.level_time).sum() / total) if total > 0 else None,
        }


class TraceStats:
    """Streaming statistics of one trace (see the module docstring)."""

    def __init__(
        self,
        service: ServiceModel | None = None,
        long_input_tokens: int = LONG_INPUT_TOKENS,
        session_timeout_s: float = SESSION_TIMEOUT_S,
        block_tokens: int = MOONCAKE_BLOCK_TOKENS,
        kv_pools: dict[str, int] | None = None,
    ) -> None:
        self.service = service or ServiceModel()
        self.long_input_tokens = long_input_tokens
        self.session_timeout_s = session_timeout_s
        self.block_tokens = block_tokens
        # prefix sharing within each named KV pool (tokens): LRU over whole blocks (benchmarks.traces.cache)
        # one replay per distinct size: candidates with the same pool share it
        self.pool_names = {name: int(tokens) for name, tokens in (kv_pools or {}).items()}
        self.pools = {tokens: LruBlocks(tokens, block_tokens) for tokens in set(self.pool_names.values())}
        self.block_keys = BlockKeys(block_tokens)
        self.rows = 0
        self.failed = 0
        self.origin: float | None = None
        self.origin_line = 0
        self.last_arrival = 0.0
        self.last_end = 0.0
        self.out_of_order_rows = 0
        self.observed_e2e_rows = 0
        self.input = _Counts()
        self.output = _Counts()
        self.arrivals = _PerSecond()
        # concurrency sweeps: observed latencies where recorded (else the model), and the model alone
        self.sweep = _Sweep()
        self.budget_sweep = _Sweep()
        self.latest_raw = -math.inf
        # sessions
        # id -> [first_arrival, last_end, turns, first_input, last_in, last_out]
        self.sessions: dict[str, list[float]] = {}
        self.session_ids_seen = False
        self.closed: list[tuple[float, float, float, float]] = []
        self.turns = _Counts()
        self.idle = _LogHistogram(np.geomspace(0.001, 1e7, 1001))
        self.session_spans = _PerSecond()  # +1 at the open second, -1 after the close second
        self.groups = {"short": 0, "long": 0, "multi_turn": 0}
        # prefix sharing
        self.input_tokens_total = 0
        self.shared_tokens = 0
        self.prefix_bases: set[str] = set()
        self.repeated_prefix_requests_without_tokens = 0
        self.hash_bitmap = np.zeros(1 << 16, dtype=bool)
        self.hash_big: set[int] = set()
        self.prefix_keys: set[str] = set()
        # tenants and observations
        self.tenants: dict[str, int] = {}
        self.tenant_rows = 0
        self.ttft = _LogHistogram()
        self.e2e = _LogHistogram()

    # ------------------------------------------------------------------ feeding

    def add(self, chunk: TraceChunk) -> None:
        frame = chunk.frame
        if frame.empty:
            return
        n = len(frame)
        self.rows += n
        raw = frame["arrival_s"].to_numpy(dtype=np.float64)
        if float(raw.min()) < self.latest_raw or (raw.size > 1 and bool(np.any(raw[1:] < raw[:-1]))):
            raise OutOfOrder  # `trace_statistics` puts the rows in order first
        self.latest_raw = float(raw[-1])
        if self.origin is None:
            self.origin = float(raw[0])
            self.origin_line = int(frame["line"].iat[0])
        arrival = raw - self.origin
        if arrival[-1] > MAX_SPAN_S:  # per-second counts would not fit; two time bases mixed, most likely
            far = int(np.argmax(arrival > MAX_SPAN_S))
            raise TraceError(
                f"line {int(frame['line'].iat[far])}: {arrival[far] / 86400:,.0f} days after the first request "
                f"(line {self.origin_line}); a trace may span up to {MAX_SPAN_S / 86400:.0f} days "
                "(seconds and epoch times mixed?)"
            )
        failed = frame["failed"].to_numpy(dtype=bool)
        self.failed += int(failed.sum())
        inputs = frame["input_tokens"].to_numpy(dtype=np.int64)
        outputs = frame["output_tokens"].to_numpy(dtype=np.int64)
        self.input.add(inputs)
        self.output.add(outputs[~failed])
        self.arrivals.add_counts(arrival.astype(np.int64))
        e2e_ms = frame["e2e_ms"].to_numpy(dtype=np.float64)
        observed = np.isfinite(e2e_ms)
        self.observed_e2e_rows += int(observed.sum())
        modelled = self.service.duration_s(outputs)
        duration = np.where(observed, e2e_ms / 1000.0, modelled)
        end = arrival + duration
        self.ttft.add(frame["ttft_ms"].to_numpy(dtype=np.float64))
        self.e2e.add(e2e_ms)
        self.last_arrival = max(self.last_arrival, float(arrival.max()))
        ok = ~failed
        if ok.any():
            self.last_end = max(self.last_end, float(end[ok].max()))
        self.sweep.advance(arrival[ok], end[ok])
        self.budget_sweep.advance(arrival[ok], arrival[ok] + modelled[ok])
        shared = np.zeros(n, dtype=np.float64)
        continuing = np.zeros(n, dtype=bool)
        self._prefixes(frame, chunk, inputs, shared)
        in_session = self._sessions(frame, arrival, end, inputs, outputs, shared, continuing)
        if self.pools:
            self._pools(frame, chunk, inputs, outputs, ok, continuing)
        single = ~in_session
        long = single & (inputs >= self.long_input_tokens)
        self.groups["long"] += int(long.sum())
        self.groups["short"] += int((single & ~long).sum())
        self.input_tokens_total += int(inputs[ok].sum())
        self.shared_tokens += int(np.minimum(shared, inputs)[ok].sum())
        self._tenants(frame)
        self._flush_closed()

    def _sessions(
        self,
        frame: pd.DataFrame,
        arrival: np.ndarray,
        end: np.ndarray,
        inputs: np.ndarray,
        outputs: np.ndarray,
        shared: np.ndarray,
        continuing_rows: np.ndarray,
    ) -> np.ndarray:
        """Update the sessions; returns which rows belong to a session (their group is decided at close).
        `continuing_rows` is set for the turns that carry their session's history."""
        ids = frame["session_id"]
        has = ids.notna().to_numpy()
        if has.any():
            self.session_ids_seen = True
            index = np.flatnonzero(has)
            sid = ids.to_numpy(dtype=object)[index].astype(str)
            order = np.lexsort((arrival[index], sid))
            index, sid = index[order], sid[order]
            run_start = np.concatenate([[True], sid[1:] != sid[:-1]])
            prev_end = np.concatenate([[np.nan], end[index][:-1]])
            prev_in = np.concatenate([[0], inputs[index][:-1]])
            prev_out = np.concatenate([[0], outputs[index][:-1]])
            for position in np.flatnonzero(run_start):
                state = self.sessions.get(sid[position])
                if state is None:
                    prev_end[position] = np.nan
                else:
                    prev_end[position], prev_in[position], prev_out[position] = state[1], state[4], state[5]
            gap = arrival[index] - prev_end
            new_session = np.isnan(prev_end) | (gap > self.session_timeout_s)
            continuing = ~new_session
            self.idle.add(np.maximum(gap[continuing], 0.0))
            history = np.minimum(prev_in[continuing] + prev_out[continuing], inputs[index][continuing])
            rows = index[continuing]
            shared[rows] = np.maximum(shared[rows], history)
            continuing_rows[rows] = True
            if history.size:
                self.prefix_bases.add("session history")
            self._update_sessions(index, sid, arrival, end, inputs, outputs, run_start, new_session)
        horizon = self.last_arrival
        expired = [key for key, state in self.sessions.items() if horizon - state[1] > self.session_timeout_s]
        for key in expired:
            self._close(key, self.sessions.pop(key))
        return has

    def _update_sessions(
        self,
        index: np.ndarray,
        sid: np.ndarray,
        arrival: np.ndarray,
        end: np.ndarray,
        inputs: np.ndarray,
        outputs: np.ndarray,
        run_start: np.ndarray,
        new_session: np.ndarray,
    ) -> None:
        """Fold each segment (a session's consecutive turns in this chunk, rows sorted by session then
        arrival) into its open session, opening and closing sessions where a gap exceeds the timeout."""
        n = index.size
        segments = np.flatnonzero(run_start | new_session)
        lasts = np.concatenate([segments[1:], [n]]) - 1
        seg_arrival = arrival[index[segments]].tolist()
        seg_end = np.maximum.reduceat(end[index], segments).tolist()
        seg_turns = (lasts - segments + 1).tolist()
        seg_first_in = inputs[index[segments]].tolist()
        seg_last_in = inputs[index[lasts]].tolist()
        seg_last_out = outputs[index[lasts]].tolist()
        seg_key = sid[segments].tolist()
        seg_run_start = run_start[segments].tolist()
        seg_new = new_session[segments].tolist()
        seg_open = np.concatenate([run_start[lasts[:-1] + 1], [True]]).tolist() if n else []
        sessions = self.sessions
        for i, key in enumerate(seg_key):
            state = None
            if seg_run_start[i]:
                state = sessions.pop(key, None)
                if state is not None and seg_new[i]:
                    self._close(key, state)
                    state = None
            if state is None:
                state = [seg_arrival[i], seg_end[i], seg_turns[i], seg_first_in[i], 0, 0]
            else:
                state[1] = max(state[1], seg_end[i])
                state[2] += seg_turns[i]
            state[4], state[5] = seg_last_in[i], seg_last_out[i]
            if seg_open[i]:
                sessions[key] = state
            else:  # a gap longer than the timeout follows: this session is over
                self._close(key, state)

    def _close(self, key: str, state: list[float]) -> None:
        """Queue a finished session; `_flush_closed` counts the queue at the end of each chunk."""
        if state[2] > 0:
            self.closed.append((state[0], state[1], state[2], state[3]))

    def _flush_closed(self) -> None:
        if not self.closed:
            return
        first_arrival, last_end, turns, first_input = (np.asarray(column) for column in zip(*self.closed, strict=True))
        self.closed = []
        turns = turns.astype(np.int64)
        self.turns.add(turns)
        multi = turns >= 2
        self.groups["multi_turn"] += int(turns[multi].sum())
        long = ~multi & (first_input >= self.long_input_tokens)
        self.groups["long"] += int(long.sum())
        self.groups["short"] += int((~multi & ~long).sum())
        opened = first_arrival.astype(np.int64)
        closed = last_end.astype(np.int64) + 1
        self.session_spans.add(
            np.concatenate([opened, closed]), np.concatenate([np.ones_like(opened), -np.ones_like(closed)])
        )

    def _pools(
        self,
        frame: pd.DataFrame,
        chunk: TraceChunk,
        inputs: np.ndarray,
        outputs: np.ndarray,
        ok: np.ndarray,
        continuing: np.ndarray,
    ) -> None:
        """Replay this chunk's requests, in arrival order, through every pool's LRU block cache."""
        hashes = chunk.hash_ids.to_pylist() if chunk.hash_ids is not None else [None] * len(frame)
        sessions = frame["session_id"].tolist()
        keys = frame["prefix_key"].tolist()
        tokens = frame["prefix_tokens"].to_numpy(dtype=np.float64).tolist()
        rows = zip(
            inputs.tolist(),
            outputs.tolist(),
            hashes,
            sessions,
            continuing.tolist(),
            keys,
            tokens,
            ok.tolist(),
            strict=True,
        )
        pools = list(self.pools.values())
        for input_tokens, output_tokens, ids, session, carries, key, prefix, counted in rows:
            prompt, cached = self.block_keys.keys(
                input_tokens,
                output_tokens,
                ids,
                None if _missing(session) else str(session),
                carries,
                None if _missing(key) else str(key),
                prefix,
            )
            for pool in pools:
                pool.request(prompt, cached, counted)

    def _prefixes(self, frame: pd.DataFrame, chunk: TraceChunk, inputs: np.ndarray, shared: np.ndarray) -> None:
        if chunk.hash_ids is not None:
            self._hash_blocks(chunk, inputs, shared)
        keys = frame["prefix_key"]
        has = keys.notna().to_numpy()
        if not has.any():
            return
        index = np.flatnonzero(has)
        values = keys.to_numpy(dtype=object)[index].astype(str)
        repeated = pd.Series(values).duplicated().to_numpy() | np.isin(values, list(self.prefix_keys))
        self.prefix_keys.update(values.tolist())
        tokens = frame["prefix_tokens"].to_numpy(dtype=np.float64)[index]
        counted = repeated & np.isfinite(tokens)
        rows = index[counted]
        shared[rows] = np.maximum(shared[rows], tokens[counted])
        self.repeated_prefix_requests_without_tokens += int((repeated & ~np.isfinite(tokens)).sum())
        self.prefix_bases.add("prefix groups")

    def _hash_blocks(self, chunk: TraceChunk, inputs: np.ndarray, shared: np.ndarray) -> None:
        lists = chunk.hash_ids
        ids = lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        if ids.size == 0:
            return
        offsets = lists.offsets.to_numpy(zero_copy_only=False)
        parent = np.repeat(np.arange(len(lists)), np.diff(offsets))
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        seen = first[inverse] < np.arange(ids.size)
        small = (ids >= 0) & (ids < HASH_BITMAP_MAX)
        if small.any():
            top = int(ids[small].max())
            if top >= self.hash_bitmap.size:
                grown = np.zeros(max(top + 1, self.hash_bitmap.size * 2), dtype=bool)
                grown[: self.hash_bitmap.size] = self.hash_bitmap
                self.hash_bitmap = grown
            seen[small] |= self.hash_bitmap[ids[small]]
            self.hash_bitmap[ids[small]] = True
        if (~small).any():
            big = ids[~small]
            seen[~small] |= np.isin(big, list(self.hash_big))
            self.hash_big.update(big.tolist())
        blocks = np.bincount(parent[seen], minlength=len(lists)).astype(np.float64)
        shared[:] = np.maximum(shared, np.minimum(blocks * self.block_tokens, inputs))
        self.prefix_bases.add(f"hash_ids blocks of {self.block_tokens} tokens")

    def _tenants(self, frame: pd.DataFrame) -> None:
        tenants = frame["tenant"]
        present = tenants.dropna()
        if present.empty:
            return
        self.tenant_rows += len(present)
        for name, count in present.astype(str).value_counts().items():
            if name in self.tenants or len(self.tenants) < MAX_TENANTS:
                self.tenants[name] = self.tenants.get(name, 0) + int(count)
            else:
                self.tenants["other"] = self.tenants.get("other", 0) + int(count)

    # ------------------------------------------------------------------ results

    def _finish(self) -> None:
        self.sweep.finish()
        self.budget_sweep.finish()
        for key in list(self.sessions):
            self._close(key, self.sessions.pop(key))
        self._flush_closed()

    def result(self) -> dict[str, Any]:
        """The statistics as plain data (calling it ends the stream: add no more chunks)."""
        self._finish()
        span = self.last_arrival
        per_second = self.arrivals.values[: int(span) + 1] if self.rows else np.zeros(0)
        served = self.rows - self.failed
        if self.observed_e2e_rows and self.observed_e2e_rows >= served:
            basis = "observed e2e_ms"
        elif self.observed_e2e_rows:
            basis = "observed e2e_ms where recorded, else the service-time model"
        else:
            basis = "model"
        concurrency = {
            **self.sweep.summary(),
            "basis": basis,
            "observed_e2e_rows": self.observed_e2e_rows,
            "service_model": self.service.describe(),
            # the same arrivals, every request held for the service-time model (the latency budget)
            "at_service_model": self.budget_sweep.summary() if self.observed_e2e_rows else None,
        }
        sessions_open = np.cumsum(self.session_spans.values) if self.session_ids_seen else None
        turns = self.turns.summary()
        sessions = {
            "present": self.session_ids_seen,
            "count": turns["count"] or 0,
            "multi_turn_sessions": int(self.turns.counts[2:].sum()),
            "turns": turns,
            "idle_s": self.idle.summary(),
            "concurrent_peak": int(sessions_open.max()) if sessions_open is not None and sessions_open.size else None,
            "timeout_s": self.session_timeout_s,
        }
        prefix_ratio = self.shared_tokens / self.input_tokens_total if self.input_tokens_total else None
        ranked = sorted(self.tenants.items(), key=lambda kv: (-kv[1], kv[0]))
        return {
            "rows": self.rows,
            "failed": self.failed,
            "out_of_order_rows": self.out_of_order_rows,
            "span_s": span,
            "rate": _rates(per_second, self.rows, span),
            "concurrency": concurrency,
            "input_tokens": self.input.summary(),
            "output_tokens": self.output.summary(),
            "sessions": sessions,
            "prefix": {
                "sharing_ratio": prefix_ratio if self.prefix_bases else None,
                "shared_tokens": self.shared_tokens,
                "input_tokens": self.input_tokens_total,
                "bases": sorted(self.prefix_bases),
                "groups": len(self.prefix_keys),
                "repeated_without_prefix_tokens": self.repeated_prefix_requests_without_tokens,
                # per KV pool: what an LRU cache of that many tokens reuses (None: no prefix data)
                "pools": {
                    name: self.pools[tokens].summary(self.input_tokens_total)
                    for name, tokens in self.pool_names.items()
                }
                if self.prefix_bases
                else {},
            },
            "groups": dict(self.groups),
            "long_input_tokens": self.long_input_tokens,
            "tenants": {
                "count": len(self.tenants),
                "requests_with_tenant": self.tenant_rows,
                "top": [[name, count] for name, count in ranked[:TOP_TENANTS]],
            },
            "observed": {"ttft_ms": self.ttft.summary(), "e2e_ms": self.e2e.summary()},
            "charts": {
                "input_tokens": self.input.histogram(),
                "output_tokens": self.output.histogram(),
                "arrivals": _rate_series(per_second),
            },
        }


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _rates(per_second: np.ndarray, rows: int, span: float) -> dict[str, Any]:
    """Mean, p95 and peak per second, the busiest minute (minutes from the first request) and the
    share of seconds without a request: a mean hides the bursts an engine must absorb."""
    if per_second.size == 0:
        return {
            "mean_rps": None,
            "p95_rps": None,
            "peak_rps": None,
            "peak_minute_rps": None,
            "peak_minute_requests": None,
            "empty_seconds_share": None,
            "seconds": 0,
        }
    minutes = math.ceil(per_second.size / 60)
    padded = np.zeros(minutes * 60, dtype=np.int64)
    padded[: per_second.size] = per_second
    per_minute = padded.reshape(minutes, 60).sum(axis=1)
    return {
        "mean_rps": rows / span if span > 0 else None,
        "p95_rps": float(np.percentile(per_second, 95)),
        "peak_rps": int(per_second.max()),
        "peak_minute_rps": float(per_minute.max()) / 60.0,
        "peak_minute_requests": int(per_minute.max()),
        "empty_seconds_share": float(np.count_nonzero(per_second == 0)) / per_second.size,
        "seconds": int(per_second.size),
    }


def _weighted_quantile(weights: np.ndarray, q: float) -> int:
    cumulative = np.cumsum(weights)
    return int(np.searchsorted(cumulative, q * cumulative[-1]))


def _rate_series(per_second: np.ndarray, points: int = ARRIVAL_CHART_POINTS) -> dict[str, Any]:
    """Requests per second averaged over at most `points` equal bins: [[t_start_s, rps], ...]."""
    if per_second.size == 0:
        return {"bin_s": 1, "points": []}
    width = max(math.ceil(per_second.size / points), 1)
    padded = np.zeros(math.ceil(per_second.size / width) * width, dtype=np.float64)
    padded[: per_second.size] = per_second
    rates = padded.reshape(-1, width).mean(axis=1)
    return {"bin_s": width, "points": [[i * width, float(r)] for i, r in enumerate(rates)]}


def trace_statistics(
    chunks: Iterable[TraceChunk] | Callable[[], Iterable[TraceChunk]],
    service: ServiceModel | None = None,
    progress: Callable[[int, int], Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Statistics of a whole trace; `progress(rows, bytes_read)` after each chunk read.

    `chunks` is a function that opens the trace's chunks (it may be called twice) or the chunks
    themselves. Opened by a function, the trace is read once when it is in time order; a chunk
    that goes back in time restarts the reading through an external merge sort
    (`benchmarks.traces.ordering`). Chunks given as such always go through the sort."""

    def reported(source: Iterable[TraceChunk]) -> Iterator[TraceChunk]:
        rows = 0
        for chunk in source:
            rows += len(chunk.frame)
            yield chunk
            if progress is not None:
                progress(rows, chunk.bytes_read)

    if callable(chunks):
        disorder = Disorder()
        stats = TraceStats(service=service, **options)
        try:
            for chunk in in_order(reported(chunks()), disorder):
                stats.add(chunk)
            stats.out_of_order_rows = disorder.rows_behind
            return stats.result()
        except OutOfOrder:
            source = chunks()
    else:
        source = chunks
    disorder = Disorder()
    stats = TraceStats(service=service, **options)
    for chunk in sorted_chunks(reported(source), disorder=disorder):
        stats.add(chunk)
    stats.out_of_order_rows = disorder.rows_behind
    return stats.result()
