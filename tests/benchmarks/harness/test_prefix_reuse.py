"""Prefix reuse (test 4) on the simulator and the scripted mock: caching on against a caching-off
endpoint, each from an emptied cache, against the KV the requests in flight need without sharing;
the reuse the engine's own counters show; the verdicts' outcomes (pass, fail, not exercised, not
applicable on a per-slot engine) (issues 33 item 3, 34 items 2 and 3)."""

import asyncio
from dataclasses import replace

import pytest

from benchmarks.harness import workloads as w
from benchmarks.harness.cache_model import CacheModel
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.mock_server import MockConfig
from benchmarks.simulator.server import start_server
from benchmarks.verdicts import FAIL, INCONCLUSIVE, NOT_APPLICABLE, NOT_EXERCISED, PASS

PARAMS = {
    "requests": 32,
    "concurrency": 8,
    "prefix_tokens": 768,
    "suffix_tokens": 64,
    "output_tokens": 24,
    "kv_capacity_tokens": 3000 * 16,
    "sample_interval_s": 0.05,
}
# The memory verdicts need MIN_KV_SAMPLES taken with the load at its height: 32 requests gave 8 or 9 on a
# quiet machine and 4 on a loaded CI one (a sampler starved of the event loop); 64 give about twice that.
JUDGED = dict(PARAMS, requests=64)


def sim_config(**changes) -> SimConfig:
    return SimConfig(**{"num_blocks": 3000, "max_model_len": 8192, "time_scale": 3.0, **changes})


def target(server) -> w.Target:
    return w.Target(server.url, "kvsim", metrics_url=server.url + "/metrics", engine="simulator")


def run_on_off(on: SimConfig, off: SimConfig | None, params=PARAMS, same_endpoint_off=False):
    async def main():
        servers = [await start_server(on)] + ([await start_server(off)] if off is not None else [])
        try:
            on_target = target(servers[0])
            off_target = target(servers[1]) if off is not None else None
            if same_endpoint_off:
                off_target = replace(on_target, cache_prompt=False)
            return await w.run_prefix_reuse(on_target, dict(params), off_target=off_target)
        finally:
            for server in servers:
                await server.stop()

    return asyncio.run(main())


def verdicts(result):
    return {v["name"]: v for v in result.verdicts}


def test_caching_on_holds_clearly_less_kv_than_off_and_than_theory():
    result = run_on_off(sim_config(), sim_config(prefix_caching=False), params=JUDGED)
    v = verdicts(result)
    assert [p.label for p in result.points] == ["prefix_on", "prefix_off"]
    assert v["kv_below_prefix_off"]["status"] == PASS, v["kv_below_prefix_off"]["detail"]
    assert v["kv_below_theory"]["status"] == PASS, v["kv_below_theory"]["detail"]
    assert v["prefix_reused"]["status"] == PASS
    on, off = result.points
    assert on.extra["kv_tokens_peak"] < 0.8 * off.extra["kv_tokens_peak"]
    assert v["kv_below_prefix_off"]["n"] >= w.MIN_KV_SAMPLES and v["kv_below_prefix_off"]["interval"]
    observed = result.metadata["observed"]
    assert observed["off_run"] and observed["memory_saving_basis"] == "measured_off"
    # the baseline: what the requests in flight at the peak need without sharing, from their usage
    need = on.extra["kv_need_at_peak"]
    assert 0 < need["requests"] <= 8 and need["prompt_tokens"] >= need["requests"] * (768 + 64)
    assert observed["theory_own_allocation_tokens"] == need["tokens"] <= 8 * (768 + 64 + 24)
    assert observed["theory_shared_once_tokens"] == need["tokens"] - (need["requests"] - 1) * 768
    # bounded and explained: on and off each against their own need, the best being the prefix held once
    assert 0.3 < observed["memory_saving"] <= observed["theoretical_saving"] + 0.05 < 1
    assert 0 < observed["saving_ratio"] <= 1
    assert result.metadata["derived"]["prefix_saving_ratio"] == observed["saving_ratio"]
    assert observed["kv_over_need_off"] > 0.8  # caching off holds about what its requests need
    line = observed["line"]
    assert "of the KV they need without sharing" in line and "caching saved" in line and "n=64/64" in line
    assert "each run from an emptied cache (POST /reset_prefix_cache)" in line
    assert all(p.extra["cache_state"] == {"method": "POST /reset_prefix_cache", "reset": True} for p in result.points)
    # the engine's own counters judged the reuse, and say so
    assert v["prefix_reused"]["source"] == "engine_counters" and "prefix-cache counters" in v["prefix_reused"]["detail"]
    # caching skips the shared prefill: the engine's prefix-cache counters find most prompt tokens cached
    # (judged on its counters: the wall-clock TTFT p50s it once was judged on are mostly event-loop lag
    # on a loaded box, where on came out above off in 2 runs of 3)
    assert observed["reuse_on"] > 0.5 and not observed["reuse_off"], (observed["reuse_on"], observed["reuse_off"])
    assert "prefix_off.kv_usage_ratio" in result.timeseries and result.evidence == "SIMULATED"


def test_an_on_endpoint_with_caching_actually_off_fails():
    result = run_on_off(sim_config(prefix_caching=False), sim_config(prefix_caching=False), params=JUDGED)
    v = verdicts(result)
    assert v["kv_below_prefix_off"]["status"] == FAIL, v["kv_below_prefix_off"]["detail"]
    assert v["kv_below_theory"]["status"] == FAIL, v["kv_below_theory"]["detail"]
    assert v["prefix_reused"]["status"] == FAIL
    assert result.metadata["observed"]["memory_saving"] < 0.2


def test_without_an_off_run_on_vs_off_is_not_exercised_and_off_is_theory_only():
    result = run_on_off(sim_config(), None)
    v = verdicts(result)
    assert v["kv_below_prefix_off"]["status"] == NOT_EXERCISED and v["kv_below_prefix_off"]["passed"] is None
    assert v["kv_below_theory"]["status"] == PASS  # still judged against the in-flight need
    observed = result.metadata["observed"]
    assert not observed["off_run"] and observed["memory_saving_basis"] == "in_flight_need"
    assert "vs off" not in observed["line"] and "of the KV they need without sharing" in observed["line"]
    assert any("on vs off was not measured" in note for note in result.notes)


def test_llama_cpp_off_run_is_the_same_endpoint_with_cache_prompt_false():
    on = w.Target("http://127.0.0.1:8080", "m", engine="llamacpp")
    off = w.prefix_off_target(on)
    assert off is not None and off.endpoint_url == on.endpoint_url and off.cache_prompt is False
    assert w.prefix_off_target(replace(on, engine="vllm")) is None
    second = w.prefix_off_target(replace(on, engine="vllm"), "http://127.0.0.1:8001/")
    assert second.endpoint_url == "http://127.0.0.1:8001" and second.metrics_url == "http://127.0.0.1:8001/metrics"
    # on the simulator, which honours cache_prompt per request as llama.cpp does
    result = run_on_off(sim_config(), None, same_endpoint_off=True)
    v = verdicts(result)
    assert v["kv_below_prefix_off"]["status"] == PASS, v["kv_below_prefix_off"]["detail"]
    assert result.metadata["off_target"]["cache_prompt"] is False
    assert result.points[1].extra["cache_prompt"] is False


def test_without_kv_metrics_memory_is_not_judged(with_mock):
    async def go(server):
        t = w.Target(server.url, "m", metrics_url=None, engine="vllm")
        return await w.run_prefix_reuse(t, dict(PARAMS, requests=8), off_target=t)

    result = with_mock(MockConfig(), go)
    v = verdicts(result)
    assert v["kv_below_theory"]["status"] == "not_judged" and v["kv_below_prefix_off"]["status"] == "not_judged"
    assert "n/a" in result.metadata["observed"]["line"]
    # the responses' cached tokens judged the reuse (no counters were scraped)
    assert v["prefix_reused"]["source"] == "responses" and "usage cached_tokens" in v["prefix_reused"]["detail"]


def test_an_engine_keeping_finished_kv_resident_is_not_judged_on_memory(with_mock):
    """As llama.cpp's slots do: what a load adds over the baseline says nothing of what it needed, so
    neither memory verdict passes or fails on it (CI once saw a pass from slot reuse alone)."""

    async def go(server):
        on = w.Target(server.url, "m", metrics_url=server.url + "/metrics", engine="llamacpp")
        return await w.run_prefix_reuse(on, dict(PARAMS), off_target=w.prefix_off_target(on))

    result = with_mock(
        MockConfig(keep_finished_kv=True, itl_s=0.005, kv_capacity_tokens=PARAMS["kv_capacity_tokens"]), go
    )
    v = verdicts(result)
    for name in ("kv_below_theory", "kv_below_prefix_off"):
        assert v[name]["status"] == INCONCLUSIVE and v[name]["passed"] is None, v[name]["detail"]
        assert "keeps finished requests' KV resident" in v[name]["detail"] and v[name]["n"] >= w.MIN_KV_SAMPLES
    on = result.points[0].extra
    assert on["kv_tokens_after"] >= w.KV_RESIDENT_SHARE * on["kv_tokens_peak_raw"] > 0


def test_bad_capacity_names_the_field():
    with pytest.raises(w.PlanError, match="params.kv_capacity_tokens"):
        run_on_off(sim_config(), None, params=dict(PARAMS, kv_capacity_tokens=-1))


def test_the_baseline_is_what_the_requests_in_flight_need_so_it_bounds_both_runs(with_mock):
    """A chat template adds 300 tokens to each request: the plan's theory (concurrency x the planned
    lengths) sits below both the caching-on and the caching-off run, as the architect's walk saw (a
    "theory" 2.33x and 6.2x below the runs). The baseline from the requests actually in flight, with
    their reported prompts, holds both: neither exceeds it, and an engine sharing nothing fails."""
    params = dict(PARAMS, requests=24, prefix_tokens=150, suffix_tokens=50, output_tokens=24, kv_capacity_tokens=8000)

    async def go(server):
        on = w.Target(server.url, "m", metrics_url=server.url + "/metrics", engine="llamacpp", api="chat")
        return await w.run_prefix_reuse(on, dict(params), off_target=w.prefix_off_target(on))

    result = with_mock(MockConfig(template_tokens=300, itl_s=0.01, kv_capacity_tokens=8000), go)
    v, (on, off) = verdicts(result), result.points
    old_theory = params["concurrency"] * (150 + 50 + 24)
    assert on.extra["kv_tokens_held"] > old_theory and off.extra["kv_tokens_held"] > old_theory
    for point in (on, off):
        assert point.extra["kv_need_at_peak"]["prompt_tokens"] >= point.extra["kv_need_at_peak"]["requests"] * 500
        assert point.extra["kv_over_need_held"] <= 1.05  # the baseline holds the measurement
    # this engine shares nothing (its KV grows with every request's whole prompt): a failure, not a saving
    assert v["kv_below_theory"]["status"] == FAIL, v["kv_below_theory"]["detail"]
    assert "requests in flight at the peak (prompts" in v["kv_below_theory"]["detail"]
    assert result.metadata["observed"]["memory_saving"] < 0.2


def test_a_per_slot_engine_saves_compute_not_memory_judged_by_its_own_counters(with_mock):
    """llama.cpp's documented slots each hold their own copy of the prefix: the memory verdicts are not
    applicable (with the source); the reuse is judged by llamacpp:prompt_tokens_total against the
    tokens sent, and on/off reports the compute saved (issue 34 items 1-3)."""
    model = CacheModel("slot_resident", source="https://example.org/llama.cpp/README.md", engine="llama.cpp")

    async def go(server):
        on = w.Target(server.url, "m", metrics_url=server.url + "/metrics", engine="llamacpp", cache_model=model)
        return await w.run_prefix_reuse(on, dict(PARAMS, requests=24), off_target=w.prefix_off_target(on))

    mock = MockConfig(llamacpp_timings=True, keep_finished_kv=True, itl_s=0.003, kv_capacity_tokens=48000)
    result = with_mock(mock, go)
    v = verdicts(result)
    for name in ("kv_below_theory", "kv_below_prefix_off"):
        assert v[name]["status"] == NOT_APPLICABLE and "saves prefill compute, not KV memory" in v[name]["detail"]
        assert model.source in v[name]["detail"]
    reused = v["prefix_reused"]
    assert reused["status"] == PASS and reused["source"] == "engine_processed_counter", reused
    assert "llamacpp:prompt_tokens_total" in reused["detail"]
    observed = result.metadata["observed"]
    assert observed["per_slot_cache"] and observed["memory_saving"] is None
    assert observed["reuse_on"] > 0.6 and observed["reuse_off"] == 0.0  # cache_prompt false recomputes it all
    assert observed["compute_saving"] == observed["reuse_on"] and 0 < observed["saving_ratio"] <= 1
    assert observed["line"].startswith("llama.cpp caches a prompt per slot, so caching saves prefill, not memory")
    assert "compute saved" in observed["line"] and "memory saving" not in observed["line"]
    # the responses' timings say the same per request
    assert result.points[0].extra["reuse"]["responses_cached_source"] == "timings"


def test_without_any_cache_figure_timing_judges_and_says_so(with_mock):
    """An engine that reports no cached tokens and no counters: TTFT on against off decides, labelled."""

    async def go(server):
        on = w.Target(server.url, "m", metrics_url=None, engine="llamacpp")
        return await w.run_prefix_reuse(on, dict(PARAMS, requests=24), off_target=w.prefix_off_target(on))

    fast = with_mock(MockConfig(llamacpp_timings=True, prefill_s_per_token=0.0002, ttft_s=0.002), go)
    reused = verdicts(fast)["prefix_reused"]
    # the responses' timings are the engine's own count: they judge before any timing
    assert reused["source"] == "responses" and "timings (prompt_n)" in reused["detail"]
    silent = MockConfig(prefill_s_per_token=0.0002, ttft_s=0.002, prefix_caching=False, report_cached=False)
    bare = with_mock(silent, go)
    timed = verdicts(bare)["prefix_reused"]
    assert timed["source"] == "timing" and timed["detail"].startswith("timing only")
    assert timed["status"] in (FAIL, INCONCLUSIVE), timed  # caching that saves nothing is never a pass
