"""The capacity page's figures and chart input, from a capacity plan dict (no Django imports).

`selection.capacity.plan_for_candidate` returns JSON; this turns it into what the page shows:
memory per GPU against context length for one sequence and for the peak concurrency (the lines
of the memory chart), and the estimates split from the exact figures.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from selection.domain.messages import marked as _
from selection.domain.messages import render

GIB = 1024**3
# Memory an engine holds besides the KV pool, as the plan's breakdown names it.
FIXED_MEMORY_KEYS = ("weights", "activation_peak", "non_torch", "cuda_graphs")


def fixed_memory_bytes(plan: Mapping[str, Any]) -> float:
    """Weights plus the engine's other reservations per GPU (activation peak, non-torch, CUDA graphs)."""
    breakdown = plan.get("memory_breakdown") or {}
    return float(sum(breakdown.get(key) or 0 for key in FIXED_MEMORY_KEYS))


def memory_lines(
    plan: Mapping[str, Any],
    concurrencies: list[int],
    label: Callable[[int], str] | None = None,
    clip_gib: float | None = None,
) -> tuple[list[int], dict[str, list[float | None]]]:
    """Contexts and, per concurrency, GiB per GPU = fixed memory + n x one sequence's KV bytes.

    `label(n)` names each line (the view passes a translated one). Values above `clip_gib` become
    None (a gap), so one line shooting to a terabyte at 128K does not flatten the others.
    """
    label = label or (lambda n: f"weights + KV, {n} sequence{'s' if n != 1 else ''}")
    rows = [row for row in plan.get("memory_by_context") or [] if row.get("context")]
    contexts = [int(row["context"]) for row in rows]
    fixed = fixed_memory_bytes(plan)
    lines: dict[str, list[float]] = {}
    for n in sorted({max(1, int(c)) for c in concurrencies}):
        values = [round((fixed + n * float(row.get("bytes_per_sequence") or 0)) / GIB, 3) for row in rows]
        lines[label(n)] = [v if clip_gib is None or v <= clip_gib else None for v in values]
    return contexts, lines


# The capacity model's estimated inputs (`selection.domain.capacity`, its `labelled_estimate` calls) in
# words; the page shows the input's key beside its label as code (the name to pass a measured value by).
ESTIMATE_LABELS = {
    "gpu_memory_bytes": _("GPU memory (bytes)"),
    "gpu_memory_utilization": _("vLLM GPU memory share"),
    "activation_peak_bytes": _("Activation peak during the profile run (bytes)"),
    "non_torch_bytes": _("Memory outside PyTorch: CUDA context, NCCL (bytes)"),
    "cuda_graph_bytes": _("CUDA graphs (bytes)"),
    "mem_fraction_static": _("SGLang static memory share"),
    "free_gpu_memory_fraction": _("TensorRT-LLM free-memory share"),
    "cache_max_entry_count": _("LMDeploy KV share of free memory"),
    "compute_buffers_bytes": _("llama.cpp compute buffers and CUDA context (bytes)"),
    "runtime_overhead_bytes": _("Runtime overhead (bytes)"),
    "max_num_batched_tokens": _("Tokens batched per step"),
}


# The model's attention kind as the plan states it (`ModelSpec.attention`), in words.
ATTENTION_LABELS = {
    "standard": _("standard attention"),
    "mla": _("multi-head latent attention (MLA)"),
}


def attention_label(kind: str, translate: Callable[[str], str] = lambda text: text) -> str:
    """The plan's attention kind ("standard", "mla") in words through `translate`; an unknown kind as it is."""
    return translate(ATTENTION_LABELS[kind]) if kind in ATTENTION_LABELS else kind


def split_estimates(
    plan: Mapping[str, Any],
    translate: Callable[[str], str] = lambda text: text,
    render_message: Callable[[Any], Any] = render,
) -> list[dict[str, Any]]:
    """Each estimated input with its label (through `translate`), whether it is an estimate or a
    measured override, and its source: the stored message through `render_message` (the page
    passes the one for its language), else the English text of a plan written before messages."""
    out = []
    for item in plan.get("estimates") or []:
        source = str(item.get("source") or "")
        estimated = source.startswith("estimate:")
        name = item.get("name", "")
        out.append(
            {
                "name": name,
                "label": translate(ESTIMATE_LABELS[name]) if name in ESTIMATE_LABELS else name,
                "value": item.get("value"),
                "estimated": estimated,
                "source": render_message(item["source_message"])
                if item.get("source_message")
                else source.split(": ", 1)[1]
                if ": " in source
                else source,
            }
        )
    return out


def concurrency_rows(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per context of interest: concurrent sequences at 100%, 80% and 70% of the KV pool."""
    headroom = plan.get("headroom") or {}
    at80, at70 = headroom.get("sequences_at_80pct") or {}, headroom.get("sequences_at_70pct") or {}
    rows = []
    for context, value in sorted((plan.get("max_concurrency") or {}).items(), key=lambda kv: int(kv[0])):
        rows.append(
            {
                "context": int(context),
                "max_concurrency": value,
                "max_sequences": (plan.get("max_sequences") or {}).get(context),
                "at_80": at80.get(context),
                "at_70": at70.get(context),
                "bytes_per_sequence": (plan.get("bytes_per_sequence") or {}).get(context),
            }
        )
    return rows
