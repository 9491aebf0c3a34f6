"""The engine model shows the KV-cache effects docs/domain.md describes, by block arithmetic."""

from __future__ import annotations

import random

import pytest

from benchmarks.simulator.block_keys import TokenStream
from benchmarks.simulator.config import SimConfig, SimConfigError, blocks_for
from benchmarks.simulator.engine import Engine
from benchmarks.simulator.errors import EngineOOM, RequestRejected, RequestTooLarge
from benchmarks.simulator.sequence import Sequence
from benchmarks.simulator.tokens import reference_output

from .helpers import Driver, small_config


def test_default_pool_is_sized_from_h100_memory_and_8b_weights():
    config = SimConfig()
    expected = (int(80 * 1024**3 * 0.9) - 16_060_522_496) // (16 * 131072)
    assert config.total_blocks == expected
    assert 28_000 < expected < 30_000


def test_capacity_plan_is_read_by_duck_typing():
    class Plan:
        block_size = 32
        num_blocks = 1234
        kv_bytes_per_token_total = 65536
        weight_bytes_per_rank = 8_000_000_000

    config = SimConfig.from_capacity_plan(Plan(), profile="radix")
    assert (config.block_size, config.num_blocks, config.kv_bytes_per_token, config.weight_bytes) == (
        32,
        1234,
        65536,
        8_000_000_000,
    )
    assert config.total_blocks == 1234 * 32  # radix allocates per token from the same memory


def test_invalid_settings_name_the_field():
    with pytest.raises(SimConfigError, match="block_size: must be a positive integer, got -1"):
        SimConfig(block_size=-1)
    with pytest.raises(SimConfigError, match="profile"):
        SimConfig(profile="vllm")


def test_kv_usage_rises_with_concurrency_and_context():
    def usage(concurrency: int, prompt: int) -> float:
        driver = Driver(small_config(num_blocks=2000, max_num_batched_tokens=16384))
        for _ in range(concurrency):
            driver.request(prompt, 8)
        driver.step()
        return driver.engine.kv_cache_usage()

    by_concurrency = [usage(c, 256) for c in (1, 4, 16)]
    by_context = [usage(4, p) for p in (256, 1024, 3072)]
    assert by_concurrency == [c * 16 / 2000 for c in (1, 4, 16)]  # 256 tokens = 16 blocks each
    assert by_context == [4 * blocks_for(p, 16) / 2000 for p in (256, 1024, 3072)]
    assert by_concurrency[0] < by_concurrency[1] < by_concurrency[2]
    assert by_context[0] < by_context[1] < by_context[2]


def test_usage_grows_during_decode_one_block_per_block_size_tokens():
    driver = Driver(small_config())
    driver.request(16, 40)  # prompt fills exactly one block
    driver.step()  # prefill: 1 block, first token
    used = [driver.engine.used_blocks]
    for _ in range(35):
        driver.step()
        used.append(driver.engine.used_blocks)
    # decode step j writes token 16+j: a new block at 16 and 32 written tokens
    assert used[0] == 1 and used[1] == 2 and used[16] == 2 and used[17] == 3


@pytest.mark.parametrize("requests", [1, 10])
def test_prefix_caching_saves_the_blocks_and_prefill_time_the_arithmetic_predicts(requests):
    prefix, suffix, bs = 4096, 512, 16

    def run(profile: str) -> tuple[int, float, Engine]:
        driver = Driver(
            small_config(profile=profile, num_blocks=8000, max_model_len=8192, max_num_batched_tokens=65536)
        )
        driver.request(prefix + suffix, 1, prefix_id="system", prefix_tokens=prefix)
        driver.run()  # warms the cache with the system prompt
        driver.idle(1.0)
        seqs = [driver.request(prefix + suffix, 4, prefix_id="system", prefix_tokens=prefix) for _ in range(requests)]
        start = driver.now
        driver.step()
        return driver.engine.used_blocks, seqs[0].first_token_t - start, driver.engine

    used_off, ttft_off, _ = run("paged-noprefix")
    used_on, ttft_on, engine = run("paged-prefix")
    per_request = blocks_for(prefix + suffix, bs)
    assert used_off == requests * per_request
    assert used_on == prefix // bs + requests * (per_request - prefix // bs)
    config = engine.config
    # the saved compute: a full prefill minus a prefill of the suffix after the cached prefix
    saved = requests * (config.prefill_s(prefix + suffix, 0) - config.prefill_s(suffix, prefix))
    assert ttft_off - ttft_on == pytest.approx(saved, rel=1e-9)
    assert saved > requests * prefix / config.prefill_rate  # at least the dense FLOPs of the prefix
    assert engine.stats["prefix_hits"] == requests * prefix


@pytest.mark.parametrize("profile", ["paged-prefix", "radix", "paged-offload"])
def test_prefix_caching_off_knob_makes_every_request_hold_its_own_prefix(profile):
    # the prefix test's "off" endpoint: the same strategy started with caching off
    prefix, suffix, requests = 2048, 256, 6
    driver = Driver(
        small_config(
            profile=profile, num_blocks=4000, max_model_len=4096, max_num_batched_tokens=65536, prefix_caching=False
        )
    )
    driver.request(prefix + suffix, 1, prefix_id="system", prefix_tokens=prefix)
    driver.run()
    driver.idle(1.0)
    for _ in range(requests):
        driver.request(prefix + suffix, 4, prefix_id="system", prefix_tokens=prefix)
    driver.step()
    bs = driver.engine.bs
    assert not driver.engine.prefix_caching and driver.engine.stats["prefix_hits"] == 0
    assert driver.engine.used_blocks == requests * blocks_for(prefix + suffix, bs)
    assert SimConfig(profile=profile).prefix_caching_on and not SimConfig(profile="static").prefix_caching_on


def test_static_admits_fewer_concurrent_requests_than_paged_for_the_same_memory():
    def admitted(profile: str) -> tuple[int, float]:
        driver = Driver(small_config(profile=profile, num_blocks=400, max_model_len=2048))
        for _ in range(20):
            driver.request(200, 50)
        driver.step()
        return len(driver.engine.running), driver.engine.fragmentation()

    static_running, static_frag = admitted("static")
    paged_running, paged_frag = admitted("paged-prefix")
    assert static_running == 400 // (2048 // 16) == 3  # each slot pre-allocates max_model_len
    assert paged_running == 20
    assert static_frag > 0.85 and paged_frag < 0.05


def test_preemptions_are_counted_when_blocks_run_out_and_every_request_still_finishes():
    for mode in ("recompute", "swap"):
        driver = Driver(small_config(profile="paged-noprefix", num_blocks=100, preemption_mode=mode))
        seqs = [driver.request(300, 400) for _ in range(6)]  # 6 x 44 blocks > 100
        driver.run()
        stats = driver.engine.stats
        assert stats["preemptions"] > 0, mode
        assert all(s.finish_reason == "length" for s in seqs)
        assert sum(s.preemptions for s in seqs) == stats["preemptions"]
        if mode == "swap":
            assert stats["swap_out_blocks"] > 0 and stats["swap_in_blocks"] == stats["swap_out_blocks"]
        assert driver.engine.used_blocks == 0


def test_offload_moves_idle_session_blocks_to_cpu_and_the_resume_pays_the_transfer():
    def resume(profile: str) -> tuple[float, Engine, Sequence]:
        driver = Driver(small_config(profile=profile, num_blocks=400, offload_after_s=2.0))
        driver.request(1000, 24, session_id="chat")
        driver.run()
        driver.idle(10.0)  # the session goes idle past offload_after_s
        driver.engine.offload_idle(driver.now)
        seq = driver.request(1000 + 24 + 100, 8, session_id="chat")
        start = driver.now
        driver.step()
        return seq.first_token_t - start, driver.engine, seq

    ttft_gpu, gpu_engine, gpu_seq = resume("paged-prefix")
    ttft_cpu, cpu_engine, cpu_seq = resume("paged-offload")
    history_blocks = (1000 + 24 - 1) // 16  # full blocks of prompt + generated tokens in KV
    assert cpu_engine.stats["offload_store_blocks"] >= history_blocks
    assert cpu_engine.stats["swap_in_blocks"] == history_blocks
    assert gpu_engine.stats["swap_in_blocks"] == 0
    assert gpu_seq.hit_tokens == cpu_seq.hit_tokens == history_blocks * 16
    assert cpu_seq.swapped_in and not gpu_seq.swapped_in
    assert ttft_cpu - ttft_gpu == pytest.approx(cpu_engine.config.transfer_s(history_blocks), rel=1e-9)


def test_corruption_knob_is_caught_by_a_continuation_check():
    def continuation(corrupt: bool) -> tuple[list[int], list[int]]:
        config = small_config(profile="paged-offload", offload_after_s=1.0, fault_corrupt_swapped_in=corrupt)
        driver = Driver(config)
        first = TokenStream(list(range(100, 164)), config.seed)
        seq = Sequence(1, 64, 8, 0.0, first, first)
        driver.engine.add(seq, 0.0)
        driver.run()
        first.extend_outputs(8)
        driver.idle(5.0)
        driver.engine.offload_idle(driver.now)
        prompt = first.prompt + first.outputs + [7, 8, 9]
        second = TokenStream(prompt, config.seed)
        seq2 = Sequence(2, len(prompt), 6, driver.now, second, second)
        driver.engine.add(seq2, driver.now)
        while driver.engine.has_work():
            outcome = driver.step()
            for s in outcome.first_token + outcome.decoded:
                s.stream.extend_outputs(driver.engine.out_done(s))
        assert seq2.swapped_in
        return second.outputs, reference_output(prompt, 6, config.seed)

    clean, expected = continuation(corrupt=False)
    assert clean == expected
    corrupted, expected = continuation(corrupt=True)
    assert corrupted != expected and len(corrupted) == len(expected)


def test_admission_limits_reject_with_429_and_oversized_requests_fail():
    driver = Driver(small_config(reject_policy="429", max_waiting=2, max_num_seqs=1))
    driver.request(100, 10)
    driver.step()  # it runs: the batch (1 sequence) is full
    driver.request(100, 10)
    driver.request(100, 10)  # two may wait
    with pytest.raises(RequestRejected):
        driver.request(100, 10)
    assert driver.engine.stats["requests_rejected"] == 1
    with pytest.raises(RequestTooLarge, match="max_model_len"):
        driver.request(4000, 200)
    oom = Driver(small_config(fault_oom_every=2))
    oom.request(10, 1)
    with pytest.raises(EngineOOM):
        oom.request(10, 1)


def test_abort_frees_every_block():
    driver = Driver(small_config())
    seqs = [driver.request(500, 100, prefix_id="p", prefix_tokens=256) for _ in range(5)]
    for _ in range(10):
        driver.step()
    for seq in seqs:
        driver.engine.abort(seq, driver.now)
    driver.engine.check_invariants()
    assert driver.engine.used_blocks == 0 and not driver.engine.has_work()


@pytest.mark.parametrize("profile", ["paged-prefix", "paged-noprefix", "radix", "static", "paged-offload"])
@pytest.mark.parametrize("coalesce", [False, True])
def test_random_workloads_conserve_blocks_and_finish(profile, coalesce):
    rng = random.Random(hash((profile, coalesce)) & 0xFFFF)
    driver = Driver(
        small_config(
            profile=profile,
            num_blocks=300,
            max_model_len=2048,
            offload_after_s=0.5,
            preemption_mode=rng.choice(["recompute", "swap"]),
        ),
        coalesce=coalesce,
    )
    seqs = []
    for _ in range(60):
        seqs.append(
            driver.request(
                rng.randint(1, 900),
                rng.randint(1, 300),
                prefix_id=rng.choice([None, "a", "b"]),
                prefix_tokens=rng.choice([0, 64, 200]),
                session_id=rng.choice([None, 1, 2, 3]),
            )
        )
        for _ in range(rng.randint(0, 5)):
            if driver.engine.has_work():
                driver.step()
    driver.run()
    assert all(s.finish_reason == "length" for s in seqs)
    assert driver.engine.used_blocks == 0


def test_radix_reuses_a_prefix_to_the_token_where_paged_stops_at_a_block_boundary():
    def hits(profile: str) -> int:
        driver = Driver(small_config(profile=profile, num_blocks=400))
        driver.request(600, 1, prefix_id="sys", prefix_tokens=250)
        driver.run()
        seq = driver.request(600, 1, prefix_id="sys", prefix_tokens=250)
        driver.run()
        return seq.hit_tokens

    assert hits("paged-prefix") == 240  # 15 full blocks of 16
    assert hits("radix") == 250


def test_one_long_prompt_delays_the_short_requests_behind_it():
    def short_ttft(with_long: bool) -> float:
        driver = Driver(small_config(num_blocks=4000, max_model_len=16384, max_num_batched_tokens=2048))
        if with_long:
            driver.request(16000, 8)
        shorts = [driver.request(100, 8) for _ in range(4)]
        driver.run()
        return max(s.first_token_t - s.arrival for s in shorts)

    alone, behind_long = short_ttft(False), short_ttft(True)
    config = small_config()
    # chunked prefill: the long prompt takes the token budget for ~8 steps first
    assert behind_long - alone >= 7 * 2048 / config.prefill_rate


def test_long_context_memory_grows_linearly_and_ttft_superlinearly():
    ttft, blocks = {}, {}
    for context in (16384, 32768, 65536, 131000):
        driver = Driver(SimConfig())  # the default H100 / Llama-3.1-8B pool
        seq = driver.request(context, 2)
        while seq.first_token_t is None:
            driver.step()
        ttft[context], blocks[context] = seq.first_token_t, driver.engine.used_blocks
    assert all(blocks[c] == blocks_for(c, 16) for c in blocks)
    assert ttft[32768] / ttft[16384] > 2 and ttft[131000] / ttft[16384] > 8  # attention makes it superlinear
    assert 5 < ttft[131000] < 30  # seconds: the order of magnitude of a real 8B prefill at 128K on one H100


def test_without_admission_control_an_exhausted_pool_is_an_oom_or_a_crash():
    from benchmarks.simulator.errors import EngineCrashed

    driver = Driver(small_config(num_blocks=20, oom_without_admission="fail"))
    driver.request(100, 60)  # 10 blocks of 16 tokens claimed at once
    driver.request(100, 60)  # 20: the pool is full
    with pytest.raises(EngineOOM, match="CUDA out of memory"):
        driver.request(100, 60)
    assert driver.engine.stats["requests_oom"] == 1
    crash = Driver(small_config(num_blocks=20, oom_without_admission="crash"))
    crash.request(100, 220)
    with pytest.raises(EngineCrashed, match="died"):
        crash.request(100, 60)
    queued = Driver(small_config(num_blocks=20))  # the default queues instead
    for _ in range(3):
        queued.request(100, 60)
    assert len(queued.engine.waiting) == 3


def test_the_leak_fault_keeps_blocks_after_each_request_and_slows_decode():
    """fault_kv_leak_blocks_per_request: the stability test's fail case (usage climbs at steady load)."""
    clean, leaking = Driver(small_config()), Driver(small_config(fault_kv_leak_blocks_per_request=3))
    for driver in (clean, leaking):
        for _ in range(20):  # one after another: each request runs beside the blocks leaked before it
            driver.request(64, 8)
            driver.run()
    assert clean.engine.used_blocks == 0 and clean.engine.fragmentation() == 0.0
    assert leaking.engine.leaked == 60 and leaking.engine.used_blocks == 60
    assert leaking.engine.fragmentation() == 1.0  # every held slot holds no token
    assert leaking.engine.snapshot()["leaked_blocks"] == 60
    # the stranded blocks are read around: the same work takes longer
    assert leaking.now > clean.now
    with pytest.raises(SimConfigError, match="fault_kv_leak_blocks_per_request"):
        small_config(fault_kv_leak_blocks_per_request=-1)


def test_the_leak_stops_at_its_cap_so_the_engine_keeps_serving():
    driver = Driver(small_config(fault_kv_leak_blocks_per_request=50))
    for _ in range(20):
        driver.request(64, 8)
        driver.run()
    assert driver.engine.leaked == int(400 * 0.9) and not driver.engine.has_work()
