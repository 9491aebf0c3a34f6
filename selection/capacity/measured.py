"""The KV capacity an engine really allocated, beside the capacity model's prediction.

Two sources, the most direct first: the engine's start-up log (kvselect launched the engine, so
the worker recorded it on the candidate; or the architect pasted it from an engine kvselect does not
launch, audited), else the engine's own metrics sampled during a run (the
harness keeps `metadata.engine_metrics.kv_capacity` when they state it: vLLM's cache_config_info,
SGLang's max_total_num_tokens, TensorRT-LLM's max blocks). The page shows it as soon as a run has it.
Either way it is the capacity the engine states it allocated ("engine-stated", `stated_by` says
where), not one kvselect computed; beside it the capacity model's prediction for the same candidate.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from benchmarks.models import BenchmarkRun
from benchmarks.result import MEASURED
from selection.audit import audit
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity.base import CapacityError
from selection.domain.capacity.measured import parse_engine_capacity_log
from selection.models import Candidate
from selection.selectors import require_editor


def record_measured_capacity(candidate: Candidate, log_text: str, run: BenchmarkRun) -> dict[str, Any] | None:
    """Store what the engine's log says it allocated, next to the capacity model's prediction."""

    found = parse_engine_capacity_log(log_text)
    if not found.get("kv_cache_tokens"):
        return None
    measured = stated_in_log(candidate, found, source=f"engine log of run {run.pk}", run_ids=[run.pk])
    measured["evidence"] = run.evidence
    Candidate.objects.filter(pk=candidate.pk).update(measured_capacity=measured)
    return measured


def stated_in_log(candidate: Candidate, found: dict[str, Any], *, source: str, run_ids: list[int]) -> dict[str, Any]:
    """The candidate's engine-stated capacity from a parsed start-up log, with the prediction beside it."""
    measured = {
        "token_capacity": found["kv_cache_tokens"],
        "stated_by": "engine log",
        "source": source,
        "run_ids": run_ids,
        "evidence": MEASURED,
        **{k: v for k, v in found.items() if k != "kv_cache_tokens"},
    }
    try:
        measured["predicted_token_capacity"] = plan_for_candidate(candidate)["token_capacity"]
    except CapacityError as exc:
        measured["prediction_error"] = str(exc)
    return measured


# the catalog's engines whose start-up log `parse_engine_capacity_log` reads, and the name it gives them
LOG_ENGINES = {"vllm": "vllm", "sglang": "sglang", "llama-cpp": "llamacpp"}
LOG_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}
MAX_LOG_CHARS = 2_000_000


@transaction.atomic
def state_capacity_from_log(*, candidate: Candidate, user, log_text: str) -> dict[str, Any]:
    """The engine-stated capacity from a start-up log the architect pastes (an engine kvselect does not
    launch): refused, naming the field, when the log states none or comes from another engine; audited."""
    require_editor(user, candidate.selection)
    text = log_text or ""
    if len(text) > MAX_LOG_CHARS:
        raise ValidationError(
            {"log": _("at most %(n)s characters: paste the start-up lines") % {"n": f"{MAX_LOG_CHARS:,}"}}
        )
    expected = LOG_ENGINES.get(candidate.engine.slug)
    if expected is None:
        raise ValidationError(
            {
                "log": _("kvselect reads the start-up logs of vLLM, SGLang and llama.cpp, not of %(engine)s")
                % {"engine": candidate.engine.name}
            }
        )
    found = parse_engine_capacity_log(text)
    if not found.get("kv_cache_tokens"):
        raise ValidationError(
            {
                "log": _(
                    "no KV capacity in this log: paste the start-up lines that state it (vLLM “GPU KV cache size: N "
                    "tokens”, SGLang “KV Cache is allocated. #tokens: N”, llama.cpp “llama_kv_cache: size = … (N "
                    "cells …)”)"
                )
            }
        )
    if found.get("engine") != expected:
        raise ValidationError(
            {
                "log": _("this is a %(found)s log; the candidate runs %(engine)s")
                % {
                    "found": LOG_ENGINE_NAMES.get(found.get("engine") or "", found.get("engine")),
                    "engine": candidate.engine.name,
                }
            }
        )
    source = f"engine log pasted by {user.get_username()} on {timezone.now():%Y-%m-%d}"
    measured = stated_in_log(candidate, found, source=source, run_ids=[])
    old = candidate.measured_capacity or None
    Candidate.objects.filter(pk=candidate.pk).update(measured_capacity=measured)
    candidate.measured_capacity = measured
    audit(
        candidate.selection,
        user,
        "candidate.capacity_stated",
        field=f"candidate:{candidate.pk}",
        old=old,
        new={"token_capacity": measured["token_capacity"], "source": source, "engine": found.get("engine")},
    )
    return measured


def measured_capacity(candidate: Candidate) -> dict[str, Any]:
    """The engine-stated capacity of a candidate: the engine log's, else the newest run whose engine
    metrics stated the KV capacity, with the prediction beside it; {} when the engine stated none."""
    if (candidate.measured_capacity or {}).get("token_capacity"):
        return {"stated_by": "engine log", **candidate.measured_capacity}
    runs = candidate.runs.filter(status=BenchmarkRun.Status.SUCCEEDED).only("pk", "evidence", "metadata")
    for run in runs:  # newest first
        found = ((run.metadata or {}).get("engine_metrics") or {}).get("kv_capacity")
        if isinstance(found, dict) and isinstance(found.get("tokens"), int) and found["tokens"] > 0:
            measured: dict[str, Any] = {
                "token_capacity": found["tokens"],
                "stated_by": "engine metrics",
                "source": f"engine metrics of run {run.pk} ({found.get('source') or 'KV capacity'})",
                "run_ids": [run.pk],
                "evidence": run.evidence,
            }
            try:
                measured["predicted_token_capacity"] = plan_for_candidate(candidate)["token_capacity"]
            except CapacityError as exc:
                measured["prediction_error"] = str(exc)
            return measured
    return {}


def stated_label(measured: dict[str, Any]) -> str:
    """How an engine-stated capacity reads in the record: "engine-stated: <source>", SIMULATED marked."""
    if not measured.get("token_capacity"):
        return ""
    label = _("engine-stated: %(source)s") % {"source": measured.get("source") or measured.get("stated_by", "")}
    return label + (" (SIMULATED)" if measured.get("evidence") == "SIMULATED" else "")
