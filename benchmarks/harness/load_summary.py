"""A load outcome in kvselect's definitions: one `LoadPoint` (`summarize`) and the per-request
table's rows (`requests_rows`)."""

from __future__ import annotations

from typing import Any

from benchmarks.harness.load_config import LoadOutcome
from benchmarks.harness.request_record import RequestRecord
from benchmarks.result import LoadPoint, Stats
from selection.domain.messages import to_json


def summarize(outcome: LoadOutcome, label: str = "", slo: dict[str, float] | None = None) -> LoadPoint:
    """One LoadPoint from a load outcome, in kvselect's definitions (see benchmarks.result)."""
    records = outcome.records
    finished = [r for r in records if r.error_class != "cancelled"]
    completed = [r for r in finished if r.ok and not r.aborted]
    failed = [r for r in finished if not r.ok]
    window = outcome.duration_s or None
    itl: list[float] = []
    for record in completed:
        itl.extend(record.itl_ms())
    errors: dict[str, int] = {}
    for record in failed:
        errors[record.error_class or "unknown"] = errors.get(record.error_class or "unknown", 0) + 1
    output_tokens = sum(r.output_tokens or 0 for r in completed)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in completed)
    point = LoadPoint(
        label=label,
        concurrency=outcome.config.concurrency if outcome.config.mode == "closed" else outcome.config.max_concurrency,
        request_rate=outcome.config.rate if outcome.config.mode == "open" else None,
        achieved_concurrency=outcome.achieved_concurrency,
        duration_s=window,
        requests_completed=len(completed),
        requests_failed=len(failed),
        ttft_ms=Stats.from_values(r.ttft_ms for r in completed),
        tpot_ms=Stats.from_values(r.tpot_ms for r in completed),
        itl_ms=Stats.from_values(itl),
        e2e_ms=Stats.from_values(r.e2e_ms for r in completed),
        request_throughput=len(completed) / window if window else None,
        output_token_throughput=output_tokens / window if window else None,
        input_token_throughput=prompt_tokens / window
        if window and any(r.prompt_tokens is not None for r in completed)
        else None,
        error_rate=len(failed) / len(finished) if finished else None,
        client_bound=outcome.client_bound,
        extra={
            "errors_by_class": errors,
            "aborted": sum(1 for r in records if r.aborted),
            "cancelled_in_flight": sum(1 for r in records if r.error_class == "cancelled"),
            "peak_concurrency": outcome.peak_concurrency,
            "achieved_rate": outcome.achieved_rate,
            "late_sends_fraction": outcome.late_sends_fraction,
            "send_lateness_ms_p99": outcome.send_lateness_ms_p99,
            "loop_lag_ms_p99": outcome.loop_lag_ms_p99,
            "client_cpu_s": round(outcome.client_cpu_s, 3),
            "client_processes": outcome.processes,
            "client_cpu_fraction": round(max(outcome.cpu_fractions), 3) if outcome.cpu_fractions else None,
            "client_busy_fraction": round(max(outcome.busy_fractions), 3) if outcome.busy_fractions else None,
            "late_read_fraction": outcome.late_read_fraction,
            "late_read_max_ms": outcome.late_read_max_ms,
            "client_bound_reasons": list(outcome.client_bound_reasons),
            "client_bound_reason_messages": to_json(outcome.client_bound_messages),
            "usage_reported_fraction": (sum(1 for r in completed if r.usage_reported) / len(completed))
            if completed
            else None,
            "warmup_requests": len(outcome.warmup),
            "stopped_early": outcome.stopped_early,
            **(
                {"stopped_early_message": outcome.stopped_early_message.to_dict()}
                if outcome.stopped_early_message is not None
                else {}
            ),
        },
    )
    if slo and completed:
        good = [r for r in completed if _meets_slo(r, slo)]
        point.slo_attainment = len(good) / len(completed)
        point.goodput = len(good) / window if window else None
    return point


def _meets_slo(record: RequestRecord, slo: dict[str, float]) -> bool:
    for key, limit in slo.items():
        value = getattr(record, key, None)
        if value is None or value > limit:
            return False
    return True


def requests_rows(outcome: LoadOutcome, point_index: int = 0, time_zero: float | None = None) -> list[dict[str, Any]]:
    """Rows of the per-request table (benchmarks.result.REQUEST_COLUMNS) for the measured records."""
    zero = outcome.run_start if time_zero is None else time_zero
    rows = []
    for record in outcome.records:
        itl = record.itl_ms()
        rows.append(
            {
                "point": point_index,
                "request_id": record.request_id,
                "start_s": record.send_time - zero,
                "ttft_ms": record.ttft_ms,
                "tpot_ms": record.tpot_ms,
                "itl_ms_mean": (sum(itl) / len(itl)) if itl else None,
                "e2e_ms": record.e2e_ms,
                "prompt_tokens": record.prompt_tokens,
                "output_tokens": record.output_tokens,
                "ok": record.ok and not record.aborted,
                "error": record.error_class if not record.aborted else "aborted",
                "finish_reason": record.finish_reason,
            }
        )
    return rows
