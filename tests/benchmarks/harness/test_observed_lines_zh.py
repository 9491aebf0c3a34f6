"""The long-context, isolation and model-switch tests' observed line ("what the test observed") is a
message: a Chinese run page and the Chinese record render it in Chinese, while the English `line` the
API and the CLI read stays the sentence it was (issue 37 item 2)."""

from __future__ import annotations

from django.utils import translation

from benchmarks import presentation
from benchmarks.harness.workloads.isolation import _isolation_observed
from benchmarks.harness.workloads.long_context import _long_context_observed
from benchmarks.harness.workloads.model_switch import _switch_observed
from benchmarks.result import LoadPoint, Stats
from selection.domain.messages import render
from selection.i18n import message_text
from tests.benchmarks.harness.test_overload_messages_zh import assert_chinese


def shown_in_chinese(observed: dict) -> str:
    """The observed line as a Chinese run page shows it."""
    with translation.override("zh-hans"):
        return presentation.observed_line({"observed": observed}, False, message_text)


def check(observed: dict, english: str, names: tuple[str, ...] = ()) -> str:
    assert observed["line"] == english
    assert render(observed["line_message"]) == english  # the stored message reads as the English line
    assert presentation.observed_line({"observed": observed}, False) == english
    shown = assert_chinese(observed["line_message"], english, names)
    assert shown_in_chinese(observed) == shown
    return shown


def rung(label: str, tokens: int, ttft: float | None, kv: float | None = None, failed: int = 0) -> LoadPoint:
    point = LoadPoint(label=label, requests_completed=2, requests_failed=failed)
    point.ttft_ms = Stats(p50=ttft)
    point.extra = {"input_tokens_requested": tokens, "kv_tokens_per_request": kv}
    return point


def background(ttft_during: float | None, failed: int) -> LoadPoint:
    def window(ttft, n):
        return {"ttft_ms": {"p95": ttft}, "tpot_ms": {"p95": 12.0}, "stall_ms": {"p95": 40.0}, "n": n, "failed": failed}

    point = LoadPoint(label="32K with_background")
    point.extra = {"background": {"before": window(80.0, 30), "during": window(ttft_during, 25)}}
    return point


def test_the_long_context_observed_line_reads_in_chinese():
    points = [
        rung("16K alone", 16384, 410.0, kv=16400.0),
        rung("32K alone", 32768, 900.0),
        background(None, 3),
        rung("64K alone", 65536, None, failed=1),
    ]
    observed = _long_context_observed(points, 32768, 65536, 65536, None)
    shown = check(
        observed,
        "largest rung served 32768 of 65536 required tokens; rung 65536 failed; 16K TTFT 410 ms, KV 16400 tok; "
        "32K TTFT 900 ms, short requests before -> during: TTFT p95 80 ms -> n/a, TPOT p95 12 ms -> 12 ms, "
        "widest token gap p95 40 ms -> 40 ms (n=25, 3 stalled/failed)",
    )
    assert "档位 65536 失败" in shown and "无数据" in shown and "3 个停滞或失败" in shown


def test_the_long_context_observed_line_quotes_the_engine_error_as_code():
    observed = _long_context_observed([rung("16K alone", 16384, 410.0)], 16384, 32768, 32768, "HTTP 400")
    shown = check(
        observed,
        "largest rung served 16384 of 32768 required tokens; rung 32768 failed (HTTP 400); 16K TTFT 410 ms",
    )
    assert "（HTTP 400）" in shown
    assert observed["line_message"]["items"][1]["params"]["error"] == {"code": "HTTP 400"}


FIGURES = {
    "a_ttft_p95_alone_ms": 120.0,
    "a_ttft_p95_flood_ms": 480.0,
    "a_ttft_n_alone": 40,
    "a_ttft_n_flood": 38,
    "a_ttft_p95_slowdown": 4.0,
    "a_ttft_p95_slowdown_interval": [3.1, 5.2],
    "a_tpot_p95_alone_ms": 20.0,
    "a_tpot_p95_flood_ms": None,
    "b_held_concurrency": 7.6,
}


def test_the_isolation_observed_line_reads_in_chinese():
    observed = _isolation_observed(FIGURES, "priority", 8192, 8)
    shown = check(
        observed,
        "tenant A TTFT p95 120 ms alone (n=40) vs 480 ms under tenant B's flood (n=38), x4.0 (95% CI 3.1–5.2); "
        "TPOT p95 20 ms vs n/a; B held 7.6 of 8 requests of 8192 tokens; scheduling priority",
    )
    assert "4.0 倍" in shown and "95% 置信区间" in shown and shown.endswith("调度方式 优先级")
    assert observed["scheduling"] == "priority" and observed["a_ttft_p95_slowdown"] == 4.0


def test_the_isolation_observed_line_without_a_slowdown_reads_in_chinese():
    figures = FIGURES | {"a_ttft_p95_flood_ms": None, "a_ttft_p95_slowdown": None, "a_ttft_p95_slowdown_interval": None}
    check(
        _isolation_observed(figures, "fcfs", 8192, 8),
        "tenant A TTFT p95 120 ms alone (n=40) vs n/a under tenant B's flood (n=38); TPOT p95 20 ms vs n/a; "
        "B held 7.6 of 8 requests of 8192 tokens; scheduling fcfs",
    ).endswith("调度方式 先到先服务")


SWITCH = {
    "switch_errors": 2,
    "rollback_errors": 1,
    "switch_downtime_s": 1.5,
    "rollback_downtime_s": None,
    "switch_stall_s": 0.75,
    "switch_recovery_s": 4.0,
    "rollback_recovery_s": None,
    "kv_usage_before_mean": 0.25,
    "kv_usage_switched_peak": None,
    "kv_spike": None,
    "hit_ratio_before": 0.5,
    "hit_ratio_after_switch": 0.125,
    "hit_drop": 0.375,
}
PHASES = {"before": [None] * 30, "switched": [None] * 20, "rolled_back": [None] * 10}


def test_the_model_switch_observed_line_reads_in_chinese():
    for mode, how, shown_how in (("restart", "restart", "以重启方式"), ("endpoint", "endpoint pair", "以端点对方式")):
        observed = _switch_observed(mode, {}, SWITCH, PHASES)
        shown = check(
            observed,
            f"switch by {how}: 3 errors, requests failing 1.50 s, longest stall 0.75 s; budget held again 4.00 s "
            "after the switch and never after the rollback; KV usage 25.0% before, peak n/a after; cache hit 50.0% "
            "before vs 12.5% right after (n=30/20/10)",
        )
        assert shown.startswith(shown_how) and "未出现" in shown and "无数据" in shown
        assert observed["requests_before"] == 30 and observed["mode"] == mode
