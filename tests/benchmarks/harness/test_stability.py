"""The soak on the simulator: steady load after an excluded warm-up, lengths from the constraints'
distribution; the normal engine holds steady, a leaking one is caught by its KV slope and its
fragmentation signal."""

import asyncio

from benchmarks.harness import workloads as w
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import start_server

CONSTRAINTS = {
    "peak_concurrency": 16,
    "avg_input_tokens": 256,
    "p95_input_tokens": 1024,
    "max_input_tokens": 4096,
    "avg_output_tokens": 32,
    "max_output_tokens": 256,
    "ttft_p95_ms": 1000,
}
# a few seconds of soak: the KV slope can only be bounded loosely (points of the pool per hour)
SHORT_SOAK = {
    "duration_s": 4.0,
    "window_s": 1.3,
    "warmup_s": 0.5,
    "metrics_interval_s": 0.1,
    "max_kv_slope_per_hour": 15,
}


def soak(config: SimConfig) -> w.NormalizedResult:
    params = w.plan("stability", CONSTRAINTS) | SHORT_SOAK

    async def scenario():
        server = await start_server(config)
        try:
            target = w.Target(server.url, "kvsim", metrics_url=server.url + "/metrics", engine="simulator")
            return await w.run_test("stability", target, params)
        finally:
            await server.stop()

    return asyncio.run(asyncio.wait_for(scenario(), 60))


def verdicts(result):
    return {v["name"]: v for v in result.verdicts}


def test_the_plan_soaks_an_hour_after_a_warm_up_with_the_constraints_lengths():
    plan = w.plan("stability", CONSTRAINTS)
    assert plan["duration_s"] == 3600 and plan["warmup_s"] > 0 and plan["recommended_duration_s"] == 3600
    assert plan["input_distribution"]["p95"] == 1024 and plan["output_distribution"]["max"] == 256
    multi_turn = w.plan("stability", CONSTRAINTS | {"multi_turn": True, "average_turns": 5})
    assert multi_turn["recommended_duration_s"] == 4 * 3600 and multi_turn["duration_s"] == 3600


def test_a_steady_engine_holds_its_latency_and_kv_usage():
    result = soak(SimConfig(num_blocks=4000))
    v = verdicts(result)
    assert v["zero_errors"]["status"] == "pass"
    # drift is judged with its interval (a busy test box can widen it to inconclusive, never to a fail)
    assert v["tpot_p50_drift"]["status"] in ("pass", "inconclusive") and v["tpot_p50_drift"]["interval"]
    assert v["kv_usage_slope"]["status"] != "fail", v["kv_usage_slope"]
    assert v["fragmentation_stable"]["status"] != "fail", v["fragmentation_stable"]
    assert v["gpu_memory_slope"]["status"] == "not_judged" and "NVML" in v["gpu_memory_slope"]["detail"]
    assert v["preemption_rate_trend"]["status"] == "pass"
    assert v["ttft_p50_drift"]["status"] != "fail" and v["ttft_p50_drift"]["n"] >= 40
    # the lengths are mixed (drawn from the distribution), and the warm-up was left out
    prompts = result.requests["prompt_tokens"]
    assert prompts.max() > 3 * prompts.median()
    assert result.metadata["warmup_excluded"]["requests"] > 0
    observed = result.metadata["observed"]
    assert observed["line"].startswith("short soak of 4 s: not the 1 h the plan asks for")
    assert observed["first_window_n"] >= 20 and observed["kv_usage_slope_per_hour"] is not None


def test_a_leaking_engine_fails_on_its_kv_slope_and_fragmentation():
    result = soak(SimConfig(num_blocks=4000, fault_kv_leak_blocks_per_request=4))
    v = verdicts(result)
    slope = v["kv_usage_slope"]
    assert slope["status"] == "fail" and slope["interval"][0] > slope["threshold"], slope
    frag = v["fragmentation_stable"]
    assert frag["status"] == "fail" and frag["value"] > 0.05, frag
    observed = result.metadata["observed"]
    assert observed["fragmentation_last"] > observed["fragmentation_first"]


def test_a_soak_shorter_than_the_plan_says_so():
    assert w.short_soak_note({"recommended_duration_s": 3600}, 3600) is None
    assert w.short_soak_note({"recommended_duration_s": 3600, "soak_label": "demo"}, 16) == (
        "short demo soak of 16 s: not the 1 h the plan asks for"
    )
    multi_turn = {"recommended_duration_s": 4 * 3600}
    assert w.short_soak_note(multi_turn, 16).endswith("(4 h recommended for multi-turn sessions)")
    assert w.short_soak_note(multi_turn, 3600) == "soak of 1 h: 4 h recommended for multi-turn sessions"
