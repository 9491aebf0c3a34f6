"""The harness's verdict details and observed lines are messages: Chinese pages render them in
Chinese (no English words beyond units, metric and product names), while the English `detail`
the API, the CLI and the logs read stays the sentence it was (issue 37 item 2)."""

from __future__ import annotations

import pytest
from django.utils import translation

from benchmarks import presentation
from benchmarks.harness.cache_model import SLOT_RESIDENT, CacheModel
from benchmarks.harness.queueing import queue_wait_verdict
from benchmarks.harness.reuse import reuse_share
from benchmarks.harness.workloads.common import errors_verdict, kv_verdicts
from benchmarks.result import LoadPoint
from benchmarks.verdicts import detail_of
from selection.i18n import message_text
from tests.e2e.pagechecks import english_words

# metric names and identifiers a detail quotes as the engine exports them
METRICS = ("vllm:request_queue_time_seconds", "llamacpp:prompt_tokens_total", "vllm", "llama-server")


def chinese(value) -> str:
    with translation.override("zh-hans"):
        return str(message_text(value))


def english_in(text: str) -> list[str]:
    return english_words(text, METRICS)


def assert_chinese(verdict: dict) -> str:
    """The verdict's detail in Chinese, checked to hold no English words; returns it."""
    assert "detail_message" in verdict, verdict["detail"]
    text = chinese(detail_of(verdict))
    assert text != verdict["detail"] and english_in(text) == [], text
    return text


def test_queue_wait_details_render_in_chinese_and_keep_their_english_text():
    figures = {"metric": "vllm:request_queue_time_seconds", "n": 40, "mean_ms": 12.5, "p95_ms": 31.0}
    judged = queue_wait_verdict({**figures, "p95_bounds_ms": [25.0, 50.0]}, 200.0)
    assert judged["detail"] == (
        "queue wait p95 31.0 ms (its histogram bucket 25–50 ms), mean 12.5 ms, n=40 requests "
        "(vllm:request_queue_time_seconds) vs <= 100 ms (50% of the 200 ms TTFT budget)"
    )
    text = assert_chinese(judged)
    assert "31.0 ms" in text and "25–50 ms" in text and "50%" in text
    straddling = queue_wait_verdict({**figures, "p95_bounds_ms": [50.0, 250.0]}, 200.0)
    assert straddling["detail"].endswith(": the limit falls inside the bucket that holds the p95")
    assert_chinese(straddling)
    assert_chinese(queue_wait_verdict({**figures, "n": 3, "p95_bounds_ms": [25.0, 50.0]}, 200.0))
    assert_chinese(queue_wait_verdict(None, 200.0))


@pytest.mark.parametrize(
    "after, cache_model, expected",
    [
        (
            {"running": 0, "waiting": 0, "kv_usage_ratio": 0.01},
            None,
            ["0 running, 0 waiting 1.5 s after the load", "KV usage 0.010 vs baseline 0.000 (tolerance 0.02)"],
        ),
        (
            {"running": 1, "waiting": 2, "kv_usage_ratio": 0.2},
            CacheModel(SLOT_RESIDENT, source="https://example.org/llama.cpp", engine="llama.cpp (llama-server)"),
            [
                "1 running, 2 waiting 1.5 s after the load",
                "not applicable: llama.cpp (llama-server) keeps each slot's last prompt in its KV cache for reuse "
                "until another request takes the slot, so KV usage stays up after requests end by design "
                "(https://example.org/llama.cpp); observed: KV usage 0.200 vs baseline 0.000 (tolerance 0.02)",
            ],
        ),
    ],
)
def test_what_the_aborts_left_behind_renders_in_chinese(after, cache_model, expected):
    verdicts = kv_verdicts({"kv_usage_ratio": 0.0}, {"after": after, "waited_s": 1.5}, cache_model)
    assert [v["detail"] for v in verdicts] == expected
    for judged in verdicts:
        assert_chinese(judged)


def test_the_errors_verdict_and_reuse_evidence_render_in_chinese():
    point = LoadPoint(label="c=4", concurrency=4, requests_completed=40, requests_failed=0)
    judged = errors_verdict([point])
    assert judged["detail"] == "no failed requests of 40"
    assert_chinese(judged)
    share = reuse_share({"counter_hits": 1200.0, "counter_queries": 2000.0, "requests": 10}, "vllm")
    assert share["detail"] == "the engine's prefix-cache counters (vllm): 1,200 of 2,000 queried tokens hit"
    assert english_in(chinese(share["message"])) == []


def test_an_observed_line_written_as_a_message_is_shown_in_the_pages_language():
    share = reuse_share({"counter_hits": 5.0, "counter_queries": 10.0, "requests": 2})
    metadata = {"observed": {"line": share["detail"], "line_message": share["message"].to_dict()}}
    with translation.override("zh-hans"):
        shown = presentation.observed_line(metadata, True, message_text)
    assert shown.startswith("SIMULATED — ") and english_in(shown) == []
    assert presentation.observed_line(metadata, False) == share["detail"]  # English without a translator
    assert presentation.observed_line({"observed": {"line": "held 3.0 of 4"}}, False, message_text) == "held 3.0 of 4"
