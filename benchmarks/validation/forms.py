"""The validation page's form: one field per planned parameter of a test, typed after its default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from benchmarks import presentation
from benchmarks.validation import specs
from selection.web import AccessibleErrorsMixin

if TYPE_CHECKING:
    from benchmarks.harness.workloads.spec import ParamSpec

# Labels of keys no test plans today (older runs' parameters, the command line's); a planned
# parameter's label is its spec's (benchmarks.harness.workloads.spec), any other key is named by
# `param_label` from the key itself.
OTHER_LABELS = {
    "drain_timeout_s": _("Drain timeout (s)"),
    "idle_fraction": _("Share of sessions left idle (0-1)"),
}
UNIT_SUFFIXES = (("_ms", "ms"), ("_s", "s"), ("_pct", "%"), ("_tokens", "tokens"))
ACRONYMS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "kv": "KV", "e2e": "end-to-end", "p95": "p95", "p99": "p99"}


def param_label(key: str, test: str | None = None) -> str:
    """A parameter's label, translated: its spec's (the test's, else any test's that plans the key),
    else words from its key ("settle_s" -> "Settle (s)")."""
    spec = param_spec(key, test)
    if spec is not None:
        return gettext(spec.label)
    if key in OTHER_LABELS:
        return str(OTHER_LABELS[key])
    unit = ""
    for suffix, name in UNIT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key, unit = key[: -len(suffix)], f" ({name})"
            break
    words = [ACRONYMS.get(word, word) for word in key.split("_") if word]
    text = " ".join(words) or key
    return text[0].upper() + text[1:] + unit


def param_spec(key: str, test: str | None = None) -> ParamSpec | None:
    """The spec of parameter `key` of `test`, else of whichever test plans it."""
    spec = specs.spec(test or "")
    return (spec.param(key) if spec else None) or specs.param_spec(key)


class ValidationParamsForm(AccessibleErrorsMixin, forms.Form):
    """One field per planned parameter of a test, typed after the planned value."""

    label = forms.CharField(label=_("Run label"), required=False, max_length=200)
    PARAM_ERRORS = {
        "empty_list": _("give at least one number, separated by commas"),
        "not_numbers": _("expected numbers separated by commas, got “%(detail)s”"),
        "not_positive": _("every value must be positive"),
        "bad_json": _("not valid JSON (%(detail)s)"),
    }

    def __init__(self, *args, plan: Mapping[str, Any], test: str, **kwargs):
        kwargs.setdefault("prefix", test)
        super().__init__(*args, **kwargs)
        self.test, self.plan, self.kinds = test, dict(plan), {}
        for key, default in self.plan.items():
            spec = param_spec(key, test)
            # a rate planned as none (no rate in the constraints) is still a number the user may give
            kind = "float" if default is None and spec and spec.positive else presentation.param_kind(default)
            self.kinds[key] = kind
            self.fields[key] = param_field(key, test, default, kind)

    def clean(self):
        data = super().clean()
        for key, kind in self.kinds.items():
            if kind in ("int_list", "float_list", "json", "text") and key not in self.errors:
                try:
                    data[key] = presentation.parse_param(self.data.get(self.add_prefix(key), ""), kind)
                except presentation.ParamError as error:
                    self.add_error(key, self.PARAM_ERRORS[error.code] % {"detail": error.detail})
            spec = param_spec(key, self.test)
            problem = spec.problem(data.get(key)) if spec and key not in self.errors else None
            if problem is not None:
                template, params = problem
                self.add_error(key, gettext(template) % params)
        return data

    def params(self) -> dict[str, Any]:
        return {key: self.cleaned_data.get(key) for key in self.kinds}


def param_field(key: str, test: str, default: Any, kind: str) -> forms.Field:
    """The field of one planned parameter: its spec's label, lower bound and help, typed after `kind`."""
    spec = param_spec(key, test)
    label = param_label(key, test)
    minimum = spec.minimum if spec else 0
    # a parameter planned as none without constraints may be left empty (the stress's rate: closed loop)
    required = not (spec and spec.optional)
    if kind == "bool":
        return forms.BooleanField(label=label, required=False, initial=default)
    if kind == "int":
        return forms.IntegerField(label=label, initial=default, min_value=minimum, required=required)
    if kind == "float":
        return forms.FloatField(label=label, initial=default, min_value=minimum, required=required)
    if kind.endswith("_list"):
        kind_help = _("comma-separated numbers")
    else:
        kind_help = _("JSON; empty for none") if kind == "json" else ""
    return forms.CharField(
        label=label,
        required=False,
        initial=presentation.format_param(default, kind),
        help_text=gettext(spec.help) if spec and spec.help else kind_help,
    )
