"""Small presentation helpers for kvselect templates."""

from __future__ import annotations

from django import template
from django.utils.formats import number_format

from selection.capacity.i18n import translate_capacity
from selection.i18n import person_name, translate_name, translate_reason, translate_test
from selection.scoring.i18n import translate_sentence

register = template.Library()


@register.filter
def person(user) -> str:
    """A user's name as their script writes it (see i18n_names.person_name)."""
    return person_name(user)


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
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@register.filter
def field_type(bound_field) -> str:
    """The widget's input type ("checkbox", "number", "select", ...) for styling."""
    widget = bound_field.field.widget
    if getattr(widget, "allow_multiple_selected", False) and getattr(widget, "input_type", "") == "checkbox":
        return "checkboxselectmultiple"
    return getattr(widget, "input_type", None) or widget.__class__.__name__.lower()


@register.filter
def domain_name(value):
    """A criterion/dimension/scenario name or description from selection.domain, translated."""
    return translate_name(value)


@register.filter
def scenario_reason(value):
    """A scenario reason produced by selection.domain.scenarios, translated."""
    return translate_reason(value)


@register.filter
def score_sentence(value):
    """A sentence, note or reason produced by selection.domain.scoring, translated."""
    return translate_sentence(value)


@register.filter
def capacity_sentence(value):
    """A capacity verdict summary or reason produced by selection.domain.capacity, translated."""
    return translate_capacity(value)


@register.filter
def test_name(value):
    """A validation test id (concurrency_stress, ...) in the active language."""
    return translate_test(value)
