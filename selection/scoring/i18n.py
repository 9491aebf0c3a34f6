"""Translations of the comparison's scoring sentences (selection.domain.scoring), at display time.

The scoring domain writes English prose with numbers into the stored Score.result; as with the
scenario reasons (selection.i18n_names), each sentence shape has one pattern here and a
translatable template. Parts that are themselves sentences (tie-break explanations, gate
reasons, sensitivity clauses) are translated recursively; criterion and dimension names go
through ``translate_name``. Unknown text is returned unchanged.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext

from selection.i18n import translate_name

_NUM = r"[-+]?[\d.,]+"


def _p(pattern: str) -> re.Pattern:
    return re.compile(pattern.replace("NUM", _NUM), re.S)


def _name_list(text: str) -> str:
    """"a +0.03, b -0.06" (criterion moves) with the names translated."""
    parts = []
    for part in text.split(", "):
        m = re.fullmatch(r"(.+) ([-+][\d.]+)", part)
        parts.append(f"{translate_name(m[1])} {m[2]}" if m else part)
    return pgettext("list separator between names", ", ").join(parts)


def _clauses(text: str) -> str:
    out = []
    for m in re.finditer(r"(rises|falls) by more than (NUM) \((above|below) (NUM), (.+?) would lead\)".replace("NUM", _NUM), text):
        template = (_("rises by more than %(by)s (above %(to)s, %(challenger)s would lead)") if m[1] == "rises"
                    else _("falls by more than %(by)s (below %(to)s, %(challenger)s would lead)"))
        out.append(str(template) % {"by": m[2], "to": m[4], "challenger": m[5]})
    return str(_(" or ")).join(out) if out else text


def _shares(text: str) -> str:
    parts = []
    for part in text.split("; "):
        m = re.fullmatch(r"(.+) in ([\d.]+%)", part)
        parts.append(str(_("%(name)s in %(share)s")) % {"name": m[1], "share": m[2]} if m else part)
    return pgettext("list separator between clauses", "; ").join(parts)


def _reasons(text: str) -> str:
    return pgettext("list separator between clauses", "; ").join(translate_sentence(r) for r in text.split("; "))


def _deciding(text: str) -> str:
    for pattern, template in _DECIDING:
        m = pattern.fullmatch(text)
        if m:
            return str(template) % m.groupdict()
    return text


_DECIDING = (
    (_p(r"better observability \((?P<first>NUM) vs (?P<second>NUM)\)"),
     _("better observability (%(first)s vs %(second)s)")),
    (_p(r"lower operating complexity \((?P<first>\S+) vs (?P<second>\S+)\)"),
     _("lower operating complexity (%(first)s vs %(second)s)")),
    (_p(r"higher total \(observability and operating complexity equal\)"),
     _("higher total (observability and operating complexity equal)")),
)

# (pattern, template, {group: how to translate it}) - first full match wins.
_RULES = (
    (_p(r"(?P<excluded>\d+) SIMULATED indicator value\(s\) excluded from this final scoring"),
     _("%(excluded)s SIMULATED indicator value(s) excluded from this final scoring"), {}),
    (_p(r"SIMULATED evidence included: this scoring is not signable"),
     _("SIMULATED evidence included: this scoring is not signable"), {}),
    (_p(r"Some evidence is missing: totals are lower bounds \(missing evidence contributes nothing\); "
        r"total_upper shows the most it could add"),
     _("Some evidence is missing: totals are lower bounds (missing evidence contributes nothing); "
       "total_upper shows the most it could add"), {}),
    (_p(r"(?P<count>\d+) candidate\(s\) screened out by the gates"),
     _("%(count)s candidate(s) screened out by the gates"), {}),
    (_p(r"The sensitivity figures below concern the weighted-sum ranking, which (?P<leader>.+) leads; "
        r"the tie-break prefers (?P<preferred>.+) within the margin\."),
     _("The sensitivity figures below concern the weighted-sum ranking, which %(leader)s leads; "
       "the tie-break prefers %(preferred)s within the margin."), {}),
    (_p(r"(?P<name>.+) is recommended with a weighted total of (?P<total>NUM) \(up to (?P<upper>NUM) if missing "
        r"evidence came in at full marks\), evidence coverage (?P<coverage>\d+%)\."),
     _("%(name)s is recommended with a weighted total of %(total)s (up to %(upper)s if missing evidence came in "
       "at full marks), evidence coverage %(coverage)s."), {}),
    (_p(r"(?P<name>.+) is recommended with a weighted total of (?P<total>NUM), evidence coverage (?P<coverage>\d+%)\."),
     _("%(name)s is recommended with a weighted total of %(total)s, evidence coverage %(coverage)s."), {}),
    (_p(r"Tie-break applied: (?P<explanation>.+)\."),
     _("Tie-break applied: %(explanation)s."), {"explanation": lambda t: translate_sentence(t)}),
    (_p(r"(?P<name>.+) leads by more than the tie margin (?P<margin>NUM)"),
     _("%(name)s leads by more than the tie margin %(margin)s"), {}),
    (_p(r"within the tie margin (?P<margin>NUM): (?P<names>.+); (?P<first>.+) is preferred on (?P<deciding>.+)"),
     _("within the tie margin %(margin)s: %(names)s; %(first)s is preferred on %(deciding)s"),
     {"deciding": _deciding}),
    (_p(r"No candidate passes the gates\."), _("No candidate passes the gates."), {}),
    (_p(r"no candidate passes the gates"), _("no candidate passes the gates"), {}),
    (_p(r"(?P<name>.+?) is screened out: (?P<reasons>.+)\."),
     _("%(name)s is screened out: %(reasons)s."), {"reasons": _reasons}),
    (_p(r"(?P<dimension>.+): no evidence \(gate (?P<threshold>NUM)\)"),
     _("%(dimension)s: no evidence (gate %(threshold)s)"), {"dimension": translate_name}),
    (_p(r"(?P<dimension>.+) (?P<score>NUM) < gate (?P<threshold>NUM)"),
     _("%(dimension)s %(score)s < gate %(threshold)s"), {"dimension": translate_name}),
    (_p(r"(?P<dimension>.+) (?P<score>NUM) >= gate (?P<threshold>NUM)"),
     _("%(dimension)s %(score)s >= gate %(threshold)s"), {"dimension": translate_name}),
    (_p(r"Sensitivity needs at least two candidates that pass the gates\."),
     _("Sensitivity needs at least two candidates that pass the gates."), {}),
    (_p(r"(?P<leader>.+) stays first for any (?P<criterion>.+) weight in \[0, 1\]\."),
     _("%(leader)s stays first for any %(criterion)s weight in [0, 1]."), {"criterion": translate_name}),
    (_p(r"(?P<leader>.+?) stays first unless the (?P<criterion>.+?) weight (?P<clauses>(?:rises|falls) by more than .+)\."),
     _("%(leader)s stays first unless the %(criterion)s weight %(clauses)s."),
     {"criterion": translate_name, "clauses": _clauses}),
    (_p(r"No weighting makes (?P<challenger>.+) tie (?P<leader>.+): it is nowhere better\."),
     _("No weighting makes %(challenger)s tie %(leader)s: it is nowhere better."), {}),
    (_p(r"(?P<challenger>.+) would tie (?P<leader>.+) if the weights moved by (?P<distance>NUM) \(L2\), "
        r"mainly (?P<main>.+)\."),
     _("%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2), mainly %(main)s."),
     {"main": _name_list}),
    (_p(r"(?P<challenger>.+) would tie (?P<leader>.+) if the weights moved by (?P<distance>NUM) \(L2\)\."),
     _("%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2)."), {}),
    (_p(r"Across (?P<draws>[\d,]+) weight vectors within ±(?P<spread>\d+%) of the chosen weights, "
        r"the first place goes to (?P<shares>.+)\."),
     _("Across %(draws)s weight vectors within ±%(spread)s of the chosen weights, the first place goes to "
       "%(shares)s."), {"shares": _shares}),
)


def translate_sentence(text):
    """A scoring sentence/note/reason in the active language; unknown text unchanged."""
    if not isinstance(text, str):
        return text
    for pattern, template, parts in _RULES:
        m = pattern.fullmatch(text)
        if m:
            values = {k: (parts[k](v) if k in parts and v is not None else v) for k, v in m.groupdict().items()}
            return str(template) % values
    return text
