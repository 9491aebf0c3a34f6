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
from benchmarks.harness.workloads.common import RESET_BY_PATH, errors_verdict, kv_verdicts
from benchmarks.result import LoadPoint
from benchmarks.verdicts import detail_of
from selection.i18n import message_text
from tests.e2e.pagechecks import english_words

# metric names, request fields and product names a detail quotes as the engine spells them
METRICS = (
    "vllm:request_queue_time_seconds",
    "llamacpp:prompt_tokens_total",
    "cache_prompt: false",
    "vllm",
    "llama-server",
)


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


def test_the_prefix_tests_memory_verdicts_and_observed_line_render_in_chinese():
    from benchmarks.harness.workloads import prefix_reuse as p

    on, off = [100.0 + i for i in range(10)], [400.0 + i for i in range(10)]
    judged = p._kv_vs_off(on, off, True)
    assert judged["detail"].startswith(
        "KV held with caching on 108 vs off 408 tokens (p90 of 10 and 10 samples; peaks 109 vs 409;"
    )
    assert_chinese(judged)
    assert_chinese(p._kv_vs_off(on, None, False))
    resident = p._unjudged_when_resident(judged, {"prefix_on": (90.0, 120.0)})
    assert "prefix_on: 90 tokens still held after the load (peak 120)" in resident["detail"]
    assert_chinese(resident)
    need = {"tokens": 5000.0, "requests": 8, "prompt_tokens": 4000, "output_tokens": 1000, "capped_by_pool": False}
    seen = {
        "per_slot_cache": False,
        "off_run": True,
        "kv_over_need_on": 0.4,
        "kv_over_need_off": 0.95,
        "kv_peak_on_tokens": 2000.0,
        "need_at_peak_on": need,
        "memory_saving": 0.58,
        "theoretical_saving": 0.7,
        "reuse_on": 0.6,
        "ttft_p50_on_ms": 40.0,
        "ttft_p50_off_ms": None,
        "throughput_on_tok_s": 1234.0,
        "throughput_off_tok_s": 1000.0,
        "requests_on": 64,
        "requests_off": 64,
        "cache_state": "POST /reset_prefix_cache",
        "cache_state_message": RESET_BY_PATH["/reset_prefix_cache"],
    }
    line = p._observed_line(seen, None)
    assert str(line) == (
        "with caching on the requests in flight held 40% of the KV they need without sharing (at the peak 2,000 of "
        "5,000 tokens for the 8 requests in flight at the peak (prompts 4,000 + outputs so far 1,000)), with caching "
        "off 95% of theirs: caching saved 58% of the KV (at most 70% with the prefix held once); 60% of the prompt "
        "tokens came from the cache; TTFT p50 on 40 ms vs off n/a; throughput on 1,234 tok/s vs off 1,000 tok/s "
        "(n=64/64); each run from an emptied cache (POST /reset_prefix_cache)"
    )
    shown = chinese(line)
    assert english_in(shown) == [] and "无数据" in shown, shown


def test_names_inside_sentences_have_chinese_names():
    from benchmarks.harness.metrics import HISTOGRAMS
    from benchmarks.harness.queueing import histogram_name
    from benchmarks.harness.reuse import ENGINE_NAMES
    from benchmarks.harness.workloads.prefix_reuse import RUN_NAMES
    from benchmarks.harness.workloads.stress import GROUP_NAMES
    from selection.domain.messages import Message

    names = [*GROUP_NAMES.values(), *RUN_NAMES.values(), *RESET_BY_PATH.values()]
    names += [histogram_name(metric) for metrics in HISTOGRAMS["queue_wait"].values() for metric in metrics]
    names += [Message(engine, context="engine") for engine in ENGINE_NAMES]
    for name in names:
        shown = chinese(name)
        assert shown != name.msgid and english_in(shown) == [], (name, shown)


def test_the_stress_tests_verdict_and_observed_line_render_in_chinese():
    from benchmarks.harness.workloads.stress import CONCURRENCY_HELD, _stress_observed
    from benchmarks.result import Stats
    from selection.domain.messages import Message

    point = LoadPoint(label="c=8", concurrency=8, achieved_concurrency=7.5, requests_completed=60, requests_failed=1)
    point.ttft_ms = Stats(p95=85.0)
    point.extra = {"kv_usage_ratio_max": 0.42, "queue_wait": {"p95_ms": 12.0, "n": 61}}
    short = LoadPoint(label="short", requests_completed=40, requests_failed=0)
    short.ttft_ms = Stats(p95=70.0)
    observed = _stress_observed(point, [short], None, 8)
    assert observed["line"] == (
        "held 7.5 of 8; TTFT p95 85 ms; 1 of 61 failed; KV peak 42%; queue wait p95 12 ms (engine, n=61); "
        "short TTFT p95 70 ms (n=40) (n=61)"
    )
    with translation.override("zh-hans"):
        shown = presentation.observed_line({"observed": observed}, False, message_text)
    assert english_in(shown) == [] and "短请求" in shown, shown
    assert str(Message(CONCURRENCY_HELD, {"held": "7.5", "concurrency": 8})) == "held 7.5 of 8 on average"
    assert english_in(chinese(Message(CONCURRENCY_HELD, {"held": "7.5", "concurrency": 8}))) == []


def test_the_swap_tests_verdicts_and_observed_line_render_in_chinese():
    from benchmarks.harness import swap
    from benchmarks.harness.workloads import swap_recovery as s

    continuation = {
        "tolerance_token": 32,
        "compared": 6,
        "reference": "POST /reset_prefix_cache",
        "identical": 5,
        "late_divergence": 1,
        "failed": 0,
        "failed_sessions": [],
        "first_divergence_min": 40,
        "matching_fraction_mean": 0.97,
    }
    judged = s._continuation_verdict(continuation, True)
    assert judged["detail"].startswith(
        "5 of 6 resumed sessions identical to the reference (POST /reset_prefix_cache), 1 diverged late, 0 failed; "
        "first divergence at token 40, matching 97% on average; greedy decoding"
    )
    assert_chinese(judged)
    never = {
        "warm_count": 2,
        "sessions": 2,
        "ttft_ms": {"p50": 30.0},
        "warm_ttft_p50_ms": 28.0,
        "warm_cached_share": 0.9,
        "per_session": [{"cached_share": 0.88}, {"cached_share": 0.91}],
    }
    judged = s._never_swap_verdict(never, True)
    assert judged["detail"] == (
        "2 of 2 never-swap sessions (kept active, resumed last) came back warm: TTFT p50 30 ms vs warm 28 ms, "
        "cached share 0.88+ vs warm 0.90"
    )
    assert_chinese(judged)
    released = s._released_verdict({"kv_usage_ratio": 0.0}, {"after": {"kv_usage_ratio": 0.01}, "waited_s": 2.0}, None)
    assert released["detail"] == (
        "KV usage 0.010 vs baseline 0.000 (tolerance 0.02) 2.0 s after every session closed; 0 requests still "
        "running or waiting"
    )
    assert_chinese(released)
    resume = {
        "resume_ttft_ms": {"p50": 80.0, "n": 24},
        "recompute_ttft_ms": {"p50": 200.0},
        "warm_ttft_ms": {"p50": 30.0},
        "recompute_method": "POST /reset_prefix_cache",
        "resume_over_recompute": {"value": 0.4},
    }
    figures = s.Message(
        s.RESUME_FIGURES,
        {
            "resume": "80 ms",
            "recompute": "200 ms",
            "warm": "30 ms",
            "method": s.method_message("POST /reset_prefix_cache"),
        },
    )
    ratio = {"value": 0.4, "interval": [0.35, 0.45], "n": 24}
    judged = s._resume_verdict(True, ratio, figures, 0.8)
    assert judged["detail"] == (
        "resume TTFT p50 80 ms vs recompute 200 ms vs warm 30 ms (recompute: POST /reset_prefix_cache): ratio 0.40 "
        "(95% CI 0.35–0.45, n=24) vs <= 0.8"
    )
    assert_chinese(judged)
    eviction = swap.observe_eviction([], [], {"pressure_start": {"swap_out": 0.0}, "resume_end": {"swap_out": 1e6}})
    assert eviction["how"] == ["offload/swap-out counter +1e+06"]
    eviction |= {"sessions": 8, "pressure_requests": 16, "preemptions": 0}
    observed = s._swap_observed_line(
        eviction,
        resume,
        continuation,
        {"sessions": 2, "warm_count": 2},
        {"kv_capacity_tokens": 4096, "idle_kv_tokens": 3000},
    )
    assert observed["line"] == (
        "offloaded the 8 idle sessions' KV (their histories needed 3000 of 4096 KV tokens; 16 pressure requests; "
        "preemptions +0); resume TTFT p50 80 ms vs warm 30 ms vs recompute 200 ms (n=24); continuation identical "
        "in 5 of 6; never-swap 2 of 2 warm"
    )
    with translation.override("zh-hans"):
        shown = presentation.observed_line({"observed": observed}, True, message_text)
        how = [message_text(m) for m in eviction["how_messages"]]
    assert english_in(shown) == [] and english_in(" ".join(how)) == [], (shown, how)


@pytest.mark.parametrize(
    "method",
    [
        "POST /reset_prefix_cache",
        "POST /flush_cache",
        "4 slots erased (POST /slots/{id}?action=erase)",
        "fresh slots: each of the 4 slots overwritten with an unrelated 16-token prompt",
        "none: the engine offers no cache reset",
    ],
)
def test_a_cache_reset_method_reads_back_as_its_message(method):
    from benchmarks.harness.workloads.common import reset_method

    message = reset_method({"method": method, "reset": True})
    assert str(message) == method and chinese(message) != method


def test_a_saturated_load_client_note_is_english_in_the_notes_and_chinese_on_the_page():
    from benchmarks.result import NormalizedResult
    from benchmarks.validation.worker import SATURATED
    from selection.domain.messages import Message

    result = NormalizedResult(tool="kvselect-harness", format="kvselect-harness", notes=["cancelled: partial data"])
    result.add_note(Message(SATURATED, {"load": "12.3", "cpus": 2}))
    assert result.notes[1] == (
        "The load client's machine was saturated (1-minute load average 12.3 on 2 CPUs): client timings may carry "
        "other work."
    )
    with translation.override("zh-hans"):
        shown = presentation.run_notes(result.notes, result.metadata, message_text)
    assert shown[0] == "cancelled: partial data" and english_in(shown[1]) == [] and "12.3" in shown[1], shown
