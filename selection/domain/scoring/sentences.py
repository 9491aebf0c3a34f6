"""The scoring's sentences for people: the headline (the recommendation naming every constraint it
fails, or the tie, the tie-break, the screened-out candidates), the notes, the figures held out; and
each candidate's fit to the constraints those sentences name."""

from __future__ import annotations

from typing import Any, Iterable

from selection.domain import procurement
from selection.domain.messages import CLAUSE_SEPARATOR, NAME_SEPARATOR, Message
from selection.domain.messages import marked as _
from selection.domain.scoring.base import SIMULATED
from selection.domain.scoring.inputs import CandidateEvidence, ScoringConstraints
from selection.domain.scoring.results import CandidateScore

# Each measured figure (a `CandidateEvidence.metrics` key) as a reader names it: the held-out
# sentences name figures in words, never by their keys. A key not listed reads as itself.
METRIC_NAMES = {
    "ttft_p95_ms": _("TTFT p95"),
    "tpot_p95_ms": _("TPOT p95"),
    "error_rate": _("Error rate"),
    "achieved_concurrency": _("Concurrency held"),
    "sustainable_concurrency_per_gpu": _("Concurrency within the latency budget (per GPU)"),
    "output_tokens_per_s_per_gpu": _("Output throughput within the budget (per GPU)"),
    "max_context_rung_reached": _("Longest input served"),
    "kv_headroom_at_target": _("KV-cache headroom at the target load"),
    "soak_drift_p99_ratio": _("Latency drift over the soak (p99, late against early)"),
    "prefix_saving_ratio": _("Prefix-reuse saving"),
    "swap_resume_ttft_ratio": _("Resume TTFT of an evicted session against a recompute"),
    "continuation_correct": _("Identical continuation after a resume"),
    "idle_release_share": _("Idle sessions whose cache was released"),
    "overload_handling": _("Behaviour under overload"),
    "isolation_ttft_p95_ms": _("TTFT p95 of interactive traffic under another client's flood"),
    "capacity_prediction_error": _("Capacity prediction error"),
    "cost_per_mtok": _("Cost per million output tokens"),
}


def metric_name(key: str) -> Message | str:
    """A measured figure's name as people read it (its key when it has none)."""
    name = METRIC_NAMES.get(key)
    return Message(name) if name else key


def metric_names(keys: Iterable[str]) -> Any:
    """Figures' names as one list inside a sentence ("a, b" / "a、b")."""
    return NAME_SEPARATOR.join(metric_name(key) for key in keys)


def result_notes(
    candidates: list[CandidateScore], passing: list[CandidateScore], include_simulated: bool
) -> list[Message]:
    """What a reader of the scores must know: SIMULATED evidence, missing evidence, screened-out candidates."""
    notes: list[Message] = []
    if not include_simulated:
        excluded = sum(
            1
            for c in candidates
            for cs in c.criteria.values()
            for i in cs.indicators
            if i.status == "excluded_simulated"
        )
        if excluded:
            notes.append(
                Message(
                    _("%(excluded)s SIMULATED indicator value(s) excluded from this final scoring"),
                    {"excluded": str(excluded)},
                )
            )
    else:
        notes.append(Message(_("SIMULATED evidence included: this scoring is not signable")))
    if any(c.coverage < 1.0 - 1e-12 for c in candidates):
        notes.append(
            Message(
                _(
                    "Some evidence is missing: totals are lower bounds (missing evidence contributes "
                    "nothing); the upper bound (≤) shows the most it could add"
                )
            )
        )
    if len(passing) < len(candidates):
        notes.append(
            Message(
                _("%(count)s candidate(s) screened out by the gates"), {"count": str(len(candidates) - len(passing))}
            )
        )
    return notes


def candidate_fit(
    evidence: CandidateEvidence, constraints: ScoringConstraints, include_simulated: bool
) -> list[dict[str, Any]]:
    """The candidate's fit to each constraint the sheet states (`procurement.constraint_fit`, then the GPU
    budget), from the figures this scoring reads (SIMULATED ones only when it includes them)."""
    sheet = {
        "peak_concurrency": constraints.target_concurrency,
        "gpu_count_budget": constraints.gpu_count_budget,
        "throughput_target_tokens_s": constraints.throughput_target_tok_s,
        "ttft_p95_ms": constraints.ttft_p95_ms,
        "tpot_p95_ms": constraints.tpot_p95_ms,
        "max_input_tokens": constraints.max_context_tokens,
    }
    metrics = {
        name: {"value": m.value, "run_ids": list(m.run_ids), "evidence": m.evidence}
        for name, m in evidence.metrics.items()
        if include_simulated or m.evidence != SIMULATED
    }
    rows = procurement.constraint_fit(sheet, metrics, evidence.verdicts)
    gpus = procurement.gpu_fit(sheet, evidence.gpu_count) if evidence.gpu_count else None
    return rows + ([gpus] if gpus else [])


def headline_sentences(
    order: list[CandidateScore],
    tie: dict[str, Any],
    labels: dict[str, str],
    candidates: list[CandidateScore],
    winner: str | None = None,
    fit: dict[str, list[dict[str, Any]]] | None = None,
) -> list[Message]:
    """The scoring's first sentences: the recommendation (naming every constraint it fails) or the tie,
    the tie-break, and why each screened-out candidate is out."""
    sentences = []
    if order and winner is None:
        sentences.append(
            Message(
                _("No candidate is recommended: %(explanation)s."),
                {"explanation": tie["explanation"]},
            )
        )
    elif order:
        first = order[0]
        values = {"name": first.label, "total": f"{first.total:.3f}", "coverage": f"{first.coverage:.0%}"}
        misses = procurement.shortfall_messages((fit or {}).get(first.candidate) or [])
        if misses:
            sentences.append(
                Message(
                    _(
                        "%(name)s is recommended by the gates with a weighted total of %(total)s (evidence coverage "
                        "%(coverage)s), but %(misses)s."
                    ),
                    {**values, "misses": CLAUSE_SEPARATOR.join(misses)},
                )
            )
        elif first.total_upper > first.total + 1e-9:
            sentences.append(
                Message(
                    _(
                        "%(name)s is recommended with a weighted total of %(total)s (up to %(upper)s if "
                        "missing evidence came in at full marks), evidence coverage %(coverage)s."
                    ),
                    {**values, "upper": f"{first.total_upper:.3f}"},
                )
            )
        else:
            sentences.append(
                Message(
                    _("%(name)s is recommended with a weighted total of %(total)s, evidence coverage %(coverage)s."),
                    values,
                )
            )
        if tie.get("applied"):
            sentences.append(Message(_("Tie-break applied: %(explanation)s."), {"explanation": tie["explanation"]}))
    else:
        sentences.append(Message(_("No candidate passes the gates.")))
    for cand in candidates:
        if cand.screened_out:
            sentences.append(
                Message(
                    _("%(name)s is screened out: %(reasons)s."),
                    {"name": cand.label, "reasons": CLAUSE_SEPARATOR.join(cand.screen_reasons)},
                )
            )
    return sentences


def held_out_sentences(evidence: Iterable[CandidateEvidence], labels: dict[str, str]) -> list[Message]:
    """Per candidate, the figures held out of the scoring and why (a client-bound run's figures are
    the client's, not the engine's), and the latencies scored with the client's lateness as their
    interval (the client still applied the load; its lateness can only have lengthened them)."""
    sentences = []
    for ev in evidence:
        name = labels.get(ev.candidate, ev.candidate)
        if ev.held_out:
            sentences.append(
                Message(
                    _("%(name)s: %(metrics)s held out of the scoring: %(reasons)s."),
                    {
                        "name": name,
                        "metrics": metric_names(sorted(ev.held_out)),
                        "reasons": CLAUSE_SEPARATOR.join(dict.fromkeys(ev.held_out[k] for k in sorted(ev.held_out))),
                    },
                )
            )
        late = {key: m.client_bound for key, m in sorted(ev.metrics.items()) if m.client_bound}
        if late:
            sentences.append(
                Message(
                    _(
                        "%(name)s: %(metrics)s scored with the client's lateness in their interval (the load was "
                        "held; the lateness can only have lengthened them): %(reasons)s."
                    ),
                    {
                        "name": name,
                        "metrics": metric_names(late),
                        "reasons": CLAUSE_SEPARATOR.join(dict.fromkeys(late.values())),
                    },
                )
            )
    return sentences
