"""The KV capacity an engine really allocated, read from its log, beside the capacity model's prediction."""

from __future__ import annotations

from typing import Any

from benchmarks.models import BenchmarkRun
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity import CapacityError, parse_engine_capacity_log
from selection.models import Candidate


def record_measured_capacity(candidate: Candidate, log_text: str, run: BenchmarkRun) -> dict[str, Any] | None:
    """Store what the engine's log says it allocated, next to the capacity model's prediction."""

    found = parse_engine_capacity_log(log_text)
    if not found.get("kv_cache_tokens"):
        return None
    measured = {
        "token_capacity": found["kv_cache_tokens"],
        "source": f"engine log of run {run.pk}",
        "run_ids": [run.pk],
        "evidence": run.evidence,
        **{k: v for k, v in found.items() if k != "kv_cache_tokens"},
    }
    try:
        measured["predicted_token_capacity"] = plan_for_candidate(candidate)["token_capacity"]
    except CapacityError as exc:
        measured["prediction_error"] = str(exc)
    Candidate.objects.filter(pk=candidate.pk).update(measured_capacity=measured)
    return measured
