"""The figures held out of the scoring, and those scored with the client's lateness, are named in
words in both languages (never by their metric keys), with the reasons as the messages they were
written as."""

import re

import pytest
from django.utils import translation

from selection.domain.messages import Message
from selection.domain.scoring.base import json_safe
from selection.domain.scoring.inputs import CandidateEvidence, Metric, evidence_from_dict
from selection.domain.scoring.sentences import METRIC_NAMES, held_out_sentences
from selection.i18n import message_text
from selection.scoring.evidence import CLIENT_BOUND_RUN_BECAUSE, DERIVED_METRICS, LATENCIES, PACE_INDEPENDENT

SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
REASON = Message(
    CLIENT_BOUND_RUN_BECAUSE,
    {"test": Message("Long-run stability"), "run": "7", "points": "c=16", "reasons": "late sends"},
)


def evidence() -> CandidateEvidence:
    return CandidateEvidence(
        candidate="1",
        metrics={
            "ttft_p95_ms": Metric(900.0, client_bound=REASON),
            "tpot_p95_ms": Metric(40.0, client_bound=REASON),
            "sustainable_concurrency_per_gpu": Metric(8.0, client_bound=REASON),
        },
        held_out={"soak_drift_p99_ratio": REASON},
    )


def test_held_out_figures_are_named_in_words_in_english_and_chinese():
    held, late = held_out_sentences([evidence()], {"1": "vLLM"})
    assert str(held) == (
        "vLLM: Latency drift over the soak (p99, late against early) held out of the scoring: "
        "client-bound (Long-run stability run 7, c=16: late sends)."
    )
    assert str(late).startswith(
        "vLLM: Concurrency within the latency budget (per GPU), TPOT p95, TTFT p95 scored with the client's lateness"
    )
    with translation.override("zh-hans"):
        held_zh, late_zh = message_text(held), message_text(late)
    assert held_zh.startswith("vLLM：长稳测试中的延迟漂移（p99，后段对比前段） 未计入评分：受客户端限制（")
    assert late_zh.startswith("vLLM：延迟预算内的并发（每 GPU）、TPOT p95、TTFT p95 以客户端的延迟作为其区间计分")
    for text in (str(held), str(late), held_zh, late_zh):
        assert not SNAKE.search(text), text


def test_every_figure_the_scoring_can_hold_out_has_a_name():
    keys = {*DERIVED_METRICS, *LATENCIES, *PACE_INDEPENDENT, "sustainable_concurrency_per_gpu", "achieved_concurrency"}
    keys |= {"output_tokens_per_s_per_gpu", "kv_headroom_at_target"}
    assert keys <= set(METRIC_NAMES), keys - set(METRIC_NAMES)


def test_a_stored_snapshot_keeps_the_reasons_as_messages():
    stored = json_safe({"candidate": "1", "metrics": {"ttft_p95_ms": {"value": 1.0, "client_bound": REASON}}})
    stored["held_out"] = json_safe({"soak_drift_p99_ratio": REASON})
    again = evidence_from_dict(stored)
    assert again.held_out["soak_drift_p99_ratio"] == REASON and again.metrics["ttft_p95_ms"].client_bound == REASON
    legacy = evidence_from_dict({"candidate": "1", "held_out": {"ttft_p95_ms": "client-bound (old text)"}})
    assert legacy.held_out["ttft_p95_ms"] == "client-bound (old text)"


@pytest.mark.django_db
def test_a_client_bound_soak_names_its_test_and_windows_in_words_in_both_languages(candidate):
    """The reason a soak's drift is held out names the test by its title and its phases in words, never
    `stability`, `first_window` or `last_window` (the crawler's identifier rule, in both languages)."""
    from benchmarks.models import BenchmarkRun, RunPoint
    from selection.scoring.evidence import client_bound_reason
    from tests.e2e import pagechecks

    run = BenchmarkRun.objects.create(candidate=candidate, test="stability", origin="validation", status="succeeded")
    for index, label in enumerate(("all", "first_window", "last_window")):
        RunPoint.objects.create(
            run=run, index=index, label=label, client_bound=True, extra={"client_bound_reasons": ["late sends"]}
        )
    reason = client_bound_reason(run)
    english, chinese = message_text(reason, "en"), message_text(reason, "zh-hans")
    assert (
        english
        == f"client-bound (Long-run stability run {run.pk}, all requests, first window, last window: late sends)"
    )
    assert "长时稳定性" in chinese and "第一个窗口" in chinese
    assert pagechecks.identifiers(english) == [] and pagechecks.identifiers(chinese) == []
