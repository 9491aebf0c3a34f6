"""Stating the KV capacity an engine allocated, from its start-up log: the log of an engine kvselect
launched (the worker, after the run) or one the architect pastes (audited). The capacity is a scoring
input (the capacity model's prediction error against it), so stating it stamps the selection's inputs
and queues its rescoring in the same transaction (`selection.tasks.schedule_rescoring`). Read through
`selection.capacity.measured.measured_capacity`.
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
from selection.capacity.measured import ENGINE_LOG_OF_RUN, ENGINE_LOG_PASTED
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity.base import CapacityError
from selection.domain.capacity.measured import parse_engine_capacity_log
from selection.domain.messages import Message
from selection.models import Candidate
from selection.selectors import require_editor
from selection.tasks import schedule_rescoring


def record_measured_capacity(candidate: Candidate, log_text: str, run: BenchmarkRun) -> dict[str, Any] | None:
    """Store what the engine's log says it allocated, next to the capacity model's prediction."""

    found = parse_engine_capacity_log(log_text)
    if not found.get("kv_cache_tokens"):
        return None
    source = Message(ENGINE_LOG_OF_RUN, {"run": run.pk})
    measured = stated_in_log(candidate, found, source=source, run_ids=[run.pk])
    measured["evidence"] = run.evidence
    with transaction.atomic():
        Candidate.objects.filter(pk=candidate.pk).update(measured_capacity=measured)
        schedule_rescoring(candidate.selection_id)  # the capacity prediction error is scored
    return measured


def stated_in_log(
    candidate: Candidate, found: dict[str, Any], *, source: Message, run_ids: list[int]
) -> dict[str, Any]:
    """The candidate's engine-stated capacity from a parsed start-up log, with the prediction beside it; its
    source in English and as a message (`source_message`) that pages and records render in their language."""
    measured = {
        "token_capacity": found["kv_cache_tokens"],
        "stated_by": "engine log",
        "source": str(source),
        "source_message": source.to_dict(),
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
    source = Message(ENGINE_LOG_PASTED, {"user": user.get_username(), "date": f"{timezone.now():%Y-%m-%d}"})
    measured = stated_in_log(candidate, found, source=source, run_ids=[])
    old = candidate.measured_capacity or None
    Candidate.objects.filter(pk=candidate.pk).update(measured_capacity=measured)
    candidate.measured_capacity = measured
    schedule_rescoring(candidate.selection_id)  # the capacity prediction error is scored
    audit(
        candidate.selection,
        user,
        "candidate.capacity_stated",
        field=f"candidate:{candidate.pk}",
        old=old,
        new={"token_capacity": measured["token_capacity"], "source": str(source), "engine": found.get("engine")},
    )
    return measured
