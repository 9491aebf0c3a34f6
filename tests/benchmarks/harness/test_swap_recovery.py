"""The swap-out and recovery test (workloads.run_swap_recovery) on the in-process simulator: the
eviction is forced and observed, or the verdicts say it was not exercised; each outcome has a
simulator setting that produces it."""

import asyncio

import pytest

from benchmarks.harness import swap
from benchmarks.harness import workloads as w
from benchmarks.harness.cache_model import CacheModel
from benchmarks.presentation import run_verdict
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.mock_server import MockConfig
from benchmarks.simulator.server import start_server

VLLM_DOC = "https://github.com/vllm-project/vllm/blob/v0.11.0/docs/design/prefix_caching.md"

CONSTRAINTS = {
    "concurrent_sessions": 20,
    "never_swap_sessions": 2,
    "avg_input_tokens": 64,
    "average_turns": 5,
    "idle_seconds_between_turns": 0.2,
    "peak_concurrency": 8,
}
# small pool, slow prefill (a recompute is clearly dearer than a cache hit), cheap decode, 2x time
FAST = dict(
    max_model_len=4096,
    prefill_tokens_per_s=4000.0,
    weight_bytes=1_000_000_000,
    time_scale=4.0,
    offload_after_s=1000.0,
)


def run_swap(config: SimConfig, cache_model: CacheModel | None = None, **params):
    async def main():
        server = await start_server(config)
        try:
            target = w.Target(
                server.url,
                "m",
                metrics_url=server.url + "/metrics",
                engine="simulator",
                allowed_hosts=["127.0.0.1"],
                cache_model=cache_model,
            )
            plan = (
                w.plan("swap_recovery", CONSTRAINTS)
                | {"output_tokens": 16, "settle_s": 2.0, "resume_parallel": 4}
                | params
            )
            return await w.run_swap_recovery(target, plan)
        finally:
            await server.stop()

    return asyncio.run(main())


def statuses(result):
    return {v["name"]: v["status"] for v in result.verdicts}


def by_name(result):
    return {v["name"]: v for v in result.verdicts}


def test_offload_evicts_the_idle_sessions_and_resumes_them_cheaper_than_a_recompute():
    offloading = CacheModel("paged_blocks", offload=True, source=VLLM_DOC, engine="vLLM")
    result = run_swap(SimConfig(profile="paged-offload", num_blocks=500, **FAST), offloading)
    s, v = statuses(result), by_name(result)
    assert s["eviction_exercised"] == "pass" and "CPU" in v["eviction_exercised"]["detail"], v["eviction_exercised"]
    assert s["resume_cheaper_than_recompute"] == "pass", v["resume_cheaper_than_recompute"]
    assert s["continuation_identical"] == "pass" and v["continuation_identical"]["n"] == 20
    assert s["never_swap_sessions_warm"] == "pass", v["never_swap_sessions_warm"]
    assert s["idle_kv_released"] == "pass" and s["zero_errors"] == "pass"
    assert "swap_in_delay_within_budget" not in s  # no delay class in these constraints: no such verdict
    sizing, eviction, resume = result.metadata["sizing"], result.metadata["eviction"], result.metadata["resume"]
    assert sizing["kv_capacity_tokens"] == 8000 and "cache_config_info" in sizing["kv_capacity_source"]
    assert sizing["idle_kv_tokens"] == 20 * (256 + 16) and sizing["pressure_requests_planned"] >= 1
    assert eviction["observed"] and eviction["offloaded"]
    # every idle session went to the CPU tier and came back: counted, as the lifecycle credit reads it
    assert eviction["offloaded_sessions"] == 20 and eviction["evicted_sessions"] == 0
    assert resume["recompute_method"] == "POST /reset_prefix_cache"
    assert resume["resume_ttft_ms"]["n"] == 20 and resume["recompute_benefit_ms"]["p50"] > 0
    assert result.metadata["continuation"]["identical"] == 20
    observed = result.metadata["observed"]
    assert observed["line"].startswith("offloaded the 20 idle sessions' KV") and "(n=20)" in observed["line"]
    assert [p.label for p in result.points] == ["turn1", "warm", "resume", "never_swap", "recompute", "pressure"]
    assert result.evidence == "SIMULATED"


def test_recompute_engine_evicts_and_resumes_no_cheaper_than_a_recompute():
    result = run_swap(SimConfig(profile="paged-prefix", num_blocks=500, **FAST))
    s, v = statuses(result), by_name(result)
    assert s["eviction_exercised"] == "pass" and "cached tokens" in v["eviction_exercised"]["detail"]
    assert result.metadata["eviction"]["evicted_sessions"] == 20
    assert result.metadata["eviction"]["offloaded_sessions"] is None  # dropped, nothing offloaded
    assert s["resume_cheaper_than_recompute"] == "fail", v["resume_cheaper_than_recompute"]
    assert v["resume_cheaper_than_recompute"]["interval"] is not None
    assert s["continuation_identical"] == "pass"


def test_a_dropping_engine_recomputes_by_design_resume_is_not_applicable_never_a_fail():
    """vLLM without an offload tier drops evicted blocks: a resumed session is recomputed by design, so
    "resume cheaper than recompute" is not applicable (with the source), and the run is no failure."""
    dropping = CacheModel("paged_blocks", offload=False, source=VLLM_DOC, engine="vLLM")
    result = run_swap(SimConfig(profile="paged-prefix", num_blocks=500, **FAST), dropping)
    s, v = statuses(result), by_name(result)
    assert s["eviction_exercised"] == "pass" and result.metadata["eviction"]["evicted_sessions"] == 20
    resume = v["resume_cheaper_than_recompute"]
    assert resume["status"] == "not_applicable" and resume["passed"] is None
    assert "vLLM as deployed has no offload tier" in resume["detail"] and VLLM_DOC in resume["detail"]
    assert "resume TTFT p50" in resume["detail"]  # the figures stay visible
    assert s["idle_kv_released"] == "pass"  # blocks are freed: judged on this engine
    assert result.metadata["target"]["cache_model"]["kind"] == "paged_blocks"
    assert run_verdict(result.verdicts) != "fail"


def test_resident_slots_keep_kv_by_design_and_an_engine_that_frees_it_fails(with_mock):
    """The same KV left behind is "not applicable" on llama.cpp's documented slots and a failure where
    the cache model says the engine frees it."""
    params = w.plan("swap_recovery", CONSTRAINTS) | {"sessions": 4, "warm_sessions": 4, "output_tokens": 8}
    mock = MockConfig(ttft_s=0.005, keep_finished_kv=True, kv_capacity_tokens=4000)

    def go(model):
        return with_mock(
            mock,
            lambda s: w.run_test(
                "swap_recovery",
                w.Target(s.url, "m", metrics_url=s.url + "/metrics", engine="llamacpp", cache_model=model),
                params,
            ),
        )

    llama = CacheModel("slot_resident", source="https://example.org/llama.cpp/README.md", engine="llama.cpp")
    released = by_name(go(llama))["idle_kv_released"]
    assert released["status"] == "not_applicable" and "keeps each slot's last prompt" in released["detail"]
    assert by_name(go(CacheModel("paged_blocks")))["idle_kv_released"]["status"] == "fail"


def test_corrupt_swap_in_fails_the_continuation():
    result = run_swap(SimConfig(profile="paged-offload", num_blocks=500, fault_corrupt_swapped_in=True, **FAST))
    s, v = statuses(result), by_name(result)
    assert s["eviction_exercised"] == "pass"
    assert (
        s["continuation_identical"] == "fail" and "first divergence at token 0" in v["continuation_identical"]["detail"]
    )
    assert result.metadata["continuation"]["failed"] == 20


def test_a_pool_large_enough_is_not_exercised_never_a_pass():
    result = run_swap(SimConfig(profile="paged-prefix", num_blocks=20000, **FAST), max_pressure_requests=1)
    s = statuses(result)
    assert s["eviction_exercised"] == "not_exercised"
    for name in ("resume_cheaper_than_recompute", "continuation_identical", "never_swap_sessions_warm"):
        assert s[name] == "not_exercised", (name, by_name(result)[name])
    assert not result.metadata["eviction"]["observed"] and "capped" in " ".join(result.notes)
    assert result.metadata["observed"]["line"].startswith("no eviction of 20 idle sessions")


def test_an_engine_that_shows_nothing_is_never_a_pass(with_mock):
    params = w.plan("swap_recovery", CONSTRAINTS) | {"sessions": 4, "warm_sessions": 4, "output_tokens": 8}
    result = with_mock(
        MockConfig(ttft_s=0.005),
        lambda s: w.run_test("swap_recovery", w.Target(s.url, "m", metrics_url=s.url + "/metrics"), params),
    )
    passed = {v["name"] for v in result.verdicts if v["status"] == "pass"}
    assert passed <= {"zero_errors", "idle_kv_released"}, result.verdicts
    assert statuses(result)["eviction_exercised"] == "not_exercised"


def test_bad_params_name_the_field():
    with pytest.raises(w.PlanError, match="params.divergence_tolerance_token"):
        asyncio.run(
            w.run_swap_recovery(
                w.Target("http://127.0.0.1:9", "m"), w.plan("swap_recovery") | {"divergence_tolerance_token": -1}
            )
        )


def test_continuation_comparison_tolerates_late_divergence_only():
    same = swap.compare_continuation("a b c d", "a b c d", 2)
    assert same["identical"] and same["ok"] and same["matching_fraction"] == 1.0
    late = swap.compare_continuation("a b c d", "a b c x", 2)
    assert late["first_divergence"] == 3 and late["ok"] and not late["identical"]
    early = swap.compare_continuation("a b c d", "x b c d", 2)
    assert early["first_divergence"] == 0 and not early["ok"] and early["matching_fraction"] == 0.75
    assert swap.compare_continuation("a b c d", "", 0)["garbage"] == "empty output"
    assert "repeated" in swap.compare_continuation("a b c d", "z z z z", 0)["garbage"]


def test_pressure_is_sized_from_the_capacity():
    plan = swap.pressure_plan(10_000, 4000, 1.5, 1000, 5000)
    assert plan["requests"] == 15 and plan["idle_kv_share_of_capacity"] == 0.4
    assert swap.pressure_plan(None, 4000, 1.5, 1000, 5000)["requests"] is None
    assert swap.pressure_plan(10_000, 4000, 1.5, 1000, 3)["capped"]


def test_cancel_returns_partial_data_and_stops_the_active_sessions():
    async def main():
        server = await start_server(SimConfig(profile="paged-prefix", num_blocks=500, **FAST))
        try:
            target = w.Target(server.url, "m", metrics_url=server.url + "/metrics", engine="simulator")
            cancel = asyncio.Event()
            asyncio.get_running_loop().call_later(1.0, cancel.set)
            params = w.plan("swap_recovery", CONSTRAINTS) | {"output_tokens": 16, "idle_s": 30.0, "settle_s": 1.0}
            return await asyncio.wait_for(w.run_swap_recovery(target, params, cancel=cancel), 15)
        finally:
            await server.stop()

    result = asyncio.run(main())
    assert result.partial and "cancelled: partial data" in result.notes
    assert result.points[0].requests_completed > 0


def test_capacity_from_the_engines_used_tokens_and_usage_ratio():
    used = [[1.0, 0.0], [2.0, 500.0], [3.0, 1000.0], [4.0, 50.0]]
    ratio = [[1.0, 0.0], [2.0, 0.25], [3.0, 0.5], [4.0, 0.005]]
    assert swap.capacity_from_usage(used, ratio) == 2000  # the scrape under 1% used is left out
    assert swap.capacity_from_usage([], ratio) is None


def test_eviction_evidence_from_metrics_alone_and_preemptions_are_not_evidence():
    def snap(hits, queries, pre=0.0):
        return {"prefix_hits": hits, "prefix_queries": queries, "preemptions": pre}

    metrics_only = {
        "warm_start": snap(0, 0),
        "warm_end": snap(800, 1000),
        "pressure_start": snap(800, 1000),
        "resume_start": snap(900, 5000),
        "resume_end": snap(1000, 6000),  # resume phase: 100 hits of 1000 queried vs 800 of 1000 warm
    }
    seen = swap.observe_eviction([None] * 20, [None] * 20, metrics_only)
    assert seen["observed"] and "hit ratio 0.10 on resume vs 0.80 warm" in seen["how"][0]
    assert seen["evicted_sessions"] is None  # no per-session count without cached tokens
    preempted = {name: snap(0, 0, 0.0) for name in metrics_only} | {"resume_end": snap(0, 0, 12.0)}
    seen = swap.observe_eviction([512] * 20, [512] * 20, preempted)
    assert not seen["observed"] and seen["preemptions"] == 12.0


def test_without_cache_metrics_a_resume_that_costs_a_recompute_is_the_evidence():
    warm, recompute = [50.0 + i % 5 for i in range(20)], [100.0 + i % 7 for i in range(20)]
    seen = swap.observe_eviction(
        [None] * 20, [None] * 20, {}, ttft_ms={"warm": warm, "resume": recompute, "recompute": recompute}
    )
    assert seen["observed"] and "prefilled again" in seen["how"][0]
    assert not swap.observe_eviction([None] * 20, [None] * 20, {}, ttft_ms={"warm": warm, "resume": warm})["observed"]
    # cached tokens, when the engine reports them, outrank the timing
    assert not swap.observe_eviction([512] * 20, [512] * 20, {}, ttft_ms={"warm": warm, "resume": recompute})[
        "observed"
    ]
    # too few sessions to judge a timing
    assert not swap.observe_eviction([None] * 5, [None] * 5, {}, ttft_ms={"warm": warm[:5], "resume": recompute[:5]})[
        "observed"
    ]


def test_each_session_class_is_judged_against_its_own_budget():
    """The constraints name two classes: never-swap sessions (kept warm) and the others, which accept a
    swap-in delay up to a budget (issue 36 item 7). An offload's swap-in fits a budget a recompute
    does not; each class has its own verdict."""
    offloading = CacheModel("paged_blocks", offload=True, source=VLLM_DOC, engine="vLLM")
    swapped = run_swap(
        SimConfig(profile="paged-offload", num_blocks=500, **FAST), offloading, swap_in_delay_budget_ms=60.0
    )
    delay = by_name(swapped)["swap_in_delay_within_budget"]
    assert delay["status"] == "pass" and delay["n"] == 20 and delay["threshold"] == 60.0, delay["detail"]
    assert delay["detail"].startswith("sessions that accept a swap-in delay: swap-in delay (resume TTFT over")
    assert statuses(swapped)["never_swap_sessions_warm"] == "pass"  # the other class, its own verdict
    dropped = run_swap(SimConfig(profile="paged-prefix", num_blocks=500, **FAST), swap_in_delay_budget_ms=60.0)
    assert statuses(dropped)["swap_in_delay_within_budget"] == "fail", by_name(dropped)["swap_in_delay_within_budget"]
    # no eviction: nothing was swapped in, the class is not exercised
    roomy = run_swap(
        SimConfig(profile="paged-prefix", num_blocks=20000, **FAST),
        max_pressure_requests=1,
        swap_in_delay_budget_ms=60.0,
    )
    assert statuses(roomy)["swap_in_delay_within_budget"] == "not_exercised"
    with pytest.raises(w.PlanError, match="params.swap_in_delay_budget_ms"):
        asyncio.run(
            w.run_swap_recovery(
                w.Target("http://127.0.0.1:9", "m"), w.plan("swap_recovery") | {"swap_in_delay_budget_ms": -5}
            )
        )


def test_the_plan_takes_the_delay_budget_from_the_constraints():
    assert w.plan("swap_recovery", CONSTRAINTS | {"swap_in_delay_budget_ms": 250.0})["swap_in_delay_budget_ms"] == 250.0
    assert w.plan("swap_recovery", CONSTRAINTS)["swap_in_delay_budget_ms"] is None
