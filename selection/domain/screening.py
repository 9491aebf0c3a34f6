"""The documentation screen (decision step 3), before any test: does each candidate's engine describe
the KV-cache management the selection's priority dimensions need?

The articles: pick 2-3 priority dimensions as first-round gates, then screen candidates from their
documentation ("does it describe its KV-cache management explicitly? Leaderboards are not
evidence"), then design tests for the priority dimensions. So the screen reads the catalog's facts
(each with the URL it was read from), never a measurement, and looks only at the priority
dimensions (the gates; before any gate is set, the scenario's priorities). A dimension needs each of
its NEEDS; a need is met when any of its capabilities is documented as present. A need the
documentation states as absent, or does not describe at all, rules the candidate out with the
reason and the source link; the architect may override that, with a justification, and it is
audited. Cost has no documented need: only measurements speak for it.

A fact's source is "source" when the URL is a source file (a pyproject, a .py/.rs/.cc file, a source
tree) and "documentation" otherwise: a reader must know whether a page documents the feature or
only the code shows it. Pure Python: no Django imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlparse

from selection.domain import catalog
from selection.domain.criteria import DIMENSIONS, SCENARIO_PRIORITIES
from selection.domain.messages import Message
from selection.domain.messages import marked as _

DOCUMENTATION, SOURCE = "documentation", "source"
# a URL whose file is one of these is code, not a page written for readers
SOURCE_SUFFIXES = (".py", ".pyi", ".rs", ".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".go", ".toml", ".cfg", ".ts", ".js")
PASS, FAIL, UNDOCUMENTED = catalog.PASS, catalog.FAIL, catalog.UNDOCUMENTED
KEPT, SCREENED_OUT, OVERRIDDEN, NOT_SCREENED = "kept", "screened_out", "overridden", "not_screened"


def source_kind(url: str | None) -> str | None:
    """ "source" for a source file or tree (pyproject.toml, a .py file, a /tree/ of code), else
    "documentation"; None without a URL."""
    if not url:
        return None
    path = urlparse(url).path.lower()
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name.endswith(SOURCE_SUFFIXES) or name in ("cmakelists.txt", "makefile"):
        return SOURCE
    if "/tree/" in path and "/docs/" not in path and "/doc/" not in path:
        return SOURCE
    return DOCUMENTATION


@dataclass(frozen=True)
class Need:
    """What a priority dimension needs documented: any of `requirements` (capability -> what
    `catalog.screen` requires of it) documented as present meets it."""

    what: str  # message fragment: "a KV offload tier (CPU, disk or remote)"
    requirements: tuple[tuple[str, Any], ...]


NEEDS: dict[str, tuple[Need, ...]] = {
    "memory": (
        Need(_("its KV-cache allocation strategy"), (("allocation_strategy", catalog.ALLOCATION_STRATEGIES),)),
        Need(
            _("a prefix cache (reuse of identical prompt prefixes)"),
            (("prefix_cache_kind", tuple(k for k in catalog.PREFIX_CACHE_KINDS if k != "none")),),
        ),
    ),
    "scheduling": (
        Need(
            _("a concurrency limit, priority or fair scheduling"),
            (("admission_limit", True), ("priority_scheduling", True), ("fair_scheduling", True)),
        ),
    ),
    "context": (
        Need(
            _("KV-cache quantisation or chunked prefill for long inputs"),
            (("kv_quant_dtypes", True), ("chunked_prefill", True)),
        ),
    ),
    "persistence": (Need(_("a KV offload tier (CPU, disk or remote) for idle sessions"), (("offload_tiers", True),)),),
    "cost": (),
    "observability": (Need(_("KV-cache metrics (usage, hits, preemptions)"), (("metrics", True),)),),
}

REASON_ABSENT = _("%(dimension)s needs %(what)s: the engine's %(kind)s says it has none (%(source)s)")
REASON_UNDOCUMENTED = _("%(dimension)s needs %(what)s: the engine's documentation and source do not describe it")
DIMENSION_NAMES = {d.id: d.name for d in DIMENSIONS}


def priority_dimensions(gates: list[str] | tuple[str, ...], scenario: str | None) -> tuple[str, ...]:
    """The dimensions the screen and the test plan put first: the gates (2-3 priority dimensions),
    or before any gate is set the scenario's priorities (docs/domain.md)."""
    if gates:
        return tuple(d for d in DIMENSION_NAMES if d in gates)
    return tuple(SCENARIO_PRIORITIES.get(scenario or "", ()))


def screen_candidate(caps: Mapping[str, Any], dimensions: tuple[str, ...]) -> dict[str, Any]:
    """The screen of one engine version's documented capabilities (`catalog.normalise_capabilities`)
    for the priority `dimensions`: {status: kept | screened_out, rows: [{dimension, dimension_name, what, status,
    facts: [{capability, documented, status, source, source_kind}]}], reasons: [Message]}."""
    rows, reasons = [], []
    for dimension in dimensions:
        for need in NEEDS.get(dimension, ()):
            facts = [
                {**fact, "source_kind": source_kind(fact["source"])}
                for fact in catalog.screen(caps, dict(need.requirements))
            ]
            statuses = {fact["status"] for fact in facts}
            status = PASS if PASS in statuses else UNDOCUMENTED if UNDOCUMENTED in statuses else FAIL
            rows.append(
                {
                    "dimension": dimension,
                    "dimension_name": DIMENSION_NAMES[dimension],
                    "what": need.what,
                    "status": status,
                    "facts": facts,
                }
            )
            if status != PASS:
                reasons.append(_reason(dimension, need, status, facts))
    return {"status": SCREENED_OUT if reasons else KEPT, "rows": rows, "reasons": reasons}


def _reason(dimension: str, need: Need, status: str, facts: list[dict[str, Any]]) -> Message:
    name = Message(DIMENSION_NAMES[dimension])
    if status == UNDOCUMENTED:
        return Message(REASON_UNDOCUMENTED, {"dimension": name, "what": Message(need.what)})
    source = next((f["source"] for f in facts if f["source"]), "")
    kind = source_kind(source) or DOCUMENTATION
    return Message(
        REASON_ABSENT,
        {"dimension": name, "kind": Message(_(kind)), "what": Message(need.what), "source": source},
    )
