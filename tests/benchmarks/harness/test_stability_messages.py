"""The soak's verdict details are messages: the English text the API and the CLI show stays as it
was, and a Chinese page renders the same figures in Chinese."""

import re
from types import SimpleNamespace

from benchmarks.harness.metrics import MetricsRecording
from benchmarks.harness.workloads import stability
from benchmarks.verdicts import detail_of
from selection.i18n import message_text


def chinese(judged: dict) -> str:
    text = message_text(detail_of(judged), "zh-hans")
    assert any("\u4e00" <= c <= "\u9fff" for c in text), text
    return text


def recording(series: dict) -> MetricsRecording:
    rec = MetricsRecording()
    rec.series.update(series)
    return rec


def test_a_drift_verdict_reads_the_same_in_english_and_in_chinese_with_its_figures():
    judged = stability._drift_verdict("ttft_p99_drift", [100.0] * 30, [150.0] * 30, 99, 25.0, "TTFT")
    assert judged["detail"].startswith("TTFT p99 100.0 -> 150.0 ms (+50.0 %")
    assert judged["detail"].endswith("; n=30 first, 30 last window) vs <= 25 %")
    text = chinese(judged)
    assert text.startswith("TTFT p99 100.0 → 150.0 ms（+50.0 %") and "≤ 25 %" in text
    few = stability._drift_verdict("tpot_p50_drift", [1.0] * 3, [1.0] * 30, 50, 25.0, "TPOT")
    assert few["detail"] == (
        "TPOT p50 drift: 3 requests in the first window and 30 in the last; at least 20 in each are needed to "
        "judge it (limit 25 %)"
    )
    assert "3 个请求" in chinese(few)


def test_preemption_fragmentation_and_kv_details_render_in_chinese():
    windows = {"first_window": (0.0, 10.0), "last_window": (20.0, 30.0)}
    rec = recording(
        {
            "preemptions": [[0.0, 0.0], [10.0, 2.0], [20.0, 2.0], [30.0, 9.0]],
            "fragmentation_ratio": [[t, 0.1 if t < 15 else 0.3] for t in range(0, 31)],
            "kv_usage_ratio": [[float(t), 0.5 + t * 0.0001] for t in range(0, 31)],
        }
    )
    preemption, _ = stability._preemption_trend_verdict(rec, windows, {})
    assert preemption["detail"] == (
        "preemptions 2 in the first window (12.0/min) -> 7 in the last (42.0/min) "
        "vs <= 2 x the first rate + 1 per window"
    )
    assert "抢占：第一个窗口 2 次（12.0 次/分钟）" in chinese(preemption)
    fragmentation, _ = stability._fragmentation_verdict(rec, windows, {})
    assert fragmentation["detail"].startswith("fragmentation 0.100 -> 0.300 (+0.200, 95% CI ")
    assert chinese(fragmentation).startswith("碎片率 0.100 → 0.300（+0.200，95% 置信区间 ")
    kv, _ = stability.kv_slope_verdict(rec, (0.0, 30.0), {"max_kv_slope_per_hour": 1})
    assert kv["detail"].startswith("KV usage +0.360 of the pool per hour at steady load (95% CI ")
    assert chinese(kv).startswith("稳定负载下 KV 使用率每小时变化池的 +0.360")
    missing, _ = stability._fragmentation_verdict(recording({}), windows, {})
    assert missing["detail"].startswith("the engine exports no fragmentation metric (vLLM, SGLang and llama.cpp")
    chinese(missing)


def test_no_nvml_says_why_in_words_in_both_languages():
    gpu = SimpleNamespace(available=False, reason="unavailable: NVML Shared Library Not Found")
    judged, _ = stability._gpu_memory_verdict(gpu, (0.0, 1.0), {})
    assert judged["detail"] == (
        "no NVML on the client machine: GPU memory not measured (unavailable: the NVML library was not found)"
    )
    assert chinese(judged) == "客户端机器上没有 NVML：未测量 GPU 显存（不可用：未找到 NVML 库）"
    other, _ = stability._gpu_memory_verdict(
        SimpleNamespace(available=False, reason="unavailable: Unknown Error"), (0, 1), {}
    )
    assert other["detail"].endswith("(unavailable: Unknown Error)")  # an unknown cause as NVML wrote it


def test_the_short_soak_note_and_the_observed_line_render_in_chinese():
    params = {"recommended_duration_s": 7200, "soak_label": "demo", "session_turns": 1}
    note = stability.short_soak_message(params, 16)
    assert (
        str(note)
        == stability.short_soak_note(params, 16)
        == ("short demo soak of 16 s: not the 2 h the plan asks for (the articles soak for hours)")
    )
    assert (
        message_text(note, "zh-hans")
        == "演示用的短长稳测试，时长 16 s：不是计划要求的 2 小时（文章中的长稳测试以小时计）"
    )
    outcome = SimpleNamespace(warmup=[1, 2], records=[1, 2, 3])
    drift = {"kv_usage_slope_per_hour": None, "fragmentation_first": 0.1, "fragmentation_last": 0.2}
    gpu = SimpleNamespace(available=False)
    observed = stability._stability_observed(params, 4, 16.0, 2.0, outcome, [], [], drift, note, gpu)
    assert observed["line"].startswith(
        "short demo soak of 16 s: not the 2 h the plan asks for (the articles soak for hours); c=4 for 16 s after a "
        "2 s warm-up (2 requests excluded), 3 measured requests (n=0 first, 0 last window); TTFT p99 "
    )
    assert observed["line"].endswith("; fragmentation 0.100 -> 0.200; GPU memory not measured (no NVML)")
    line = message_text(observed["line_message"], "zh-hans")
    assert line.startswith("演示用的短长稳测试，时长 16 s：") and line.endswith(
        "；碎片率 0.100 → 0.200；未测量 GPU 显存（没有 NVML）"
    )


def test_the_chinese_templates_hold_no_english_a_chinese_reader_would_meet():
    from django.utils import translation

    from benchmarks.harness.workloads import isolation, long_context, model_switch, replay
    from selection.capacity import display
    from selection.domain.capacity import engines
    from selection.domain.scoring import sentences
    from selection.scoring import evidence
    from tests.e2e.pagechecks import english_words, identifiers

    templates = [
        value
        for module in (stability, isolation, long_context, model_switch, replay, engines, evidence)
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and len(value) > 3
    ]
    templates += list(sentences.METRIC_NAMES.values()) + list(display.ESTIMATE_LABELS.values())
    templates += list(stability.NVML_REASONS.values())
    with translation.override("zh-hans"):
        translated = {t: translation.gettext(t) for t in templates}
        translated = {t: text for t, text in translated.items() if text != t}  # the messages, not other constants
        assert len(translated) > 80
        for template, text in translated.items():
            text = re.sub(r"%\(\w+\)s", "", text)
            assert not english_words(text) and not identifiers(text), (template, text)
