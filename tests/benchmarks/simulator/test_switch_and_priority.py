"""What the model_switch and isolation tests need from the simulator: priority scheduling (vLLM's
--scheduling-policy priority and the request's `priority` field) and POST /admin/restart."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from benchmarks.simulator.config import SimConfig, SimConfigError
from benchmarks.simulator.sequence import Sequence
from benchmarks.simulator.server import start_server

from .helpers import Driver, small_config


def _short_ttft_behind_longs(policy: str) -> float:
    """TTFT of short priority-0 requests arriving behind three long priority-10 ones."""
    driver = Driver(
        small_config(num_blocks=8000, max_model_len=16384, max_num_batched_tokens=2048, scheduling_policy=policy)
    )
    for _ in range(3):
        driver.count += 1
        seq = Sequence(
            driver.count, 12000, 8, driver.now, driver.space.keys(), priority=10 if policy == "priority" else 0
        )
        driver.engine.add(seq, driver.now)
    driver.step()  # the first long prefill is under way when the short ones arrive
    shorts = [driver.request(100, 8) for _ in range(4)]
    driver.run()
    return max(s.first_token_t - s.arrival for s in shorts)


def test_priority_policy_serves_the_important_requests_ahead_of_queued_long_prefills():
    fcfs, priority = _short_ttft_behind_longs("fcfs"), _short_ttft_behind_longs("priority")
    config = small_config()
    # fcfs: behind three 12K-token prefills (~18 steps of 2048 tokens); priority: the next step or two
    assert fcfs >= 15 * 2048 / config.prefill_rate
    assert priority <= 3 * 2048 / config.prefill_rate + 0.05
    with pytest.raises(SimConfigError, match="scheduling_policy"):
        SimConfig(scheduling_policy="fair")
    with pytest.raises(SimConfigError, match="restart_downtime_s"):
        SimConfig(restart_downtime_s=-1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _complete(http: aiohttp.ClientSession, url: str, **extra) -> aiohttp.ClientResponse:
    body = {"model": "m", "prompt": "hello there " * 40, "max_tokens": 4} | extra
    async with http.post(url + "/v1/completions", json=body) as response:
        await response.read()
        return response


def test_priority_field_is_refused_without_priority_scheduling_as_vllm_does():
    async def main():
        for policy, expected in (("fcfs", 400), ("priority", 200)):
            server = await start_server(
                SimConfig(num_blocks=600, max_model_len=4096, time_scale=200.0, scheduling_policy=policy)
            )
            try:
                async with aiohttp.ClientSession() as http:
                    assert (await _complete(http, server.url, priority=5)).status == expected
                    assert (await _complete(http, server.url, priority=0)).status == 200
            finally:
                await server.stop()

    run(main())


def test_admin_restart_applies_new_settings_clears_the_cache_and_rolls_back():
    async def main():
        config = SimConfig(num_blocks=600, max_model_len=4096, time_scale=200.0, restart_downtime_s=0.2)
        server = await start_server(config)
        try:
            async with aiohttp.ClientSession() as http:
                await _complete(http, server.url)
                assert server.engine.stats["prompt_tokens"] > 0
                async with http.post(
                    server.url + "/admin/restart", json={"config": {"kv_bytes_per_token": 262144}}
                ) as r:
                    assert r.status == 202 and (await r.json())["changed"] == ["kv_bytes_per_token"]
                async with http.get(server.url + "/health") as r:
                    assert r.status == 503  # down while it restarts
                held = asyncio.ensure_future(_complete(http, server.url))  # graceful: waits, then served
                assert (await held).status == 200
                assert server.state.restarts == 1 and server.state.config.kv_bytes_per_token == 262144
                assert server.engine.stats["prefix_hits"] == 0  # a new engine: nothing cached from before
                async with http.post(server.url + "/admin/restart", json={"config": {"time_scale": 1}}) as r:
                    assert r.status == 400 and "time_scale" in (await r.json())["error"]["message"]
                async with http.post(server.url + "/admin/restart", json={"config": {"profile": "nope"}}) as r:
                    assert r.status == 400 and "profile" in (await r.json())["error"]["message"]
                async with http.post(server.url + "/admin/restart", json={"config": {}, "graceful": False}) as r:
                    assert r.status == 202
                assert (await _complete(http, server.url)).status == 503  # abrupt: refused while down
                await asyncio.sleep(0.4)
                assert (await _complete(http, server.url)).status == 200
                # rolled back to the original settings, on the simulated GPU drawn at start
                assert server.state.config == config.with_(device=server.state.config.device)
        finally:
            await server.stop()

    run(main())
