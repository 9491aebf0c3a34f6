"""The fidelity benchmark's reference clock: the wire mock's own TTFT must be what it was told,
and a client's TTFT must be comparable with it request by request."""

import asyncio
import json
import urllib.request

import pytest

from benchmarks.harness import wireclock
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.request_record import RequestSpec
from benchmarks.perf.wire_mock import WireMockConfig, WireMockServer

pytestmark = pytest.mark.skipif(not wireclock.SUPPORTED, reason="kernel receive stamps are Linux-only")


def serve_and_load(config, specs, **client_kwargs):
    async def main():
        server = WireMockServer(config)
        server.start(asyncio.get_running_loop())
        try:
            async with OpenAIClient(server.url, "m", **client_kwargs) as client:
                records = await asyncio.gather(*(client.send(spec) for spec in specs))
            health = await asyncio.to_thread(
                lambda: json.load(urllib.request.urlopen(server.url + "/health", timeout=5))
            )
            return records, dict(server.true_times), health, server.unstamped
        finally:
            server.close()

    return asyncio.run(main())


def test_streams_the_requested_tokens_and_records_wire_times_per_request():
    specs = [
        RequestSpec(prompt=f"p{i}", max_tokens=5, request_id=f"r{i}", extra_body={"kvselect_request_id": f"r{i}"})
        for i in range(6)
    ]
    records, truth, health, unstamped = serve_and_load(WireMockConfig(ttft_s=0.04, itl_s=0.005), specs)
    assert health == {"status": "ok"}
    assert all(r.ok and r.output_tokens == 5 and r.done_marker and r.finish_reason == "length" for r in records)
    assert sorted(truth) == [f"r{i}" for i in range(6)]
    for record in records:
        arrival, first_sent, last_sent = truth[record.request_id]
        assert first_sent <= last_sent <= record.end_time + 0.0005
        true_ttft_ms = (first_sent - arrival) * 1000
        assert 40 <= true_ttft_ms < 60  # it never sends early; late only by its own timer lag
        # both clocks are CLOCK_MONOTONIC: the request reached the mock after the client sent it,
        # and the client saw the first token after the mock sent it
        assert record.send_time <= arrival + 0.0005 and first_sent <= record.first_token_time + 0.0005
        assert abs(record.ttft_ms - true_ttft_ms) < 5
    assert unstamped <= 6  # the first packets after stamping is switched on may come unstamped


def test_completions_api_and_unknown_paths():
    spec = RequestSpec(api="completions", prompt="x", max_tokens=3, extra_body={"kvselect_request_id": "c"})
    records, truth, _, _ = serve_and_load(WireMockConfig(ttft_s=0.01, itl_s=0.001), [spec])
    assert records[0].ok and records[0].output_tokens == 3 and "c" in truth
