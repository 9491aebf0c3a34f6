"""The context ladder on the simulator: the required length served, refused past max_model_len (the
engine's own error), and short traffic isolated by chunked prefill vs frozen without it."""

import asyncio

from benchmarks.harness import workloads as w
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import start_server

CONSTRAINTS = {"max_input_tokens": 32768, "peak_concurrency": 96, "avg_input_tokens": 256, "ttft_p95_ms": 500}


def run_on_simulator(config: SimConfig, params: dict) -> w.NormalizedResult:
    async def scenario():
        server = await start_server(config)
        try:
            target = w.Target(server.url, "kvsim", metrics_url=server.url + "/metrics", engine="simulator")
            return await w.run_test("long_context", target, params)
        finally:
            await server.stop()

    return asyncio.run(asyncio.wait_for(scenario(), 60))


def verdicts(result):
    return {v["name"]: v for v in result.verdicts}


def ladder_params(**changes) -> dict:
    params = w.plan("long_context", CONSTRAINTS) | {"rungs": [32768], "background_lead_s": 0.5}
    params["kv_capacity_tokens"] = SimConfig().total_blocks * SimConfig().block_size
    return params | changes


def test_required_length_served_with_short_traffic_isolated_by_chunked_prefill():
    result = run_on_simulator(SimConfig(max_num_batched_tokens=2048, time_scale=2.0), ladder_params())
    v = verdicts(result)
    assert v["largest_rung_succeeds"]["status"] == "pass" and v["largest_rung_succeeds"]["value"] == 32768
    isolated = v["short_traffic_isolated[32K with_background]"]
    assert isolated["status"] == "pass" and isolated["n"] >= 20 and isolated["interval"], isolated
    alone = result.points[0]
    # the long request's own KV: about its prompt plus output, from the usage ratio x capacity
    assert 32768 <= alone.extra["kv_tokens_per_request"] <= 33000
    observed = result.metadata["observed"]
    assert observed["largest_successful_rung"] == 32768 and "short requests before -> during" in observed["line"]


def test_short_traffic_frozen_by_an_unchunked_long_prefill_fails_the_rung():
    # half speed (a 16K prefill freezes decode for ~1.4 s of wall time) and a longer lead, so the
    # short streams are decoding when it freezes them, and a busy box cannot let the engine skip it
    params = ladder_params(rungs=[16384], required_tokens=16384, background_lead_s=1.0, background_concurrency=24)
    result = run_on_simulator(SimConfig(max_num_batched_tokens=65536, time_scale=0.5), params)
    isolated = verdicts(result)["short_traffic_isolated[16K with_background]"]
    assert isolated["status"] == "fail" and isolated["value"] > 500 and isolated["n"] >= 20, isolated


def test_a_rung_past_max_model_len_fails_with_the_engines_error():
    params = ladder_params(rungs=[16384, 32768], with_background=False)
    result = run_on_simulator(SimConfig(max_model_len=20000, time_scale=4.0), params)
    largest = verdicts(result)["largest_rung_succeeds"]
    assert largest["status"] == "fail" and largest["value"] == 16384 and largest["threshold"] == 32768
    assert "exceeds max_model_len 20000" in largest["detail"] and "HTTP 400" in largest["detail"]
    assert result.metadata["observed"]["failed_rung"] == 32768
    assert "exceeds max_model_len" in result.points[-1].extra["errors"][0]
