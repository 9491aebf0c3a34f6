"""The OpenAI-compatible HTTP surface, driven with an aiohttp client against an in-process server."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.request_record import RequestSpec
from benchmarks.simulator.config import SimConfig, SimConfigError
from benchmarks.simulator.engine_streams import SHAPES
from benchmarks.simulator.server import start_server
from benchmarks.simulator.tokens import detokenize, reference_output, render_chat, tokenize

SYSTEM = " ".join(f"rule{i}" for i in range(120))  # 120 words: 7 full blocks with the role marker


def _config(**changes) -> SimConfig:
    values = dict(num_blocks=600, max_model_len=4096, time_scale=200.0)
    values.update(changes)
    return SimConfig(**values)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _sse(response: aiohttp.ClientResponse) -> list:
    events = []
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_chat_streams_sse_with_usage_and_metrics_use_vllm_names():
    async def scenario():
        server = await start_server(_config())
        try:
            async with aiohttp.ClientSession() as client:
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "summarise the rules"}]
                body = {
                    "model": "x",
                    "messages": messages,
                    "max_tokens": 12,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                async with client.post(server.url + "/v1/chat/completions", json=body) as response:
                    assert response.status == 200
                    assert response.headers["Content-Type"].startswith("text/event-stream")
                    assert response.headers["X-Kvsim-Evidence"] == "SIMULATED"
                    events = await _sse(response)
                async with client.get(server.url + "/metrics") as response:
                    metrics = await response.text()
            return events, metrics, messages
        finally:
            await server.stop()

    events, metrics, messages = run(scenario())
    assert events[-1] == "[DONE]"
    usage_event = events[-2]
    assert usage_event["choices"] == [] and usage_event["usage"]["completion_tokens"] == 12
    prompt_ids = tokenize(render_chat(messages))
    assert usage_event["usage"]["prompt_tokens"] == len(prompt_ids)
    chunks = events[:-2]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == detokenize(reference_output(prompt_ids, 12))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    # vLLM's current names plus the kvsim series, scraped as Prometheus text
    assert _metric(metrics, "vllm:prefix_cache_queries_total") == len(prompt_ids)
    assert _metric(metrics, "vllm:generation_tokens_total") == 12
    assert _metric(metrics, "vllm:time_to_first_token_seconds_count") == 1
    assert _metric(metrics, "vllm:num_requests_running") == 0
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:num_requests_waiting",
        "vllm:inter_token_latency_seconds_count",
        "kvsim:fragmentation_ratio",
        "kvsim:cpu_blocks",
        "kvsim:swap_in_blocks_total",
    ):
        _metric(metrics, name)
    assert 'kvsim_info{evidence="SIMULATED"' in metrics


def test_completions_models_tokenize_health_and_prefix_hits():
    async def scenario():
        server = await start_server(_config())
        try:
            async with aiohttp.ClientSession() as client:
                assert (await client.get(server.url + "/health")).status == 200
                models = await (await client.get(server.url + "/v1/models")).json()
                tokens = await (await client.post(server.url + "/tokenize", json={"prompt": "a b  c"})).json()
                results = []
                for suffix in ("first question", "second question"):
                    response = await client.post(
                        server.url + "/v1/completions", json={"prompt": SYSTEM + " " + suffix, "max_tokens": 5}
                    )
                    results.append(await response.json())
                bad = await client.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": -1})
                return models, tokens, results, bad.status, await bad.json()
        finally:
            await server.stop()

    models, tokens, results, bad_status, bad_body = run(scenario())
    assert models["data"][0]["id"] == "kvsim-llama-3.1-8b" and models["data"][0]["max_model_len"] == 4096
    assert tokens["count"] == 3 and tokens["tokens"] == tokenize("a b c")
    first, second = results
    assert first["object"] == "text_completion" and first["choices"][0]["finish_reason"] == "length"
    assert len(first["choices"][0]["text"].split()) == 5
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 112  # 120 shared words -> 7 full blocks
    assert bad_status == 400 and "max_tokens" in bad_body["error"]["message"]


def test_multi_turn_continuation_check_detects_the_corruption_fault():
    async def conversation(corrupt: bool):
        server = await start_server(
            _config(profile="paged-offload", offload_after_s=1.0, fault_corrupt_swapped_in=corrupt)
        )
        try:
            async with aiohttp.ClientSession() as client:
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]
                first = await (
                    await client.post(
                        server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 20}
                    )
                ).json()
                await asyncio.sleep(0.05)  # 10 simulated seconds idle: the session is offloaded
                messages += [
                    {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                    {"role": "user", "content": "and then"},
                ]
                second = await (
                    await client.post(
                        server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 10}
                    )
                ).json()
                swapped = server.engine.stats["swap_in_blocks"]
            return second, messages, swapped
        finally:
            await server.stop()

    for corrupt in (False, True):
        second, messages, swapped = run(conversation(corrupt))
        assert swapped > 0
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > len(
            tokenize(SYSTEM)
        )  # the history was reused
        expected = reference_output(tokenize(render_chat(messages)), 10)
        matches = second["kvsim"]["token_ids"] == expected
        assert matches is (not corrupt)


def test_fault_knobs_drop_oom_crash_and_429():
    async def scenario():
        results = {}
        server = await start_server(_config(fault_drop_after_tokens=3))
        try:
            async with aiohttp.ClientSession() as client:
                response = await client.post(
                    server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 50, "stream": True}
                )
                with pytest.raises(aiohttp.ClientPayloadError):
                    await response.read()
                results["aborted"] = server.engine.stats["requests_aborted"]
        finally:
            await server.stop()
        server = await start_server(_config(fault_oom_every=2))
        try:
            async with aiohttp.ClientSession() as client:
                statuses = [
                    (await client.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})).status
                    for _ in range(4)
                ]
                results["oom"] = statuses
        finally:
            await server.stop()
        server = await start_server(_config(fault_crash_after_requests=1))
        try:
            async with aiohttp.ClientSession() as client:
                ok = await client.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
                crashed = await client.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
                await asyncio.sleep(0.05)
                try:
                    after = (await client.get(server.url + "/health")).status
                except aiohttp.ClientError:
                    after = "refused"
                results["crash"] = (ok.status, crashed.status, after)
        finally:
            await server.stop()
        server = await start_server(_config(reject_policy="429", max_waiting=0, max_num_seqs=1, time_scale=1.0))
        try:
            async with aiohttp.ClientSession() as client:
                body = {"prompt": "hi", "max_tokens": 3}
                responses = await asyncio.gather(
                    *(client.post(server.url + "/v1/completions", json=body) for _ in range(5))
                )
                results["429"] = sorted(r.status for r in responses)
        finally:
            await server.stop()
        return results

    results = run(scenario())
    assert results["aborted"] == 1
    assert results["oom"] == [200, 500, 200, 500]
    assert results["crash"][:2] == (200, 503) and results["crash"][2] in (503, "refused")
    assert 429 in results["429"] and 200 in results["429"]


def test_time_scale_runs_faster_than_simulated_time():
    async def scenario():
        server = await start_server(_config(time_scale=1000.0))
        try:
            async with aiohttp.ClientSession() as client:
                loop = asyncio.get_running_loop()
                started = loop.time()
                await (
                    await client.post(server.url + "/v1/completions", json={"prompt": "go", "max_tokens": 200})
                ).json()
                wall = loop.time() - started
                metrics = await (await client.get(server.url + "/metrics")).text()
            return wall, _metric(metrics, "vllm:e2e_request_latency_seconds_sum")
        finally:
            await server.stop()

    wall, simulated = run(scenario())
    assert simulated >= 200 * SimConfig().decode_step_s(0) * 0.99  # 199 decode steps + prefill, in simulated seconds
    assert wall < simulated / 5


@pytest.mark.slow
def test_streams_to_a_thousand_concurrent_clients():
    async def scenario():
        server = await start_server(_config(num_blocks=4000, time_scale=20.0))
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:

                async def one(i: int) -> int:
                    body = {
                        "prompt": f"client {i} says hello",
                        "max_tokens": 8,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    }
                    async with client.post(server.url + "/v1/completions", json=body) as response:
                        events = await _sse(response)
                    return events[-2]["usage"]["completion_tokens"]

                counts = await asyncio.gather(*(one(i) for i in range(1000)))
                return counts, server.engine.peak_running
        finally:
            await server.stop()

    counts, peak = asyncio.run(asyncio.wait_for(scenario(), 150))
    assert counts == [8] * 1000
    assert peak == 256  # max_num_seqs caps the batch; the rest queue and still stream


def test_server_thread_serves_synchronous_callers():
    import urllib.request

    from benchmarks.simulator.server import ServerThread

    with ServerThread(_config()) as server:
        request = urllib.request.Request(
            server.url + "/v1/completions",
            data=json.dumps({"prompt": "a b", "max_tokens": 3}).encode(),
            headers={"Content-Type": "application/json"},
        )
        body = json.loads(urllib.request.urlopen(request, timeout=10).read())
        port = server.port
    assert body["usage"]["completion_tokens"] == 3 and port > 0


@pytest.mark.parametrize("shape", SHAPES)
def test_streams_in_each_engines_shape_and_the_harness_reads_them(shape):
    async def scenario():
        server = await start_server(_config(stream_shape=shape))
        try:
            async with aiohttp.ClientSession() as session:
                body = {
                    "model": "x",
                    "messages": [{"role": "user", "content": "hello there"}],
                    "max_tokens": 6,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                async with session.post(server.url + "/v1/chat/completions", json=body) as response:
                    raw = await response.read()
            async with OpenAIClient(server.url, "x") as client:
                record = await client.send(RequestSpec(prompt="hello there", max_tokens=6))
            return raw, record
        finally:
            await server.stop()

    raw, record = run(scenario())
    blocks = [block for block in raw.split(b"\n\n") if block]
    assert blocks[-1] == b"data: [DONE]"
    assert all(block.startswith(b"data:{" if shape == "tgi" else b"data: {") for block in blocks[:-1])
    assert (b'"role":"assistant","content":""' in blocks[0]) is (shape != "tgi")  # vLLM's and SGLang's opening chunk
    assert record.ok and record.output_tokens == 6 and record.finish_reason == "length" and record.chunk_times


def test_unknown_stream_shape_is_refused():
    with pytest.raises(SimConfigError, match="stream_shape"):
        _config(stream_shape="openai")


def test_cache_prompt_false_shares_no_prefix_as_llama_cpp_does():
    # llama.cpp's per-request `cache_prompt: false`: the same endpoint serves the prefix test's "off" run
    async def hits(cache_prompt) -> float:
        server = await start_server(_config())
        try:
            async with aiohttp.ClientSession() as client:
                for index in range(3):
                    body = {"model": "x", "prompt": SYSTEM + f" question {index}", "max_tokens": 2}
                    if cache_prompt is not None:
                        body["cache_prompt"] = cache_prompt
                    async with client.post(server.url + "/v1/completions", json=body) as response:
                        assert response.status == 200
                        await response.read()
            return server.engine.stats["prefix_hits"]
        finally:
            await server.stop()

    assert run(hits(None)) > 0 and run(hits(True)) > 0
    assert run(hits(False)) == 0
