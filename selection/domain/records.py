"""What a decision record must contain: the context dict the PDF template renders.

Pure (no Django). ``build_record_context`` checks a context, lists every missing or wrong
section in ONE error, and adds derived values (capacity deviations, the SIMULATED flag).
A complete example context for tests and the benchmark is ``tests.support.record_context``.

Context shape (sections appear in the PDF in this order; "[...]" = list of):

    record:        {id, version:int, title, created_at (ISO str), language?}
    summary?:      the one-page procurement summary, printed first (selection.domain.procurement):
                   {fit:[{key, constraint, required, observed, status: pass|fail|not_validated, runs:[str],
                    unsettled?:[str] (its run's verdicts that did not pass), simulated, configuration}],
                    budget:{monthly, currency}, cost_per_mtok:{value, runs, simulated}|None, gpu_price,
                    economics?:{monthly, status: within|over|not_derivable, verdict, breakdown, replicas,
                    growth_label, growth, growth_verdict, growth_status, limits} (selection.scoring.economics),
                    licence:{value, source, note, terms}, vendor_support,
                    delivery_owner, test_gaps:[{test, outcome, detail, run}],
                    open_items:[{key, section, item, note, owner_roles, status: open|resolved|waived,
                    reason, decided_by}]}   build adds unresolved:int and blockers:[str]
    simulated:     bool - derived: True when any manifest entry is SIMULATED (may not be False then)
    decision:      {chosen_engine, chosen_configuration, summary, rationale:[str]}
    risk_boundary: {applies_to:[str], does_not_apply_to:[str]}
    constraints:   [{label, value}]                       - the one-page business constraints
    scenario:      {id: A|B|C|D, name, reasons:[str]}
    weights:       {source: preset|edited, edited_by?, edit_reason?,
                    items:[{criterion, weight: float, preset?: float}]}
    gates:         [{dimension, threshold, results:[{candidate, passed: bool, note?}]}]
    candidates:    [{name, version, kept: bool, screening_note, documentation_screen?, documentation?, source?}]
                   (documentation: a page written for readers; source: a source file such as a pyproject)
    capacity:      [{candidate, configuration, rows:[{quantity, unit, predicted, measured?}]}]
    economics?:    {tables:[{columns:[str], rows:[{key, label, cells:[{text, meta, status}]}]}], budget,
                    hours_per_month, host_price}   - cost against the budget and growth, chosen first
                   build adds per row: deviation_pct (float|None), flagged (|deviation| > 10 %)
    validation:    [{test, candidate, summary, verdicts?:[str] (every verdict, in words),
                     judged?:[{criterion, status, outcome, value, threshold, n, interval, detail}] (each verdict
                     with the figure it judged), verdict: pass|fail|inconclusive|...,
                     metrics:[{name, value, unit, n?, interval?}] (the figures the test judged: warm vs
                     resumed vs recomputed, caching on vs off, per rung, ...), charts:[{title, svg: str}]}]
                   in the articles' order of the tests
    scores:        {criteria:[str], rows:[{candidate, values:[float|None], total?: float|None,
                    topsis: float|None, rank: int|None, screened_out?: bool}], method?: str,
                    sensitivity:[str], evidence_coverage:[{candidate, coverage: 0..1, note?}],
                    scoring_rules:[{criterion, rule}]}
                   None is a missing score (printed "—", never 0). build adds `tables`: the rows
                   transposed (criteria down, candidates across), at most SCORE_COLUMNS candidates
                   per table, so no table is wider than the page however many candidates compete
    rollout:       {headroom:{percent: 20..30, statement},
                    monitoring:[{signal: memory|cache_hit_rate|swap|fragmentation|<other>,
                                 metric (the engine's real name), threshold, action?, owner?}],
                    swap_policy:{statement, never_swap:[str]},
                    hardware (what the evidence ran on against the target), provenance_flags?:[str],
                    kv_format_compatibility, fallback, rollback,
                    staged_rollout?:[{stage, traffic_percent, gate, decides}]}
    operations:    {record_id, engine:{slug, version, name}, job, metrics:{role:{metric, type}},
                    thresholds:{kv_usage_warning, ttft_p95_ms?, ...}, headroom_percent, evidence,
                    owner, rollback}            - what selection.domain.monitoring exports
    project_checks:{affected:{applications, teams, data:[str], confirmed_by},
                    readiness:{items:[{item, status: ready|not_ready|not_stated, note, hint}], confirmed_by},
                    acceptance:{pilot_result, stages:[...], stages_derived, confirmed_by},
                    security:{items:[...], confirmed_by}, watch:{capacity, cost, stability},
                    open_items:[str]}          - selection.domain.project_checks.record_section
    evidence:      [{kind: configuration|runtime|responsibility|review, checks, evidence, review}]
    manifest:      [{kind: run|artifact, name, tool, version, sha256 (64 hex),
                     provenance: MEASURED|SIMULATED}]
    owners:        [{role: business|platform|security, name, team?, approved_at?: ISO str,
                     certificate_sha256 (64 hex: the owner's enrolled signing certificate, which
                     verification checks their signature field against), certificate_subject?,
                     development_certificate?: bool}]  - three different people
    seal:          {name}?                                  - optional organisational seal box
    observer:      {name, team?, watches}
    review:        {review_by: ISO date, triggers:[str]}  - build merges REEVALUATION_TRIGGERS
    lineage:       {supersedes?: str, superseded_by?: str}
    score:         {id, inputs_hash, rules_version}?           - the scoring snapshot behind section 9
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from selection.domain import procurement

REQUIRED_SECTIONS = (
    "record",
    "decision",
    "risk_boundary",
    "constraints",
    "scenario",
    "weights",
    "gates",
    "candidates",
    "capacity",
    "validation",
    "scores",
    "rollout",
    "evidence",
    "manifest",
    "owners",
    "observer",
    "review",
    "operations",
    "project_checks",
)  # lineage (supersedes / superseded_by) and seal are optional
OWNER_ROLES = ("business", "platform", "security")
MONITORED_SIGNALS = ("memory", "cache_hit_rate", "swap", "fragmentation")
EVIDENCE_KINDS = ("configuration", "runtime", "responsibility", "review")
PROVENANCES = ("MEASURED", "SIMULATED")
CHECK_STATUSES = ("ready", "not_ready", "not_stated")
HEADROOM_RANGE = (20.0, 30.0)
PLANNED_HEADROOM_PERCENT = procurement.KV_HEADROOM_PERCENT  # the headroom a record requires and plans with
REVIEW_AFTER_DAYS = 180  # a record is reviewed at the latest this long after it is written
CAPACITY_FLAG_FRACTION = 0.10
SCORE_COLUMNS = 4  # candidates per scores table: beside the criterion column, they fit A4 portrait
REEVALUATION_TRIGGERS = (
    "engine major version change",
    "model change",
    "hardware change (GPU generation or memory size)",
    "traffic profile change (concurrency, context lengths, multi-turn share)",
)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RecordContextError(ValueError):
    """The record context is incomplete or inconsistent; ``problems`` lists every issue."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("record context: " + "; ".join(problems))


def capacity_deviation(predicted: float, measured: float | None) -> float | None:
    """Relative deviation of measured from predicted in percent (None if not measured)."""
    if measured is None or predicted in (None, 0):
        return None
    return (float(measured) - float(predicted)) / abs(float(predicted)) * 100.0


def missing_sections(context: dict) -> list[str]:
    """Names of required top-level sections that are absent or empty."""
    return [s for s in REQUIRED_SECTIONS if context.get(s) in (None, "", [], {})]


def _need(ctx: dict, path: str, problems: list[str]) -> Any:
    cur: Any = ctx
    for part in path.split("."):
        if not isinstance(cur, dict) or cur.get(part) in (None, "", [], {}):
            problems.append(f"{path}: missing")
            return None
        cur = cur[part]
    return cur


def score_tables(scores: dict, problems: list[str]) -> list[dict]:
    """The scores transposed for the page: criteria as rows, at most SCORE_COLUMNS candidates as
    columns per table, then the weighted total, TOPSIS and rank. A missing value stays None."""
    criteria = list(scores.get("criteria") or [])
    rows = list(scores.get("rows") or [])
    for i, row in enumerate(rows):
        values = row.get("values")
        if not isinstance(values, list) or len(values) != len(criteria):
            problems.append(f"scores.rows[{i}].values: need one value (or None) per criterion ({len(criteria)})")
            return []
        for key, value in [("values", v) for v in values] + [(k, row.get(k)) for k in ("total", "topsis")]:
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                problems.append(f"scores.rows[{i}].{key}: must be a number or None (missing), got {value!r}")
                return []
    tables = []
    for start in range(0, len(rows), SCORE_COLUMNS):
        chunk = rows[start : start + SCORE_COLUMNS]
        tables.append(
            {
                "candidates": [row.get("candidate") for row in chunk],
                "criteria": [
                    {"name": name, "values": [row["values"][k] for row in chunk]} for k, name in enumerate(criteria)
                ],
                "totals": [row.get("total") for row in chunk],
                "topsis": [row.get("topsis") for row in chunk],
                # a screened-out candidate is never ranked (a snapshot frozen before the scores said so
                # may still carry its old rank): its cell says "screened out"
                "ranks": [None if row.get("screened_out") else row.get("rank") for row in chunk],
                "screened_out": [bool(row.get("screened_out")) for row in chunk],
                "rank_cells": [
                    {
                        "rank": None if row.get("screened_out") else row.get("rank"),
                        "screened_out": bool(row.get("screened_out")),
                    }
                    for row in chunk
                ],
            }
        )
    return tables


_NEEDED_FIELDS = (
    "record.id",
    "record.title",
    "decision.chosen_engine",
    "decision.summary",
    "risk_boundary.applies_to",
    "risk_boundary.does_not_apply_to",
    "scenario.id",
    "weights.items",
    "rollout.headroom",
    "rollout.monitoring",
    "rollout.swap_policy",
    "rollout.hardware",
    "rollout.kv_format_compatibility",
    "rollout.fallback",
    "rollout.rollback",
    "observer.name",
    "review.review_by",
)


def _check_weights(weights: dict, problems: list[str]) -> None:
    if weights.get("source") not in ("preset", "edited"):
        problems.append(f"weights.source: must be 'preset' or 'edited', got {weights.get('source')!r}")
    elif weights["source"] == "edited" and not (weights.get("edited_by") and weights.get("edit_reason")):
        problems.append("weights: edited weights need edited_by and edit_reason")


def _check_rollout(rollout: dict, problems: list[str]) -> Any:
    """Check the headroom and the alerts; return the headroom percent (operations must repeat it)."""
    headroom = (rollout.get("headroom") or {}).get("percent")
    lo, hi = HEADROOM_RANGE
    if not isinstance(headroom, (int, float)) or math.isnan(headroom) or not lo <= headroom <= hi:
        problems.append(f"rollout.headroom.percent: must be within {lo:g}-{hi:g} %, got {headroom!r}")
    signals = {m.get("signal") for m in rollout.get("monitoring") or []}
    for sig in MONITORED_SIGNALS:
        if sig not in signals:
            problems.append(f"rollout.monitoring: no alert for signal {sig!r}")
    for i, m in enumerate(rollout.get("monitoring") or []):
        if not m.get("metric") or not m.get("threshold"):
            problems.append(f"rollout.monitoring[{i}]: needs metric and threshold")
    return headroom


def _check_operations(operations: dict, headroom: Any, problems: list[str]) -> None:
    for key in ("record_id", "engine", "thresholds"):
        if not operations.get(key):
            problems.append(f"operations.{key}: missing")
    if operations.get("headroom_percent") != headroom:
        problems.append(
            f"operations.headroom_percent: must equal rollout.headroom.percent ({headroom!r}), "
            f"got {operations.get('headroom_percent')!r}"
        )
    if operations.get("evidence") not in PROVENANCES:
        problems.append(f"operations.evidence: must be MEASURED or SIMULATED, got {operations.get('evidence')!r}")


def _check_project_checks(checks: dict, problems: list[str]) -> None:
    for section in ("affected", "readiness", "acceptance", "security", "watch"):
        if not isinstance(checks.get(section), dict):
            problems.append(f"project_checks.{section}: missing")
    for section in ("readiness", "security"):
        for i, item in enumerate((checks.get(section) or {}).get("items") or []):
            if item.get("status") not in CHECK_STATUSES:
                problems.append(
                    f"project_checks.{section}.items[{i}].status: must be one of {', '.join(CHECK_STATUSES)}"
                )
    if not ((checks.get("acceptance") or {}).get("stages")):
        problems.append("project_checks.acceptance.stages: at least one rollout stage")
    for area in ("capacity", "cost", "stability"):
        if not (checks.get("watch") or {}).get(area):
            problems.append(f"project_checks.watch.{area}: nobody is named")


def _check_evidence(evidence: list, problems: list[str]) -> None:
    kinds = {e.get("kind") for e in evidence}
    for kind in EVIDENCE_KINDS:
        if kind not in kinds:
            problems.append(f"evidence: no {kind!r} row")


def _check_manifest(manifest: list, problems: list[str]) -> bool:
    """Check every manifest entry; return whether any is SIMULATED."""
    simulated = False
    for i, item in enumerate(manifest):
        if item.get("provenance") not in PROVENANCES:
            problems.append(f"manifest[{i}].provenance: must be MEASURED or SIMULATED, got {item.get('provenance')!r}")
        simulated |= item.get("provenance") == "SIMULATED"
        if not _SHA256.match(str(item.get("sha256", ""))):
            problems.append(f"manifest[{i}].sha256: must be 64 lowercase hex characters")
        for key in ("name", "tool", "version"):
            if not item.get(key):
                problems.append(f"manifest[{i}].{key}: missing")
    return simulated


def _check_owners(owners: list, problems: list[str]) -> None:
    roles = [o.get("role") for o in owners]
    for role in OWNER_ROLES:
        if roles.count(role) != 1:
            problems.append(f"owners: need exactly one {role!r} owner, got {roles.count(role)}")
    for i, o in enumerate(owners):
        if not o.get("name"):
            problems.append(f"owners[{i}].name: missing")
        if not _SHA256.match(str(o.get("certificate_sha256") or "")):
            problems.append(
                f"owners[{i}].certificate_sha256: {o.get('name') or o.get('role')} has no enrolled signing certificate"
            )
    fingerprints = [o.get("certificate_sha256") for o in owners if o.get("certificate_sha256")]
    if len(set(fingerprints)) != len(fingerprints):
        problems.append("owners: two owners share one signing certificate; each signs as themselves")


def _flag_capacity_deviations(capacity: list) -> None:
    for block in capacity:
        for row in block.get("rows", []):
            dev = capacity_deviation(row.get("predicted"), row.get("measured"))
            row["deviation_pct"] = dev
            row["flagged"] = dev is not None and abs(dev) > CAPACITY_FLAG_FRACTION * 100


def _check_charts(validation: list, problems: list[str]) -> None:
    for i, test in enumerate(validation):
        for j, chart in enumerate(test.get("charts", [])):
            if "<svg" not in str(chart.get("svg", "")):
                problems.append(f"validation[{i}].charts[{j}].svg: not SVG markup")


def _with_standard_triggers(triggers: list | None) -> list:
    merged = list(triggers or [])
    merged.extend(t for t in REEVALUATION_TRIGGERS if t not in merged)
    return merged


def build_record_context(context: dict) -> dict:
    """Validate ``context`` and return a copy with derived fields; raise RecordContextError.

    Derived: ``simulated`` (True if any manifest entry is SIMULATED), capacity rows'
    ``deviation_pct``/``flagged``, ``scores.tables`` (see `score_tables`), the standard
    re-evaluation triggers merged into ``review.triggers``, and ``lineage`` defaulted to empty.
    """
    problems = [f"{s}: missing" for s in missing_sections(context)]
    ctx = copy.deepcopy(context)
    ctx.setdefault("lineage", {})
    if problems:
        raise RecordContextError(problems)

    for path in _NEEDED_FIELDS:
        _need(ctx, path, problems)
    _check_weights(ctx["weights"], problems)
    headroom = _check_rollout(ctx["rollout"], problems)
    _check_operations(ctx["operations"], headroom, problems)
    _check_project_checks(ctx["project_checks"], problems)
    _check_evidence(ctx["evidence"], problems)

    simulated = _check_manifest(ctx["manifest"], problems)
    if ctx.get("simulated") is False and simulated:
        problems.append("simulated: is False but the manifest holds SIMULATED evidence")
    ctx["simulated"] = bool(ctx.get("simulated")) or simulated
    if ctx.get("summary"):  # optional: snapshots frozen before the one-page summary have none
        ctx["summary"] = procurement.checked_summary(
            ctx["summary"], simulated=ctx["simulated"], owners=ctx["owners"], problems=problems
        )

    _check_owners(ctx["owners"], problems)
    _flag_capacity_deviations(ctx["capacity"])
    _check_charts(ctx["validation"], problems)
    ctx["scores"]["tables"] = score_tables(ctx["scores"], problems)
    ctx["review"]["triggers"] = _with_standard_triggers(ctx["review"].get("triggers"))
    # order owners business, platform, security for the signature page
    ctx["owners"] = sorted(
        ctx["owners"], key=lambda o: OWNER_ROLES.index(o["role"]) if o.get("role") in OWNER_ROLES else 99
    )
    if problems:
        raise RecordContextError(problems)
    return ctx


# --------------------------------------------------------------------------- sample
