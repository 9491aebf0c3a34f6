"""What the swap test needs from the simulator: a cache reset (vLLM's and SGLang's endpoints) and
the offload series of vLLM's CPU offloading connector where the engine has a CPU tier."""

from __future__ import annotations

import asyncio

import aiohttp

from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import start_server

PROMPT = " ".join(f"word{i}" for i in range(200))


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def _cached(client: aiohttp.ClientSession, url: str) -> int:
    body = {"model": "x", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    async with client.post(url + "/v1/completions", json=body) as response:
        return (await response.json())["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_reset_prefix_cache_and_flush_cache_make_the_next_request_recompute():
    async def scenario():
        server = await start_server(SimConfig(num_blocks=600, max_model_len=4096, time_scale=200.0))
        try:
            async with aiohttp.ClientSession() as client:
                assert await _cached(client, server.url) == 0
                assert await _cached(client, server.url) > 0  # the prefix cache holds it
                for path in ("/reset_prefix_cache", "/flush_cache"):
                    async with client.post(server.url + path) as response:
                        assert response.status == 200 and (await response.json())["reset"] is True
                    assert await _cached(client, server.url) == 0  # recomputed after the reset
                async with client.get(server.url + "/metrics") as response:
                    text = await response.text()
                assert _metric(text, "vllm:kv_offload_store_bytes_total") is None  # no CPU tier, no series
            server.engine.check_invariants()
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_offload_profile_exports_the_connector_series():
    async def scenario():
        config = SimConfig(profile="paged-offload", num_blocks=600, max_model_len=4096, time_scale=200.0)
        server = await start_server(config)
        try:
            async with aiohttp.ClientSession() as client:
                await _cached(client, server.url)
                server.engine.offload_idle(1e9)  # everything idle long enough moves to the CPU tier
                async with client.get(server.url + "/metrics") as response:
                    text = await response.text()
                stored = _metric(text, "vllm:kv_offload_store_bytes_total")
                assert stored and stored % config.block_bytes == 0
                assert _metric(text, "vllm:kv_offload_cpu_cache_usage_perc") > 0
                assert await _cached(client, server.url) > 0  # loaded back from the CPU tier
                async with client.get(server.url + "/metrics") as response:
                    assert _metric(await response.text(), "vllm:kv_offload_load_bytes_total") > 0
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))
