"""Translations of what the domain writes, applied at display time.

``selection.domain`` stays plain Python: its sentences (scenario reasons, scoring sentences,
notes and reasons, capacity verdicts) are `selection.domain.messages.Message`s, and
`message_text` renders one (or its stored dict) in the active language with gettext. Names
(criteria, dimensions, scenarios, their descriptions) are marked where the domain defines them
and translated here by id, or as text (`domain_text`) where a snapshot stored them. Unknown text
is returned unchanged, so user data never breaks a page: at worst it stays English.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.utils import translation
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language, gettext, pgettext

from benchmarks import suite
from selection.domain import criteria as criteria_domain
from selection.domain import messages
from selection.domain.roles import ROLE_LABELS
from selection.domain.scenarios import SCENARIO_NAMES


def domain_text(text):
    """A name or description `selection.domain` defines (a criterion's, a dimension's, a scenario's,
    a record's row label) in the active language. The English text is its own msgid, marked where it
    is defined, so names stored as text in snapshots translate as well; anything else (user data, an
    empty string, a name renamed since) is returned unchanged."""
    return gettext(text) if isinstance(text, str) and text else text


def criterion_name(criterion_id: str) -> str:
    """A criterion's name in the active language (the id itself when unknown)."""
    criterion = criteria_domain.CRITERIA_BY_ID.get(criterion_id)
    return gettext(criterion.name) if criterion else criterion_id


def dimension_name(dimension_id: str) -> str:
    """A dimension's name in the active language (the id itself when unknown)."""
    dimension = next((d for d in criteria_domain.DIMENSIONS if d.id == dimension_id), None)
    return gettext(dimension.name) if dimension else dimension_id


def scenario_name(scenario_id: str) -> str:
    """A scenario's name in the active language ("" when unknown)."""
    name = SCENARIO_NAMES.get(scenario_id)
    return gettext(name) if name else ""


def role_name(role: str) -> str:
    """An owner role or the seal (business, platform, security, seal) in the active language (the
    role itself when unknown)."""
    label = ROLE_LABELS.get(role)
    return gettext(label) if label else role


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


def message_html(value) -> SafeString:
    """`message_text` as HTML for a page: the text escaped, every `messages.Code` value (a key path, a column,
    a value quoted from an uploaded file) in `<code>`, as a page shows identifiers."""
    value = messages.load(value)
    if isinstance(value, messages.Message):
        values = {name: message_html(param) for name, param in value.params.items()}
        try:
            return mark_safe(conditional_escape(_gettext(value.msgid, value.context)) % values)
        except (KeyError, ValueError, TypeError):  # a translation that lost or mistyped a placeholder
            return mark_safe(conditional_escape(value.msgid) % values)
    if isinstance(value, messages.Join):
        separator = message_html(value.separator)
        return mark_safe(separator.join(message_html(item) for item in value.items))
    if isinstance(value, messages.Code):
        return format_html("<code>{}</code>", str(value))
    return conditional_escape(value)


def message_literals(value):
    """`message_text` for text a page passes through the `literals` filter (a run's notes): every `messages.Code`
    value in backticks, which the filter sets as `<code>`."""
    value = messages.load(value)
    if isinstance(value, messages.Message):
        values = {name: message_literals(param) for name, param in value.params.items()}
        try:
            return _gettext(value.msgid, value.context) % values
        except (KeyError, ValueError, TypeError):  # a translation that lost or mistyped a placeholder
            return value.msgid % values
    if isinstance(value, messages.Join):
        return str(message_literals(value.separator)).join(str(message_literals(item)) for item in value.items)
    if isinstance(value, messages.Code):
        return f"`{value}`" if "`" not in value else str(value)
    return value


def record_language() -> str:
    """The language a new record snapshot is written in: the active one (the architect's who sends
    it to review) when kvselect offers it, else English. The PDF renders in it whoever opens it."""
    code = (get_language() or settings.LANGUAGE_CODE).lower()
    return code if code in dict(settings.LANGUAGES) else "en"


def translate_test(test_id):
    """A validation test as people read it in run lists, buttons and messages: its title from
    `benchmarks.suite` in the active language ("Long context"), never its id (`long_context` is
    what the API, the CLI and CI scripts use)."""
    return gettext(suite.title_of(test_id))


def certificate_name(subject: str) -> str:
    """Who a certificate names, as people read it: the common name of an RFC 4514 subject
    ("OU=Business owner (DEVELOPMENT),O=kvselect development,CN=张伟" reads 张伟); the subject itself
    when it holds no common name or does not parse."""
    from cryptography import x509  # loaded by the first certificate shown, not by every process
    from cryptography.x509.oid import NameOID

    try:
        name = x509.Name.from_rfc4514_string(subject or "")
    except ValueError:
        return subject or ""
    common_names = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common_names[0].value) if common_names else subject


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


# Languages whose sentences follow one another without a space (their full stop, "。", is wide).
UNSPACED_LANGUAGES = ("zh",)


def labelled(label, value) -> str:
    """`label` and its `value` as the active language writes them: "Observed: …", "观测：…" (never an
    ASCII colon after Chinese text)."""
    return f"{label}{message_text(messages.LABEL_SEPARATOR)}{value}"


def clauses(parts) -> str:
    """Clauses joined as the active language separates them ("a; b"; Chinese "a；b"), empty ones left out."""
    return message_text(messages.CLAUSE_SEPARATOR).join(str(part) for part in parts if part)


def names(parts) -> str:
    """Names joined as the active language lists them ("a, b"; Chinese "a、b"), empty ones left out."""
    return message_text(messages.NAME_SEPARATOR).join(str(part) for part in parts if part)


def sentences(parts) -> str:
    """Sentences one after another as the active language writes them: a space between them in English,
    none after a Chinese full stop (a sentence that ends in Latin text keeps its space). Empty ones are
    left out."""
    parts = [str(part).strip() for part in parts if part and str(part).strip()]
    if not (get_language() or "").lower().startswith(UNSPACED_LANGUAGES):
        return " ".join(parts)
    text = ""
    for part in parts:
        spaced = text and not _CJK_END.search(text)
        text += (" " if spaced else "") + part
    return text


_CJK_END = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]$")
