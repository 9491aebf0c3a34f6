"""Who is recommended among the candidates that pass the gates, and what the choice rests on.

The article's step 5: "when two candidates are close on the core dimensions, prefer the one with
better observability and lower operating complexity". Pure Python, no Django; the scoring passes
each passing candidate as a `Contender` and stores the `Decision`. The rule, in one place:

* **Who is compared.** The weighted-sum leader and every candidate close to it on the core
  dimensions (the priority dimensions: the gates, or the scenario's priorities before any gate) or
  on the weighted total. Close means within `tie_margin`, or inside the measurement noise (the two
  95 % intervals overlap). A leader nobody is close to is chosen by the weighted sum.
* **In that group, one step after the other**, each keeping only the candidates still level:
  1. the core dimensions: the best core score and those close to it;
  2. observability (the dimension's score): the best;
  3. operating complexity (documented): the lowest;
  4. the weighted total: the highest, when its lead over the others left is beyond the tie margin
     and the measurement noise.
  The first step that leaves one candidate decides (`decided_by`: core, observability,
  operating_complexity, total).
* **A tie names no winner.** When the four steps leave two or more candidates (an exact tie, or a
  lead within the tie margin or the measurement noise on everything the rule reads), `winner` is
  None, the tied candidates share the first rank, and `rests_on` says so; nothing else may name one of
  them first (the headline, the record and the API read `winner`).
* **What the choice rests on** (`rests_on`, the record's page 1): "the only candidate through the
  gates", "leads on the core dimensions by X", "tie on the core dimensions, decided by
  observability", ..., "tie".

Sentences are `messages.Message`s, translated where shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from selection.domain.messages import NAME_SEPARATOR, Message
from selection.domain.messages import marked as _

EPS = 1e-12
WEIGHTED_SUM, CORE, OBSERVABILITY, COMPLEXITY, TOTAL, NONE = (
    "weighted_sum",
    "core",
    "observability",
    "operating_complexity",
    "total",
    "none",
)


@dataclass(frozen=True)
class Contender:
    """One passing candidate as the rule reads it. `core`: the weighted mean of its core criteria's
    lower-bound scores; intervals: the value with every measurement at the ends of its 95 % interval
    (None: no interval). `complexity_rank`: lower is simpler (unknown ranks last)."""

    id: str
    label: str
    total: float
    core: float
    observability: float  # -1 when the dimension has no evidence
    complexity_rank: int
    complexity: str | None = None
    total_interval: tuple[float, float] | None = None
    core_interval: tuple[float, float] | None = None


@dataclass
class Decision:
    order: list[str]  # the recommendation order (tied candidates first, by total)
    winner: str | None
    decided_by: str  # WEIGHTED_SUM, CORE, OBSERVABILITY, COMPLEXITY, TOTAL, NONE (a tie)
    applied: bool  # whether anyone was close enough to the leader for the tie rule
    group: list[str]  # the leader and those close to it
    noise: list[str]  # in the group only because the intervals overlap
    tied: list[str]  # decided_by NONE: the candidates nothing separates
    explanation: Message
    rests_on: Message | None
    ranks: dict[str, int] = field(default_factory=dict)


def _overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    return a is not None and b is not None and a[0] <= b[1] + EPS and b[0] <= a[1] + EPS


def close_on_total(a: Contender, b: Contender, margin: float) -> bool:
    return abs(a.total - b.total) <= margin + EPS or _overlap(a.total_interval, b.total_interval)


def close_on_core(a: Contender, b: Contender, margin: float) -> bool:
    return abs(a.core - b.core) <= margin + EPS or _overlap(a.core_interval, b.core_interval)


def _by_total(contenders: Sequence[Contender]) -> list[Contender]:
    return sorted(contenders, key=lambda c: (-c.total, c.id))


def _narrow(group: list[Contender], margin: float) -> tuple[list[Contender], str]:
    """The rule's steps over `group`: the candidates still level after the step that decided, and the step."""
    best = max(group, key=lambda c: (c.core, -group.index(c)))
    level = [c for c in group if close_on_core(best, c, margin)]
    if len(level) == 1:
        return level, CORE
    top = max(round(c.observability, 9) for c in level)
    level = [c for c in level if round(c.observability, 9) == top]
    if len(level) == 1:
        return level, OBSERVABILITY
    simplest = min(c.complexity_rank for c in level)
    level = [c for c in level if c.complexity_rank == simplest]
    if len(level) == 1:
        return level, COMPLEXITY
    ranked = _by_total(level)
    tied = [c for c in ranked if close_on_total(ranked[0], c, margin)]
    return (tied, NONE) if len(tied) > 1 else ([ranked[0]], TOTAL)


def decide(contenders: Sequence[Contender], margin: float, core: Message) -> Decision:
    """The recommendation among the passing `contenders` (see the module's rule); `core` names the core
    dimensions in a sentence ("the core dimensions (memory, persistence)")."""
    if not contenders:
        return Decision([], None, NONE, False, [], [], [], Message(_("no candidate passes the gates")), None)
    by_total = _by_total(contenders)
    top = by_total[0]
    group = [top] + [c for c in by_total[1:] if close_on_core(top, c, margin) or close_on_total(top, c, margin)]
    # in the group only because the 95 % intervals overlap (neither margin held them)
    noise = [
        c.id for c in group[1:] if abs(top.total - c.total) > margin + EPS and abs(top.core - c.core) > margin + EPS
    ]
    if len(group) == 1:
        decision = Decision(
            [c.id for c in by_total], top.id, WEIGHTED_SUM, False, [top.id], [], [], _lead(top, margin), None
        )
        decision.rests_on = _rests_on_lead(top, by_total[1] if len(by_total) > 1 else None, core)
        decision.ranks = {c.id: i for i, c in enumerate(by_total, start=1)}
        return decision
    level, step = _narrow(group, margin)
    first = _by_total(level)
    rest = [c for c in by_total if c not in level]
    order = [c.id for c in first + rest]
    if step == NONE:  # the tied share the first rank; the others follow them
        ranks = {c.id: 1 for c in first} | {c.id: len(first) + i for i, c in enumerate(rest, start=1)}
    else:
        ranks = {cid: i for i, cid in enumerate(order, start=1)}
    others = [c for c in group if c not in level]
    decision = Decision(
        order=order,
        winner=None if step == NONE else first[0].id,
        decided_by=step,
        applied=True,
        group=[c.id for c in group],
        noise=noise,
        tied=[c.id for c in first] if step == NONE else [],
        explanation=_explanation(step, first, others, group, margin, core, bool(noise)),
        rests_on=_rests_on_rule(step, first, others, group, core),
        ranks=ranks,
    )
    return decision


def _lead(top: Contender, margin: float) -> Message:
    if top.total_interval is not None:
        return Message(
            _("%(name)s leads by more than the tie margin %(margin)s and the measurement noise"),
            {"name": top.label, "margin": f"{margin:.2f}"},
        )
    return Message(
        _("%(name)s leads by more than the tie margin %(margin)s"), {"name": top.label, "margin": f"{margin:.2f}"}
    )


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def _rests_on_lead(top: Contender, runner: Contender | None, core: Message) -> Message:
    if runner is None:
        return Message(_("%(name)s is the only candidate through the gates"), {"name": top.label})
    values = {
        "name": top.label,
        "other": runner.label,
        "core": core,
        "lead": f"{top.total - runner.total:.3f}",
        "core_lead": f"{abs(top.core - runner.core):.3f}",
    }
    if top.core + EPS >= runner.core:
        return Message(
            _(
                "%(name)s leads %(other)s on %(core)s by %(core_lead)s and on the weighted total by %(lead)s, "
                "beyond the tie margin"
            ),
            values,
        )
    return Message(
        _(
            "%(name)s leads %(other)s on the weighted total by %(lead)s, beyond the tie margin, although "
            "%(other)s leads on %(core)s by %(core_lead)s"
        ),
        values,
    )


def _names(contenders: Sequence[Contender]) -> Any:
    return NAME_SEPARATOR.join(c.label for c in contenders)


def _rests_on_rule(
    step: str, first: list[Contender], others: list[Contender], group: list[Contender], core: Message
) -> Message:
    """What the choice rests on after the tie rule ran over `group` (`first`: those left by `step`)."""
    winner = first[0]
    other = max(others, key=lambda c: (c.core, c.total)) if others else None
    values: dict[str, Any] = {"name": winner.label, "core": core, "names": _names(group)}
    if other is not None:
        values.update(
            other=other.label,
            core_lead=f"{winner.core - other.core:.3f}",
            lead=_signed(winner.total - other.total),
            total=f"{winner.total:.3f}",
            other_total=f"{other.total:.3f}",
            a=f"{max(winner.observability, 0.0):.2f}",
            b=f"{max(other.observability, 0.0):.2f}",
            simple=winner.complexity or "—",
            complex=other.complexity or "—",
        )
    if step == CORE:
        return Message(
            _(
                "%(name)s leads %(other)s on %(core)s by %(core_lead)s, with the weighted totals close (%(total)s "
                "against %(other_total)s)"
            ),
            values,
        )
    if step == OBSERVABILITY:
        return Message(
            _("tie on %(core)s between %(names)s, decided by observability (%(name)s %(a)s, %(other)s %(b)s)"),
            values,
        )
    if step == COMPLEXITY:
        return Message(
            _(
                "tie on %(core)s and in observability between %(names)s, decided by lower operating complexity "
                "(%(name)s %(simple)s, %(other)s %(complex)s)"
            ),
            values,
        )
    if step == TOTAL:
        return Message(
            _(
                "tie on %(core)s, in observability and in operating complexity between %(names)s; %(name)s leads on "
                "the weighted total by %(lead)s, beyond the tie margin and the measurement noise"
            ),
            values,
        )
    return Message(
        _(
            "tie between %(tied)s: level on %(core)s and on the weighted total (within the tie margin or the "
            "measurement noise), with equal observability and operating complexity: no winner"
        ),
        {**values, "tied": _names(first)},
    )


def _explanation(
    step: str,
    first: list[Contender],
    others: list[Contender],
    group: list[Contender],
    margin: float,
    core: Message,
    noise: bool,
) -> Message:
    """The tie-break sentence ("Tie-break applied: ..."): who was close, and which step decided."""
    values = {
        "names": NAME_SEPARATOR.join(f"{c.label} {c.total:.3f}" for c in group),
        "margin": f"{margin:.2f}",
        "core": core,
        "first": first[0].label,
        "how": _rests_on_rule(step, first, others, group, core),
    }
    if noise:
        return Message(
            _(
                "close on %(core)s or on the weighted total (within the tie margin %(margin)s or the measurement "
                "noise: overlapping 95%% intervals): %(names)s; %(how)s"
            ),
            values,
        )
    return Message(
        _("close on %(core)s or on the weighted total (within the tie margin %(margin)s): %(names)s; %(how)s"),
        values,
    )


def within_noise(
    decision: Decision, contenders: Sequence[Contender], tied_ids: Sequence[str], core: Message
) -> Decision:
    """`decision` turned into a tie when the draws of the measurements within their intervals do not hold
    its winner (`scoring.measurement_noise`): a lead the noise can reverse names no winner. `tied_ids`:
    the candidates that come first in a share of the draws the winner's lead cannot dismiss."""
    tied = _by_total([c for c in contenders if c.id in set(tied_ids)])
    if len(tied) < 2:
        return decision
    rest = [c for c in _by_total(contenders) if c not in tied]
    values = {"tied": _names(tied), "core": core}
    return Decision(
        order=[c.id for c in tied + rest],
        winner=None,
        decided_by=NONE,
        applied=True,
        group=[c.id for c in tied],
        noise=[c.id for c in tied[1:]],
        tied=[c.id for c in tied],
        explanation=Message(
            _(
                "within the measurement noise each of %(tied)s comes first in a share of the draws of the "
                "measurements: a tie, no winner"
            ),
            values,
        ),
        rests_on=Message(
            _(
                "tie between %(tied)s: the lead is inside the measurement noise (each comes first in a share of "
                "the draws of the measurements within their 95%% intervals): no winner"
            ),
            values,
        ),
        ranks={c.id: 1 for c in tied} | {c.id: len(tied) + i for i, c in enumerate(rest, start=1)},
    )
