"""What the simulator says it runs as and on (GET /version, kvsim_build_info) and its hierarchical-cache
profile (radix-offload): the token-level tree whose idle cache moves to host memory and back."""

from __future__ import annotations

import asyncio

import aiohttp

from benchmarks.harness.metrics import parse_prometheus
from benchmarks.simulator.cli import config_from_options
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import start_server

from .helpers import Driver, small_config


def test_version_and_build_info_report_the_engine_version_model_and_gpus():
    config = SimConfig(num_blocks=600, max_model_len=4096, engine_version="0.11.0", gpu_count=2)

    async def scenario():
        server = await start_server(config)
        try:
            async with aiohttp.ClientSession() as client:
                async with client.get(server.url + "/version") as response:
                    version = await response.json()
                async with client.get(server.url + "/metrics") as response:
                    metrics = parse_prometheus(await response.text())
        finally:
            await server.stop()
        return version, metrics

    version, metrics = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert version == {"version": "0.11.0", "simulator": "kvsim"}
    ((labels, value),) = metrics["kvsim_build_info"]
    assert value == 1
    assert labels["version"] == "0.11.0" and labels["gpu"] == "H100" and labels["gpu_count"] == "2"
    assert labels["gpu_memory_gib"] == "80" and labels["driver"] == "simulated"
    assert labels["served_model_name"] == config.served_model_name


def test_the_command_line_sets_the_version_the_served_name_and_the_gpu_count():
    base = {
        "profile": "radix-offload",
        "model": "llama-3.1-8b",
        "gpu": "H100",
        "time_scale": 1.0,
        "num_blocks": 100,
        "block_size": 16,
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 1024,
        "preemption_mode": "recompute",
        "reject_policy": "queue",
        "max_waiting": None,
        "offload_after_s": 5.0,
        "seed": 0,
        "tp": 2,
    }
    config = config_from_options({**base, "engine_version": "0.5.5", "served_model_name": "support-bot"})
    assert (config.engine_version, config.served_model_name, config.gpu_count) == ("0.5.5", "support-bot", 2)
    assert config_from_options(base).engine_version == "kvsim"


def test_the_hierarchical_cache_profile_offloads_idle_tokens_and_loads_them_back():
    driver = Driver(small_config(profile="radix-offload", num_blocks=4000, block_size=1, offload_after_s=2.0))
    driver.request(1000, 24, session_id="chat")
    driver.run()
    driver.idle(10.0)
    driver.engine.offload_idle(driver.now)
    seq = driver.request(1000 + 24 + 100, 8, session_id="chat")
    driver.step()
    stats = driver.engine.stats
    assert stats["offload_store_blocks"] >= 1000  # one-token pages moved to the host tier
    assert stats["swap_in_blocks"] >= 1000 and seq.swapped_in
    assert seq.hit_tokens >= 1000
