"""Build a decision record's context (the dict `domain.records` defines) from a selection's state.

This is the snapshot that is frozen when review starts: everything the PDF shows comes from it,
so a signed record never changes when the selection does. The domain's sentences (scenario
reasons, scoring sentences, gate and screening reasons) are written into it as text in the
record's language, as the rest of its prose is.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Iterable

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext, pgettext

from benchmarks import presentation, suite
from benchmarks import verdicts as verdict_status
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.run_charts import Budgets, candidate_colours, record_charts
from benchmarks.selectors import latest_runs
from benchmarks.suite.concurrency_stress import CONCURRENCY
from benchmarks.suite.long_context import INPUT_LENGTH
from benchmarks.suite.swap_recovery import CONTINUATION, NEVER_SWAP, SWAP_DELAY, SWAP_IN
from selection.candidates import probing
from selection.candidates.screening import documentation_screen
from selection.capacity.measured import measured_capacity, stated_label
from selection.capacity.plans import plan_for_candidate
from selection.certificates.services import current_certificate
from selection.domain import catalog as catalog_domain
from selection.domain import claims as claims_domain
from selection.domain import criteria as criteria_domain
from selection.domain import launch_flags as launch_flags_domain
from selection.domain import monitoring as monitoring_domain
from selection.domain import project_checks as project_checks_domain
from selection.domain import records as records_domain
from selection.domain import screening
from selection.domain import tie_ground as tie_domain
from selection.domain.capacity.base import CapacityError
from selection.domain.messages import CLAUSE_SEPARATOR, load, to_json
from selection.domain.scenarios import SCENARIO_NAMES
from selection.i18n import clauses, labelled, message_text, person_name, record_language
from selection.i18n import sentences as joined_sentences
from selection.models import Candidate, DecisionRecord, Selection
from selection.records.summary import build_summary
from selection.scoring.economics import economics_table
from selection.scoring.services import compute_scores
from selection.selectors import compared_candidates

DIMENSION_NAMES = {d.id: d.name for d in criteria_domain.DIMENSIONS}
# What the owner does when the alert fires (translated into the record's language when frozen).


def _cost_text(c) -> str:
    """The constraints' prices: the GPU-hour and an offload tier's host memory per GiB-month."""
    parts = []
    if c.cost_per_gpu_hour is not None:
        parts.append(_("%(cost)s per GPU-hour") % {"cost": c.cost_per_gpu_hour})
    if c.host_memory_cost_per_gib_month is not None:
        parts.append(_("host memory %(cost)s per GiB-month") % {"cost": c.host_memory_cost_per_gib_month})
    return clauses(parts) or "—"


def _growth_text(c) -> str:
    if not c.growth_factor:
        return "—"
    if not c.growth_horizon_months:
        return f"×{c.growth_factor:g}"
    return _("×%(factor)s in %(months)s months") % {"factor": f"{c.growth_factor:g}", "months": c.growth_horizon_months}


def _constraints_rows(selection: Selection) -> list[dict[str, str]]:
    c = selection.constraints
    rows = [
        (
            _("Concurrency"),
            _("peak %(n)s concurrent requests") % {"n": f"{c.peak_concurrency:,}"}
            + (_(", p95 %(n)s") % {"n": f"{c.p95_concurrency:,}"} if c.p95_concurrency is not None else "")
            + (_(", %(rate)s req/s") % {"rate": f"{c.request_rate:g}"} if c.request_rate else "")
            + (_(", %(n)s tenants") % {"n": c.tenants} if c.tenants else ""),
        ),
        (
            _("Input tokens"),
            _("average %(avg)s, p95 %(p95)s, max %(max)s")
            % {
                "avg": f"{c.avg_input_tokens:,}",
                "p95": f"{c.p95_input_tokens:,}" if c.p95_input_tokens else "—",
                "max": f"{c.max_input_tokens:,}",
            },
        ),
        (
            _("Output tokens"),
            _("average %(avg)s, max %(max)s") % {"avg": f"{c.avg_output_tokens:,}", "max": f"{c.max_output_tokens:,}"}
            + (_(", p95 %(n)s") % {"n": f"{c.p95_output_tokens:,}"} if c.p95_output_tokens is not None else ""),
        ),
        (
            _("Prefix sharing"),
            _("%(pct)s of input tokens repeat a prefix already sent") % {"pct": f"{c.prefix_sharing_ratio:.0%}"}
            if c.prefix_sharing_ratio is not None
            else "—",
        ),
        (
            _("Multi-turn"),
            (
                _(
                    "yes: %(turns)s turns, %(idle)s s idle between turns, %(sessions)s concurrent sessions, "
                    "%(never)s never swapped"
                )
                % {
                    "turns": f"{c.average_turns:g}",
                    "idle": f"{c.idle_seconds_between_turns or 0:g}",
                    "sessions": c.concurrent_sessions or "—",
                    "never": c.never_swap_sessions or 0,
                }
            )
            + (
                _("; the others accept a swap-in delay up to %(ms)s ms") % {"ms": f"{c.swap_in_delay_budget_ms:g}"}
                if c.swap_in_delay_budget_ms is not None
                else ""
            )
            if c.multi_turn
            else _("no"),
        ),
        (
            _("Latency budget"),
            _("TTFT p95 %(ttft)s ms, TPOT p95 %(tpot)s ms, end-to-end p95 %(e2e)s ms")
            % {"ttft": c.ttft_p95_ms or "—", "tpot": c.tpot_p95_ms or "—", "e2e": c.e2e_p95_ms or "—"},
        ),
        (
            _("Throughput target"),
            _("%(n)s output tokens/s") % {"n": f"{c.throughput_target_tokens_s:g}"}
            if c.throughput_target_tokens_s
            else "—",
        ),
        (
            _("Hardware"),
            _("%(gpu)s, %(mem)s GiB per GPU, budget %(count)s GPUs")
            % {"gpu": c.gpu_model, "mem": f"{c.gpu_memory_gib:g}", "count": c.gpu_count_budget},
        ),
        (_("Cost"), _cost_text(c)),
        (_("Expected growth"), _growth_text(c)),
        (_("Operations team"), _("%(n)s people") % {"n": c.ops_team_size}),
        (
            _("Model"),
            _("%(model)s; KV precision allowed: %(kv)s")
            % {
                "model": c.target_model,
                "kv": pgettext("list separator between names", ", ").join(c.kv_precisions_allowed) or "—",
            },
        ),
    ]
    return [{"label": label, "value": value} for label, value in rows]


def _weights_section(selection: Selection) -> dict[str, Any]:
    presets = criteria_domain.blended_weights(selection.scenario_mix or {selection.scenario or "A": 1.0})
    rows = list(selection.weights.select_related("updated_by"))
    edited = [w for w in rows if w.source == "edited"]
    section: dict[str, Any] = {
        "source": "edited" if edited else "preset",
        "items": [
            {
                "criterion": criteria_domain.CRITERIA_BY_ID[w.criterion].name,
                "weight": round(w.weight, 4),
                "preset": round(presets.get(w.criterion, 0.0), 4),
            }
            for w in rows
        ],
    }
    if edited:
        latest = max(edited, key=lambda w: w.updated_at)
        section["edited_by"] = person_name(latest.updated_by) or "unknown"
        section["edit_reason"] = latest.justification or "—"
    return section


def _gate_passed(candidate_score: dict[str, Any], dimension: str) -> bool:
    outcome = next((o for o in candidate_score.get("gates", []) if o.get("dimension") == dimension), None)
    return bool(outcome and outcome.get("passed"))


def _manifest_entries(run: BenchmarkRun) -> list[dict[str, Any]]:
    """The run, then each file it stored (per-request Parquet, engine log, native result) with its
    SHA-256; the raw upload is the run's own hash."""
    entries = [_manifest_entry(run)]
    for artifact in run.artifacts.exclude(kind=Artifact.Kind.RAW):
        entries.append(
            {
                "kind": "artifact",
                "name": labelled(f"run-{run.pk} {artifact.get_kind_display()}", Path(artifact.file.name).name),
                "tool": run.tool or run.origin,
                "version": run.tool_version or "—",
                "sha256": artifact.sha256,
                "provenance": run.evidence,
            }
        )
    return entries


def _manifest_entry(run: BenchmarkRun) -> dict[str, Any]:
    sha = (
        run.raw_sha256
        or hashlib.sha256(
            json.dumps({"id": run.pk, "test": run.test, "metadata": run.metadata}, sort_keys=True, default=str).encode()
        ).hexdigest()
    )
    return {
        "kind": "run",
        # the test by its title in the record's language (its id is code: the run's page names it)
        "name": f"run-{run.pk} {_(suite.title_of(run.test))} ({run.candidate.display_name})",
        "tool": run.tool or run.origin,
        "version": run.tool_version or "—",
        "sha256": sha,
        "provenance": run.evidence,
    }


def validation_entry(run: BenchmarkRun, budgets: Budgets, colours: dict[str, str]) -> dict[str, Any]:
    """A test's result in the record: its verdicts in words, each with the figure it judged, its
    sample size and interval (`judged`), and the figures the test measured (`metrics`: warm vs
    resumed vs recomputed, caching on vs off, per rung, ...), each with n and interval."""
    verdicts = run.verdicts or []
    return {
        "test": _(suite.title_of(run.test)) + (" (SIMULATED)" if run.is_simulated else ""),
        "run": f"run-{run.pk}",
        "candidate": run.candidate.display_name,
        "summary": _summary(verdicts),
        "observed": presentation.observed_line(run.metadata, run.is_simulated, message_text),
        "verdicts": [_verdict_line(v) for v in verdicts],
        "judged": presentation.judged_rows(verdicts, _, message_text),
        "verdict": presentation.run_verdict(verdicts),
        "metrics": presentation.result_figures(run.test, list(run.points.values()), run.metadata, _),
        "charts": record_charts(run, budgets, colours),
        "soak_length": _record_note(run),  # the key records have stored it under
    }


# The domain's re-evaluation triggers (`records_domain.REEVALUATION_TRIGGERS`, merged into every
# record in English): marked here so the catalogue keeps them; the record template translates them.
TRIGGER_TEXTS = (
    gettext_noop("engine major version change"),
    gettext_noop("model change"),
    gettext_noop("hardware change (GPU generation or memory size)"),
    gettext_noop("traffic profile change (concurrency, context lengths, multi-turn share)"),
)


def _record_note(run: BenchmarkRun) -> str:
    """What the run's test adds under its result in the record (its row's `record_note`: a soak shorter
    than planned), in the active language; "" for none."""
    test = suite.BY_ID.get(run.test)
    note = test.record_note(run.metadata or {}) if test is not None and test.record_note is not None else None
    return "" if note is None else message_text(note)


def _summary(verdicts: list[dict[str, Any]]) -> str:
    """How many verdicts the run has and how they came out; each one is listed below it."""
    if not verdicts:
        return _("No pass criteria were evaluated for this run.")
    outcomes = [verdict_status.status_of(v) for v in verdicts]
    counts = pgettext("list separator between names", ", ").join(
        f"{outcomes.count(status)} {presentation.status_label(status, _)}" for status in dict.fromkeys(outcomes)
    )
    return ngettext("%(n)s verdict: %(counts)s.", "%(n)s verdicts: %(counts)s.", len(verdicts)) % {
        "n": len(verdicts),
        "counts": counts,
    }


def _verdict_line(verdict: dict[str, Any]) -> str:
    """One verdict as the record prints it, in words: every verdict of every test, none left out,
    each with its sample size when it has one."""
    detail = message_text(verdict_status.detail_of(verdict))
    n = verdict.get("n")
    size = f" (n={n})" if n is not None and f"n={n}" not in str(detail or "") else ""
    name = presentation.verdict_label(str(verdict.get("name") or ""), _)
    outcome = presentation.status_label(verdict_status.status_of(verdict), _)
    return labelled(name, outcome) + size + (f" — {detail}" if detail else "")


def _in_articles_order(runs: list[BenchmarkRun], candidates: list) -> list[BenchmarkRun]:
    """Runs by test in the articles' order (stress, long context, swap-out, prefix reuse, stability,
    then the rest), then by candidate as the comparison lists them."""
    rank = {c.pk: i for i, c in enumerate(candidates)}
    order = {test.id: test.number if test.number is not None else 99 for test in suite.TESTS}
    return sorted(runs, key=lambda r: (order.get(r.test, 99), rank.get(r.candidate_id, 99), r.pk))


def _rounded(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def _clauses(reasons, language: str) -> str:
    """Gate or screening reasons (stored messages, or plain text stored before them) as one text in
    the record's language."""
    return message_text(CLAUSE_SEPARATOR.join(load(reason) for reason in reasons), language)


def _cited(url: str) -> dict[str, str]:
    """The engine's cited page under the key of its kind: documentation, or source (a source file)."""
    kind = screening.source_kind(url)
    return {
        "documentation": url if kind == screening.DOCUMENTATION else "",
        "source": url if kind == screening.SOURCE else "",
    }


def _documentation_screen_note(candidate: Candidate, language: str) -> str:
    """Decision step 3 for the record: kept, screened out with the reasons, or kept by an override."""
    screen = documentation_screen(candidate)
    reasons = _clauses(to_json(screen["reasons"]), language)
    if screen["status"] == screening.SCREENED_OUT:
        return _("documentation screen: screened out (%(reasons)s)") % {"reasons": reasons}
    if screen["status"] == screening.OVERRIDDEN:
        override = screen["override"] or {}
        return _("documentation screen: screened out (%(reasons)s), kept by %(who)s: %(why)s") % {
            "reasons": reasons,
            "who": override.get("by", ""),
            "why": override.get("justification", ""),
        }
    if screen["status"] == screening.KEPT and screen["rows"]:
        return _("documentation screen: kept")
    return ""


ROLLBACK = gettext_noop(
    "Roll back by re-pointing traffic to the previous deployment; drain, do not kill, in-flight sessions."
)
NOT_EXPORTED = gettext_noop("not exported by this engine: derive from logs or add an exporter")


def _operations(record: DecisionRecord, selection: Selection, winner, runs: list[BenchmarkRun]) -> dict[str, Any]:
    """What the chosen engine's monitoring watches and the record's thresholds (selection.domain.monitoring)."""
    c = selection.constraints
    catalog = catalog_domain.default_catalog()
    caps: dict[str, Any] = {}
    if winner.engine.slug in catalog.slugs:
        known = [v.version for v in catalog.engine(winner.engine.slug).versions]
        version = winner.engine_version if winner.engine_version in known else None
        caps = catalog.capabilities(winner.engine.slug, version)
        flags = f"{winner.launch_flags or ''} {winner.launch_recipe or ''}"
        caps = launch_flags_domain.apply_to_capabilities(caps, winner.engine.slug, flags)
    metrics_off = (caps.get("off_in_launch_flags") or {}).get(launch_flags_domain.METRICS)
    validated = validated_thresholds(winner, runs, {"peak_concurrency": c.peak_concurrency})
    return {
        "record_id": f"DR-{selection.pk}-v{record.version}",
        "engine": {
            "slug": winner.engine.slug,
            "version": winner.engine_version,
            "name": f"{winner.engine.name} {winner.engine_version}",
        },
        "job": winner.engine.slug,
        "metrics_endpoint": caps.get("metrics_endpoint"),
        "metrics": caps.get("monitoring_metrics") or {},
        "metrics_source": (caps.get("sources") or {}).get("monitoring_metrics"),
        "metrics_off_in_launch_flags": metrics_off,
        "headroom_percent": records_domain.PLANNED_HEADROOM_PERCENT,
        "thresholds": {
            "kv_usage_warning": round(1 - records_domain.PLANNED_HEADROOM_PERCENT / 100, 4),
            "ttft_p95_ms": c.ttft_p95_ms,
            "tpot_p95_ms": c.tpot_p95_ms,
            "e2e_p95_ms": c.e2e_p95_ms,
            # the longest input a long-context run served, else the constraints' maximum, labelled planned
            "max_input_tokens": validated.get("max_input_tokens") or c.max_input_tokens,
            "max_input_validated": validated.get("max_input_tokens") is not None,
            "validated_concurrency": validated.get("validated_concurrency"),
            "planned_concurrency": c.peak_concurrency,
            "validated_output_tokens_per_s": validated.get("validated_output_tokens_per_s"),
            "prefix_hit_ratio_validated": validated.get("prefix_hit_ratio_validated"),
        },
        "evidence": "SIMULATED" if any(r.is_simulated for r in runs) else "MEASURED",
        "owner": person_name(selection.platform_owner),
        "rollback": _(ROLLBACK),
    }


def validated_thresholds(winner, runs: list[BenchmarkRun], planned: dict[str, Any]) -> dict[str, Any]:
    """The monitoring thresholds the chosen engine's runs validate: each test's row reads its own
    (`thresholds`: the longest input served, the load held, the prefix hit ratio) from the engine's run
    of it, counted only while every claim of that test holds on that run."""
    validated: dict[str, Any] = {}
    for test in suite.TESTS:
        run = next((r for r in runs if r.candidate_id == winner.pk and r.test == test.id), None)
        if test.thresholds is None or run is None:
            continue
        if all(_claim(claim, winner, runs).claimed for claim in test.claims):
            validated.update(test.thresholds(list(run.points.values()), run.metadata or {}, planned))
    return validated


METRICS_OFF = gettext_noop("off in the launch flags: the engine exports it only when started with %(flag)s")


def _metric_absent(operations: dict[str, Any]) -> str:
    """Why a monitoring row has no metric: the engine exports none, or its launch flags leave metrics off."""
    off = operations.get("metrics_off_in_launch_flags")
    if off and off.get("flag"):
        return _(METRICS_OFF) % {"flag": off["flag"]}
    return _(NOT_EXPORTED)


def _claim(claim: claims_domain.Claim, winner, runs: list[BenchmarkRun]) -> claims_domain.Outcome:
    """`claim` judged on the chosen engine's run of its test (`selection.domain.claims`)."""
    run = next((r for r in runs if r.candidate_id == winner.pk and r.test == claim.test), None)
    if run is None:
        return claims_domain.judge(claim, None, None)
    return claims_domain.judge_verdicts(claim, str(run.pk), run.verdicts or [], verdict_status.status_of)


def _evidence(outcome: claims_domain.Outcome) -> str:
    """The clause that names the test, its run and each verdict the claim rests on with its outcome."""
    test = _(suite.title_of(outcome.claim.test))
    if outcome.run is None:
        return _("no %(test)s run on the chosen engine") % {"test": test}
    verdicts = message_text(CLAUSE_SEPARATOR).join(
        _("%(verdict)s: %(outcome)s")
        % {
            "verdict": presentation.verdict_label(name, _),
            "outcome": _("not in the run") if status == claims_domain.MISSING else presentation.status_label(status, _),
        }
        for name, status in outcome.verdicts
    )
    return _("%(test)s, run %(run)s: %(verdicts)s") % {"test": test, "run": outcome.run, "verdicts": verdicts}


def _claim_text(outcome: claims_domain.Outcome, **params: Any) -> str:
    """The claim's sentence in the record's language: claimed, or "not validated", with its evidence."""
    return message_text(claims_domain.sentence(outcome, _evidence(outcome), **params))


def _swap_statement(winner, runs: list[BenchmarkRun]) -> str:
    """The swap policy, only as strong as the chosen engine's swap test: swapping out and resuming
    is claimed when the test saw the eviction and resuming cost less than recomputing, the
    continuation after a swap-in only then and when it matched (the swap test's `SWAP_IN`, `CONTINUATION`);
    otherwise each says "not validated" and names the verdicts that stop it."""
    sentences = [_claim_text(_claim(SWAP_IN, winner, runs))]
    continuation = _claim(CONTINUATION, winner, runs)
    if continuation.run is not None:
        sentences.append(_claim_text(continuation))
    run = next((r for r in runs if r.candidate_id == winner.pk and r.test == "swap_recovery"), None)
    line = presentation.observed_line(run.metadata, False, message_text) if run is not None else None
    if line:
        sentences.append(_("Observed: %(line)s.") % {"line": line})
    return joined_sentences(sentences)


def _monitoring_rows(operations: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's monitoring table: the same plan, thresholds, actions and watchers the exported
    alerts.yml and dashboard.json read (`selection.domain.monitoring`)."""
    rows = []
    for item in monitoring_domain.plan_signals(operations):
        alerts = ", ".join(rule["alert"] for rule in item["rules"])
        action = _(monitoring_domain.SIGNAL_ACTIONS[item["signal"]])
        rows.append(
            {
                "signal": item["signal"],
                "title": _(item["title"]),
                "metric": item["metric"] or _metric_absent(operations),
                "threshold": monitoring_domain.render(item["threshold"], _),
                # the alerts by their rule names (code, as alerts.yml names them), set apart from the words
                "action": action
                if alerts
                else pgettext("list separator between clauses", "; ").join([action, _("dashboard only")]),
                "alerts": alerts,
                "owner": monitoring_domain.watcher(operations, item["signal"]),
            }
        )
    return rows


def _project_checks(record: DecisionRecord, selection: Selection, operations: dict[str, Any]) -> dict[str, Any]:
    c = selection.constraints
    business = person_name(selection.business_owner)
    budget = _("the latency budget")
    if c.ttft_p95_ms:
        budget = _("TTFT p95 within %(ttft)s ms") % {"ttft": f"{c.ttft_p95_ms:g}"}
    gate = _("%(budget)s and error rate below %(limit)s for 7 days") % {
        "budget": budget,
        "limit": f"{monitoring_domain.ERROR_RATE_LIMIT:.0%}",
    }
    stages = [
        {"stage": name, "traffic_percent": share, "gate": gate, "decides": business}
        for name, share in ((_("pilot"), 5.0), (_("expand"), 25.0), (_("half"), 50.0), (_("full"), 100.0))
    ]
    hints = {
        "readiness": {
            "permissions": _("who may call the engine and who may change its configuration"),
            "monitoring": _("alert rules and dashboard exported from this record (alerts.yml, dashboard.json)"),
            "logs": _("request and error logs kept, queryable by tenant and application"),
            "capacity": _("GPUs for the capacity plan in this record, with the headroom"),
            "rollback": operations["rollback"],
        },
        "security": {
            "permissions": _("access to the engine's API and to its launch configuration"),
            "logs": _("who called what, kept as long as the policy says"),
            "audit_trail": _("this selection's audit trail and the engine's configuration changes"),
        },
    }
    try:
        checks = project_checks_domain.normalise(record.project_checks or {})
    except project_checks_domain.ProjectChecksError as exc:
        raise records_domain.RecordContextError(exc.problems) from exc
    watcher = person_name(selection.observer) or person_name(selection.platform_owner)
    return project_checks_domain.record_section(checks, stages, watcher, hints)


def _owner_entry(selection: Selection, role: str) -> dict[str, Any]:
    """An owner and the signing certificate they enrolled: their field is checked against it."""
    user = getattr(selection, f"{role}_owner")
    entry = {"role": role, "name": person_name(user), "team": selection.team.name}
    certificate = current_certificate(user)
    if certificate is not None:
        entry.update(
            certificate_sha256=certificate.sha256,
            certificate_subject=certificate.subject,
            development_certificate=certificate.development,
        )
    return entry


def _with_page_one_runs(runs: list[BenchmarkRun], result: dict, score, winner: Candidate) -> list[BenchmarkRun]:
    """`runs` with every run page 1 reads a figure from (the chosen candidate's fit and cost): a figure the
    scores took from an earlier run (the newest one that was not client-bound) is shown with that run in
    the body too."""
    wanted = {str(r) for row in ((result.get("fit") or {}).get(str(winner.pk)) or []) for r in row.get("runs") or []}
    for evidence in (score.inputs or {}).get("evidence") or []:
        if str(evidence.get("candidate")) == str(winner.pk):
            wanted |= {
                str(r) for r in ((evidence.get("metrics") or {}).get("cost_per_mtok") or {}).get("run_ids") or []
            }
    have = {str(run.pk) for run in runs}
    extra = [int(r) for r in wanted - have if r.isdigit()]
    return runs + list(BenchmarkRun.objects.filter(pk__in=extra, candidate=winner).select_related("candidate"))


def page_one_figures(summary: dict[str, Any], validation: list[dict[str, Any]]) -> None:
    """Each figure page 1 shows, repeated in the section of the run it comes from (`figures_on_page_one`),
    as page 1 writes it: a procurement reader finds "1,870 tokens/s per GPU" beside its run."""
    by_run = {entry.get("run"): entry for entry in validation if entry.get("run")}
    for row in summary.get("fit") or []:
        for run in row.get("runs") or []:
            if run in by_run and row.get("observed"):
                by_run[run].setdefault("page_one", []).append({"name": row["constraint"], "value": row["observed"]})
    cost = summary.get("cost_per_mtok") or {}
    for run in cost.get("runs") or []:
        if run in by_run:
            by_run[run].setdefault("page_one", []).append(
                {"name": _("Cost per million output tokens"), "value": cost["value"]}
            )


def record_runs(candidates: Iterable[Candidate], *, include_simulated: bool) -> list[BenchmarkRun]:
    """The runs a record lists (and cites): each candidate's latest successful run per test."""
    return [
        run
        for candidate in candidates
        for run in latest_runs(candidate).values()
        if include_simulated or not run.is_simulated
    ]


def _capacity_block(candidate: Candidate, plan: dict[str, Any], gpu_model: str) -> dict[str, Any]:
    """Predicted against engine-stated capacity for one candidate."""
    stated = measured_capacity(candidate)  # engine-stated (its log or its metrics), labelled so
    return {
        "candidate": candidate.display_name,
        "configuration": f"TP={candidate.tensor_parallel}, KV {candidate.kv_precision}, "
        f"{candidate.gpu_model or gpu_model}",
        "rows": [
            {"quantity": _("KV bytes per token (per GPU)"), "unit": "B", "predicted": plan["kv_bytes_per_token"]},
            {"quantity": _("KV blocks"), "unit": _("blocks"), "predicted": plan["num_blocks"]},
            {
                "quantity": _("Token capacity"),
                "unit": _("tokens"),
                "predicted": plan["token_capacity"],
                "measured": stated.get("token_capacity"),
                # in words in the record's language, the metric expression apart (set as code)
                **{f"measured_{key}": value for key, value in stated_label(stated).items()},
            },
        ],
    }


def _capacity_section(selection: Selection, candidates: Iterable[Candidate], winner) -> tuple[list, dict | None]:
    """(one capacity block per candidate, the winner's plan or None when the model refused it)."""
    blocks, winner_plan = [], None
    for candidate in candidates:
        try:
            plan = plan_for_candidate(candidate)
        except CapacityError as exc:
            blocks.append({"candidate": candidate.display_name, "configuration": str(exc), "rows": []})
            continue
        if candidate is winner:
            winner_plan = plan
        blocks.append(_capacity_block(candidate, plan, selection.constraints.gpu_model))
    return blocks, winner_plan


def _headroom_statement(winner_plan: dict | None) -> str:
    pool_tokens = winner_plan["token_capacity"] if winner_plan else None
    if not pool_tokens:
        return _("Plan with %(pct)s %% memory headroom.") % {"pct": f"{records_domain.PLANNED_HEADROOM_PERCENT:g}"}
    return _(
        "Plan with %(pct)s %% KV headroom: of %(pool)s tokens of KV capacity per replica, budget "
        "%(budget)s for traffic."
    ) % {
        "pct": f"{records_domain.PLANNED_HEADROOM_PERCENT:g}",
        "pool": f"{pool_tokens:,}",
        "budget": f"{int(pool_tokens * (1 - records_domain.PLANNED_HEADROOM_PERCENT / 100)):,}",
    }


def _score_rows(by_id: dict[str, dict], criteria_ids: list[str]) -> list[dict[str, Any]]:
    rows = []
    for cid, cand in sorted(by_id.items(), key=lambda item: item[1].get("rank") or 10**6):
        crit = cand.get("criteria", {})
        rows.append(
            {
                "candidate": cand.get("label") or cid,
                # a missing score stays None: the record prints "—" (missing), never 0
                "values": [_rounded((crit.get(k) or {}).get("score")) for k in criteria_ids],
                "total": _rounded(cand.get("total")),
                "topsis": _rounded(cand.get("topsis")),
                "rank": cand.get("rank"),
                "screened_out": bool(cand.get("screened_out")),
            }
        )
    return rows


def _lines(text: str | None) -> list[str]:
    return [line for line in (text or "").splitlines() if line.strip()]


def _decision_section(
    record: DecisionRecord, selection: Selection, winner, sentences: list, language: str, tie: dict | None = None
) -> dict:
    """Section 1. A choice among tied candidates says so (`tie`: tied on the evidence, chosen on the stated
    ground, in full, with who stated it and when) and never reads as a recommendation."""
    c = selection.constraints
    engine_label = f"{winner.engine.name} {winner.engine_version}"
    section = {
        "chosen_engine": engine_label,
        "chosen_configuration": clauses(
            [
                winner.launch_flags or _("default flags"),
                f"TP={winner.tensor_parallel}, KV {winner.kv_precision}, "
                f"{winner.gpu_count}x {winner.gpu_model or c.gpu_model}",
            ]
        ),
        "summary": record.decision
        or (tie or {}).get("summary")
        or _("Choose %(engine)s for %(selection)s.") % {"engine": engine_label, "selection": selection.name},
        "rationale": _lines(record.rationale) + [message_text(s, language) for s in sentences[:5]],
    }
    if tie is not None:
        section["tie"] = tie
    return section


def _risk_boundary(record: DecisionRecord, selection: Selection, winner, runs: list[BenchmarkRun]) -> dict:
    c = selection.constraints
    applies_to = _lines(record.applies_to) or [
        _claim_text(_claim(CONCURRENCY, winner, runs), n=f"{c.peak_concurrency:,}"),
        _claim_text(
            _claim(INPUT_LENGTH, winner, runs),
            inp=f"{c.max_input_tokens:,}",
            out=f"{c.max_output_tokens:,}",
        ),
        _("%(gpu)s with %(mem)s GiB per GPU") % {"gpu": c.gpu_model, "mem": f"{c.gpu_memory_gib:g}"},
    ]
    does_not_apply_to = _lines(record.does_not_apply_to) or [
        _("other GPU generations or memory sizes (results do not carry over)"),
        _(
            "contexts beyond %(n)s tokens at high concurrency: use retrieval, chunking or asynchronous batch "
            "rather than more cache tuning"
        )
        % {"n": f"{c.max_input_tokens + c.max_output_tokens:,}"},
    ]
    return {"applies_to": applies_to, "does_not_apply_to": does_not_apply_to}


def _gates_section(selection: Selection, by_id: dict[str, dict], language: str) -> list[dict[str, Any]]:
    def failed_reasons(cand: dict, dimension: str):
        return (
            o.get("reason") or ""
            for o in cand.get("gates", [])
            if o.get("dimension") == dimension and not o.get("passed")
        )

    gates = [
        {
            "dimension": DIMENSION_NAMES[g.dimension],
            "threshold": _("the dimension and each of its own criteria >= %(threshold)s")
            % {"threshold": f"{g.threshold:.2f}"},
            "results": [
                {
                    "candidate": cand.get("label") or cid,
                    "passed": _gate_passed(cand, g.dimension),
                    "note": _clauses(failed_reasons(cand, g.dimension), language),
                }
                for cid, cand in by_id.items()
            ],
        }
        for g in selection.gates.all()
    ]
    return gates or [{"dimension": "none", "threshold": "no gates were set", "results": []}]


def _candidates_section(candidates: dict[str, Candidate], by_id: dict[str, dict], language: str) -> list[dict]:
    return [
        {
            "name": cand.display_name,
            # a version the catalog does not list is planned with the newest one's facts, and says so
            "version": " — ".join(filter(None, [cand.engine_version, probing.version_note(cand)])),
            "kept": not by_id.get(cid, {}).get("screened_out", False),
            "screening_note": _clauses(by_id.get(cid, {}).get("screen_reasons") or [], language)
            or _("passes the gates"),
            "documentation_screen": _documentation_screen_note(cand, language),
            # a pyproject or source file is cited as source, a page as documentation
            **_cited(cand.engine.data.get("homepage", {}).get("source") or ""),
        }
        for cid, cand in candidates.items()
    ]


def _validation_section(runs: list[BenchmarkRun], selection: Selection, colours: dict, engine_label: str) -> list:
    c = selection.constraints
    return [validation_entry(r, Budgets(c.ttft_p95_ms, c.tpot_p95_ms), colours) for r in runs] or [
        {
            "test": "none",
            "candidate": engine_label,
            "summary": "No validation evidence in this record.",
            "verdict": "inconclusive",
            "metrics": [],
            "charts": [],
        }
    ]


def _method_and_sentences(result: dict) -> tuple[Any, list]:
    """The scoring's ranking-method sentence and its other sentences (the method has its own line)."""
    method = (result.get("method") or {}).get("sentence")
    return method, [s for s in result.get("sentences") or [] if s != method]


def _scores_section(result: dict, by_id: dict[str, dict], criteria_ids: list[str], language: str) -> dict:
    method, sentences = _method_and_sentences(result)
    return {
        "criteria": [criteria_domain.CRITERIA_BY_ID[k].name for k in criteria_ids],
        "rows": _score_rows(by_id, criteria_ids),
        "method": message_text(method, language) if method else "",
        "sensitivity": [message_text(s, language) for s in sentences],
        "evidence_coverage": [
            {"candidate": cand.get("label") or cid, "coverage": cand.get("coverage") or 0.0}
            for cid, cand in by_id.items()
        ],
        "scoring_rules": [
            {"criterion": m["criterion"], "rule": m.get("formula") or m.get("rule") or ""}
            for m in result.get("mappings", [])
        ],
    }


def _rollout_section(
    selection: Selection,
    winner,
    runs: list[BenchmarkRun],
    operations: dict[str, Any],
    project_checks: dict[str, Any],
    winner_plan: dict | None,
) -> dict[str, Any]:
    c = selection.constraints
    provenance = probing.evidence_provenance(winner, runs)
    never_swap = (
        [_claim_text(_claim(NEVER_SWAP, winner, runs), n=str(c.never_swap_sessions))] if c.never_swap_sessions else []
    )
    single = _("Single-turn traffic: no session swap policy needed.")
    statement = _swap_statement(winner, runs) if c.multi_turn else single
    if c.multi_turn and c.swap_in_delay_budget_ms is not None:  # the class that accepts a delay, against its budget
        budget = f"{c.swap_in_delay_budget_ms:g}"
        statement = joined_sentences([statement, _claim_text(_claim(SWAP_DELAY, winner, runs), ms=budget)])
    return {
        "headroom": {"percent": records_domain.PLANNED_HEADROOM_PERCENT, "statement": _headroom_statement(winner_plan)},
        "monitoring": _monitoring_rows(operations),
        "swap_policy": {"statement": statement, "never_swap": never_swap},
        # what the evidence ran on (the engine host, never the load client) against the target
        "hardware": joined_sentences(
            [
                provenance["statement"],
                _("Valid for %(gpu)s with %(mem)s GiB; re-validate on any other GPU or memory size.")
                % {"gpu": c.gpu_model, "mem": f"{c.gpu_memory_gib:g}"},
            ]
        ),
        "provenance_flags": provenance["flags"],
        "kv_format_compatibility": _(
            "Check KV-cache format compatibility before engine or model upgrades: an "
            "incompatible upgrade invalidates all cache at once and spikes memory."
        ),
        "fallback": _("Keep the previous engine deployment warm for one release cycle."),
        "rollback": operations["rollback"],
        "staged_rollout": project_checks["acceptance"]["stages"],
    }


def _evidence_section(selection: Selection, runs: list[BenchmarkRun]) -> list[dict[str, str]]:
    """Section 11's rows in the record's language (`kind` stays the domain's id; the template names it)."""
    return [
        {
            "kind": "configuration",
            "checks": _("engine version, launch flags, model and hardware"),
            "evidence": _("candidate configuration and capacity plan in this record"),
            "review": _("versions kept in kvselect"),
        },
        {
            "kind": "runtime",
            "checks": _("latency, errors, KV usage"),
            "evidence": ngettext(
                "%(n)s validation run listed in the manifest", "%(n)s validation runs listed in the manifest", len(runs)
            )
            % {"n": len(runs)},
            "review": _("queryable per run in kvselect"),
        },
        {
            "kind": "responsibility",
            "checks": _("approval and ownership"),
            "evidence": _("owners' approvals and signatures"),
            "review": _("audit trail of the selection"),
        },
        {
            "kind": "review",
            "checks": _("degradation, rollback, next optimisation"),
            "evidence": _("re-evaluation triggers and review-by date"),
            "review": _("observer: %(name)s") % {"name": person_name(selection.observer) or "—"},
        },
    ]


def _manifest_section(runs: list[BenchmarkRun]) -> list[dict[str, Any]]:
    return [entry for r in runs for entry in _manifest_entries(r)] or [
        {
            "kind": "run",
            "name": "no runs",
            "tool": "—",
            "version": "—",
            "sha256": hashlib.sha256(b"no evidence").hexdigest(),
            "provenance": "MEASURED",
        }
    ]


def _record_header(record: DecisionRecord, selection: Selection, language: str) -> dict[str, Any]:
    return {
        "id": f"DR-{selection.pk}-v{record.version}",
        "version": record.version,
        "title": selection.name,
        "created_at": timezone.now().isoformat(),
        "language": language,
        "time_zone": timezone.get_current_timezone_name(),
    }


TIE_FIELD_LABELS = {
    tie_domain.CHOICE_FIELD: gettext_noop("Which tied candidate"),
    tie_domain.GROUND_FIELD: gettext_noop("Ground for choosing it"),
}


def _winner(
    record: DecisionRecord, result: dict, candidates: dict[str, Candidate], language: str
) -> tuple[Candidate, dict[str, Any] | None]:
    """The candidate the record decides for, and its choice among tied candidates (None: the scores'
    recommendation). When the scores tie the record decides only for the tied candidate its drafter chose on
    a stated ground (domain/tie_ground.py); otherwise it is refused, each reason naming its field."""
    winner = candidates.get(str(result.get("winner") or ""))
    labels = {cid: c.display_name for cid, c in candidates.items()}
    tied = tie_domain.tied(result)
    problems = tie_domain.problems(
        tied, labels, record.tie_choice_id, record.tie_ground, winner.display_name if winner else None
    )
    if problems:
        lines = [
            labelled(_(TIE_FIELD_LABELS[field]), message_text(m)) for field, found in problems.items() for m in found
        ]
        separate = clauses(message_text(m) for m in (result.get("tie") or {}).get("separate") or [])
        if tied and separate:
            lines.append(_("What would separate the tied candidates: %(separate)s") % {"separate": separate})
        raise records_domain.RecordContextError(lines)
    if winner is not None:
        return winner, None
    chosen = candidates.get(str(record.tie_choice_id or ""))
    if tied and chosen is None:  # tied, but no longer compared (archived since the draft)
        raise records_domain.RecordContextError(
            [
                _(
                    "%(field)s: the chosen candidate is no longer compared (archived): choose one of the tied "
                    "candidates."
                )
                % {"field": _(TIE_FIELD_LABELS[tie_domain.CHOICE_FIELD])}
            ]
        )
    if chosen is None:
        raise records_domain.RecordContextError(
            [
                _(
                    "Not ready: no candidate passes the gates with evidence yet. Measure the candidates on the "
                    "Evidence page, or revisit the gates, then send the record to review."
                )
            ]
        )
    choice = tie_domain.TiedChoice(
        chosen=chosen.display_name, ground=record.tie_ground or "", tied=tuple(labels[cid] for cid in tied)
    )
    return chosen, {
        "chosen": choice.chosen,
        "chosen_id": chosen.pk,
        "tied": list(choice.tied),
        "ground": choice.ground,  # in full: never clipped, on page 1 or anywhere
        "statement": message_text(tie_domain.statement(choice), language),
        "summary": message_text(tie_domain.summary(choice, record.selection.name), language),
        "stated_by": person_name(record.tie_ground_by) or "",
        "stated_at": record.tie_ground_at.isoformat() if record.tie_ground_at else "",
        "confirmed_by_role": tie_domain.BUSINESS_CONFIRMS,
    }


def build_context(record: DecisionRecord) -> dict[str, Any]:
    """The full record context for `record`, validated by `domain.records.build_record_context`."""
    selection = Selection.objects.select_related(
        "constraints", "business_owner", "platform_owner", "security_owner", "observer"
    ).get(pk=record.selection_id)
    if not compared_candidates(selection).exists():
        raise records_domain.RecordContextError(["candidates: add candidates and their evidence before a record"])
    score = compute_scores(selection, include_simulated=record.include_simulated)
    result = score.result
    candidates = {str(c.pk): c for c in compared_candidates(selection)}
    colours = candidate_colours([c.display_name for c in candidates.values()])  # one per candidate, every chart
    by_id = {c["candidate"]: c for c in result.get("candidates", [])}
    language = record_language()
    winner, tie = _winner(record, result, candidates, language)
    runs = _with_page_one_runs(
        record_runs(candidates.values(), include_simulated=record.include_simulated), result, score, winner
    )
    ranked = sorted(candidates.values(), key=lambda c: (by_id.get(str(c.pk)) or {}).get("rank") or 10**6)
    runs = _in_articles_order(runs, ranked)
    capacity_blocks, winner_plan = _capacity_section(selection, candidates.values(), winner)
    c = selection.constraints
    operations = _operations(record, selection, winner, runs)
    engine_label = f"{winner.engine.name} {winner.engine_version}"
    criteria_ids = [w.criterion for w in selection.weights.all()]
    _method, sentences = _method_and_sentences(result)
    project_checks = _project_checks(record, selection, operations)
    operations["watchers"] = dict(project_checks["watch"])  # every alert names the record's watcher for its area
    summary = build_summary(selection, winner, runs, score, project_checks)
    validation = _validation_section(runs, selection, colours, engine_label)
    page_one_figures(summary, validation)
    context = {
        "record": _record_header(record, selection, language),
        "simulated": any(r.is_simulated for r in runs),
        "decision": _decision_section(record, selection, winner, sentences, language, tie),
        "risk_boundary": _risk_boundary(record, selection, winner, runs),
        "constraints": _constraints_rows(selection),
        "scenario": {
            "id": selection.scenario,
            "name": SCENARIO_NAMES.get(selection.scenario, ""),
            "reasons": [message_text(r, language) for r in selection.scenario_reasons],
        },
        "weights": _weights_section(selection),
        "gates": _gates_section(selection, by_id, language),
        "candidates": _candidates_section(candidates, by_id, language),
        "capacity": capacity_blocks,
        # cost against the budget and growth of every candidate, the chosen one first (section 7)
        "economics": economics_table(selection, score, [winner, *[c for c in ranked if c.pk != winner.pk]]),
        "validation": validation,
        "scores": _scores_section(result, by_id, criteria_ids, language),
        "rollout": _rollout_section(selection, winner, runs, operations, project_checks, winner_plan),
        "operations": operations,
        "project_checks": project_checks,
        "summary": summary,
        "evidence": _evidence_section(selection, runs),
        "manifest": _manifest_section(runs),
        "owners": [_owner_entry(selection, role) for role in records_domain.OWNER_ROLES],
        "observer": {
            "name": person_name(selection.observer) or person_name(selection.platform_owner),
            "team": selection.team.name,
            "watches": _("capacity, cost and stability after launch"),
        },
        "review": {
            "review_by": (
                record.review_by or (date.today() + timedelta(days=records_domain.REVIEW_AFTER_DAYS))
            ).isoformat(),
            "triggers": [],
        },
        "lineage": {"supersedes": f"DR-{selection.pk}-v{record.supersedes.version}" if record.supersedes_id else ""},
        "score": {"id": score.pk, "inputs_hash": score.inputs_hash, "rules_version": score.rules_version},
        # what the periodic re-evaluation compares against (records/reevaluation.py); not printed
        "basis": {
            "candidate": winner.pk,
            "engine": winner.engine.slug,
            "engine_version": winner.engine_version,
            "hardware": {"gpu_model": c.gpu_model, "gpu_memory_gib": c.gpu_memory_gib},
        },
    }
    return records_domain.build_record_context(context)
