"""Trace replay: the plan keeps the trace's clock, sessions and prefixes; the replay sends on that clock."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from benchmarks.harness import workloads as w
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.prompts import PromptFactory, calibrate, measure_template
from benchmarks.harness.request_record import RequestSpec
from benchmarks.harness.trace_replay import PromptBuilder, lengths_from_trace, load_plan, run_replay
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.mock_server import MockConfig
from benchmarks.simulator.server import start_server
from benchmarks.traces.formats import read_trace
from benchmarks.traces.replay import PlanError, build_plan

ROWS = [
    # a two-turn session: the second turn arrives 2 s after the first answer (1 s) ended
    {"timestamp": 0.0, "session_id": "a", "input_tokens": 40, "output_tokens": 8, "e2e_ms": 1000.0},
    {"timestamp": 0.5, "input_tokens": 30, "output_tokens": 4, "prefix_group": "sys", "prefix_tokens": 20},
    {"timestamp": 1.0, "input_tokens": 25, "output_tokens": 4, "prefix_group": "sys", "prefix_tokens": 20},
    {"timestamp": 3.0, "session_id": "a", "input_tokens": 60, "output_tokens": 8, "e2e_ms": 900.0},
    {"timestamp": 3.5, "input_tokens": 20000, "output_tokens": 2},
    {"timestamp": 4.0, "input_tokens": 10, "output_tokens": 0},  # failed in production: not replayed
]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    pd.DataFrame(ROWS).to_csv(path, index=False)
    return path


def test_the_plan_keeps_sessions_gaps_prefixes_and_groups(trace):
    plan = build_plan(read_trace(trace))
    assert plan.requests == 5 and plan.failed_left_out == 1
    session = next(s for s in plan.sessions if s.key == "a")
    first, second = session.turns
    assert second.gap_s == pytest.approx(2.0)  # arrival 3.0 - (0.0 + 1.0 s answer)
    assert second.history_tokens == 48 and second.new_tokens == 12
    assert {t.group for t in session.turns} == {"multi_turn"}
    grouped = [t for t in plan.turns if t.prefix_key == "sys"]
    assert [t.prefix_tokens for t in grouped] == [20, 20]
    assert plan.group_counts() == {"short": 2, "long": 1, "multi_turn": 2}


def test_speedup_divides_the_clock_and_sample_keeps_the_first_requests(trace):
    fast = build_plan(read_trace(trace), speedup=2.0)
    assert [t.offset_s for t in fast.first_turns()] == [0.0, 0.25, 0.5, 1.75]
    assert next(s for s in fast.sessions if s.key == "a").turns[1].gap_s == pytest.approx(1.0)
    window = build_plan(read_trace(trace), sample=3)
    assert window.requests == 3 and all(len(s.turns) == 1 for s in window.sessions)
    with pytest.raises(PlanError, match="speedup: must be a positive number"):
        build_plan(read_trace(trace), speedup=0)
    with pytest.raises(PlanError, match="sample: must be a positive whole number"):
        build_plan(read_trace(trace), sample=0)


def test_prompts_share_the_prefix_group_and_carry_the_session_history(trace):
    plan = build_plan(read_trace(trace))
    builder = PromptBuilder(PromptFactory(words=["alpha", "beta", "gamma", "delta"]), api="completions")
    by_line = {t.line: t for t in plan.turns}
    one, two = builder.prompt(by_line[3]).text, builder.prompt(by_line[4]).text
    assert one.split()[:20] == two.split()[:20] and one.split() != two.split()
    assert len(one.split()) == 30 and len(two.split()) == 25
    first = by_line[2]
    text = builder.prompt(first).text

    class Answer:
        text = " eight words of answer from the engine here"

    builder.answered(first, Answer(), last_turn=False)
    following = builder.prompt(by_line[5]).text
    assert following.startswith(text + Answer.text) and len(following.split()) == 40 + 8 + 12


def test_mooncake_blocks_with_equal_ids_have_equal_text(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 1100, "output_length": 2, "hash_ids": [1, 2, 3]}\n'
        '{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1, 9]}\n'
    )
    plan = build_plan(read_trace(path))
    builder = PromptBuilder(PromptFactory(words=["a", "b", "c", "d", "e"]), api="completions")
    first, second = (builder.prompt(t).text.split() for t in plan.turns)
    assert len(first) == 1100 and len(second) == 600
    assert first[:512] == second[:512] and first[512:600] != second[512:600]


def test_replay_sends_on_the_traces_clock_and_waits_for_answers(trace, with_mock):
    plan = build_plan(read_trace(trace), speedup=4.0)

    async def scenario(server):
        async with OpenAIClient(server.url, "m", keep_text=True) as client:
            builder = PromptBuilder(PromptFactory(words=["a", "b", "c"]), api="chat")

            def make_spec(turn, prompt):
                return RequestSpec(api="chat", messages=prompt.messages, max_tokens=turn.output_tokens, tag=turn.group)

            return await run_replay(client, plan, make_spec, builder)

    outcome = with_mock(MockConfig(ttft_s=0.02, itl_s=0.005, metrics_style=None), scenario)
    assert len(outcome.records) == 5 and not outcome.cancelled and outcome.unsent == 0
    records = {turn.line: record for turn, record in outcome.records}
    assert all(r.ok for r in records.values())
    starts = {line: r.send_time - outcome.start for line, r in records.items()}
    assert starts[3] == pytest.approx(0.125, abs=0.05) and starts[4] == pytest.approx(0.25, abs=0.05)
    # the second turn waits for the first answer, then the recorded 2 s gap / 4
    assert records[5].send_time >= records[2].end_time + 0.5 - 0.005
    assert outcome.lateness_p99_ms() < 50
    assert outcome.peak_in_flight >= 1


def test_run_trace_replay_reports_per_traffic_group_on_the_simulator(trace):
    params = w.plan("trace_replay", {"ttft_p95_ms": 5000}) | {"trace": str(trace), "speedup": 4.0}

    async def scenario():
        server = await start_server(SimConfig(num_blocks=2000, max_model_len=32768, time_scale=50.0))
        try:
            target = w.Target(server.url, "kvsim", metrics_url=server.url + "/metrics", engine="simulator")
            return await w.run_test("trace_replay", target, params)
        finally:
            await server.stop()

    result = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert result.evidence == "SIMULATED" and result.test == "trace_replay"
    assert [p.label for p in result.points] == ["all", "short", "long", "multi_turn"]
    assert result.points[0].requests_completed == 5
    names = {v["name"]: v for v in result.verdicts}
    assert names["zero_errors"]["passed"] and names["arrivals_on_time"]["passed"] is not None
    assert "ttft_p95_within_budget[short]" in names
    replay = result.metadata["replay"]
    assert replay["format"] == "kvselect" and len(replay["sha256"]) == 64 and replay["speedup"] == 4.0
    assert result.metadata["send_lateness_ms_p99"] is not None
    assert set(result.requests["point"]) == {1, 2, 3}


def test_a_missing_trace_names_the_parameter():
    with pytest.raises(w.PlanError, match="params.trace: the trace file to replay is required"):
        asyncio.run(w.run_test("trace_replay", w.Target("http://127.0.0.1:9", "m"), w.plan("trace_replay")))
    with pytest.raises(ValueError, match="no such file"):
        load_plan("/nonexistent/trace.csv")


def test_lengths_come_from_the_trace_deterministically(trace):
    lengths = lengths_from_trace(trace)
    drawn = [lengths(i) for i in range(10)]
    assert set(drawn) <= {(r["input_tokens"], r["output_tokens"]) for r in ROWS if r["output_tokens"]}
    assert drawn == [lengths_from_trace(trace)(i) for i in range(10)]
    assert lengths.source["requests"] == 5


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_replayed_prompts_have_exactly_the_traces_input_length_on_the_simulator(trace, api):
    """The simulator's chat template adds `<|user|>` and `<|assistant|>` (two tokens): the prompt's words
    leave room for them, so the engine's usage.prompt_tokens is the trace's input_tokens, later turns
    (history + the engine's answer + new text) included."""
    plan = build_plan(read_trace(trace), speedup=8.0)

    async def scenario():
        server = await start_server(SimConfig(num_blocks=4000, max_model_len=32768, time_scale=50.0))
        try:
            async with OpenAIClient(server.url, "kvsim", keep_text=True) as client:
                prompts = await calibrate(client, api=api)
                await measure_template(client, prompts, api)
                builder = PromptBuilder(prompts, api, plan.block_tokens)

                def make_spec(turn, prompt):
                    return RequestSpec(
                        api=api, prompt=prompt.text, messages=prompt.messages, max_tokens=turn.output_tokens
                    )

                return prompts, await run_replay(client, plan, make_spec, builder)
        finally:
            await server.stop()

    prompts, outcome = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert prompts.exact and prompts.template_tokens == (2 if api == "chat" else 0)
    assert prompts.turn_template_tokens == (2 if api == "chat" else 0)
    assert len(outcome.records) == 5
    sent = {turn.line: (turn.input_tokens, record.prompt_tokens) for turn, record in outcome.records}
    assert all(expected == counted for expected, counted in sent.values()), sent


def test_a_chat_template_the_engine_does_not_count_makes_the_prompts_inexact():
    class NoUsage:  # an engine that reports no prompt tokens
        async def send(self, spec):
            class Record:
                prompt_tokens = None

            return Record()

    factory = PromptFactory(words=["a", "b", "c"], exact=True, source="tokenize")
    asyncio.run(measure_template(NoUsage(), factory, "chat"))
    assert factory.template_tokens is None and factory.exact is False
    assert "chat template not measured" in factory.source
    completions = PromptFactory(words=["a", "b", "c"], exact=True, source="tokenize")
    asyncio.run(measure_template(NoUsage(), completions, "completions"))
    assert completions.exact is True and completions.template_tokens is None
