"""A record for one of tied candidates: the ground its drafter states (issue 33, issue 34 item 4).

A tie names no winner (`tiebreak`: an exact tie, or a lead within the tie margin or the measurement
noise, where the evidence is inconclusive). A procurement reader still needs a decision, so a record
may be drafted for ONE of the tied candidates, only on a ground a person states and answers for.
The rule, in one place:

* **When the scores tie** (`tied(result)`: the scoring's `tie.candidates`, no `winner`), a draft
  names which tied candidate it chooses (`tie_choice`) and the ground for choosing it (`tie_ground`:
  free text, at least `MIN_GROUND_CHARS` characters, at most `MAX_GROUND_CHARS`). Without either, the
  draft is refused, the refusal naming the field; a candidate outside the tie is refused.
* **When the scores name a winner** there is nothing to choose between: a stated ground is refused
  (the record decides for the recommendation), so a ground stated for a tie that new evidence has
  since broken never reaches a record.
* **What the record says** (`statement`): "Tied on the evidence between A and B; chosen on the
  stated ground: <the ground, in full>". Never "winner", never "recommended": the choice rests on
  the ground, not on the evidence, and the record names who stated it and when.
* **Who answers for it**: the drafter states it (audited: who, when); the business owner confirms
  it before approving (`BUSINESS_CONFIRMS`), the other owners see it on the record before they sign.

Pure Python, no Django; sentences are `messages.Message`s, translated where shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from selection.domain.messages import NAME_SEPARATOR, Message
from selection.domain.messages import marked as _

CHOICE_FIELD, GROUND_FIELD, CONFIRM_FIELD = "tie_choice", "tie_ground", "confirm_tie_ground"
MIN_GROUND_CHARS = 20  # a ground is a reason a reader can weigh, not "ok" or a candidate's name
MAX_GROUND_CHARS = 2000
BUSINESS_CONFIRMS = "business"  # the owner who confirms the ground before approving


@dataclass(frozen=True)
class TiedChoice:
    """The record's choice among tied candidates: the chosen one, the ground, the others it tied with."""

    chosen: str  # the candidate's label
    ground: str
    tied: tuple[str, ...]  # every tied candidate's label, the chosen one included


def tied(result: Mapping[str, Any]) -> list[str]:
    """The tied candidates' ids of a stored scoring result (empty: the scores name a winner, or nobody)."""
    if result.get("winner"):
        return []
    candidates = [str(c) for c in (result.get("tie") or {}).get("candidates") or []]
    return candidates if len(candidates) > 1 else []


def problems(
    tied_ids: Sequence[str],
    labels: Mapping[str, str],
    choice: str | None,
    ground: str | None,
    winner_label: str | None = None,
) -> dict[str, list[Message]]:
    """What keeps a draft's `choice` and `ground` from standing, by field (empty: they stand).

    `tied_ids`: the scores' tied candidates (`tied`); `labels`: each candidate's name by id;
    `winner_label`: the recommendation's name when the scores name one."""
    choice = str(choice) if choice not in (None, "") else None
    text = (ground or "").strip()
    out: dict[str, list[Message]] = {}
    if not tied_ids:
        if choice is not None or text:
            field = CHOICE_FIELD if choice is not None else GROUND_FIELD
            if winner_label:
                out[field] = [
                    Message(
                        _(
                            "The scores do not tie: they recommend %(winner)s, and the record decides for it. A "
                            "stated ground is only for choosing among tied candidates: clear “which tied candidate” "
                            "and “ground for choosing it”."
                        ),
                        {"winner": winner_label},
                    )
                ]
            else:
                out[field] = [
                    Message(
                        _(
                            "The scores do not tie: a stated ground is only for choosing among tied candidates. "
                            "Clear “which tied candidate” and “ground for choosing it”."
                        )
                    )
                ]
        return out
    names = NAME_SEPARATOR.join(labels.get(cid, cid) for cid in tied_ids)
    if choice is None:
        out[CHOICE_FIELD] = [
            Message(
                _(
                    "The scores tie between %(names)s: the evidence names no winner. Name which tied candidate this "
                    "record chooses, and state the ground for choosing it."
                ),
                {"names": names},
            )
        ]
    elif choice not in tied_ids:
        out[CHOICE_FIELD] = [
            Message(
                _("%(name)s is not one of the tied candidates (%(names)s): the record chooses among them."),
                {"name": labels.get(choice, choice), "names": names},
            )
        ]
    if not text:
        out[GROUND_FIELD] = [
            Message(
                _(
                    "The scores tie between %(names)s: state the ground for choosing one of them (required: the "
                    "record says it was chosen on this ground, not on the evidence, and the business owner "
                    "confirms it)."
                ),
                {"names": names},
            )
        ]
    elif len(text) < MIN_GROUND_CHARS:
        out[GROUND_FIELD] = [
            Message(
                _(
                    "Too short to weigh: say why this candidate, in at least %(min)s characters (for example the "
                    "team's experience with it, its support contract, or the test it was faster in)."
                ),
                {"min": MIN_GROUND_CHARS},
            )
        ]
    elif len(text) > MAX_GROUND_CHARS:
        out[GROUND_FIELD] = [
            Message(
                _("At most %(max)s characters (this one has %(n)s): put the long argument in the rationale."),
                {"max": MAX_GROUND_CHARS, "n": len(text)},
            )
        ]
    elif choice is not None and text.casefold() == labels.get(choice, choice).strip().casefold():
        out[GROUND_FIELD] = [Message(_("The ground is the candidate's name: say why it is chosen."))]
    return out


def statement(choice: TiedChoice) -> Message:
    """What the record says of the choice, the ground in full: never "winner" or "recommended"."""
    return Message(
        _("Tied on the evidence between %(tied)s; chosen on the stated ground: %(ground)s"),
        {"tied": NAME_SEPARATOR.join(choice.tied), "ground": choice.ground},
    )


def summary(choice: TiedChoice, selection: str) -> Message:
    """The decision's one line when the drafter wrote none (in place of "Choose X for Y")."""
    return Message(
        _("%(name)s for %(selection)s: tied on the evidence with %(others)s; chosen on the stated ground."),
        {
            "name": choice.chosen,
            "selection": selection,
            "others": NAME_SEPARATOR.join(name for name in choice.tied if name != choice.chosen),
        },
    )


def confirmation_needed(role: str, has_ground: bool, confirmed: bool) -> Message | None:
    """Why `role`'s approval is refused for want of confirming the ground (None: it may approve)."""
    if not has_ground or role != BUSINESS_CONFIRMS or confirmed:
        return None
    return Message(
        _(
            "This record chooses among tied candidates on a stated ground, not on the evidence: as business owner, "
            "read the ground and confirm it to approve."
        )
    )
