"""Fits or does not fit: a plan against a selection's peak concurrency and context lengths, with
the changes that would make it fit (fp8 KV, a larger TP, replicas), each planned under the same
engine rules. The summary and the reasons are `Message`s.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from selection.domain.capacity.base import CapacityError, GiB
from selection.domain.capacity.inputs import CapacityInputs
from selection.domain.capacity.plan import CapacityPlan, plan_capacity
from selection.domain.messages import Message
from selection.domain.messages import marked as _

_CONSTRAINT_KEYS = (
    "peak_concurrency",
    "avg_input_tokens",
    "avg_output_tokens",
    "max_input_tokens",
    "max_output_tokens",
)


def _read_constraints(constraints: Mapping[str, Any]) -> dict:
    if not isinstance(constraints, Mapping):
        raise CapacityError("constraints: must be a mapping")
    out = {}
    for key in _CONSTRAINT_KEYS:
        v = constraints.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "peak_concurrency" else 0):
            raise CapacityError(
                f"constraints.{key}: must be a {'positive' if key == 'peak_concurrency' else 'non-negative'} "
                f"integer, got {v!r}"
            )
        out[key] = v
    budget = constraints.get("gpu_budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise CapacityError(f"constraints.gpu_budget: must be a positive integer, got {budget!r}")
    out["gpu_budget"] = budget
    allowed = constraints.get("kv_precisions_allowed")  # optional: alternatives keep to these
    out["kv_precisions_allowed"] = [str(p) for p in allowed] if isinstance(allowed, (list, tuple)) else []
    return out


def _assess(plan: CapacityPlan, c: dict) -> dict:
    avg_ctx = max(1, c["avg_input_tokens"] + c["avg_output_tokens"])
    max_ctx = max(1, c["max_input_tokens"] + c["max_output_tokens"], avg_ctx)
    pool = plan.pool_bytes
    per_avg = plan.sequence_bytes(avg_ctx)
    per_max = plan.sequence_bytes(max_ctx)
    need = (c["peak_concurrency"] - 1) * per_avg + per_max
    return {
        "avg_context": avg_ctx,
        "max_context": max_ctx,
        "need_bytes": need,
        "pool_bytes": pool,
        "fits_30": pool > 0 and need <= 0.7 * pool,
        "fits_20": pool > 0 and need <= 0.8 * pool,
        "seqs_80": int(0.8 * pool // per_avg) if per_avg else 0,
        "seqs_70": int(0.7 * pool // per_avg) if per_avg else 0,
        "max_fits": pool > 0 and per_max <= 0.8 * pool,
    }


def _short_of_peak(aa: dict, c: dict) -> Message:
    return Message(
        _("at 80%% of the pool only %(seqs)s sequences of avg context fit (peak %(peak)s)"),
        {"seqs": str(aa["seqs_80"]), "peak": str(c["peak_concurrency"])},
    )


def _above_budget(gpus: int, c: dict) -> Message:
    return Message(
        _("the plan uses %(gpus)s GPUs, above the budget of %(budget)s"),
        {"gpus": str(gpus), "budget": str(c["gpu_budget"])},
    )


def _alternatives(plan: CapacityPlan, c: dict, a: dict, over_budget: bool) -> list[dict]:
    """Changes that would make the plan fit, each planned under the same engine rules: fp8 (or
    int8) KV when the constraints allow that precision, a larger TP up to the GPU budget, or
    replicas of the plan as it is. Each says what it changes in words (`label`; `change` is the
    setting, for the API) and, when it does not fit, why (`why_not`)."""
    i, gpus = plan.inputs, plan.inputs.tp * plan.inputs.pp
    alternatives: list[dict] = []
    budget = c["gpu_budget"]
    kv_alt = "fp8" if i.engine != "llamacpp" else "int8"
    allowed = c.get("kv_precisions_allowed") or []
    if i.kv_dtype in ("bf16", "fp16") and (not allowed or kv_alt in allowed):
        try:
            alt = plan_capacity(replace(i, kv_dtype=kv_alt))
            aa = _assess(alt, c)
            fits = aa["fits_20"] and not over_budget
            alternatives.append(
                {
                    "change": f"kv_dtype={alt.inputs.kv_dtype}",
                    "label": Message(_("KV cache in %(dtype)s"), {"dtype": alt.inputs.kv_dtype}),
                    "gpus": gpus,
                    "fits": fits,
                    "headroom_30": aa["fits_30"],
                    "sequences_at_80pct": aa["seqs_80"],
                    "why_not": None if fits else (_above_budget(gpus, c) if over_budget else _short_of_peak(aa, c)),
                }
            )
        except CapacityError:
            pass
    for k in (2, 4, 8, 16, 32):
        if k <= i.tp or (budget is not None and k * i.pp > budget):
            continue
        try:
            alt = plan_capacity(replace(i, tp=k))
        except CapacityError:
            continue
        aa = _assess(alt, c)
        alternatives.append(
            {
                "change": f"tp={k}",
                "label": Message(_("tensor parallel %(tp)s"), {"tp": str(k)}),
                "gpus": k * i.pp,
                "fits": aa["fits_20"],
                "headroom_30": aa["fits_30"],
                "sequences_at_80pct": aa["seqs_80"],
                "why_not": None if aa["fits_20"] else _short_of_peak(aa, c),
            }
        )
        if aa["fits_30"]:
            break
    if a["max_fits"] and a["seqs_80"] > 0:
        replicas = math.ceil(c["peak_concurrency"] / a["seqs_80"])
        if replicas > 1:
            n = replicas * gpus
            fits = budget is None or n <= budget
            alternatives.append(
                {
                    "change": f"{replicas} replicas of TP={i.tp}",
                    "label": Message(
                        _("%(replicas)s replicas of the plan (tensor parallel %(tp)s each)"),
                        {"replicas": str(replicas), "tp": str(i.tp)},
                    ),
                    "gpus": n,
                    "fits": fits,
                    "headroom_30": False,
                    "sequences_at_80pct": a["seqs_80"] * replicas,
                    "why_not": None if fits else _above_budget(n, c),
                }
            )
    return alternatives


def verdict(plan_or_inputs: CapacityPlan | CapacityInputs, constraints: Mapping[str, Any]) -> dict:
    """Fits / does not fit against peak concurrency and context lengths, with alternatives
    (fp8 KV, a larger TP, more replicas) checked under the same engine rules. The summary and the
    reasons are `Message`s (``str()`` gives English; `messages.to_json` makes the dict JSON)."""
    plan = plan_or_inputs if isinstance(plan_or_inputs, CapacityPlan) else plan_capacity(plan_or_inputs)
    c = _read_constraints(constraints)
    i = plan.inputs
    gpus = i.tp * i.pp
    a = _assess(plan, c)
    reasons: list[Message] = []
    gib = lambda b: f"{b / GiB:.2f} GiB"  # noqa: E731
    # a page of one token (SGLang) is a token slot: "blocks of 1 tokens" read as a typo (walk 1b#31)
    pool_sentence = (
        _(
            "KV pool %(pool)s per GPU (%(blocks)s token slots); %(peak)s concurrent sequences "
            "(one at max context %(max)s, the rest at avg %(avg)s) need %(need)s"
        )
        if plan.block_size == 1
        else _(
            "KV pool %(pool)s per GPU (%(blocks)s blocks of %(block)s tokens); %(peak)s concurrent sequences "
            "(one at max context %(max)s, the rest at avg %(avg)s) need %(need)s"
        )
    )
    reasons.append(
        Message(
            pool_sentence,
            {
                "pool": gib(a["pool_bytes"]),
                "blocks": str(plan.num_blocks),
                "block": str(plan.block_size),
                "peak": str(c["peak_concurrency"]),
                "max": str(a["max_context"]),
                "avg": str(a["avg_context"]),
                "need": gib(a["need_bytes"]),
            },
        )
    )
    mp = i.model.max_position_embeddings
    too_long = bool(mp) and a["max_context"] > mp
    if too_long:
        reasons.append(
            Message(
                _("max context %(max)s exceeds the model's %(positions)s positions"),
                {"max": str(a["max_context"]), "positions": str(mp)},
            )
        )
    if plan.kv_memory_bytes <= 0:
        reasons.append(
            Message(
                _("weights (%(weights)s per GPU) leave no room for KV cache"),
                {"weights": gib(plan.weight_bytes_per_rank)},
            )
        )
    over_budget = c["gpu_budget"] is not None and gpus > c["gpu_budget"]
    if over_budget:
        reasons.append(
            Message(
                _("the plan uses %(gpus)s GPUs, above the budget of %(budget)s"),
                {"gpus": str(gpus), "budget": str(c["gpu_budget"])},
            )
        )
    few_slots = plan.slots is not None and c["peak_concurrency"] > plan.slots
    if few_slots:
        reasons.append(
            Message(
                _(
                    "llama-server serves at most %(slots)s requests at once (-np); "
                    "%(wait)s of the peak %(peak)s would wait"
                ),
                {
                    "slots": str(plan.slots),
                    "wait": str(c["peak_concurrency"] - plan.slots),
                    "peak": str(c["peak_concurrency"]),
                },
            )
        )
    short_slot = plan.sequence_limit is not None and a["max_context"] > plan.sequence_limit
    if short_slot:
        reasons.append(
            Message(
                _("a slot holds at most %(limit)s tokens, less than the max context %(max)s"),
                {"limit": str(plan.sequence_limit), "max": str(a["max_context"])},
            )
        )
    fits = a["fits_20"] and not too_long and not over_budget and not few_slots and not short_slot
    if a["fits_30"] and fits:
        summary = Message(
            _("fits with 30%% headroom on %(gpus)s GPU(s) (TP=%(tp)s, PP=%(pp)s, %(kv)s KV)"),
            {"gpus": str(gpus), "tp": str(i.tp), "pp": str(i.pp), "kv": i.kv_dtype},
        )
    elif fits:
        summary = Message(
            _("fits with 20%% headroom only on %(gpus)s GPU(s); below the 30%% comfort margin"), {"gpus": str(gpus)}
        )
        reasons.append(
            Message(_("at 70%% of the pool only %(seqs)s sequences of avg context fit"), {"seqs": str(a["seqs_70"])})
        )
    else:
        summary = Message(_("does not fit"))
        if not too_long and plan.kv_memory_bytes > 0 and not a["fits_20"]:
            reasons.append(
                Message(
                    _("at 80%% of the pool only %(seqs)s sequences of avg context fit (peak %(peak)s)"),
                    {"seqs": str(a["seqs_80"]), "peak": str(c["peak_concurrency"])},
                )
            )

    alternatives = _alternatives(plan, c, a, over_budget) if not a["fits_30"] and not too_long else []
    good = [x for x in alternatives if x["fits"]]
    if not fits and good:
        best = min(good, key=lambda x: (x["gpus"], not x["headroom_30"]))
        summary = Message(
            _("does not fit as planned; fits with %(change)s (%(gpus)s GPUs)"),
            {"change": best["label"], "gpus": str(best["gpus"])},
        )
    elif not fits:  # the badge already says "does not fit": the summary says what follows from it
        summary = Message(
            _("does not fit as planned, nor with any alternative checked below")
            if alternatives
            else _("does not fit as planned, for the reasons below")
        )
    return {
        "fits": fits,
        "summary": summary,
        "reasons": reasons,
        "alternatives": alternatives,
        "avg_context": a["avg_context"],
        "max_context": a["max_context"],
        "sequences_at_70pct": a["seqs_70"],
        "sequences_at_80pct": a["seqs_80"],
    }
