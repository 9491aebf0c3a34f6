"""The decision at the head of the comparison: who leads, by how much, on how much evidence, how
robust that is, and a plain verdict (docs/domain.md, step 5).

Pure: a stored scoring result (`scoring.ScoringResult.to_dict()`, as a `Score` row holds it) in,
messages and figures out. The rules, in one place:

* **Leader and runner-up.** The leader is the recommended candidate (the weighted sum with the
  tie-break); the runner-up the next one that passes the gates. The margin is the leader's total
  minus the runner-up's (negative when the tie-break preferred a candidate with a lower total).
* **Measurement interval of the margin.** When scoring carries each total's range with every
  measurement at the ends of its 95 % interval (`total_interval`, bootstrap over the runs'
  requests), the margin's interval is (leader low - runner-up high, leader high - runner-up low);
  without one on either side it is unknown, never assumed to be zero.
* **Verdict**, the first that applies:
  - *tie*: the scoring named no winner (`tiebreak`: level on the core dimensions and the total, within
    the tie margin or the measurement noise, with equal observability and operating complexity): the
    headline names no one first, says what would separate them, and reports no weight robustness;
  - *misfit*: the recommended candidate fails a constraint of the sheet (`procurement`: a figure
    outside its limit, a failed verdict or a failed part of a compound claim): "recommended by the
    gates, but misses the TTFT budget 34x at the planned load", every failed constraint named;
  - *inconclusive*: the leader's fit to a constraint is not validated (nothing measured it, or its
    run's verdicts did not settle): "clear" needs the fit, not only the gates; or the leader's
    evidence covers less than `COVERAGE_MIN` of the weight, or the runner-up's upper bound (its
    missing evidence at full marks) reaches the leader's total: the evidence still missing could
    reverse the order; or the leader is first in fewer than `noise.STABLE_SHARE` of the draws of the
    measurements within their intervals (the scoring's `sensitivity.noise`): the winner flips within
    the noise (the scoring then names a tie, see `tiebreak`);
  - *close*: the margin is within the tie margin, or its interval reaches zero (inside the
    measurement noise), or the leader is first in fewer than `ROBUST_SHARE` of the perturbed weight
    vectors;
  - *clear*: otherwise. A leader with no runner-up is *clear* on enough coverage, else
    *inconclusive*. No leader: *none*.
* **Robustness is never shown alone**: the weight-vector share and the noise clause come with the
  coverage and the upper bounds (`caveat`), so "100 % of 10,000 weight vectors" on a third of the
  evidence cannot read as certainty.

Sentences are `messages.Message`s, translated where shown.
"""

from __future__ import annotations

from typing import Any, Mapping

from selection.domain import procurement
from selection.domain.messages import CLAUSE_SEPARATOR, NAME_SEPARATOR, Message, load
from selection.domain.messages import marked as _

CLEAR, CLOSE, INCONCLUSIVE, NONE = "clear", "close", "inconclusive", "none"
TIE, MISFIT = "tie", "misfit"
COVERAGE_MIN = 0.5  # below: too little of the weight is evidenced to call a winner
ROBUST_SHARE = 0.9  # below: the weights, not the evidence, decide: a close call


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def _interval(candidate: Mapping[str, Any]) -> tuple[float, float] | None:
    ends = candidate.get("total_interval")
    if not isinstance(ends, (list, tuple)) or len(ends) != 2:
        return None
    low, high = _float(ends[0]), _float(ends[1])
    return None if low is None or high is None else (min(low, high), max(low, high))


def margin_interval(leader: Mapping[str, Any], runner_up: Mapping[str, Any]) -> tuple[float, float] | None:
    """The margin with every measurement at the ends of its interval, or None when neither total has
    an interval (a side without one counts at its total)."""
    lead, other = _interval(leader), _interval(runner_up)
    if lead is None and other is None:
        return None
    lead = lead or (float(leader.get("total") or 0.0),) * 2
    other = other or (float(runner_up.get("total") or 0.0),) * 2
    return lead[0] - other[1], lead[1] - other[0]


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def _share(share: float) -> str:
    """A share of weight vectors: whole percents only when exact (99.6 % never reads as 100 %)."""
    return f"{share:.0%}" if share in (0.0, 1.0) else f"{share:.1%}"


def decision_headline(result: Mapping[str, Any]) -> dict[str, Any]:
    """The headline of a stored scoring result: verdict, leader, runner-up, margin (with its
    interval), robustness figures, and the sentences (`lead`, `coverage`, `robustness`, `verdict_reason`,
    `caveat`) as messages."""
    candidates = {c.get("candidate"): c for c in result.get("candidates") or []}
    leader = candidates.get(result.get("winner"))
    if leader is None:
        if (result.get("tie") or {}).get("candidates"):
            return _tie(result, candidates)
        return {"verdict": NONE, "leader": None, "runner_up": None}
    ranking = [candidates[cid] for cid in result.get("ranking") or [] if cid in candidates]
    runner_up = next((c for c in ranking if c is not leader and not c.get("screened_out")), None)
    options = result.get("options") or {}
    tie_margin = float(options.get("tie_margin") or 0.0)
    acceptability = (result.get("sensitivity") or {}).get("acceptability") or {}
    share = _float((acceptability.get("first_share") or {}).get(leader.get("candidate")))
    total, coverage = float(leader.get("total") or 0.0), float(leader.get("coverage") or 0.0)
    upper = float(leader.get("total_upper") if leader.get("total_upper") is not None else total)
    name = leader.get("label") or leader.get("candidate")
    fit = (result.get("fit") or {}).get(leader.get("candidate")) or []
    out: dict[str, Any] = {
        "leader": leader,
        "runner_up": runner_up,
        "margin": None,
        "margin_interval": None,
        "share": share,
        "draws": acceptability.get("draws"),
        "spread": acceptability.get("spread"),
        "coverage": coverage,
        "fit": fit,
        "misses": procurement.shortfall_messages(fit),
        "rests_on": result.get("rests_on"),
    }
    inconclusive: list[Message] = []
    undecided: list[Message] = []  # the evidence at hand does not separate them (tie-break, noise)
    close: list[Message] = []
    if coverage < COVERAGE_MIN:
        inconclusive.append(
            Message(
                _("only %(coverage)s of the weight is evidenced for %(name)s"),
                {"coverage": f"{coverage:.0%}", "name": name},
            )
        )
    unvalidated = [row for row in fit if row.get("status") == procurement.NOT_VALIDATED]
    if unvalidated:
        inconclusive.append(
            Message(
                _("the fit of %(name)s to %(constraints)s is not validated"),
                {
                    "name": name,
                    "constraints": NAME_SEPARATOR.join(
                        Message(procurement.FIT_NAMES.get(row["key"], row["key"])) for row in unvalidated
                    ),
                },
            )
        )
    if runner_up is None:
        return _single_candidate(out, name, total, upper, inconclusive)

    other = runner_up.get("label") or runner_up.get("candidate")
    other_total = float(runner_up.get("total") or 0.0)
    other_coverage = float(runner_up.get("coverage") or 0.0)
    other_upper = float(runner_up.get("total_upper") if runner_up.get("total_upper") is not None else other_total)
    margin = total - other_total
    interval = margin_interval(leader, runner_up)
    out["margin"], out["margin_interval"] = margin, interval
    values = {
        "name": name,
        "other": other,
        "total": f"{total:.3f}",
        "other_total": f"{other_total:.3f}",
        "margin": _signed(margin),
    }
    out.update(_comparison_sentences(values, interval, coverage, other_coverage, upper, other_upper))
    draws = (result.get("sensitivity") or {}).get("noise") or {}
    drawn_share = _float((draws.get("first_share") or {}).get(leader.get("candidate")))
    out["noise_share"], out["noise_draws"] = drawn_share, draws.get("draws")
    tie = result.get("tie_break") or {}
    if draws.get("stable") is False and drawn_share is not None:
        undecided.append(
            Message(
                _("within the measurement noise %(name)s is first in only %(share)s of %(draws)s draws"),
                {"name": name, "share": _share(drawn_share), "draws": f"{int(draws.get('draws') or 0):,}"},
            )
        )
    noise_list = set(tie.get("noise") or [])
    in_noise = (interval is not None and interval[0] <= 1e-12) or runner_up.get("candidate") in noise_list
    noise = _noise_clause(interval, in_noise, draws, drawn_share)
    if share is not None:
        out["robustness"] = Message(
            _("Robustness: %(name)s is first in %(share)s of %(draws)s weight vectors within ±%(spread)s; %(noise)s."),
            {
                "name": name,
                "share": _share(share),
                "draws": f"{int(acceptability.get('draws') or 0):,}",
                "spread": f"{float(acceptability.get('spread') or 0.0):.0%}",
                "noise": noise,
            },
        )
    else:
        out["robustness"] = Message(_("Robustness: %(noise)s."), {"noise": noise})
    if other_upper >= total - 1e-12:
        inconclusive.append(
            Message(
                _("with its missing evidence %(other)s could reach %(other_upper)s, above %(name)s's %(total)s"),
                {**values, "other_upper": f"{other_upper:.3f}"},
            )
        )
    if abs(margin) <= tie_margin + 1e-12:
        close.append(Message(_("the margin is within the tie margin %(tie)s"), {"tie": f"{tie_margin:.2f}"}))
    if in_noise:
        close.append(Message(_("the margin is inside the measurement noise")))
    if share is not None and share < ROBUST_SHARE:
        close.append(
            Message(
                _("%(name)s is first in only %(share)s of the weight vectors"), {"name": name, "share": _share(share)}
            )
        )
    clear = _clear_message(name, interval)
    return _verdict(out, inconclusive, close, clear, undecided)


def _single_candidate(
    out: dict[str, Any], name: str, total: float, upper: float, inconclusive: list[Message]
) -> dict[str, Any]:
    """The headline when only the leader passes the gates: nothing to compare it with."""
    coverage = out["coverage"]
    out["lead"] = Message(
        _("%(name)s is the only candidate that passes the gates: weighted total %(total)s."),
        {"name": name, "total": f"{total:.3f}"},
    )
    out["coverage_sentence"] = Message(
        _("Evidence coverage %(coverage)s; with the missing evidence at full marks the total could reach %(upper)s."),
        {"coverage": f"{coverage:.0%}", "upper": f"{upper:.3f}"},
    )
    out["robustness"] = Message(
        _("Robustness to weights and to measurement noise needs a second candidate that passes the gates.")
    )
    out["caveat"] = out["coverage_sentence"]
    clear = Message(
        _("Clear: %(name)s is the only candidate that passes the gates, on enough evidence."), {"name": name}
    )
    return _verdict(out, inconclusive, [], clear, [])


def _comparison_sentences(
    values: dict[str, str],
    interval: tuple[float, float] | None,
    coverage: float,
    other_coverage: float,
    upper: float,
    other_upper: float,
) -> dict[str, Message]:
    """The lead, coverage and caveat sentences of the leader against the runner-up."""
    sentences: dict[str, Message] = {}
    if interval is not None:
        sentences["lead"] = Message(
            _(
                "%(name)s leads %(other)s by %(margin)s (%(low)s to %(high)s with the measurements at the ends of "
                "their 95%% intervals): weighted total %(total)s against %(other_total)s."
            ),
            {**values, "low": _signed(interval[0]), "high": _signed(interval[1])},
        )
    else:
        sentences["lead"] = Message(
            _(
                "%(name)s leads %(other)s by %(margin)s (no measurement interval yet): weighted total %(total)s "
                "against %(other_total)s."
            ),
            values,
        )
    sentences["coverage_sentence"] = Message(
        _(
            "Evidence coverage: %(name)s %(coverage)s, %(other)s %(other_coverage)s; with the missing evidence at "
            "full marks the totals could reach %(upper)s and %(other_upper)s."
        ),
        {
            **values,
            "coverage": f"{coverage:.0%}",
            "other_coverage": f"{other_coverage:.0%}",
            "upper": f"{upper:.3f}",
            "other_upper": f"{other_upper:.3f}",
        },
    )
    sentences["caveat"] = Message(
        _(
            "These figures hold for the evidence so far: coverage %(coverage)s (%(name)s) and %(other_coverage)s "
            "(%(other)s), totals up to %(upper)s and %(other_upper)s with the missing evidence at full marks."
        ),
        {
            **values,
            "coverage": f"{coverage:.0%}",
            "other_coverage": f"{other_coverage:.0%}",
            "upper": f"{upper:.3f}",
            "other_upper": f"{other_upper:.3f}",
        },
    )
    return sentences


def _noise_clause(
    interval: tuple[float, float] | None, in_noise: bool, draws: Mapping[str, Any], drawn_share: float | None
) -> Any:
    """How the margin holds against measurement noise (with the noise draws' share when they ran)."""
    if interval is None:
        noise = Message(_("no measurement has an interval yet, so robustness to measurement noise is unknown"))
    elif in_noise:
        noise = Message(_("the margin is inside the measurement noise (the totals' intervals overlap)"))
    else:
        noise = Message(_("the margin stays above zero with every measurement at the ends of its 95%% interval"))
    if draws.get("stable") is not None and drawn_share is not None:
        noise = CLAUSE_SEPARATOR.join(
            [
                Message(
                    _("first in %(share)s of %(draws)s draws of the measurements within their intervals"),
                    {"share": _share(drawn_share), "draws": f"{int(draws.get('draws') or 0):,}"},
                ),
                noise,
            ]
        )
    return noise


def _clear_message(name: str, interval: tuple[float, float] | None) -> Message:
    if interval is None:
        return Message(
            _(
                "Clear: %(name)s's lead is beyond the tie margin, holds for most weight vectors, and the missing "
                "evidence cannot reverse it; its robustness to measurement noise is not known yet."
            ),
            {"name": name},
        )
    return Message(
        _(
            "Clear: %(name)s's lead is beyond the tie margin and the measurement noise, holds for most weight "
            "vectors, and the missing evidence cannot reverse it."
        ),
        {"name": name},
    )


def _verdict(
    out: dict[str, Any],
    inconclusive: list[Message],
    close: list[Message],
    clear: Message,
    undecided: list[Message] | None = None,
) -> dict[str, Any]:
    """The first verdict that applies; `inconclusive_reasons` lists why it is inconclusive (missing
    evidence first, then what the evidence at hand does not separate)."""
    out["inconclusive_reasons"] = [*inconclusive, *(undecided or [])]
    if out.get("misses"):
        out["verdict"] = MISFIT
        out["verdict_reason"] = Message(
            _(
                "Misses the constraints: %(name)s is recommended by the gates, but %(misses)s. Change the "
                "configuration (more GPUs, another candidate) or the constraints before signing."
            ),
            {
                "name": out["leader"].get("label") or out["leader"].get("candidate"),
                "misses": CLAUSE_SEPARATOR.join(out["misses"]),
            },
        )
    elif inconclusive:
        out["verdict"] = INCONCLUSIVE
        out["verdict_reason"] = Message(
            _("Inconclusive: %(reasons)s. Run the missing validation tests, then recompute."),
            {"reasons": CLAUSE_SEPARATOR.join(out["inconclusive_reasons"])},
        )
    elif undecided:
        out["verdict"] = INCONCLUSIVE
        out["verdict_reason"] = Message(
            _(
                "Inconclusive: %(reasons)s. Repeat the validation tests on a quiet load client (more requests "
                "narrow the intervals), then recompute."
            ),
            {"reasons": CLAUSE_SEPARATOR.join(undecided)},
        )
    elif close:
        out["verdict"] = CLOSE
        out["verdict_reason"] = Message(
            _("Close: %(reasons)s. Weigh the tie-break and the sensitivity below before signing."),
            {"reasons": CLAUSE_SEPARATOR.join(close)},
        )
    else:
        out["verdict"], out["verdict_reason"] = CLEAR, clear
    return out


def _tie(result: Mapping[str, Any], candidates: Mapping[Any, Mapping[str, Any]]) -> dict[str, Any]:
    """The headline of a tie: nobody first, what would separate the tied candidates, no weight robustness."""
    tie = result.get("tie") or {}
    tied = [candidates[cid] for cid in tie.get("candidates") or [] if cid in candidates]
    names = NAME_SEPARATOR.join(c.get("label") or c.get("candidate") for c in tied)
    totals = NAME_SEPARATOR.join(
        f"{c.get('label') or c.get('candidate')} {float(c.get('total') or 0.0):.3f}" for c in tied
    )
    separate = [load(item) for item in tie.get("separate") or []]
    out: dict[str, Any] = {
        "verdict": TIE,
        "leader": None,
        "runner_up": None,
        "tied": tied,
        "margin": None,
        "margin_interval": None,
        "share": None,
        "coverage": None,
        "fit": [],
        "misses": [],
        "rests_on": result.get("rests_on"),
        "inconclusive_reasons": [],
        "lead": Message(_("Tie between %(names)s: weighted totals %(totals)s."), {"names": names, "totals": totals}),
        "coverage_sentence": Message(
            _("Evidence coverage: %(coverages)s."),
            {
                "coverages": NAME_SEPARATOR.join(
                    f"{c.get('label') or c.get('candidate')} {float(c.get('coverage') or 0.0):.0%}" for c in tied
                )
            },
        ),
        "robustness": Message(_("Weight robustness is not reported for a tie.")),
        "separate": separate,
    }
    out["verdict_reason"] = Message(
        _("Tie, no winner: %(why)s. What would separate them: %(separate)s."),
        {
            "why": load((result.get("tie_break") or {}).get("explanation") or ""),
            "separate": CLAUSE_SEPARATOR.join(separate),
        },
    )
    out["caveat"] = out["coverage_sentence"]
    return out
