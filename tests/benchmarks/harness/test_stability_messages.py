"""The soak's verdict details are messages: the English text the API and the CLI show stays as it
was, and a Chinese page renders the same figures in Chinese."""

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
