"""The scoring's sentences for people: the headline (the recommendation naming every constraint it
fails, or the tie, the tie-break, the screened-out candidates), the notes, the figures held out; and
each candidate's fit to the constraints those sentences name."""

from __future__ import annotations

from typing import Any, Iterable

from selection.domain import procurement
from selection.domain.messages import CLAUSE_SEPARATOR, Message
from selection.domain.scoring.base import SIMULATED
from selection.domain.scoring.inputs import CandidateEvidence, ScoringConstraints
from selection.domain.scoring.results import CandidateScore


def _(text: str) -> str:  # named `_` so `makemessages` collects the templates; translated where shown
    return text


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
                        "metrics": ", ".join(sorted(ev.held_out)),
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
                        "metrics": ", ".join(late),
                        "reasons": CLAUSE_SEPARATOR.join(dict.fromkeys(late.values())),
                    },
                )
            )
    return sentences
