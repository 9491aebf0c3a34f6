"""A replay plan: the trace's requests as sessions of turns, ready for the load client or the simulator.

What a replay keeps from the trace:
- arrival times: a session's first turn is sent at its recorded arrival (rebased on the first
  request kept), divided by `speedup` (2 = the same traffic in half the time, i.e. 2x the rate);
- session structure: a later turn waits for the previous turn's answer, then for the recorded
  idle gap (the turn's arrival minus the previous turn's end: observed `e2e_ms`, else the
  service-time model of `benchmarks.traces.stats`), also divided by `speedup`; a gap longer than
  the sessions' timeout starts a new session, as in the statistics;
- prompts: each turn's input and output length; a later turn's prompt is the previous prompt, its
  answer and `new_tokens` of new text (when the recorded prompt is shorter than that history, the
  turn starts afresh); requests of one `prefix_key` share their first `prefix_tokens` tokens;
  Mooncake's `hash_ids` are kept per request (equal ids, equal 512-token blocks);
- traffic groups: multi-turn (a turn of a session with at least two turns in the plan), long
  (input >= `long_input_tokens`) or short, as the statistics define them.

`sample=N` keeps the first N requests in arrival order (the trace's own rate and bursts over a
shorter window); turns of a session after the cut are dropped. A log out of time order is merge-
sorted first (`benchmarks.traces.ordering`), so the N are the earliest, not the first N lines.
Failed rows (no output) are left out. The plan does not generate text: the load client turns it into prompts
(`benchmarks.harness.trace_replay`), the simulator into block keys (`benchmarks.simulator.offline`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from benchmarks.traces.formats import MOONCAKE_BLOCK_TOKENS, TraceChunk
from benchmarks.traces.ordering import sorted_chunks
from benchmarks.traces.stats import LONG_INPUT_TOKENS, SESSION_TIMEOUT_S, ServiceModel

GROUPS = ("short", "long", "multi_turn")
MAX_REPLAY_REQUESTS = 1_000_000


class PlanError(ValueError):
    """Replay options that cannot work; the message names the option."""


@dataclass(slots=True)
class Turn:
    request_id: str  # "L<line>": the trace line it replays
    session: int  # index of its session in the plan
    index: int  # 0 for the first turn of a session
    offset_s: float  # scaled recorded arrival since the first request kept (when a first turn is sent)
    gap_s: float  # scaled idle gap after the previous turn's answer (later turns)
    input_tokens: int
    output_tokens: int
    new_tokens: int  # tokens after the history (the whole prompt for a first turn)
    history_tokens: int  # tokens repeated from the previous turn: its prompt and its answer
    prefix_key: str | None
    prefix_tokens: int
    group: str = "short"
    tenant: str | None = None
    hash_ids: tuple[int, ...] | None = None
    line: int = 0


@dataclass
class Session:
    key: str | None  # the trace's session id (None: a single request)
    turns: list[Turn] = field(default_factory=list)


@dataclass
class ReplayPlan:
    sessions: list[Session]
    speedup: float = 1.0
    sample: int | None = None
    rows_read: int = 0
    failed_left_out: int = 0
    long_input_tokens: int = LONG_INPUT_TOKENS
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    service: ServiceModel = field(default_factory=ServiceModel)
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def turns(self) -> list[Turn]:
        return [turn for session in self.sessions for turn in session.turns]

    @property
    def requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def first_turns(self) -> list[Turn]:
        """The first turn of every session, in send order."""
        return sorted((s.turns[0] for s in self.sessions if s.turns), key=lambda t: (t.offset_s, t.line))

    def recorded_span_s(self) -> float:
        """Scaled span of the recorded arrivals (a lower bound of the replay's duration)."""
        offsets = [t.offset_s + t.gap_s for t in self.turns]
        return max(offsets) if offsets else 0.0

    def group_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(GROUPS, 0)
        for turn in self.turns:
            counts[turn.group] += 1
        return counts

    @property
    def has_history(self) -> bool:
        return any(turn.history_tokens for turn in self.turns)

    def describe(self) -> dict[str, Any]:
        span = self.recorded_span_s()
        return {
            **self.source,
            "requests": self.requests,
            "sessions": len(self.sessions),
            "multi_turn_sessions": sum(1 for s in self.sessions if len(s.turns) >= 2),
            "groups": self.group_counts(),
            "speedup": self.speedup,
            "sample": self.sample,
            "rows_read": self.rows_read,
            "failed_left_out": self.failed_left_out,
            "recorded_span_s": round(span, 3),
            "mean_rate_rps": round(self.requests / span, 3) if span > 0 else None,
            "long_input_tokens": self.long_input_tokens,
            "service_model": self.service.describe(),
        }


def build_plan(
    chunks: Iterable[TraceChunk],
    speedup: float = 1.0,
    sample: int | None = None,
    service: ServiceModel | None = None,
    long_input_tokens: int = LONG_INPUT_TOKENS,
    session_timeout_s: float = SESSION_TIMEOUT_S,
    source: dict[str, Any] | None = None,
) -> ReplayPlan:
    """The replay plan of a trace (see the module docstring); reading stops once `sample` rows are kept."""
    if (
        not isinstance(speedup, (int, float))
        or isinstance(speedup, bool)
        or not speedup > 0
        or not math.isfinite(speedup)
    ):
        raise PlanError(f"speedup: must be a positive number, got {speedup!r}")
    if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool) or sample < 1):
        raise PlanError(f"sample: must be a positive whole number of requests, got {sample!r}")
    limit = sample or MAX_REPLAY_REQUESTS
    service = service or ServiceModel()
    rows: list[tuple] = []
    hashes: list[tuple[int, ...] | None] = []
    read = failed = 0
    if sample is not None:  # the earliest N requests, wherever the log has them
        chunks = sorted_chunks(chunks)
    for chunk in chunks:
        frame = chunk.frame
        read += len(frame)
        keep = ~frame["failed"].to_numpy(dtype=bool)
        failed += int((~keep).sum())
        lists = chunk.hash_ids.to_pylist() if chunk.hash_ids is not None else None
        positions = np.flatnonzero(keep)[: limit - len(rows)]
        kept = frame.iloc[positions]
        columns = [
            kept["arrival_s"].astype(float).tolist(),
            kept["line"].astype(int).tolist(),
            [None if _missing(v) else str(v) for v in kept["session_id"].tolist()],
            kept["input_tokens"].astype(int).tolist(),
            kept["output_tokens"].astype(int).tolist(),
            [None if _missing(v) else str(v) for v in kept["prefix_key"].tolist()],
            [0 if _missing(v) else int(v) for v in kept["prefix_tokens"].tolist()],
            [None if _missing(v) else str(v) for v in kept["tenant"].tolist()],
            kept["e2e_ms"].astype(float).tolist(),
        ]
        rows.extend(zip(*columns, strict=True))
        hashes.extend(
            tuple(lists[p]) if lists is not None and lists[p] is not None else None for p in positions.tolist()
        )
        if len(rows) >= limit:
            break
    if sample is None and len(rows) >= MAX_REPLAY_REQUESTS:
        raise PlanError(f"sample: the trace has more than {MAX_REPLAY_REQUESTS:,} requests; give --sample N")
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][1]))
    origin = rows[order[0]][0] if rows else 0.0
    sessions: list[Session] = []
    open_sessions: dict[str, tuple[int, float, int, int]] = {}  # id -> (session index, end, input, output)
    for i in order:
        arrival, line, sid, inputs, outputs, prefix_key, prefix_tokens, tenant, e2e_ms = rows[i]
        duration = e2e_ms / 1000.0 if math.isfinite(e2e_ms) else float(service.duration_s(np.array([outputs]))[0])
        previous = open_sessions.get(sid) if sid is not None else None
        if previous is not None and arrival - previous[1] > session_timeout_s:
            previous = None
        history = 0
        gap = 0.0
        if previous is None:
            session_index = len(sessions)
            sessions.append(Session(key=sid))
        else:
            session_index, previous_end, previous_in, previous_out = previous
            gap = max(arrival - previous_end, 0.0)
            if previous_in + previous_out < inputs:
                history = previous_in + previous_out
        turn = Turn(
            request_id=f"L{line}",
            session=session_index,
            index=len(sessions[session_index].turns),
            offset_s=(arrival - origin) / speedup,
            gap_s=gap / speedup,
            input_tokens=inputs,
            output_tokens=outputs,
            new_tokens=inputs - history,
            history_tokens=history,
            prefix_key=prefix_key if history == 0 else None,
            prefix_tokens=min(prefix_tokens, inputs) if history == 0 else 0,
            tenant=tenant,
            hash_ids=hashes[i],
            line=line,
        )
        sessions[session_index].turns.append(turn)
        if sid is not None:
            open_sessions[sid] = (session_index, arrival + duration, inputs, outputs)
    for session in sessions:
        multi = len(session.turns) >= 2
        for turn in session.turns:
            if multi:
                turn.group = "multi_turn"
            elif turn.input_tokens >= long_input_tokens:
                turn.group = "long"
            else:
                turn.group = "short"
    return ReplayPlan(
        sessions=sessions,
        speedup=float(speedup),
        sample=sample,
        rows_read=read,
        failed_left_out=failed,
        long_input_tokens=long_input_tokens,
        service=service,
        source=dict(source or {}),
    )


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and pandas' missing values
    except (TypeError, ValueError):
        return False
