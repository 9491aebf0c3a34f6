"""Small presentation helpers for kvselect templates."""

from __future__ import annotations

import math
import unicodedata
from datetime import date, datetime

from django import template
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext_lazy

from selection.i18n import domain_text, message_text, person_name, translate_test
from selection.i18n import role_name as role_label
from selection.records.staleness import staleness

register = template.Library()


@register.simple_tag
def inputs_changed(selection):
    """What changed since the selection's current signed decision was signed (None: nothing)."""
    return staleness(selection) if getattr(selection, "pk", None) else None


VERDICT_STATUS_LABELS = {
    "pass": gettext_lazy("pass"),
    "fail": gettext_lazy("fail"),
    "inconclusive": gettext_lazy("inconclusive"),
    "insufficient_data": gettext_lazy("insufficient data"),
    "not_exercised": gettext_lazy("not exercised"),
    "not_judged": gettext_lazy("not judged"),
    "not_applicable": gettext_lazy("not applicable"),
}


@register.filter
def verdict_status(status: str) -> str:
    """A verdict status (benchmarks.verdicts.STATUSES) in the reader's language."""
    return str(VERDICT_STATUS_LABELS.get(status, status))


@register.filter
def person(user) -> str:
    """A user's name as their script writes it (see i18n_names.person_name)."""
    return person_name(user)


@register.filter
def when(value, precision: str = "") -> str:
    """A moment as kvselect writes it everywhere: "2026-03-02 14:05 UTC+01:00", in the active time
    zone (the user's, see `selection.middleware.TimezoneMiddleware`); `when:"s"` adds seconds.
    Takes datetimes, dates ("2026-03-02") and the ISO strings stored in record snapshots."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        if timezone.is_naive(value):
            value = timezone.make_aware(value, timezone.get_default_timezone())
        local = timezone.localtime(value)
        offset = local.utcoffset()
        minutes = int(offset.total_seconds() // 60) if offset is not None else 0
        sign = "+" if minutes > 0 else "-"
        zone = "UTC" if minutes == 0 else f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        pattern = "%Y-%m-%d %H:%M:%S" if precision == "s" else "%Y-%m-%d %H:%M"
        return f"{local.strftime(pattern)} {zone}"
    if isinstance(value, date):
        return value.isoformat()
    return ""


@register.filter
def role_name(role: str) -> str:
    """A signature field or owner role (business, platform, security, seal) in the active language."""
    return role_label(role)


@register.filter
def percent(value, digits: int = 1) -> str:
    """0.2345 -> "23.5%" (a share of 1 shown as a percentage, localised)."""
    try:
        return f"{number_format(float(value) * 100, int(digits))}%"
    except (TypeError, ValueError):
        return "—"


@register.filter
def audit_value(value) -> str:
    """An audit old/new JSON value as short readable text."""
    if value is None or value == "":
        return "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {audit_value(v)}" for k, v in value.items()) or "—"
    if isinstance(value, list):
        return ", ".join(audit_value(v) for v in value) or "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return plain_number(value)
    return str(value)


def plain_number(value: float) -> str:
    """20000.0 -> "20,000", 0.123456 -> "0.1235", 2e-05 -> "0.00002": never an exponent; whole
    numbers exact, others to four significant digits below 1 and four decimals above."""
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 1:
        text = f"{value:,.4f}"
    else:
        text = f"{value:.{3 - math.floor(math.log10(abs(value)))}f}"
    return text.rstrip("0").rstrip(".")


@register.filter
def field_type(bound_field) -> str:
    """The widget's input type ("checkbox", "number", "select", ...) for styling."""
    widget = bound_field.field.widget
    if getattr(widget, "allow_multiple_selected", False) and getattr(widget, "input_type", "") == "checkbox":
        return "checkboxselectmultiple"
    return getattr(widget, "input_type", None) or widget.__class__.__name__.lower()


@register.filter
def domain_name(value):
    """A criterion/dimension/scenario name or description from selection.domain (as a snapshot
    stored it: the English text), translated."""
    return domain_text(value)


@register.filter
def message(value):
    """A sentence from selection.domain (scenario reason, scoring sentence, note or reason, capacity
    verdict), stored as a message, in the active language; plain text is shown unchanged."""
    return message_text(value)


@register.filter
def test_name(value):
    """A validation test id (concurrency_stress, ...) in the active language."""
    return translate_test(value)


@register.filter
def clip(value, columns: int) -> str:
    """Text cut to `columns` display columns with "…" (a CJK character takes two, as it does on the
    page): the record's one-page summary bounds each free text by the room it has, in any language."""
    text = " ".join(str(value or "").split())
    used = 0
    for index, char in enumerate(text):
        used += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        if used > int(columns):
            return text[:index].rstrip() + "…"
    return text
