"""The simulator's `slots` profile models llama.cpp's documented cache (issue 34): each slot keeps its
last prompt resident for the next prompt with a common prefix, nothing is shared between slots, an idle
slot is overwritten when more sessions than slots take turns; it speaks llama-server (its metric names,
`timings.prompt_n`, GET /props, no cache reset). Each verdict the harness judges on such an engine has a
simulator setting where it passes and one where it fails."""

import asyncio

from benchmarks.harness import workloads as w
from benchmarks.harness.cache_model import CacheModel
from benchmarks.harness.workloads.common import Session
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import start_server

LLAMA = CacheModel("slot_resident", source="https://example.org/llama.cpp/README.md", engine="llama.cpp")
FAST = dict(prefill_tokens_per_s=20000.0, weight_bytes=1_000_000_000, time_scale=3.0)


def slots(count: int, cells_per_slot: int, **changes) -> SimConfig:
    """llama-server -np `count` -c `count * cells_per_slot` (cells in blocks of 16)."""
    return SimConfig(
        profile="slots",
        max_num_seqs=count,
        num_blocks=count * cells_per_slot // 16,
        max_model_len=cells_per_slot,
        **{**FAST, **changes},
    )


def target(server) -> w.Target:
    return w.Target(server.url, "kvsim", metrics_url=server.url + "/metrics", engine="simulator", cache_model=LLAMA)


def serve(config: SimConfig, work):
    async def main():
        server = await start_server(config)
        try:
            return await work(server)
        finally:
            await server.stop()

    return asyncio.run(main())


def test_a_slot_keeps_its_prompt_resident_and_reuses_its_prefix_and_speaks_llama_server():
    async def work(server):
        t = target(server)
        async with Session(t) as session:
            prompt = session.prompts.text(300, seed=1)
            first = await session.client.send(session.spec(prompt + " a b", 4))
            again = await session.client.send(session.spec(prompt + " c d", 4))
            props = await session.client.get_json("/props")
            status, _body = await session.client.post_json("/reset_prefix_cache", {})
            erase, _body = await session.client.post_json("/slots/0?action=erase", {})
            metrics = await session.kv_now()
            return first, again, props, status, erase, metrics, session.metrics.recording.engine

    first, again, props, reset, erase, metrics, engine = serve(slots(4, 1024), work)
    assert first.cached_source == "timings" and first.cached_tokens == 0
    assert first.prompt_processed == first.prompt_tokens
    assert again.cached_tokens >= 290 and again.prompt_processed <= again.prompt_tokens - 290  # the slot's prefix
    assert props == {"total_slots": 4} and reset == 404 and erase == 501
    assert engine == "llamacpp" and metrics["kv_usage_ratio"] > 0  # idle, yet the slot keeps its prompt
    assert metrics["running"] == 0
    assert metrics["prompt_tokens_processed"] == first.prompt_tokens + again.prompt_processed


def test_prefix_reuse_on_slots_saves_compute_and_fails_when_the_cache_is_off():
    params = {"requests": 32, "concurrency": 8, "prefix_tokens": 600, "suffix_tokens": 100, "output_tokens": 24}
    params["sample_interval_s"] = 0.05

    def run(config):
        return serve(
            config, lambda s: w.run_prefix_reuse(target(s), dict(params), off_target=w.prefix_off_target(target(s)))
        )

    on = run(slots(8, 1200))
    v = {x["name"]: x for x in on.verdicts}
    assert v["prefix_reused"]["status"] == "pass" and v["prefix_reused"]["source"] == "engine_processed_counter"
    assert v["kv_below_theory"]["status"] == v["kv_below_prefix_off"]["status"] == "not_applicable"
    observed = on.metadata["observed"]
    assert observed["reuse_on"] > 0.5 and observed["reuse_off"] == 0.0 and observed["compute_saving"] > 0.5
    assert "fresh slots: each of the 8 slots" in observed["cache_state"]
    off = run(slots(8, 1200, prefix_caching=False))  # a build that caches nothing: no reuse, a failure
    reused = {x["name"]: x for x in off.verdicts}["prefix_reused"]
    assert reused["status"] == "fail" and reused["value"] < 0.05, reused["detail"]


def test_more_sessions_than_slots_are_seen_evicted_from_the_timings():
    """The audit's server B: sessions on 4 slots; each resumed session's `timings.prompt_n` shows its
    history recomputed. With as many slots as sessions nothing is evicted: not exercised, never a pass."""
    constraints = {"concurrent_sessions": 20, "avg_input_tokens": 64, "average_turns": 5}
    constraints |= {"idle_seconds_between_turns": 0.2, "peak_concurrency": 4}
    params = w.plan("swap_recovery", constraints) | {"output_tokens": 16, "settle_s": 1.0, "parallel": 4}

    def run(config, **extra):
        return serve(config, lambda s: w.run_swap_recovery(target(s), params | extra))

    four = run(slots(4, 1024))
    v = {x["name"]: x for x in four.verdicts}
    assert v["eviction_exercised"]["status"] == "pass" and "timings" in v["eviction_exercised"]["detail"]
    assert four.metadata["eviction"]["evicted_sessions"] >= 16 and v["eviction_exercised"]["source"] == "responses"
    assert v["resume_cheaper_than_recompute"]["status"] == v["idle_kv_released"]["status"] == "not_applicable"
    assert four.metadata["resume"]["recompute_method"] == "cache_prompt=false"
    assert v["continuation_identical"]["status"] == "pass"
    roomy = run(slots(64, 1024), max_pressure_requests=1, pressure_concurrency=1)
    roomy_v = {x["name"]: x for x in roomy.verdicts}
    assert roomy_v["eviction_exercised"]["status"] == "not_exercised", roomy_v["eviction_exercised"]["detail"]
