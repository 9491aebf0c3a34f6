"""Offline mode: run a workload trace through the engine as a discrete-event simulation.

No HTTP, no wall clock: the virtual clock jumps from one scheduler step to the next (runs of
identical decode steps are coalesced) and to the next arrival when the engine is idle.
The result is a `NormalizedResult` with evidence SIMULATED, per-request records and KV usage
time series, so what-if questions ("what concurrency fits with fp8 KV?") use the same
pipeline as measured runs.

Trace format (CSV with a header, or JSONL with one object per line). Columns:
- `arrival_s` (aliases `arrival`, `timestamp`): seconds since the trace start, required
- `input_tokens` (alias `prompt_tokens`): prompt length, the whole prompt an engine sees
  (for a multi-turn session that includes the earlier turns), required
- `output_tokens` (alias `max_tokens`): tokens to generate, required
- `session_id`: optional; turns of one session share their history's KV blocks. A session is
  append-only: each turn's prompt is the previous turn's prompt + output + new text (use a new
  session id for a new conversation)
- `prefix_id`, `prefix_tokens`: optional; requests with the same prefix id share their first
  `prefix_tokens` tokens (a system prompt)
- `request_id`: optional (defaults to the line number)

Production traces in the formats of `benchmarks.traces` (kvselect's request log, Mooncake, Azure
LLM inference, BurstGPT) run too: `load_trace(path, format=None, speedup=1.0, sample=None)`
detects them, builds the same replay plan the load client uses (`benchmarks.traces.replay`) and
runs its requests at their recorded arrivals divided by `speedup` ("what if 2x the traffic":
`--speedup 2`). Sessions keep their KV history across turns, prefix groups share their blocks,
and Mooncake's `hash_ids` become block keys (equal id, equal 512-token block), so the simulated
prefix-cache hits follow the trace's own sharing. Offline, a later turn arrives at its recorded
time (the replay against an endpoint waits for the answer instead).
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from benchmarks.result import REQUEST_COLUMNS, SIMULATED, LoadPoint, NormalizedResult, Stats
from benchmarks.simulator.block_keys import KeySpace
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.engine import Engine
from benchmarks.simulator.errors import EngineError
from benchmarks.simulator.sequence import Sequence
from benchmarks.traces.formats import MOONCAKE_BLOCK_TOKENS, read_head, read_trace
from benchmarks.traces.formats import TraceError as TraceFormatError
from benchmarks.traces.replay import ReplayPlan, build_plan

TOOL = "kvsim"
TOOL_VERSION = "1"
FORMAT = "kvsim-offline"


class TraceError(ValueError):
    """A trace line is malformed; the message names the line and the field."""


@dataclass(slots=True)
class TraceRecord:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    session_id: Any = None
    prefix_id: Any = None
    prefix_tokens: int = 0
    request_id: Any = None
    hash_ids: tuple[int, ...] | None = None  # Mooncake block hashes (MOONCAKE_BLOCK_TOKENS tokens each)


class HashIdKeys:
    """Block keys from a trace's block hashes: a simulator block inside trace block j is keyed by
    (hash_ids[j], its position in that block), so equal ids share cache; blocks past the hashed
    prompt (the outputs) are the request's own."""

    __slots__ = ("hash_ids", "own", "trace_block")

    def __init__(self, hash_ids: tuple[int, ...], own: int, trace_block: int = MOONCAKE_BLOCK_TOKENS) -> None:
        self.hash_ids, self.own, self.trace_block = hash_ids, own, trace_block

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Any]:
        keys: list[Any] = []
        per = max(self.trace_block // block_size, 1)
        for index in range(start, stop):
            j, within = divmod(index, per)
            keys.append(("h", self.hash_ids[j], within) if j < len(self.hash_ids) else ("o", self.own, index))
        return keys


_ALIASES = {
    "arrival_s": ("arrival_s", "arrival", "timestamp"),
    "input_tokens": ("input_tokens", "prompt_tokens"),
    "output_tokens": ("output_tokens", "max_tokens"),
}


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _record(row: dict[str, Any], line: int) -> TraceRecord:
    values: dict[str, Any] = {}
    for name, aliases in _ALIASES.items():
        raw = next((row[a] for a in aliases if a in row and not _blank(row[a])), None)
        if raw is None:
            raise TraceError(f"trace line {line}: {name}: missing")
        try:
            values[name] = float(raw) if name == "arrival_s" else int(float(raw))
        except (TypeError, ValueError):
            raise TraceError(f"trace line {line}: {name}: not a number, got {raw!r}") from None
    if not math.isfinite(values["arrival_s"]) or values["arrival_s"] < 0:
        raise TraceError(f"trace line {line}: arrival_s: must be a non-negative number, got {values['arrival_s']}")
    for name in ("input_tokens", "output_tokens"):
        if values[name] <= 0:
            raise TraceError(f"trace line {line}: {name}: must be a positive integer, got {values[name]}")
    prefix_tokens = row.get("prefix_tokens")
    try:
        prefix_tokens = 0 if _blank(prefix_tokens) else int(float(prefix_tokens))
    except (TypeError, ValueError):
        raise TraceError(f"trace line {line}: prefix_tokens: not a number, got {prefix_tokens!r}") from None
    return TraceRecord(
        arrival_s=values["arrival_s"],
        input_tokens=values["input_tokens"],
        output_tokens=values["output_tokens"],
        session_id=None if _blank(row.get("session_id")) else row.get("session_id"),
        prefix_id=None if _blank(row.get("prefix_id")) else row.get("prefix_id"),
        prefix_tokens=min(max(prefix_tokens, 0), values["input_tokens"]),
        request_id=line if _blank(row.get("request_id")) else row.get("request_id"),
    )


_SIMULATOR_COLUMNS = {"arrival_s", "arrival", "prefix_id", "prompt_tokens", "max_tokens"}


def load_trace(
    path: str | Path, format: str | None = None, speedup: float = 1.0, sample: int | None = None
) -> list[TraceRecord]:
    """Read a trace, sorted by arrival: the simulator's own CSV/JSONL (above), or a production trace
    (`benchmarks.traces`: its format detected unless given), scaled by `speedup`, cut to `sample`."""
    path = Path(path)
    if format is None:
        try:
            own = bool(_SIMULATOR_COLUMNS & set(read_head(path).keys))
        except TraceFormatError:
            own = True  # let the simulator's reader say what is wrong
        if own:
            records = _load_own(path)
            if speedup != 1.0:
                for record in records:
                    record.arrival_s /= speedup
            return records[:sample] if sample else records
    try:
        plan = build_plan(read_trace(path, format), speedup=speedup, sample=sample)
    except (TraceFormatError, ValueError) as exc:
        raise TraceError(str(exc)) from None
    return records_from_plan(plan)


def records_from_plan(plan: ReplayPlan) -> list[TraceRecord]:
    """The plan's turns as offline records: each at its recorded (scaled) arrival."""
    records = []
    for session in plan.sessions:
        for turn in session.turns:
            records.append(
                TraceRecord(
                    arrival_s=turn.offset_s,
                    input_tokens=turn.input_tokens,
                    output_tokens=turn.output_tokens,
                    session_id=f"s{turn.session}" if len(session.turns) > 1 else None,
                    prefix_id=turn.prefix_key,
                    prefix_tokens=turn.prefix_tokens,
                    request_id=turn.request_id,
                    hash_ids=turn.hash_ids,
                )
            )
    records.sort(key=lambda r: r.arrival_s)
    return records


def _load_own(path: Path) -> list[TraceRecord]:
    records = []
    with path.open(newline="", encoding="utf-8") as handle:
        if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
            for line, text in enumerate(handle, 1):
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"trace line {line}: not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise TraceError(f"trace line {line}: must be a JSON object")
                records.append(_record(row, line))
        else:
            for line, row in enumerate(csv.DictReader(handle), 2):
                records.append(_record(row, line))
    records.sort(key=lambda r: r.arrival_s)
    return records


def write_trace(path: str | Path, records: Iterable[TraceRecord]) -> None:
    """Write records as CSV (tests and the perf benchmark generate traces with this)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["arrival_s", "input_tokens", "output_tokens", "session_id", "prefix_id", "prefix_tokens", "request_id"]
        )
        for r in records:
            writer.writerow(
                [
                    repr(r.arrival_s),
                    r.input_tokens,
                    r.output_tokens,
                    "" if r.session_id is None else r.session_id,
                    "" if r.prefix_id is None else r.prefix_id,
                    r.prefix_tokens,
                    "" if r.request_id is None else r.request_id,
                ]
            )


def simulate(records: list[TraceRecord], config: SimConfig, sample_interval_s: float | None = None) -> NormalizedResult:
    """Run the trace (sorted by arrival) and return the SIMULATED result.

    Time series are sampled every `sample_interval_s` simulated seconds (default: the arrival
    span / 1000, at least 10 ms); the peak KV usage is exact (tracked at every step)."""
    started = time.perf_counter()
    if sample_interval_s is None:
        span = records[-1].arrival_s - records[0].arrival_s if records else 0.0
        sample_interval_s = max(span / 1000.0, 0.01)
    engine = Engine(config, coalesce=True)
    space = KeySpace()
    sequences: list[Sequence] = []
    errors: dict[int, str] = {}
    series: dict[str, list[list[float]]] = {
        "kv_cache_usage_perc": [],
        "num_requests_running": [],
        "num_requests_waiting": [],
        "kvsim_fragmentation": [],
        "kvsim_cpu_blocks": [],
    }
    count = len(records)
    index = 0
    now = records[0].arrival_s if records else 0.0
    next_sample = now
    steps = 0
    while index < count or engine.has_work():
        if not engine.has_work() and index < count and now < records[index].arrival_s:
            now = records[index].arrival_s
        while index < count and records[index].arrival_s <= now:
            r = records[index]
            keys = (
                HashIdKeys(r.hash_ids, space.base())
                if r.hash_ids
                else space.keys(r.prefix_id, r.prefix_tokens, r.session_id)
            )
            seq = Sequence(
                index if r.request_id is None else r.request_id, r.input_tokens, r.output_tokens, r.arrival_s, keys
            )
            sequences.append(seq)
            try:
                engine.add(seq, now)
            except EngineError as exc:
                errors[len(sequences) - 1] = f"{exc.status}: {exc}"
                seq.finish_t, seq.finish_reason = now, "error"
            index += 1
        if now >= next_sample:
            snap_usage = engine.kv_cache_usage()
            series["kv_cache_usage_perc"].append([now, snap_usage])
            series["num_requests_running"].append([now, len(engine.running)])
            series["num_requests_waiting"].append([now, len(engine.waiting)])
            series["kvsim_fragmentation"].append([now, engine.fragmentation()])
            series["kvsim_cpu_blocks"].append([now, len(engine.cpu) + engine.cpu_swap_used])
            next_sample = now + sample_interval_s
        if not engine.has_work():
            continue
        horizon = min(records[index].arrival_s if index < count else math.inf, next_sample)
        outcome = engine.step(now, horizon)
        now += outcome.duration
        steps += 1
    elapsed = time.perf_counter() - started
    return _result(records, sequences, errors, engine, series, steps, elapsed, config)


def _result(records, sequences, errors, engine, series, steps, elapsed, config) -> NormalizedResult:
    import numpy as np
    import pandas as pd

    n = len(sequences)
    arrival = np.array([s.arrival for s in sequences], dtype=float)
    first = np.array([np.nan if s.first_token_t is None else s.first_token_t for s in sequences], dtype=float)
    finish = np.array([np.nan if s.finish_t is None else s.finish_t for s in sequences], dtype=float)
    outputs = np.array([s.max_tokens if s.finish_reason == "length" else 0 for s in sequences], dtype=float)
    ok = np.array([s.finish_reason == "length" for s in sequences], dtype=bool)
    ttft = (first - arrival) * 1000.0
    e2e = np.where(ok, (finish - arrival) * 1000.0, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(ok & (outputs > 1), (finish - first) * 1000.0 / (outputs - 1), np.nan)
    frame = pd.DataFrame(
        {
            "point": np.zeros(n, dtype=int),
            "request_id": [s.request_id for s in sequences],
            "start_s": arrival - (arrival[0] if n else 0.0),
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "itl_ms_mean": tpot,
            "e2e_ms": e2e,
            "prompt_tokens": [s.prompt_len for s in sequences],
            "output_tokens": outputs.astype(int),
            "ok": ok,
            "error": [errors.get(i) for i in range(n)],
            "finish_reason": [s.finish_reason for s in sequences],
        },
        columns=list(REQUEST_COLUMNS),
    )
    completed = int(ok.sum())
    failed = n - completed
    start = float(arrival.min()) if n else 0.0
    end = float(np.nanmax(finish)) if n and np.isfinite(finish).any() else start
    duration = max(end - start, 1e-9)
    usage = [v for _, v in series["kv_cache_usage_perc"]]
    stats = engine.stats
    extra = {
        "preemptions": stats["preemptions"],
        "prefix_cache_queries": stats["prefix_queries"],
        "prefix_cache_hits": stats["prefix_hits"],
        "prefix_cache_hit_rate": stats["prefix_hits"] / stats["prefix_queries"] if stats["prefix_queries"] else None,
        "swap_in_blocks": stats["swap_in_blocks"],
        "swap_out_blocks": stats["swap_out_blocks"],
        "offload_store_blocks": stats["offload_store_blocks"],
        "peak_kv_cache_usage": engine.peak_used_blocks / engine.total_blocks,
        "peak_used_blocks": engine.peak_used_blocks,
        "mean_kv_cache_usage": float(np.mean(usage)) if usage else None,
        "peak_running": engine.peak_running,
        "engine_steps": steps,
        "simulation_wall_s": elapsed,
    }
    point = LoadPoint(
        label="trace",
        achieved_concurrency=float(np.nansum(np.where(ok, e2e, 0.0)) / 1000.0 / duration) if n else None,
        duration_s=duration,
        requests_completed=completed,
        requests_failed=failed,
        ttft_ms=Stats.from_values(ttft[ok]),
        tpot_ms=Stats.from_values(tpot[ok]),
        itl_ms=Stats.from_values(tpot[ok]),
        e2e_ms=Stats.from_values(e2e[ok]),
        request_throughput=completed / duration,
        output_token_throughput=float(outputs.sum()) / duration,
        input_token_throughput=float(sum(s.prompt_len for s in sequences if s.finish_reason == "length")) / duration,
        error_rate=failed / n if n else None,
        extra=extra,
    )
    description = config.describe()
    return NormalizedResult(
        tool=TOOL,
        format=FORMAT,
        tool_version=TOOL_VERSION,
        evidence=SIMULATED,
        test="custom",
        metadata={
            "engine": f"kvsim/{config.profile}",
            "model": config.model,
            "hardware": config.gpu,
            "simulator": description,
            "trace_requests": len(records),
        },
        definitions={"itl_ms": "simulated: every decode step emits one token, so the mean ITL equals TPOT"},
        points=[point],
        requests=frame,
        timeseries=series,
        notes=[
            "SIMULATED by the kvsim discrete-event engine model: no GPU ran this workload.",
            f"profile {config.profile} on a modelled {config.gpu}: {config.total_blocks} KV blocks of "
            f"{config.effective_block_size} tokens x {config.kv_bytes_per_token} bytes/token",
        ],
    )


def run_trace_file(
    trace: str | Path,
    config: SimConfig,
    out: str | Path | None = None,
    sample_interval_s: float | None = None,
    format: str | None = None,
    speedup: float = 1.0,
    sample: int | None = None,
) -> NormalizedResult:
    """Load, simulate and (optionally) write the native JSON result."""
    result = simulate(load_trace(trace, format, speedup, sample), config, sample_interval_s)
    result.metadata["trace"] = {"file": Path(trace).name, "format": format, "speedup": speedup, "sample": sample}
    if out is not None:
        Path(out).write_text(json.dumps(result.to_native(), indent=None, default=str), encoding="utf-8")
    return result
