"""Evidence quality of an upload: warnings that hold it back from scoring until confirmed.

An uploaded file may have measured something else than the candidate: its metadata names another
model or engine, or it holds too few requests for its percentiles to mean much. Such a run is
stored with its warnings (shown on its page) and counts for scoring only once someone who may
edit the selection confirms it as evidence (`confirm_as_evidence`, audited). A warning is a code
and its values, so pages say it in their own language.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from benchmarks.models import BenchmarkRun
from benchmarks.result import NormalizedResult
from selection.audit import audit
from selection.domain import provenance
from selection.selectors import archived_refusal, require_editor
from selection.tasks import schedule_rescoring

MIN_REQUESTS = 20  # fewer requests in a load point: its p95/p99 rest on one or two requests

# engine names as files and the catalog spell them -> one name
ENGINE_NAMES = {
    "vllm": "vllm",
    "sglang": "sglang",
    "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm",
    "trt-llm": "trtllm",
    "trtllm": "trtllm",
    "lmdeploy": "lmdeploy",
    "tgi": "tgi",
    "text-generation-inference": "tgi",
    "llama-cpp": "llamacpp",
    "llama.cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "llamacpp": "llamacpp",
}


def engine_key(name: Any) -> str:
    text = str(name or "").strip().lower()
    return ENGINE_NAMES.get(text, text)


def evidence_warnings(
    result: NormalizedResult, *, model: str, engine: str, aliases: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Warnings about a parsed upload for a selection deciding on `model` (its target model), for a
    candidate on `engine` (catalog slug); `aliases`: served names the candidate's endpoint showed to be
    that model (vLLM's --served-model-name). A name missing on either side is not a mismatch (nothing
    to compare)."""
    warnings: list[dict[str, Any]] = []
    file_model = result.metadata.get("model")
    if isinstance(file_model, str) and model and not provenance.model_matches([file_model], model):
        if file_model not in aliases:
            warnings.append({"code": "model_mismatch", "file": file_model, "candidate": model})
    file_engine = result.metadata.get("engine")
    if isinstance(file_engine, str) and file_engine and engine and engine_key(file_engine) != engine_key(engine):
        warnings.append({"code": "engine_mismatch", "file": file_engine, "candidate": engine})
    counts = [
        (index, (point.requests_completed or 0) + (point.requests_failed or 0))
        for index, point in enumerate(result.points)
        if point.requests_completed is not None
    ]
    if counts:
        index, fewest = min(counts, key=lambda item: item[1])
        if fewest < MIN_REQUESTS:
            label = result.points[index].label or str(index)
            warnings.append({"code": "few_requests", "requests": fewest, "point": label, "minimum": MIN_REQUESTS})
    return warnings


def warnings_for_candidate(result: NormalizedResult, candidate) -> list[dict[str, Any]]:
    """The upload checked against the selection's model (issue 33 item 5), not the candidate's name: the
    candidate's served name counts only where its endpoint's probe showed it serves that model."""
    constraints = getattr(candidate.selection, "constraints", None)
    model = constraints.target_model if constraints is not None else ""
    identity = (candidate.endpoint_probe or {}).get("identity") or {}
    served = provenance.served_names(identity)
    aliases = (
        (candidate.model_name,) if candidate.model_name and model and provenance.model_matches(served, model) else ()
    )
    return evidence_warnings(
        result, model=model or candidate.model_name or "", engine=candidate.engine.slug, aliases=aliases
    )


def confirm_as_evidence(*, run: BenchmarkRun, user) -> BenchmarkRun:
    """Count a warned-about upload as evidence despite its warnings (who and when are kept)."""
    require_editor(user, run.candidate.selection)
    if not run.needs_confirmation:
        return run
    refused = archived_refusal(run.candidate)
    if refused:
        raise ValidationError(refused)
    with transaction.atomic():
        run.evidence_confirmed_by = user.get_username()[:150]
        run.evidence_confirmed_at = timezone.now()
        run.save(update_fields=["evidence_confirmed_by", "evidence_confirmed_at"])
        audit(
            run.candidate.selection,
            user,
            "upload.confirmed_as_evidence",
            field=f"run:{run.pk}",
            new=[w.get("code") for w in run.quality_warnings],
        )
        schedule_rescoring(run.candidate.selection_id)  # the run counts for scoring from now on
    return run
