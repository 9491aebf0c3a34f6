"""Web forms for evidence: CI upload tokens, result uploads, and a validation test's parameters.

Forms only read and check input; `selection.services` and `benchmarks.services/validation` write.
"""

from __future__ import annotations

import uuid

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from benchmarks.suite import TEST_IDS
from selection.i18n import translate_test
from selection.selectors import archived_refusal
from selection.web import AccessibleErrorsMixin

# The result formats as people know them: the tool's name and the file it writes (the format ids,
# "guidellm-csv", stay what the API's `format` field takes; the page offers the files by name).
FORMAT_LABELS = {
    "native": _("kvselect native result (JSON, CSV or JSONL)"),
    "guidellm": "guidellm benchmarks.json",
    "guidellm-csv": _("guidellm CSV export"),
    "aiperf": "aiperf profile_export_aiperf.json",
    "aiperf-csv": "aiperf profile_export_aiperf.csv",
    "aiperf-jsonl": _("aiperf profile_export.jsonl (one record per request)"),
    "genai-perf": "genai-perf profile_export_genai_perf.json",
    "genai-perf-csv": "genai-perf profile_export_genai_perf.csv",
    "perf-analyzer-raw": _("Perf Analyzer raw profile_export.json (timestamps in ns)"),
    "vllm": _("vLLM benchmark result (JSON)"),
    "sglang": _("SGLang benchmark result (JSONL)"),
    "inference-perf": "inference-perf summary_lifecycle_metrics.json",
    "inference-perf-prometheus": "inference-perf summary_prometheus_metrics.json",
    "inference-perf-requests": "inference-perf per_request_lifecycle_metrics.json",
    "llmperf": "LLMPerf *_summary.json",
    "llmperf-responses": "LLMPerf *_individual_responses.json",
}


def format_label(name: str) -> str:
    """A result format's name as the page shows it (an unknown one: its tool's file, by its description)."""
    if name in FORMAT_LABELS:
        return str(FORMAT_LABELS[name])
    from benchmarks import formats  # the parsers, loaded by the page that lists them

    described = {fmt.name: fmt.description for fmt in formats.FORMATS}
    return described.get(name, name)


def format_choices() -> list[tuple[str, str]]:
    """The result formats the parsers know ("" = detect automatically), each by its name. The parsers
    (numpy, pyarrow) load with the first upload form, not with the URL conf (issue 39)."""
    from benchmarks import formats

    names = getattr(formats, "format_names", lambda: [])()
    return [("", _("detect automatically"))] + [(name, format_label(name)) for name in names]


class UploadTokenForm(AccessibleErrorsMixin, forms.Form):
    name = forms.CharField(
        label=_("Token name"), max_length=80, help_text=_("Where it is used, e.g. “github-actions nightly”.")
    )


class ResultUploadForm(AccessibleErrorsMixin, forms.Form):
    candidate = forms.ModelChoiceField(
        label=_("Candidate"), queryset=None, help_text=_("The engine configuration the file measured.")
    )
    test = forms.ChoiceField(
        label=_("Test"),
        choices=[(t, t) for t in TEST_IDS],
        help_text=_("Which validation test the run belongs to; “Custom” for anything else."),
    )
    format = forms.ChoiceField(
        label=_("Format"), required=False, help_text=_("Leave on automatic unless detection picks the wrong tool.")
    )
    label = forms.CharField(label=_("Label"), required=False, max_length=200)
    file = forms.FileField(
        label=_("Result file"),
        help_text=_(
            "guidellm, aiperf, genai-perf, vLLM bench, SGLang, inference-perf, LLMPerf "
            "or kvselect native JSON/CSV/JSONL, as the tool wrote it."
        ),
    )
    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=200)

    def __init__(self, *args, candidates, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["candidate"].queryset = candidates
        # offered: the compared candidates; an archived one posted anyway is refused by name (clean_candidate)
        self.fields["candidate"].widget.choices = [("", "---------")] + [
            (c.pk, str(c)) for c in candidates if c.archived_at is None
        ]
        self.fields["format"].choices = format_choices()
        # the tests by their titles in the page's language (the ids are what the API and CI send)
        self.fields["test"].choices = [(t, translate_test(t)) for t in TEST_IDS]
        # the browser refuses a file over the limit before sending it (the server's 413 page stays the backstop)
        limit = settings.KVSELECT_MAX_UPLOAD_BYTES
        self.fields["file"].widget.attrs.update(
            {
                "data-max-bytes": str(limit),
                "data-too-large": _("This file is larger than the %(limit)s MiB an upload may be: nothing was sent.")
                % {"limit": f"{limit / 2**20:,.0f}"},
            }
        )
        if not self.is_bound:
            # One key per rendered form: a double submit returns the first run instead of a duplicate.
            self.initial.setdefault("idempotency_key", f"web-{uuid.uuid4()}")
            compared = [c for c in candidates if c.archived_at is None]
            if "candidate" not in self.initial and len(compared) == 1:
                self.initial["candidate"] = compared[0].pk

    def clean_candidate(self):
        candidate = self.cleaned_data["candidate"]
        refused = archived_refusal(candidate)
        if refused:
            raise forms.ValidationError(refused)
        return candidate
