"""The validation page's form: one field per planned parameter of a test, typed after its default."""

from __future__ import annotations

from typing import Any, Mapping

from django import forms
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from benchmarks import presentation
from selection.web import AccessibleErrorsMixin

# Labels of the planned parameters (benchmarks.harness.workloads.plan): the English text is the key
# with spaces, as before; unknown keys fall back to that.
PARAM_LABELS = {
    "concurrency": pgettext_lazy("validation parameter", "concurrency"),
    "duration_s": pgettext_lazy("validation parameter", "duration s"),
    "warmup_s": pgettext_lazy("validation parameter", "warmup s"),
    "ramp_up_s": pgettext_lazy("validation parameter", "ramp up s"),
    "input_tokens": pgettext_lazy("validation parameter", "input tokens"),
    "output_tokens": pgettext_lazy("validation parameter", "output tokens"),
    "abort_fraction": pgettext_lazy("validation parameter", "abort fraction"),
    "settle_s": pgettext_lazy("validation parameter", "settle s"),
    "rungs": pgettext_lazy("validation parameter", "rungs"),
    "repeats": pgettext_lazy("validation parameter", "repeats"),
    "background_concurrency": pgettext_lazy("validation parameter", "background concurrency"),
    "background_input_tokens": pgettext_lazy("validation parameter", "background input tokens"),
    "background_output_tokens": pgettext_lazy("validation parameter", "background output tokens"),
    "background_lead_s": pgettext_lazy("validation parameter", "background lead s"),
    "with_background": pgettext_lazy("validation parameter", "with background"),
    "required_tokens": pgettext_lazy("validation parameter", "required tokens"),
    "sessions": pgettext_lazy("validation parameter", "sessions"),
    "idle_fraction": pgettext_lazy("validation parameter", "idle fraction"),
    "idle_s": pgettext_lazy("validation parameter", "idle s"),
    "turn_input_tokens": pgettext_lazy("validation parameter", "turn input tokens"),
    "pressure_concurrency": pgettext_lazy("validation parameter", "pressure concurrency"),
    "pressure_input_tokens": pgettext_lazy("validation parameter", "pressure input tokens"),
    "seed": pgettext_lazy("validation parameter", "seed"),
    "parallel": pgettext_lazy("validation parameter", "parallel"),
    "requests": pgettext_lazy("validation parameter", "requests"),
    "prefix_tokens": pgettext_lazy("validation parameter", "prefix tokens"),
    "suffix_tokens": pgettext_lazy("validation parameter", "suffix tokens"),
    "kv_capacity_tokens": pgettext_lazy("validation parameter", "kv capacity tokens"),
    "window_s": pgettext_lazy("validation parameter", "window s"),
    "max_drift_pct": pgettext_lazy("validation parameter", "max drift pct"),
    "ttft_p95_ms": pgettext_lazy("validation parameter", "ttft p95 ms"),
    "tpot_p95_ms": pgettext_lazy("validation parameter", "tpot p95 ms"),
}


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
            kind = presentation.param_kind(default)
            self.kinds[key] = kind
            label = PARAM_LABELS.get(key, key.replace("_", " "))
            if kind == "bool":
                field = forms.BooleanField(label=label, required=False, initial=default)
            elif kind == "int":
                field = forms.IntegerField(label=label, initial=default, min_value=0)
            elif kind == "float":
                field = forms.FloatField(label=label, initial=default, min_value=0)
            else:
                field = forms.CharField(
                    label=label,
                    required=False,
                    initial=presentation.format_param(default, kind),
                    help_text=_("comma-separated numbers")
                    if kind.endswith("_list")
                    else (_("JSON; empty for none") if kind == "json" else ""),
                )
            self.fields[key] = field

    def clean(self):
        data = super().clean()
        for key, kind in self.kinds.items():
            if kind in ("int_list", "float_list", "json", "text") and key not in self.errors:
                try:
                    data[key] = presentation.parse_param(self.data.get(self.add_prefix(key), ""), kind)
                except presentation.ParamError as error:
                    self.add_error(key, self.PARAM_ERRORS[error.code] % {"detail": error.detail})
        return data

    def params(self) -> dict[str, Any]:
        return {key: self.cleaned_data.get(key) for key in self.kinds}
