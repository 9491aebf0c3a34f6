"""The three checks a real project makes before adopting the choice, and who confirms each.

From the first article: before a real project adopts the choice, check (1) which existing
applications, teams and data are affected; (2) whether the platform already has permissions,
monitoring, logs, capacity and a rollback plan; (3) whether the business accepts the pilot's
results and the pace of expansion (here: a staged rollout, each stage with its traffic share, the
metric that gates it and who decides). The security owner checks permissions, logs and the audit
trail; someone is named to watch capacity, cost and stability after launch.

The architect states them on the draft (`DecisionRecord.project_checks`); the record freezes them
in its snapshot (`record_section`), where each section names the owners whose approval and
signature confirm it, and lists what is still not stated (an owner sees the gaps before approving).
Pure: plain data in and out; `ProjectChecksError` names every wrong field.
"""

from __future__ import annotations

from typing import Any

READINESS_ITEMS = ("permissions", "monitoring", "logs", "capacity", "rollback")
SECURITY_ITEMS = ("permissions", "logs", "audit_trail")
WATCH_AREAS = ("capacity", "cost", "stability")
STATUSES = ("ready", "not_ready", "not_stated")
AFFECTED = ("applications", "teams", "data")
# who confirms each section (their approval and signature of the record)
CONFIRMED_BY = {
    "affected": ("business", "platform"),
    "readiness": ("platform",),
    "acceptance": ("business",),
    "security": ("security",),
}


class ProjectChecksError(ValueError):
    """Project checks that cannot be read; `problems` names every field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def empty() -> dict[str, Any]:
    return {
        "affected": {key: [] for key in AFFECTED},
        "readiness": {item: {"status": "not_stated", "note": ""} for item in READINESS_ITEMS},
        "acceptance": {"pilot_result": "", "stages": []},
        "security": {item: {"status": "not_stated", "note": ""} for item in SECURITY_ITEMS},
        "watch": {area: "" for area in WATCH_AREAS},
    }


def parse_stages(text: str) -> list[dict[str, Any]]:
    """One stage per line: `name | traffic % | gating metric | who decides` (blank lines skipped)."""
    stages, problems = [], []
    previous = 0.0
    for number, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 4 or not all(parts):
            problems.append(f"line {number}: expected 'name | traffic % | gating metric | who decides', got {line!r}")
            continue
        name, share, gate, decides = parts
        try:
            percent = float(share.rstrip("%").strip())
        except ValueError:
            problems.append(f"line {number}: traffic share: not a number, got {share!r}")
            continue
        if not 0 < percent <= 100:
            problems.append(f"line {number}: traffic share: must be between 0 and 100 %, got {percent:g}")
        elif percent < previous:
            problems.append(
                f"line {number}: traffic share: stages must not shrink ({percent:g} % after {previous:g} %)"
            )
        previous = max(previous, percent)
        stages.append({"stage": name, "traffic_percent": percent, "gate": gate, "decides": decides})
    if problems:
        raise ProjectChecksError([f"project_checks.acceptance.stages: {p}" for p in problems])
    return stages


def normalise(data: Any) -> dict[str, Any]:
    """A complete, checked copy of the architect's project checks (missing parts filled as not stated)."""
    checks = empty()
    if data in (None, ""):
        return checks
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ProjectChecksError([f"project_checks: must be an object, got {type(data).__name__}"])
    unknown = sorted(set(data) - set(checks))
    if unknown:
        problems.append(f"project_checks: unknown sections {unknown} (known: {', '.join(checks)})")
    affected = data.get("affected") or {}
    for key in AFFECTED:
        values = affected.get(key) or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(f"project_checks.affected.{key}: must be a list of texts")
            continue
        checks["affected"][key] = [v.strip() for v in values if v.strip()]
    for section, items in (("readiness", READINESS_ITEMS), ("security", SECURITY_ITEMS)):
        given = data.get(section) or {}
        for item in given:
            if item not in items:
                problems.append(f"project_checks.{section}.{item}: unknown item (known: {', '.join(items)})")
        for item in items:
            entry = given.get(item) or {}
            status = entry.get("status") or "not_stated"
            if status not in STATUSES:
                problems.append(f"project_checks.{section}.{item}.status: must be one of {', '.join(STATUSES)}")
                continue
            checks[section][item] = {"status": status, "note": str(entry.get("note") or "").strip()}
    acceptance = data.get("acceptance") or {}
    checks["acceptance"]["pilot_result"] = str(acceptance.get("pilot_result") or "").strip()
    stages = acceptance.get("stages") or []
    if not isinstance(stages, list):
        problems.append("project_checks.acceptance.stages: must be a list")
    else:
        for index, stage in enumerate(stages):
            if not isinstance(stage, dict) or not all(
                stage.get(k) not in (None, "") for k in ("stage", "gate", "decides")
            ):
                problems.append(
                    f"project_checks.acceptance.stages[{index}]: needs stage, traffic_percent, gate, decides"
                )
                continue
            try:
                percent = float(stage.get("traffic_percent"))
            except (TypeError, ValueError):
                problems.append(f"project_checks.acceptance.stages[{index}].traffic_percent: must be a number")
                continue
            if not 0 < percent <= 100:
                problems.append(f"project_checks.acceptance.stages[{index}].traffic_percent: must be in (0, 100]")
                continue
            checks["acceptance"]["stages"].append(
                {
                    "stage": str(stage["stage"]),
                    "traffic_percent": percent,
                    "gate": str(stage["gate"]),
                    "decides": str(stage["decides"]),
                }
            )
    watch = data.get("watch") or {}
    for area in WATCH_AREAS:
        checks["watch"][area] = str(watch.get(area) or "").strip()
    if problems:
        raise ProjectChecksError(problems)
    return checks


def stages_text(stages: list[dict[str, Any]]) -> str:
    """The stages as the draft form shows them (the inverse of parse_stages)."""
    return "\n".join(f"{s['stage']} | {s['traffic_percent']:g} % | {s['gate']} | {s['decides']}" for s in stages or [])


def record_section(
    checks: dict[str, Any],
    default_stages: list[dict[str, Any]],
    default_watcher: str,
    hints: dict[str, dict[str, str]],
) -> dict[str, Any]:
    """The snapshot's `project_checks`: the architect's statements (defaults where silent: the derived
    stages, the post-launch observer), who confirms each section, and what is still not stated."""
    checks = normalise(checks)
    open_items: list[str] = []
    for key in AFFECTED:
        if not checks["affected"][key]:
            open_items.append(f"affected.{key}")
    for section, items in (("readiness", READINESS_ITEMS), ("security", SECURITY_ITEMS)):
        for item in items:
            entry = checks[section][item]
            entry["hint"] = (hints.get(section) or {}).get(item, "")
            if entry["status"] == "not_stated":
                open_items.append(f"{section}.{item}")
    stages = checks["acceptance"]["stages"]
    derived = not stages
    if derived:
        stages = [dict(stage) for stage in default_stages]
    if not checks["acceptance"]["pilot_result"]:
        open_items.append("acceptance.pilot_result")
    watch = {area: checks["watch"][area] or default_watcher for area in WATCH_AREAS}
    return {
        "affected": {**checks["affected"], "confirmed_by": list(CONFIRMED_BY["affected"])},
        "readiness": {
            "items": [{"item": item, **checks["readiness"][item]} for item in READINESS_ITEMS],
            "confirmed_by": list(CONFIRMED_BY["readiness"]),
        },
        "acceptance": {
            "pilot_result": checks["acceptance"]["pilot_result"],
            "stages": stages,
            "stages_derived": derived,
            "confirmed_by": list(CONFIRMED_BY["acceptance"]),
        },
        "security": {
            "items": [{"item": item, **checks["security"][item]} for item in SECURITY_ITEMS],
            "confirmed_by": list(CONFIRMED_BY["security"]),
        },
        "watch": watch,
        "open_items": open_items,
    }
