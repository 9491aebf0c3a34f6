"""Offline trace mode: discrete-event simulation to a SIMULATED NormalizedResult."""

from __future__ import annotations

import json

import pytest

from benchmarks.result import REQUEST_COLUMNS, SIMULATED
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.offline import TraceError, TraceRecord, load_trace, run_trace_file, simulate, write_trace


def _trace(n: int, concurrency_gap: float, prompt: int = 512, output: int = 64, **extra) -> list[TraceRecord]:
    return [TraceRecord(i * concurrency_gap, prompt, output, request_id=i, **extra) for i in range(n)]


def test_result_is_simulated_with_requests_and_kv_timeseries(tmp_path):
    records = _trace(40, 0.01, prefix_id="sys", prefix_tokens=256)
    path = tmp_path / "trace.csv"
    write_trace(path, records)
    out = tmp_path / "result.json"
    result = run_trace_file(path, SimConfig(num_blocks=2000), out)
    assert result.evidence == SIMULATED
    assert list(result.requests.columns) == list(REQUEST_COLUMNS)
    assert len(result.requests) == 40 and result.requests["ok"].all()
    point = result.points[0]
    assert point.requests_completed == 40 and point.requests_failed == 0
    assert point.ttft_ms.p50 > 0 and point.tpot_ms.p50 > 0
    assert point.extra["prefix_cache_hits"] > 0
    assert result.timeseries["kv_cache_usage_perc"] and max(v for _, v in result.timeseries["kv_cache_usage_perc"]) > 0
    document = json.loads(out.read_text())
    assert document["evidence"] == "SIMULATED" and document["schema"] == "kvselect.result/1"
    assert len(document["requests"]["request_id"]) == 40


def test_tpot_matches_the_decode_roofline_for_a_lone_request():
    config = SimConfig(num_blocks=2000)
    result = simulate([TraceRecord(0.0, 1000, 101)], config)
    # 100 decode steps with KV growing from 1000 to 1099 tokens
    expected = sum(config.decode_step_s(1000 + j) for j in range(100)) / 100 * 1000
    assert result.points[0].tpot_ms.mean == pytest.approx(expected, rel=1e-6)


def test_coalesced_offline_run_matches_step_by_step_timing():
    from benchmarks.simulator.engine import Engine

    records = _trace(30, 0.05, prompt=300, output=120)
    coalesced = simulate(records, SimConfig(num_blocks=1500))
    # the same workload step by step (no coalescing): finish times must agree
    engine = Engine(SimConfig(num_blocks=1500), coalesce=False)
    from benchmarks.simulator.block_keys import KeySpace
    from benchmarks.simulator.sequence import Sequence

    space, now, index, seqs = KeySpace(), 0.0, 0, []
    while index < len(records) or engine.has_work():
        if not engine.has_work() and now < records[index].arrival_s:
            now = records[index].arrival_s
        while index < len(records) and records[index].arrival_s <= now:
            seq = Sequence(index, 300, 120, records[index].arrival_s, space.keys())
            engine.add(seq, now)
            seqs.append(seq)
            index += 1
        now += engine.step(now).duration
    step_e2e = sorted((s.finish_t - s.arrival) * 1000 for s in seqs)
    assert sorted(coalesced.requests["e2e_ms"]) == pytest.approx(step_e2e, rel=0.02)


def test_kv_usage_is_higher_with_more_concurrency_offline():
    config = SimConfig(num_blocks=3000)
    low = simulate(_trace(50, 1.0), config).points[0].extra["peak_kv_cache_usage"]  # ~1 at a time
    high = simulate(_trace(50, 0.0), config).points[0].extra["peak_kv_cache_usage"]  # all at once
    assert high > 5 * low


def test_jsonl_trace_and_errors(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"arrival": 0.5, "prompt_tokens": 10, "max_tokens": 3, "session_id": "a"}\n\n{"timestamp": 0, "input_tokens": 5, "output_tokens": 2}\n'  # noqa: E501  (data as the tool writes it)
    )
    records = load_trace(path)
    assert [r.arrival_s for r in records] == [0.0, 0.5] and records[1].session_id == "a"
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1,ten,5\n")
    with pytest.raises(TraceError, match="trace line 3: input_tokens: not a number"):
        load_trace(bad)
    bad.write_text("arrival_s,input_tokens\n0,10\n")
    with pytest.raises(TraceError, match="output_tokens: missing"):
        load_trace(bad)


def test_requests_that_cannot_fit_are_recorded_as_failed():
    config = SimConfig(num_blocks=500, max_model_len=16384)
    records = [TraceRecord(0.0, 100, 10), TraceRecord(0.1, 20000, 10), TraceRecord(0.2, 9000, 10)]
    frame = simulate(records, config).requests
    assert frame["ok"].tolist() == [True, False, False]
    assert "max_model_len" in frame["error"][1]
    assert frame["error"][2] == "400: request needs 564 KV blocks, the pool has 500"
    assert simulate(records, config).points[0].error_rate == pytest.approx(2 / 3)


def test_perf_benchmark_runs_small():
    from benchmarks.perf.simulator import main

    assert main(["--requests", "2000"]) == 0
