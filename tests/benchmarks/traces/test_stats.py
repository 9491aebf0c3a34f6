"""The proposed one-pager matches the trace's own statistics, computed here the slow, obvious way.

Small generated traces in every format, read in small chunks so that every piece of state that
crosses a chunk boundary (requests in flight, open sessions, seen prefixes) is exercised.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchmarks.traces.formats import read_trace
from benchmarks.traces.proposal import MULTI_TURN_SHARE, proposal_values, propose_constraints
from benchmarks.traces.stats import LONG_INPUT_TOKENS, SESSION_TIMEOUT_S, ServiceModel, trace_statistics
from benchmarks.traces.synthetic import FORMAT_NAMES, hash_ids, synthetic_requests, write_trace

SUFFIX = {"kvselect-csv": ".csv", "kvselect-jsonl": ".jsonl", "mooncake": ".jsonl", "azure": ".csv", "burstgpt": ".csv"}


def nearest_rank(values, q):
    ordered = np.sort(np.asarray(values))
    return int(ordered[max(math.ceil(q * ordered.size), 1) - 1])


def reference(frame: pd.DataFrame, fmt: str, service: ServiceModel) -> dict:
    """Every proposed figure from the whole frame, by brute force."""
    t = frame["timestamp"].to_numpy(dtype=float)
    if fmt == "mooncake":
        t = np.round(t * 1000) / 1000
    t = t - t.min()
    has_e2e = fmt.startswith("kvselect")
    out = frame["output_tokens"].to_numpy()
    duration = frame["e2e_ms"].to_numpy() / 1000 if has_e2e else service.duration_s(out)
    end = t + duration
    # concurrency: sweep over every event, ends first at equal times
    events = sorted([(x, 1) for x in t] + [(x, -1) for x in end], key=lambda e: (e[0], e[1]))
    level, peak, weights, last = 0, 0, {}, events[0][0]
    for time, delta in events:
        weights[level] = weights.get(level, 0.0) + time - last
        last = time
        level += delta
        peak = max(peak, level)
    levels = np.array(sorted(weights))
    cumulative = np.cumsum([weights[k] for k in levels])
    p95_concurrency = int(levels[np.searchsorted(cumulative, 0.95 * cumulative[-1])])
    inputs = frame["input_tokens"].to_numpy()
    result = {
        "peak_concurrency": peak,
        "p95_concurrency": p95_concurrency,
        "request_rate": round(len(frame) / t.max(), 3),
        "avg_input_tokens": int(round(inputs.mean())),
        "p95_input_tokens": nearest_rank(inputs, 0.95),
        "max_input_tokens": int(inputs.max()),
        "avg_output_tokens": int(round(out.mean())),
        "p95_output_tokens": nearest_rank(out, 0.95),
        "max_output_tokens": int(out.max()),
    }
    shared = np.zeros(len(frame))
    if fmt.startswith("kvselect"):
        sessions, gaps = [], []
        ordered = frame.assign(t=t, end=end).dropna(subset=["session_id"]).sort_values(["session_id", "t"])
        for _sid, rows in ordered.groupby("session_id", sort=False):
            turns, prev = 0, None
            for row in rows.itertuples():
                if prev is not None and row.t - prev.end > SESSION_TIMEOUT_S:
                    sessions.append(turns)
                    turns, prev = 0, None
                if prev is not None:
                    gaps.append(max(row.t - prev.end, 0.0))
                    shared[row.Index] = min(prev.input_tokens + prev.output_tokens, row.input_tokens)
                turns += 1
                prev = row
            sessions.append(turns)
        sessions = np.array(sessions)
        multi_requests = sessions[sessions >= 2].sum()
        assert multi_requests / len(frame) >= MULTI_TURN_SHARE
        result.update(
            multi_turn=True,
            average_turns=round(sessions.mean(), 2),
            idle_seconds_between_turns=round(float(np.mean(gaps)), 1),
        )
        seen = set()
        for row in frame.itertuples():
            if isinstance(row.prefix_group, str):
                if row.prefix_group in seen:
                    shared[row.Index] = max(shared[row.Index], row.prefix_tokens)
                seen.add(row.prefix_group)
        result["tenants"] = frame["tenant"].nunique()
    if fmt == "mooncake":
        seen = set()
        for index, ids in enumerate(hash_ids(frame)):
            shared[index] = min(sum(512 for i in ids if i in seen), inputs[index])
            seen.update(ids)
    if fmt.startswith("kvselect") or fmt == "mooncake":
        result["prefix_sharing_ratio"] = round(shared.sum() / inputs.sum(), 4)
    return result


@pytest.fixture(scope="module")
def frame():
    return synthetic_requests(1500, rate=5.0, seed=11, idle_mean_s=30.0)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_the_proposal_matches_the_traces_own_statistics(frame, fmt, tmp_path):
    path = write_trace(tmp_path / f"trace{SUFFIX[fmt]}", frame, fmt)
    service = ServiceModel(ttft_ms=400.0, tpot_ms=40.0)
    stats = trace_statistics(read_trace(path, chunk_rows=97), service=service)
    proposed = proposal_values(propose_constraints(stats))
    expected = reference(frame, fmt, service)
    for field in ("average_turns", "idle_seconds_between_turns", "prefix_sharing_ratio"):
        if field in expected:
            assert proposed.pop(field) == pytest.approx(expected.pop(field), abs=0.011), field
    concurrent_sessions = proposed.pop("concurrent_sessions", None)
    assert proposed == expected
    assert stats["rows"] == len(frame)
    if fmt.startswith("kvselect"):
        assert concurrent_sessions >= 1
        assert stats["concurrency"]["basis"] == "observed e2e_ms"
    else:
        assert stats["concurrency"]["basis"] == "model"


def test_traffic_groups_split_short_long_and_multi_turn(frame, tmp_path):
    path = write_trace(tmp_path / "trace.csv", frame, "kvselect-csv")
    groups = trace_statistics(read_trace(path, chunk_rows=50))["groups"]
    in_session = frame["session_id"].notna()
    single = frame[~in_session]
    assert groups["long"] == int((single["input_tokens"] >= LONG_INPUT_TOKENS).sum())
    assert groups["short"] + groups["long"] + groups["multi_turn"] == len(frame)
    assert groups["multi_turn"] > 0


def test_a_session_silent_for_longer_than_the_timeout_starts_again(tmp_path):
    rows = [
        {"timestamp": 0, "session_id": "a", "input_tokens": 100, "output_tokens": 10, "e2e_ms": 1000},
        {"timestamp": 10, "session_id": "a", "input_tokens": 210, "output_tokens": 10, "e2e_ms": 1000},
        {"timestamp": 10 + SESSION_TIMEOUT_S + 60, "session_id": "a", "input_tokens": 50, "output_tokens": 5},
    ]
    path = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    stats = trace_statistics(read_trace(path, chunk_rows=1))
    sessions = stats["sessions"]
    assert sessions["count"] == 2 and sessions["multi_turn_sessions"] == 1
    assert sessions["idle_s"]["count"] == 1 and sessions["idle_s"]["mean"] == pytest.approx(9.0)
    assert stats["groups"] == {"short": 1, "long": 0, "multi_turn": 2}
    assert stats["prefix"]["shared_tokens"] == 110  # the second turn repeats the first prompt and answer


def test_out_of_order_rows_are_counted_not_lost(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame(
        {
            "timestamp": [0.0, 5.0, 6.0, 1.0],
            "input_tokens": [10] * 4,
            "output_tokens": [2] * 4,
            "e2e_ms": [500.0] * 4,
            "note": ["x" * 200] * 4,  # a long row: one row per 256-byte block
        }
    ).to_csv(path, index=False)
    stats = trace_statistics(read_trace(path, chunk_rows=1))
    assert stats["rows"] == 4
    assert stats["out_of_order_rows"] == 1
    assert stats["concurrency"]["peak"] == 1  # the late row is swept at its own time (1 s), alone
    assert stats["rate"]["peak_rps"] == 1 and stats["span_s"] == 6.0


@pytest.mark.parametrize(
    "e2e, source, start",
    [
        ([1000.0, 1000.0, 1000.0], "latency budget", "replayed from the arrival times, each request held for its own"),
        ([1000.0, None, None], "latency budget", "replayed from the arrival times: %(observed)s requests"),
        ([None, None, None], "latency budget", "assumed: the trace records no latency, so each request is held"),
        ([None, None, None], "default", "assumed: the trace records no latency and no latency budget is set"),
    ],
)
def test_the_concurrency_basis_says_which_latencies_held_the_requests(tmp_path, e2e, source, start):
    path = tmp_path / "t.csv"
    pd.DataFrame(
        {"timestamp": [0.0, 0.5, 0.9], "input_tokens": [10] * 3, "output_tokens": [20] * 3, "e2e_ms": e2e}
    ).to_csv(path, index=False)
    service = ServiceModel(ttft_ms=100.0, tpot_ms=10.0, source=source)  # 0.29 s per request
    stats = trace_statistics(lambda: read_trace(path), service=service)
    basis = next(p["basis"] for p in propose_constraints(stats) if p["field"] == "peak_concurrency")
    assert basis["message"].startswith(start)
    if e2e[0] is not None and e2e[1] is not None:  # all observed: 1 s each overlaps all three
        assert stats["concurrency"]["peak"] == 3 and basis["params"]["peak"] == 1  # at 0.29 s none overlap
    if e2e[1] is None and e2e[0] is not None:
        assert basis["params"]["observed"] == 1


def test_the_rate_basis_gives_the_busiest_minute_and_the_empty_seconds(tmp_path):
    times = [0.1, 0.2, 0.3, 59.5, 61.0, 179.0]  # from the first request: seconds 0, 0, 0, 59, 60, 178
    path = tmp_path / "t.csv"
    pd.DataFrame({"timestamp": times, "input_tokens": [10] * 6, "output_tokens": [2] * 6}).to_csv(path, index=False)
    stats = trace_statistics(lambda: read_trace(path))
    rate = stats["rate"]
    assert rate["peak_rps"] == 3 and rate["peak_minute_requests"] == 4 and rate["peak_minute_rps"] == 4 / 60
    assert rate["seconds"] == 179 and rate["empty_seconds_share"] == pytest.approx(175 / 179)
    basis = next(p["basis"] for p in propose_constraints(stats) if p["field"] == "request_rate")
    assert basis["params"]["minute"] == "0.0667" and basis["params"]["empty"] == "98%"
