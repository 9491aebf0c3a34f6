"""The candidate form: engine, version, launch flags, endpoint, hardware and the KV precision."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from selection.candidates.services import candidate_errors
from selection.domain import limits
from selection.models import Candidate, Engine
from selection.web import AccessibleErrorsMixin, bound_numbers

# the other fields each of the service's rules reads (`services.candidate_errors`)
RULE_READS = {
    "tensor_parallel": ("gpu_count", "engine", "engine_version"),
    "kv_precision": ("engine", "engine_version"),
    "label": ("engine", "engine_version"),
}


class CandidateForm(AccessibleErrorsMixin, forms.ModelForm):
    """A candidate: catalog engine + version + endpoint + hardware. The API key is write-only."""

    api_key = forms.CharField(
        label=_("API key"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=_("Stored encrypted and never shown again. Leave empty to keep the current key."),
    )
    clear_api_key = forms.BooleanField(label=_("Remove the stored API key"), required=False)
    # Local engines usually speak plain http; a scheme-less entry means http, not https.
    endpoint_url = forms.URLField(
        label=_("Endpoint URL (OpenAI-compatible)"),
        required=False,
        assume_scheme="http",
        widget=forms.URLInput(attrs={"placeholder": "http://127.0.0.1:8000"}),
    )
    metrics_url = forms.URLField(
        label=_("Metrics URL (Prometheus)"),
        required=False,
        assume_scheme="http",
        widget=forms.URLInput(attrs={"placeholder": "http://127.0.0.1:8000/metrics"}),
    )

    prefix_off_endpoint_url = forms.URLField(
        label=_("Prefix-caching-off endpoint (optional)"),
        required=False,
        assume_scheme="http",
        widget=forms.URLInput(attrs={"placeholder": "http://127.0.0.1:8001"}),
        help_text=_(
            "The same engine started with prefix caching off (vLLM --no-enable-prefix-caching, SGLang "
            "--disable-radix-cache): the prefix-reuse test runs the same load on it to measure the memory saved. "
            "llama.cpp needs none: the test sends cache_prompt: false to the same endpoint."
        ),
    )
    prefix_off_metrics_url = forms.URLField(
        label=_("Its metrics URL (Prometheus)"),
        required=False,
        assume_scheme="http",
        widget=forms.URLInput(attrs={"placeholder": "http://127.0.0.1:8001/metrics"}),
        help_text=_("Default: the off endpoint's /metrics."),
    )

    model_justification = forms.CharField(
        label=_("Why keep an endpoint serving another model"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_(
            "Only when the endpoint serves another model than the selection's: why its evidence may stand for "
            "this decision (recorded in the audit trail and printed in the record)."
        ),
    )

    class Meta:
        model = Candidate
        fields = [
            "engine",
            "engine_version",
            "label",
            "launch_flags",
            "endpoint_url",
            "metrics_url",
            "prefix_off_endpoint_url",
            "prefix_off_metrics_url",
            "model_name",
            "gpu_model",
            "gpu_count",
            "tensor_parallel",
            "kv_precision",
            "gpu_pool",
        ]
        labels = {
            "engine": _("Engine"),
            "engine_version": _("Engine version"),
            "label": _("Label"),
            "launch_flags": _("Launch flags"),
            "endpoint_url": _("Endpoint URL (OpenAI-compatible)"),
            "metrics_url": _("Metrics URL (Prometheus)"),
            "prefix_off_endpoint_url": _("Prefix-caching-off endpoint (optional)"),
            "prefix_off_metrics_url": _("Its metrics URL (Prometheus)"),
            "model_name": _("Model name"),
            "gpu_model": _("GPU model"),
            "gpu_count": _("GPU count"),
            "tensor_parallel": _("Tensor parallel (TP)"),
            "kv_precision": _("KV precision"),
            "gpu_pool": _("GPU pool"),
        }
        widgets = {"launch_flags": forms.Textarea(attrs={"rows": 2, "spellcheck": "false"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        bound_numbers(self, limits.CANDIDATE_BOUNDS)
        self.fields["engine"].queryset = Engine.objects.order_by("name")
        self.fields["engine"].widget.attrs["data-engine-select"] = "1"
        self.fields["engine_version"].widget.attrs.update({"list": "engine-versions", "data-version-input": "1"})
        if not (self.instance and self.instance.pk and self.instance.api_key_encrypted):
            del self.fields["clear_api_key"]
            self.fields["api_key"].help_text = _("Stored encrypted and never shown again.")

    def _post_clean(self):
        """The service's rules too (GPU budget, TP, precisions, label, allow-list), on the fields they name,
        so that every error shows at once rather than the form's first and the service's after a fix."""
        super()._post_clean()
        if self.instance.selection_id is None:
            return
        errored = set(self._errors)
        for field, message in candidate_errors(self.instance).items():
            # a rule reading a field the form refused would judge the instance's default, not the input
            if field in self.fields and not ({field, *RULE_READS.get(field, ())} & errored):
                self.add_error(field, message)

    def engine_versions(self) -> dict[str, list[str]]:
        """Documented versions per engine id, for the version suggestions."""
        return {str(e.pk): [v for v in e.versions if v] for e in self.fields["engine"].queryset}

    def service_data(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}

    def service_justification(self) -> str:
        return self.cleaned_data.get("model_justification") or ""

    def service_api_key(self) -> str | None:
        """The key to store: a new one, "" to remove, None to keep the current one."""
        if self.cleaned_data.get("clear_api_key"):
            return ""
        return self.cleaned_data.get("api_key") or None
