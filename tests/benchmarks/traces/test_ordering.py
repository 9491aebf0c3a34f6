"""Logs out of time order (written in completion order, two logs appended) give the statistics of the
same log in order, at every chunk size, through the one-pass check and the external merge sort; and
a property test against a brute-force computation over small random traces."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.traces.formats import TraceError, read_trace, write_kvselect_csv
from benchmarks.traces.ordering import sorted_chunks
from benchmarks.traces.replay import build_plan
from benchmarks.traces.stats import ServiceModel, trace_statistics
from benchmarks.traces.synthetic import synthetic_requests, write_trace

SUFFIX = {"kvselect-csv": ".csv", "kvselect-jsonl": ".jsonl", "mooncake": ".jsonl", "azure": ".csv"}


def reorder_lines(path, order_key, out):
    """`path` with its data lines in the order of `order_key(line_index)` (the header, if any, first)."""
    lines = path.read_text().splitlines(keepends=True)
    header = [] if path.suffix == ".jsonl" else lines[:1]
    body = lines[len(header) :]
    order = sorted(range(len(body)), key=order_key)
    out.write_text("".join(header + [body[i] for i in order]))
    return out


def comparable(stats):
    """The statistics without the disorder count, floats rounded (sums in another order differ in the
    last bits)."""

    def rounded(value):
        if isinstance(value, float):
            return float(f"{value:.10g}")
        if isinstance(value, dict):
            return {key: rounded(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [rounded(item) for item in value]
        return value

    stats = dict(stats)
    stats.pop("out_of_order_rows")
    return rounded(stats)


@pytest.fixture(scope="module")
def frame():
    frame = synthetic_requests(800, rate=4.0, seed=5, idle_mean_s=20.0)
    return frame[~frame["timestamp"].round(3).duplicated()].reset_index(drop=True)  # no ties at Mooncake's ms


@pytest.mark.parametrize("fmt", list(SUFFIX))
@pytest.mark.parametrize("chunk_rows", [3, 97, 5000])
@pytest.mark.parametrize("shape", ["completion order", "two logs appended"])
def test_an_out_of_order_log_has_the_statistics_of_the_ordered_log(frame, tmp_path, fmt, chunk_rows, shape):
    ordered = write_trace(tmp_path / f"ordered{SUFFIX[fmt]}", frame, fmt)
    ends = (frame["timestamp"] + frame["e2e_ms"] / 1000).to_numpy()
    server = np.arange(len(frame)) % 2  # two servers' logs, one after the other
    key = (lambda i: ends[i]) if shape == "completion order" else (lambda i: (server[i], i))
    shuffled = reorder_lines(ordered, key, tmp_path / f"shuffled{SUFFIX[fmt]}")
    service = ServiceModel(ttft_ms=400.0, tpot_ms=40.0)
    expected = trace_statistics(lambda: read_trace(ordered, chunk_rows=chunk_rows), service=service)
    assert expected["out_of_order_rows"] == 0
    restarted = trace_statistics(lambda: read_trace(shuffled, chunk_rows=chunk_rows), service=service)
    merged = trace_statistics(read_trace(shuffled, chunk_rows=chunk_rows), service=service)
    assert comparable(restarted) == comparable(expected)
    assert comparable(merged) == comparable(expected)
    assert restarted["out_of_order_rows"] == merged["out_of_order_rows"] > 0


@pytest.mark.parametrize("run_rows, merge_rows", [(1, 1), (3, 2), (50, 64), (10_000, 10_000)])
def test_the_merge_sort_orders_every_row_within_its_memory_bound(frame, tmp_path, run_rows, merge_rows):
    path = tmp_path / "t.csv"
    write_trace(path, frame.sample(frac=1.0, random_state=3), "kvselect-csv")
    sizes, arrivals, lines = [], [], []
    chunks = sorted_chunks(read_trace(path, chunk_rows=13), run_rows=run_rows, merge_rows=merge_rows, run_batch_rows=4)
    for chunk in chunks:
        sizes.append(len(chunk.frame))
        arrivals.extend(chunk.frame["arrival_s"].tolist())
        lines.extend(chunk.frame["line"].tolist())
    assert sorted(lines) == list(range(2, len(frame) + 2))
    assert arrivals == sorted(arrivals)
    runs = math.ceil(len(frame) / max(run_rows, 13))
    if runs > 1:  # merged: at most merge_rows / runs rows from each run, in steps of 4-row record batches
        assert max(sizes) <= runs * (max(merge_rows // runs, 1) + 3)


def test_mooncake_hash_blocks_stay_with_their_rows_through_the_sort(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 3000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
        '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 3]}\n'
        '{"timestamp": 1000, "input_length": 600, "output_length": 1, "hash_ids": [9, 10]}\n'
    )
    chunks = list(sorted_chunks(read_trace(path, chunk_rows=1), run_rows=1, merge_rows=1))
    hashes = [ids for chunk in chunks for ids in chunk.hash_ids.to_pylist()]
    assert hashes == [[1, 3], [9, 10], [1, 2]]
    stats = trace_statistics(read_trace(path, chunk_rows=1))
    assert stats["prefix"]["shared_tokens"] == 512  # block 1 of the last request was sent at t=0


# --------------------------------------------------------------------------- property


def brute_force(times: list[float], durations: list[float]) -> dict:
    origin = min(times)
    t = [x - origin for x in times]
    events = sorted([(a, 1) for a in t] + [(a + d, -1) for a, d in zip(t, durations, strict=True)])
    level = peak = 0
    for _when, delta in events:
        level += delta
        peak = max(peak, level)
    seconds = [0] * (int(max(t)) + 1)
    for a in t:
        seconds[int(a)] += 1
    minutes = [sum(seconds[m : m + 60]) for m in range(0, len(seconds), 60)]
    behind, latest = 0, -math.inf
    for x in times:
        behind += x < latest
        latest = max(latest, x)
    return {
        "peak": peak,
        "peak_rps": max(seconds),
        "peak_minute_requests": max(minutes),
        "empty_seconds_share": seconds.count(0) / len(seconds),
        "out_of_order_rows": behind,
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    requests=st.lists(
        st.tuples(st.integers(0, 400_000), st.integers(1, 90_000)),  # arrival (ms), e2e (ms)
        min_size=1,
        max_size=40,
    ),
    chunk_rows=st.integers(1, 12),
)
def test_out_of_order_statistics_match_a_brute_force_computation(tmp_path, requests, chunk_rows):
    path = tmp_path / "p.csv"
    write_kvselect_csv(
        path,
        [
            {"timestamp": arrival / 1000, "input_tokens": 10, "output_tokens": 2, "e2e_ms": e2e}
            for arrival, e2e in requests
        ],
    )
    times = [arrival / 1000 for arrival, _ in requests]
    expected = brute_force(times, [e2e / 1000 for _, e2e in requests])
    for stats in (
        trace_statistics(lambda: read_trace(path, chunk_rows=chunk_rows)),
        trace_statistics(read_trace(path, chunk_rows=chunk_rows)),
    ):
        assert stats["concurrency"]["peak"] == expected["peak"]
        assert stats["rate"]["peak_rps"] == expected["peak_rps"]
        assert stats["rate"]["peak_minute_requests"] == expected["peak_minute_requests"]
        assert stats["rate"]["empty_seconds_share"] == pytest.approx(expected["empty_seconds_share"])
        assert stats["out_of_order_rows"] == expected["out_of_order_rows"]
        assert stats["rows"] == len(requests)


def test_an_empty_log_after_its_header_has_no_rows(tmp_path):
    path = tmp_path / "e.csv"
    pd.DataFrame(columns=["timestamp", "input_tokens", "output_tokens"]).to_csv(path, index=False)
    assert trace_statistics(lambda: read_trace(path))["rows"] == 0


def test_a_replay_sample_of_an_out_of_order_log_keeps_the_earliest_requests(tmp_path):
    path = tmp_path / "r.csv"
    write_kvselect_csv(
        path,
        [{"timestamp": t, "input_tokens": 10, "output_tokens": 2} for t in (50.0, 40.0, 3.0, 60.0, 1.0, 2.0)],
    )
    plan = build_plan(read_trace(path, chunk_rows=1), sample=3)
    assert [turn.line for turn in plan.turns] == [6, 7, 4]
    assert [turn.offset_s for turn in plan.turns] == [0.0, 1.0, 2.0]


def test_seconds_and_epoch_times_mixed_are_refused_naming_the_line(tmp_path):
    path = tmp_path / "mixed.csv"
    write_kvselect_csv(
        path,
        [{"timestamp": t, "input_tokens": 10, "output_tokens": 2} for t in (1_764_000_000.0, 12.0, 13.0)],
    )
    for chunks in (lambda: read_trace(path, chunk_rows=1), read_trace(path, chunk_rows=1)):
        with pytest.raises(TraceError, match=r"^line 2: 20,417 days after the first request \(line 3\)"):
            trace_statistics(chunks)


@pytest.fixture(scope="module")
def small_log(tmp_path_factory):
    frame = synthetic_requests(70, rate=2.0, seed=9, idle_mean_s=5.0, prefix_tokens=600)
    frame = frame[~frame["timestamp"].round(3).duplicated()].reset_index(drop=True)
    path = write_trace(tmp_path_factory.mktemp("small") / "ordered.csv", frame, "kvselect-csv")
    pools = {"small": 6 * 512, "large": 200 * 512}
    return path, pools, comparable(trace_statistics(lambda: read_trace(path), kv_pools=pools))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), chunk_rows=st.integers(1, 30), run_rows=st.integers(1, 80))
def test_any_order_of_a_log_gives_the_statistics_of_the_ordered_log(tmp_path, small_log, data, chunk_rows, run_rows):
    path, pools, expected = small_log
    lines = path.read_text().splitlines(keepends=True)
    order = data.draw(st.permutations(range(len(lines) - 1)))
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text(lines[0] + "".join(lines[1 + i] for i in order))
    restarted = trace_statistics(lambda: read_trace(shuffled, chunk_rows=chunk_rows), kv_pools=pools)
    merged = trace_statistics(
        sorted_chunks(read_trace(shuffled, chunk_rows=chunk_rows), run_rows=run_rows, merge_rows=run_rows),
        kv_pools=pools,
    )
    assert comparable(restarted) == expected
    assert comparable(merged) == expected  # merged with small runs first, then given as chunks
