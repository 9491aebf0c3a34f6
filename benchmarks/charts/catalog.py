"""Every chart by name, for the pages that draw a chart from stored arguments (`presentation`)."""

from __future__ import annotations

from benchmarks.charts.candidates import (
    capacity_memory_vs_context,
    dimension_bars,
    kv_usage_over_time,
    latency_vs_concurrency,
    overload_steps,
    prefix_on_off,
    soak_drift,
    ttft_vs_context,
)
from benchmarks.charts.phases import swap_phases, switch_timeline, tenant_isolation
from benchmarks.charts.traces import arrival_rate, length_distribution

CHARTS = {
    "length_distribution": length_distribution,
    "arrival_rate": arrival_rate,
    "dimension_bars": dimension_bars,
    "latency_vs_concurrency": latency_vs_concurrency,
    "kv_usage_over_time": kv_usage_over_time,
    "ttft_vs_context": ttft_vs_context,
    "prefix_on_off": prefix_on_off,
    "soak_drift": soak_drift,
    "overload_steps": overload_steps,
    "capacity_memory_vs_context": capacity_memory_vs_context,
    "switch_timeline": switch_timeline,
    "tenant_isolation": tenant_isolation,
    "swap_phases": swap_phases,
}
