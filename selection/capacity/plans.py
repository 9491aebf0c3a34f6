"""Capacity plans for candidates: the Django-side glue around `domain.capacity`."""

from __future__ import annotations

from typing import Any

from selection.domain import catalog
from selection.domain.capacity.base import CapacityError
from selection.domain.capacity.inputs import inputs_from_flags
from selection.domain.capacity.measured import compare_predicted_measured
from selection.domain.capacity.model_config import load_model_config, shipped_models
from selection.domain.capacity.plan import plan_for_model
from selection.domain.capacity.verdict import verdict
from selection.domain.messages import Message, to_json
from selection.domain.messages import marked as _
from selection.models import Candidate

# Catalog engines -> the capacity model's memory semantics. Engines whose memory rules the model
# does not implement are planned with vLLM's paged semantics and say so.
ENGINE_SEMANTICS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "tensorrt-llm": "trtllm",
    "trtllm": "trtllm",
    "lmdeploy": "lmdeploy",
    "llama-cpp": "llamacpp",
    "llamacpp": "llamacpp",
    "llama.cpp": "llamacpp",
}


def semantics_for(engine_slug: str) -> tuple[str, Message | None]:
    engine = ENGINE_SEMANTICS.get(engine_slug)
    if engine:
        return engine, None
    note = Message(
        _("%(engine)s: memory rules not modelled; planned with vLLM's paged-KV semantics (estimate)"),
        {"engine": engine_slug},
    )
    return "vllm", note


def model_config_for(candidate: Candidate) -> dict:
    constraints = getattr(candidate.selection, "constraints", None)
    if constraints is not None and constraints.model_config:
        return constraints.model_config
    shipped = {name.lower(): name for name in shipped_models()}
    served = (candidate.model_name or "").split("/")[-1].lower()
    if served in shipped:  # the served name is a shipped config (e.g. meta-llama/Llama-3.1-8B -> Llama-3.1-8B)
        return load_model_config(shipped[served])
    name = constraints.target_model if constraints else ""
    if not name:
        raise CapacityError(
            "model: the candidate's served model is not a shipped config and the constraints name no target model"
        )
    return load_model_config(name)


def launch_inputs(candidate: Candidate, engine: str) -> dict[str, Any]:
    """Plan inputs from the engine's launch line: the recipe kvselect runs, then the flags field."""
    return inputs_from_flags(engine, f"{candidate.launch_recipe} {candidate.launch_flags}")


def plan_for_candidate(
    candidate: Candidate, *, measured: dict[str, Any] | None = None, **overrides: Any
) -> dict[str, Any]:
    """Plan + verdict + predicted-vs-measured for one candidate, JSON-safe.

    The engine's own rules and its version's default memory fraction (the catalog's memory_budget
    fact), the candidate's launch flags (llama.cpp's -c/-np, vLLM's --gpu-memory-utilization, ...),
    then the what-if overrides. `measured` is the measured capacity to compare with (default: the
    one recorded on the candidate)."""
    constraints = getattr(candidate.selection, "constraints", None)
    engine, note = semantics_for(candidate.engine.slug)
    kwargs: dict[str, Any] = {
        "kv_dtype": candidate.kv_precision,
        "tp": candidate.tensor_parallel,
        "engine": engine,
        "gpu": candidate.gpu_model or (constraints.gpu_model if constraints else None),
    }
    if constraints is not None:
        kwargs["gpu_mem_gib"] = constraints.gpu_memory_gib
        contexts = sorted(
            {
                constraints.avg_input_tokens + constraints.avg_output_tokens,
                constraints.max_input_tokens + constraints.max_output_tokens,
            }
        )
        kwargs["contexts"] = contexts
    known = [v for v in candidate.engine.versions if v]
    facts_of = candidate.engine_version if candidate.engine_version in known else (known[0] if known else None)
    if not note and facts_of is not None:
        default = catalog.memory_default(candidate.engine.slug, facts_of)
        if default is not None:
            kwargs["memory_default"] = default
    flags = launch_inputs(candidate, engine)
    kwargs.update(flags)
    kwargs.update(overrides)
    plan = plan_for_model(model_config_for(candidate), **kwargs)
    data = plan.to_dict()
    if note:
        data["notes"].append(note.to_dict())
    if facts_of is not None and facts_of != candidate.engine_version:  # planned with another version's facts
        data["notes"].append(
            Message(
                _("version %(version)s is not in the engine catalog: facts of %(assumed)s assumed"),
                {"version": candidate.engine_version, "assumed": facts_of},
            ).to_dict()
        )
    if flags:
        given = ", ".join(f"{k}={v}" for k, v in sorted(flags.items()))
        data["notes"].append(Message(_("from the launch flags: %(flags)s"), {"flags": given}).to_dict())
    if constraints is not None:
        domain = constraints.as_domain()
        domain["gpu_budget"] = constraints.gpu_count_budget
        domain["kv_precisions_allowed"] = list(constraints.kv_precisions_allowed or [])
        data["verdict"] = to_json(verdict(plan, domain))  # summary and reasons as message dicts
    measured = measured if measured is not None else (candidate.measured_capacity or {})
    if measured.get("token_capacity"):
        data["measured"] = dict(measured)
        tokens = measured["token_capacity"]
        data["predicted_vs_measured"] = compare_predicted_measured(plan.token_capacity, tokens)
    return data
