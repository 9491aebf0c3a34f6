"""`score_candidates`: score, screen, rank and analyse the candidates, the steps in order (the rules
are in the package's docstring); and the hash of every input a snapshot is keyed by."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Iterable
from typing import Mapping as TMapping

import numpy as np

from selection.domain import tiebreak
from selection.domain.headline import INCONCLUSIVE, decision_headline
from selection.domain.messages import CLAUSE_SEPARATOR, Message
from selection.domain.messages import marked as _
from selection.domain.scoring.aggregation import candidate_score, normalise_weights, score_matrix
from selection.domain.scoring.base import RULES_VERSION, ScoringInputError, check_scenario, json_safe
from selection.domain.scoring.gates import validate_gates
from selection.domain.scoring.inputs import CandidateEvidence, ScoringConstraints, ScoringOptions
from selection.domain.scoring.mappings import mapping_table, mappings_for
from selection.domain.scoring.noise import measurement_noise
from selection.domain.scoring.ranking import ranking_method, topsis
from selection.domain.scoring.results import ScoringResult
from selection.domain.scoring.sensitivity import analyse_sensitivity, without_weight_robustness
from selection.domain.scoring.sentences import candidate_fit, headline_sentences, held_out_sentences, result_notes
from selection.domain.scoring.ties import (
    contender,
    core_dimensions,
    core_label,
    core_weights,
    noise_tie,
    tie_break_dict,
    tie_section,
)


def inputs_hash(
    scenario: str,
    evidence: Iterable[CandidateEvidence],
    constraints: ScoringConstraints,
    weights: TMapping[str, float],
    gates: TMapping[str, float],
    options: ScoringOptions,
) -> str:
    """SHA-256 of the canonical JSON of every input and the rules version."""
    document = {
        "rules_version": RULES_VERSION,
        "scenario": scenario,
        "evidence": [asdict(ev) for ev in evidence],
        "constraints": asdict(constraints),
        "weights": dict(weights),
        "gates": dict(gates),
        "options": asdict(options),
    }
    canonical = json.dumps(json_safe(document), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def score_candidates(
    scenario: str,
    evidence: list[CandidateEvidence],
    constraints: ScoringConstraints,
    weights: TMapping[str, float],
    gates: TMapping[str, float] | None = None,
    options: ScoringOptions | None = None,
) -> ScoringResult:
    """Score, screen, rank and analyse the candidates. See the module docstring for the rules."""
    check_scenario(scenario)
    options = options or ScoringOptions()
    gates = dict(gates or {})
    if not evidence:
        raise ScoringInputError("evidence: at least one candidate is needed")
    ids = [ev.candidate for ev in evidence]
    if len(set(ids)) != len(ids):
        raise ScoringInputError(f"evidence: candidate ids must be unique, got {ids}")
    if not (0.0 <= options.tie_margin < 1.0):
        raise ScoringInputError(f"options.tie_margin: must be in [0, 1), got {options.tie_margin}")
    norm_w = normalise_weights(weights)
    validate_gates(gates, norm_w)
    rows = mappings_for(scenario)
    criteria_ids = list(norm_w)

    candidates = [
        candidate_score(ev, norm_w, rows, constraints, scenario, gates, options.include_simulated) for ev in evidence
    ]

    passing = [c for c in candidates if not c.screened_out]
    matrix = score_matrix(passing, criteria_ids)
    w_vec = np.array([norm_w[c] for c in criteria_ids])
    if len(passing) >= 2:
        for cand, closeness in zip(passing, topsis(matrix, w_vec), strict=True):
            cand.topsis = float(closeness)

    core = core_dimensions(gates, scenario)
    decision = tiebreak.decide([contender(c, core) for c in passing], options.tie_margin, core_label(core))
    leader = min(passing, key=lambda c: (-c.total, c.candidate)).candidate if passing else None
    labels = {c.candidate: c.label for c in candidates}
    sensitivity = analyse_sensitivity(matrix, w_vec, [c.candidate for c in passing], criteria_ids, options, labels)
    by_id = {c.candidate: c for c in candidates}
    order = [by_id[cid] for cid in decision.order]
    tie = tie_break_dict(decision, options.tie_margin)
    sensitivity["noise"] = measurement_noise(
        passing, order, tie, criteria_ids, w_vec, options, labels, core_weights(passing, criteria_ids, w_vec, core)
    )
    decision = noise_tie(decision, passing, sensitivity["noise"], core)
    order, tie = [by_id[cid] for cid in decision.order], tie_break_dict(decision, options.tie_margin)
    for cand in candidates:  # a screened-out candidate is never ranked
        cand.rank = decision.ranks.get(cand.candidate)
    screened = sorted((c for c in candidates if c.screened_out), key=lambda c: (-c.total, c.candidate))
    ranking = [c.candidate for c in order] + [c.candidate for c in screened]
    fit = {
        c.candidate: candidate_fit(ev, constraints, options.include_simulated)
        for c, ev in zip(candidates, evidence, strict=True)
    }
    tied = tie_section(decision, by_id, criteria_ids)
    if tied:  # weight robustness is not reported for a tie: nothing is first to be robust
        sensitivity = without_weight_robustness(sensitivity)
    else:
        sensitivity["sentences"].append(sensitivity["noise"]["sentence"])
    uses_sim = any(c.uses_simulated for c in candidates)
    notes = result_notes(candidates, passing, options.include_simulated)
    sentences = headline_sentences(order, tie, labels, candidates, decision.winner, fit)
    sentences += held_out_sentences(evidence, labels)
    method = ranking_method(order, passing, matrix, w_vec, criteria_ids, tied=bool(tied))
    sentences.append(method["sentence"])
    if decision.winner is not None and leader is not None and decision.winner != leader and len(passing) >= 2:
        sentences.append(
            Message(
                _(
                    "The sensitivity figures below concern the weighted-sum ranking, which %(leader)s "
                    "leads; the tie-break prefers %(preferred)s within the margin."
                ),
                {"leader": labels[leader], "preferred": order[0].label},
            )
        )
    sentences += sensitivity["sentences"]

    result = ScoringResult(
        rules_version=RULES_VERSION,
        inputs_hash=inputs_hash(scenario, evidence, constraints, weights, gates, options),
        scenario=scenario,
        final=not options.include_simulated,
        signable=(not options.include_simulated) and not uses_sim,
        weights=norm_w,
        gates=gates,
        options=options,
        candidates=candidates,
        ranking=ranking,
        winner=decision.winner,
        weighted_sum_leader=leader,
        tie_break=tie,
        sensitivity=sensitivity,
        sentences=sentences,
        mappings=mapping_table(scenario),
        notes=notes,
        method=method,
        fit=fit,
        rests_on=decision.rests_on,
        tie=tied,
        core_dimensions=core,
    )
    verdict = decision_headline(result.to_dict())
    if verdict["verdict"] == INCONCLUSIVE and order and decision.winner is not None:
        first = order[0]
        result.sentences[0] = Message(
            _(
                "Inconclusive: %(name)s leads with a weighted total of %(total)s (evidence coverage %(coverage)s), "
                "but %(reasons)s."
            ),
            {
                "name": first.label,
                "total": f"{first.total:.3f}",
                "coverage": f"{first.coverage:.0%}",
                "reasons": CLAUSE_SEPARATOR.join(verdict["inconclusive_reasons"]),
            },
        )
    return result
