import asyncio

import pytest
from aiohttp import web

from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.completion_payloads import classify_error_text
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.simulator.mock_server import MockConfig

from .conftest import run


@pytest.fixture(params=["raw", "raw-user-clock", "aiohttp"])
def transport(request):
    """Every client behaviour is checked on each transport: the lean client with kernel receive
    stamps (Linux) and with asyncio's own transport, and aiohttp."""
    return {
        "raw": {"transport": "raw"},
        "raw-user-clock": {"transport": "raw", "kernel_timestamps": False},
        "aiohttp": {"transport": "aiohttp"},
    }[request.param]


def send(server, spec, **client_kwargs):
    async def go():
        async with OpenAIClient(server.url, "m", **client_kwargs) as client:
            return await client.send(spec)

    return go()


def test_chat_stream_records_usage_timing_and_definitions(with_mock, transport):
    record = with_mock(
        MockConfig(ttft_s=0.03, itl_s=0.005),
        lambda s: send(s, RequestSpec(prompt="a b c d", max_tokens=6), keep_text=True, **transport),
    )
    assert record.ok and record.done_marker and record.usage_reported
    assert (record.prompt_tokens, record.output_tokens, record.finish_reason) == (4, 6, "length")
    assert len(record.chunk_times) == 6 and record.text.split() == record.text.split()[:6]
    assert 30 <= record.ttft_ms < 80
    assert record.tpot_ms == pytest.approx((record.e2e_ms - record.ttft_ms) / 5)
    assert len(record.itl_ms()) == 5 and 2 < sum(record.itl_ms()) / 5 < 30


def test_completions_api_and_max_completion_tokens_field(with_mock, transport):
    spec = RequestSpec(api="completions", prompt="x y", max_tokens=3, max_tokens_field="max_completion_tokens")
    assert "max_tokens" not in spec.body("m") and spec.body("m")["max_completion_tokens"] == 3
    record = with_mock(None, lambda s: send(s, spec, **transport))
    assert record.ok and record.output_tokens == 3


def test_body_omits_ignore_eos_when_none_and_sends_usage_option():
    body = RequestSpec(prompt="p", ignore_eos=None, temperature=0.0, seed=1).body("m")
    assert "ignore_eos" not in body and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "p"}] and body["temperature"] == 0.0
    with pytest.raises(ValueError, match="RequestSpec.prompt"):
        RequestSpec(api="completions").body("m")


def test_stream_without_done_marker_still_completes(with_mock, transport):
    record = with_mock(
        MockConfig(send_done=False), lambda s: send(s, RequestSpec(prompt="a", max_tokens=4), **transport)
    )
    assert record.ok and not record.done_marker and record.output_tokens == 4


def test_without_usage_tokens_come_from_chunks(with_mock, transport):
    spec = RequestSpec(prompt="a", max_tokens=5, include_usage=False)
    record = with_mock(None, lambda s: send(s, spec, **transport))
    assert record.ok and not record.usage_reported and record.output_tokens == 5 and record.prompt_tokens is None


def test_usage_wins_over_chunk_count_and_multi_token_chunks_split_itl(with_mock, transport):
    record = with_mock(
        MockConfig(chunk_tokens=3, itl_s=0.003, usage_in_chunks=True),
        lambda s: send(s, RequestSpec(prompt="a", max_tokens=9), **transport),
    )
    assert record.chunk_tokens == [3, 3, 3] and record.output_tokens == 9
    assert len(record.itl_ms()) == 6  # two later chunks of 3 tokens each count 3 gaps


def test_non_streaming_has_e2e_but_no_ttft(with_mock, transport):
    record = with_mock(
        MockConfig(ttft_s=0.01), lambda s: send(s, RequestSpec(prompt="a", max_tokens=4, stream=False), **transport)
    )
    assert record.ok and record.output_tokens == 4 and record.e2e_ms > 10
    assert record.ttft_ms is None and record.tpot_ms is None


@pytest.mark.parametrize(
    "config, error_class",
    [
        (MockConfig(fail_status=503, fail_body="overloaded"), "http"),
        (MockConfig(fail_status=500, fail_body="CUDA out of memory"), "oom"),
        (MockConfig(oom_in_stream_after=2), "oom"),
        (MockConfig(drop_after=2), "disconnect"),
    ],
)
def test_errors_are_classified(with_mock, config, error_class, transport):
    record = with_mock(config, lambda s: send(s, RequestSpec(prompt="a", max_tokens=6), **transport))
    assert not record.ok and record.error_class == error_class and record.error


def test_read_timeout_is_classified(with_mock, transport):
    record = with_mock(
        MockConfig(ttft_s=2.0),
        lambda s: send(s, RequestSpec(prompt="a", max_tokens=2), request_timeout_s=0.2, **transport),
    )
    assert record.error_class == "timeout"


def test_connection_refused_is_classified(transport):
    async def go():
        async with OpenAIClient("http://127.0.0.1:1", "m", connect_timeout_s=1, **transport) as client:
            return await client.send(RequestSpec(prompt="a"))

    assert run(go()).error_class == "connect"


def test_deliberate_abort_closes_the_stream_and_the_engine_sees_it(with_mock, transport):
    async def go(server):
        async with OpenAIClient(server.url, "m", **transport) as client:
            record = await client.send(RequestSpec(prompt="a", max_tokens=200, abort_after_tokens=3))
            await asyncio.sleep(0.2)
            return record, server.state.running, server.state.aborted

    record, running, aborted = with_mock(MockConfig(itl_s=0.01), go)
    # Tokens that arrived in the same network read as the third are counted too (they were received),
    # so a loaded machine can see a few more than 3; the stream must still end long before 200.
    assert record.aborted and record.ok and 3 <= record.output_tokens < 50
    assert running == 0 and aborted == 1


def test_api_key_header_is_sent_and_never_shown(transport):
    seen = {}

    async def handler(request):
        seen["auth"] = request.headers.get("Authorization")
        return web.json_response(
            {
                "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            }
        )

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            client = OpenAIClient(f"http://127.0.0.1:{port}/v1", "m", api_key="sk-secret", **transport)
            async with client:
                record = await client.send(RequestSpec(prompt="a", stream=False))
            return record, repr(client)
        finally:
            await runner.cleanup()

    record, text = run(go())
    assert record.ok and seen["auth"] == "Bearer sk-secret" and "sk-secret" not in text


def test_oom_text_classifier():
    assert classify_error_text("RuntimeError: CUDA out of memory. Tried to allocate") == "oom"
    assert classify_error_text("failed to find free space in the KV cache") == "oom"
    assert classify_error_text("bad request: temperature") == "stream_error"


def test_derived_metrics_from_a_synthetic_record():
    record = RequestRecord(
        send_time=10.0,
        first_token_time=10.05,
        end_time=10.25,
        chunk_times=[10.05, 10.10, 10.20],
        chunk_tokens=[1, 1, 2],
        output_tokens=4,
    )
    assert record.ttft_ms == pytest.approx(50.0)
    assert record.e2e_ms == pytest.approx(250.0)
    assert record.tpot_ms == pytest.approx(200.0 / 3)
    assert record.itl_ms() == pytest.approx([50.0, 50.0, 50.0])


def test_raw_transport_parses_chunked_and_length_bodies_split_anywhere():
    """The protocol client against hand-written responses, delivered one byte at a time."""
    from benchmarks.harness.rawhttp import _ResponseProtocol

    events = b'data: {"choices":[{"delta":{"content":"a"},"finish_reason":null}]}\n\ndata: [DONE]\n\n'
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"%x;ext=1\r\n" % len(part) + part + b"\r\n" for part in (events[:10], events[10:]))
        + b"0\r\n\r\n"
    )
    length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(events) + events

    async def go(raw):
        loop = asyncio.get_running_loop()
        protocol = _ResponseProtocol()
        received = []
        done = loop.create_future()
        protocol.on_body, protocol.done, protocol.state = (lambda p, now, data: received.append(data)), done, "head"
        for i in range(len(raw)):
            protocol.data_received(raw[i : i + 1])
        assert done.done()
        return b"".join(received), protocol.keep_alive

    assert run(go(chunked)) == (events, True)
    assert run(go(length)) == (events, False)


def test_raw_transport_refuses_https():
    with pytest.raises(ValueError, match="transport"):
        OpenAIClient("https://example.com", "m", transport="raw")


def test_llama_cpp_timings_give_the_cached_prompt_tokens(with_mock, transport):
    """llama.cpp states no cached tokens in its usage, but each response's `timings.prompt_n` is the
    prompt tokens it processed: the rest came from the slot's cache (issue 34, item 2)."""

    async def twice(server):
        async with OpenAIClient(server.url, "m", **transport) as client:
            words = " ".join(f"p{i}" for i in range(40))
            first = await client.send(RequestSpec(prompt=words + " tail", max_tokens=2))
            again = await client.send(RequestSpec(prompt=words + " other", max_tokens=2))
            return first, again

    first, again = with_mock(MockConfig(llamacpp_timings=True), twice)
    assert first.prompt_processed == first.prompt_tokens == 41 and first.cached_tokens == 0
    assert again.cached_source == "timings" and again.prompt_processed == 41 - 32 and again.cached_tokens == 32
    # an engine's usage field wins over the timings
    usage = with_mock(MockConfig(), lambda s: send(s, RequestSpec(prompt="a b", max_tokens=2), **transport))
    assert usage.cached_source == "usage" and usage.prompt_processed is None


def test_a_complete_response_reads_usage_details_and_timings(transport):
    async def handler(request):
        return web.json_response(
            {
                "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 956, "completion_tokens": 1},
                "timings": {"prompt_n": 951, "predicted_n": 1},
            }
        )

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with OpenAIClient(f"http://127.0.0.1:{port}", "m", **transport) as client:
                return await client.send(RequestSpec(prompt="a", stream=False))
        finally:
            await runner.cleanup()

    record = run(go())
    assert record.ok and (record.prompt_processed, record.cached_tokens, record.cached_source) == (951, 5, "timings")
