"""The capacity page's what-if form: re-plan with another KV precision, TP or GPU without saving."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from selection.web import AccessibleErrorsMixin


class CapacityWhatIfForm(AccessibleErrorsMixin, forms.Form):
    """What-if inputs of the capacity page (a GET form: it re-plans, it never saves)."""

    kv_dtype = forms.ChoiceField(label=_("KV precision"), required=False)
    tp = forms.IntegerField(
        label=_("Tensor parallel (TP)"),
        required=False,
        min_value=1,
        max_value=1024,
        help_text=_("GPUs one replica's weights and KV cache are split across."),
    )
    gpu = forms.ChoiceField(label=_("GPU"), required=False)

    def __init__(self, *args, kv_dtypes=(), gpus=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["kv_dtype"].choices = [("", _("as configured"))] + [(d, d) for d in kv_dtypes]
        self.fields["gpu"].choices = [("", _("as configured"))] + [(g, g) for g in gpus]

    def overrides(self, gpu_memory_gib: dict[str, float]) -> dict:
        """The capacity model's keyword overrides for the chosen what-if values (empty: as configured)."""
        data, out = self.cleaned_data, {}
        if data.get("kv_dtype"):
            out["kv_dtype"] = data["kv_dtype"]
        if data.get("tp"):
            out["tp"] = data["tp"]
        if data.get("gpu"):
            out["gpu"], out["gpu_mem_gib"] = data["gpu"], gpu_memory_gib[data["gpu"]]
        return out
