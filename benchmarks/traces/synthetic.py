"""Synthetic traces in the four formats, for the tests and the benchmarks (deterministic per seed).

`synthetic_requests` draws a production-like log: Poisson arrivals of single requests and of
multi-turn sessions (each turn's prompt is the previous prompt + answer + a new message, sent an
idle gap after the answer), a few shared system prompts (prefix groups), tenants, some long
documents, and the latencies production observed. `write_trace` writes it in any of the formats;
Mooncake's `hash_ids` are derived from the same structure (512-token blocks: a prefix group's
blocks, then a session's history, then new blocks), so every format describes the same traffic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.traces.formats import MOONCAKE_BLOCK_TOKENS

FORMAT_NAMES = ("kvselect-csv", "kvselect-jsonl", "mooncake", "azure", "burstgpt")
AZURE_EPOCH = pd.Timestamp("2023-11-16 18:00:00")


def synthetic_requests(
    n: int,
    rate: float = 20.0,
    seed: int = 7,
    session_share: float = 0.4,
    mean_turns: float = 4.0,
    idle_mean_s: float = 20.0,
    prefix_groups: int = 8,
    prefix_tokens: int = 1024,
    prefix_share: float = 0.5,
    tenants: int = 3,
    long_share: float = 0.03,
    ttft_ms: float = 300.0,
    tpot_ms: float = 30.0,
) -> pd.DataFrame:
    """About `n` requests (exactly n rows) as a kvselect-format frame, sorted by timestamp."""
    rng = np.random.default_rng(seed)
    n_session_rows = int(n * session_share)
    n_single = n - n_session_rows
    horizon = n / rate
    # single requests
    single_t = np.sort(rng.uniform(0, horizon, n_single))
    single_in = rng.integers(64, 2048, n_single)
    long = rng.random(n_single) < long_share
    single_in[long] = rng.integers(20_000, 60_000, int(long.sum()))
    grouped = rng.random(n_single) < prefix_share
    group = np.where(grouped, rng.integers(0, prefix_groups, n_single), -1)
    single_in = np.where(grouped, single_in + prefix_tokens, single_in)
    single_out = rng.integers(16, 512, n_single)
    # sessions: turns per session, then turn by turn
    turns = []
    remaining = n_session_rows
    while remaining > 0:
        k = int(min(max(rng.geometric(1.0 / mean_turns), 1), remaining))
        turns.append(k)
        remaining -= k
    turns = np.asarray(turns, dtype=np.int64)
    n_sessions = turns.size
    starts = rng.uniform(0, horizon * 0.9, n_sessions)
    session_of = np.repeat(np.arange(n_sessions), turns)
    first = np.concatenate([[0], np.cumsum(turns)[:-1]])
    turn_index = np.arange(n_session_rows) - np.repeat(first, turns)
    new_tokens = rng.integers(32, 400, n_session_rows)
    out = rng.integers(16, 400, n_session_rows)
    # prompt of turn k = sum of new tokens and outputs of turns < k, + new tokens of turn k
    step = new_tokens + out
    cumulative = np.cumsum(step)
    before = cumulative - step - np.repeat(cumulative[first] - step[first], turns)
    sess_in = before + new_tokens
    sess_e2e = ttft_ms + tpot_ms * (out - 1)
    idle = rng.exponential(idle_mean_s, n_session_rows)
    gap = np.where(turn_index == 0, 0.0, idle + np.concatenate([[0.0], sess_e2e[:-1] / 1000.0]))
    gap_cum = np.cumsum(gap)
    sess_t = np.repeat(starts, turns) + gap_cum - np.repeat(gap_cum[first] - gap[first], turns)
    frame = pd.DataFrame(
        {
            "timestamp": np.concatenate([single_t, sess_t]),
            "session_id": np.concatenate(
                [np.full(n_single, None, dtype=object), np.array([f"s{i}" for i in session_of], dtype=object)]
            ),
            "tenant": np.array([f"tenant-{i}" for i in rng.integers(0, max(tenants, 1), n)], dtype=object)
            if tenants
            else np.full(n, None, dtype=object),
            "input_tokens": np.concatenate([single_in, sess_in]).astype(np.int64),
            "output_tokens": np.concatenate([single_out, out]).astype(np.int64),
            "prefix_group": np.concatenate(
                [
                    np.array([f"sys{g}" if g >= 0 else None for g in group], dtype=object),
                    np.full(n_session_rows, None, dtype=object),
                ]
            ),
            "prefix_tokens": np.concatenate(
                [np.where(grouped, float(prefix_tokens), np.nan), np.full(n_session_rows, np.nan)]
            ),
        }
    )
    outputs = frame["output_tokens"].to_numpy()
    frame["ttft_ms"] = np.round(ttft_ms * (1 + 0.2 * rng.random(n)), 2)
    frame["e2e_ms"] = np.round(frame["ttft_ms"].to_numpy() + tpot_ms * (outputs - 1), 2)
    frame = frame.sort_values("timestamp", kind="stable").reset_index(drop=True)
    frame["timestamp"] = np.round(frame["timestamp"].to_numpy(), 6)
    return frame


def hash_ids(frame: pd.DataFrame, block: int = MOONCAKE_BLOCK_TOKENS) -> list[list[int]]:
    """Mooncake block hashes for the frame's rows: equal ids where the prompts share a prefix."""
    next_id = 0
    groups: dict[str, list[int]] = {}
    history: dict[str, list[int]] = {}
    result = []
    for row in frame.itertuples(index=False):
        blocks = math.ceil(row.input_tokens / block)
        ids: list[int] = []
        if isinstance(row.session_id, str) and row.session_id in history:
            ids = list(history[row.session_id])
        elif isinstance(row.prefix_group, str) and not math.isnan(row.prefix_tokens):
            shared = int(row.prefix_tokens) // block
            ids = groups.setdefault(row.prefix_group, list(range(next_id, next_id + shared)))
            if len(ids) == shared and ids and ids[0] == next_id:
                next_id += shared
            ids = list(ids)
        ids = ids[: max(blocks - 1, 0)] if len(ids) >= blocks else ids
        while len(ids) < blocks:
            ids.append(next_id)
            next_id += 1
        if isinstance(row.session_id, str):
            # the next turn repeats the whole blocks of this prompt (its answer starts a new block)
            history[row.session_id] = ids[: row.input_tokens // block]
        result.append(ids)
    return result


def write_trace(path: str | Path, frame: pd.DataFrame, fmt: str) -> Path:
    """Write `frame` (from `synthetic_requests`) as `fmt`, one of FORMAT_NAMES."""
    path = Path(path)
    if fmt == "kvselect-csv":
        frame.to_csv(path, index=False)
    elif fmt == "kvselect-jsonl":
        with path.open("w", encoding="utf-8") as handle:
            for record in frame.to_dict("records"):
                handle.write(json.dumps({k: v for k, v in record.items() if not _missing(v)}) + "\n")
    elif fmt == "mooncake":
        ids = hash_ids(frame)
        millis = np.round(frame["timestamp"].to_numpy() * 1000).astype(np.int64)
        with path.open("w", encoding="utf-8") as handle:
            for t, i, o, h in zip(millis, frame["input_tokens"], frame["output_tokens"], ids, strict=True):
                handle.write(
                    f'{{"timestamp": {t}, "input_length": {i}, "output_length": {o}, "hash_ids": {json.dumps(h)}}}\n'
                )
    elif fmt == "azure":
        times = AZURE_EPOCH + pd.to_timedelta(frame["timestamp"].to_numpy(), unit="s")
        pd.DataFrame(
            {
                "TIMESTAMP": times.strftime("%Y-%m-%d %H:%M:%S.%f") + "0",
                "ContextTokens": frame["input_tokens"],
                "GeneratedTokens": frame["output_tokens"],
            }
        ).to_csv(path, index=False)
    elif fmt == "burstgpt":
        pd.DataFrame(
            {
                "Timestamp": frame["timestamp"],
                "Model": "ChatGPT",
                "Request tokens": frame["input_tokens"],
                "Response tokens": frame["output_tokens"],
                "Total tokens": frame["input_tokens"] + frame["output_tokens"],
                "Log Type": np.where(frame["session_id"].notna(), "Conversation log", "API log"),
            }
        ).to_csv(path, index=False)
    else:
        raise ValueError(f"fmt: must be one of {', '.join(FORMAT_NAMES)}, got {fmt!r}")
    return path


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
