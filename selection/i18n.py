"""Translations of what the domain writes, applied at display time.

``selection.domain`` stays plain Python: its sentences (scenario reasons, scoring sentences,
notes and reasons, capacity verdicts) are `selection.domain.messages.Message`s, and
`message_text` renders one (or its stored dict) in the active language with gettext. This
module also lists every criterion, dimension and scenario name (and the "looks at"/question
texts) for makemessages, for the tables that show the names on their own. Unknown text is
returned unchanged, so user data never breaks a page: at worst it stays English.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.utils import translation
from django.utils.translation import get_language, gettext, pgettext
from django.utils.translation import gettext_lazy as _

from benchmarks import suite
from selection.domain import criteria as criteria_domain
from selection.domain import messages
from selection.domain.scenarios import SCENARIO_NAMES

# Every English domain name that may be shown, with its translatable form (the msgids are the
# domain's own texts, so a renamed domain string simply shows up as untranslated, never wrong).
DOMAIN_NAMES = {
    # dimensions
    "Memory allocation and reuse": _("Memory allocation and reuse"),
    "Concurrency scheduling and isolation": _("Concurrency scheduling and isolation"),
    "Context extension and compression": _("Context extension and compression"),
    "Cross-turn persistence and offload": _("Cross-turn persistence and offload"),
    "Cost structure": _("Cost structure"),
    "Observability": _("Observability"),
    "Pre-allocation vs paged, fragmentation, prefix reuse: sets the concurrency ceiling.": _(
        "Pre-allocation vs paged, fragmentation, prefix reuse: sets the concurrency ceiling."
    ),
    "Concurrency limits, isolation between requests and tenants, rejection policy: prevents OOM.": _(
        "Concurrency limits, isolation between requests and tenants, rejection policy: prevents OOM."
    ),
    "Supported context, cache quantisation or compression, control of one long request's cache.": _(
        "Supported context, cache quantisation or compression, control of one long request's cache."
    ),
    "Keeping cache across turns, swapping idle sessions out and back, cost and correctness of swap-in.": _(
        "Keeping cache across turns, swapping idle sessions out and back, cost and correctness of swap-in."
    ),
    "Memory and compute per unit of concurrency, utilisation.": _(
        "Memory and compute per unit of concurrency, utilisation."
    ),
    "Monitoring, alerting, capacity-planning data: memory, hit rate, swaps, fragmentation.": _(
        "Monitoring, alerting, capacity-planning data: memory, hit rate, swaps, fragmentation."
    ),
    # criteria
    "Memory allocation strategy": _("Memory allocation strategy"),
    "Cache reuse": _("Cache reuse"),
    "Concurrency control": _("Concurrency control"),
    "Context extension": _("Context extension"),
    "Cache persistence": _("Cache persistence"),
    "Cost control": _("Cost control"),
    "Cache lifecycle management": _("Cache lifecycle management"),
    "Session recovery consistency": _("Session recovery consistency"),
    "Throughput / unit cost": _("Throughput / unit cost"),
    "pre-allocation / dynamic, fragmentation": _("pre-allocation / dynamic, fragmentation"),
    "prefix cache, identical-input de-duplication": _("prefix cache, identical-input de-duplication"),
    "limit, isolation, rejection policy": _("limit, isolation, rejection policy"),
    "long context, cache compression": _("long context, cache compression"),
    "cross-turn keep, swap out / swap in": _("cross-turn keep, swap out / swap in"),
    "monitoring, alerting, capacity planning": _("monitoring, alerting, capacity planning"),
    "cost per unit of concurrency, utilisation": _("cost per unit of concurrency, utilisation"),
    "release, reclamation of aborted and idle sessions": _("release, reclamation of aborted and idle sessions"),
    "continuation after swap-in equals continuation without it": _(
        "continuation after swap-in equals continuation without it"
    ),
    "output tokens per GPU-second, cost per million tokens": _("output tokens per GPU-second, cost per million tokens"),
    # scenarios
    "High-concurrency short text": _("High-concurrency short text"),
    "Long documents": _("Long documents"),
    "Multi-turn and agents": _("Multi-turn and agents"),
    "Offline batch": _("Offline batch"),
}

# Row labels of the record's business-constraints section (selection.record_context).
DOMAIN_NAMES.update(
    {
        "Concurrency": _("Concurrency"),
        "Context length": _("Context length"),
        "Input tokens": _("Input tokens"),
        "Output tokens": _("Output tokens"),
        "Prefix sharing": _("Prefix sharing"),
        "Multi-turn": _("Multi-turn"),
        "Latency budget": _("Latency budget"),
        "Throughput target": _("Throughput target"),
        "Memory limit": _("Memory limit"),
        "Hardware": _("Hardware"),
        "Cost": _("Cost"),
        "Operations team": _("Operations team"),
        "Model": _("Model"),
    }
)
# Records written by hand (and older snapshots) use the names in lower case.
_BY_CASEFOLD = {name.casefold(): name for name in DOMAIN_NAMES}


def translate_name(text):
    """A domain name/description in the active language; anything unknown (or untranslated) unchanged."""
    if isinstance(text, str):
        key = text if text in DOMAIN_NAMES else _BY_CASEFOLD.get(text.casefold())
        if key is not None:
            translated = str(DOMAIN_NAMES[key])
            return text if translated == key else translated
    return text


def criterion_name(criterion_id: str) -> str:
    criterion = criteria_domain.CRITERIA_BY_ID.get(criterion_id)
    return translate_name(criterion.name) if criterion else criterion_id


def dimension_name(dimension_id: str) -> str:
    dimension = next((d for d in criteria_domain.DIMENSIONS if d.id == dimension_id), None)
    return translate_name(dimension.name) if dimension else dimension_id


def scenario_name(scenario_id: str) -> str:
    return translate_name(SCENARIO_NAMES.get(scenario_id, ""))


def _gettext(msgid: str, context: str | None) -> str:
    return pgettext(context, msgid) if context else gettext(msgid)


def message_text(value, language: str | None = None):
    """A message from the domain (a `Message`, or its dict as stored in Score.result,
    Selection.scenario_reasons or a capacity verdict) as text in the active language, or in
    `language` when given (a record's). Anything else, such as a plain English string stored
    before messages existed, is returned unchanged."""
    if language is None:
        return messages.render(value, _gettext)
    with translation.override(language):
        return messages.render(value, _gettext)


def record_language() -> str:
    """The language a new record snapshot is written in: the active one (the architect's who sends
    it to review) when kvselect offers it, else English. The PDF renders in it whoever opens it."""
    code = (get_language() or settings.LANGUAGE_CODE).lower()
    return code if code in dict(settings.LANGUAGES) else "en"


def translate_test(test_id):
    """A validation test as shown in run lists and buttons: the id itself in English (what the API,
    the CLI and CI scripts use), its title from `benchmarks.suite` in other languages."""
    title = suite.title_of(test_id)
    translated = gettext(title)
    return test_id if translated == title else translated


# Han, kana and hangul: names written family name first, without a space.
_CJK_NAME = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def person_name(user) -> str:
    """A person's name as their script writes it: 张伟 (family name first, no space) where
    Django's get_full_name gives "伟 张"; "first last" otherwise; the username without a name."""
    if user is None:
        return ""
    first, last = (user.first_name or "").strip(), (user.last_name or "").strip()
    if first and last and _CJK_NAME.search(first + last):
        return f"{last}{first}"
    return user.get_full_name() or user.get_username()
