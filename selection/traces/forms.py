"""The trace upload form: a file and, optionally, its format (detected otherwise)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from benchmarks.traces.catalog import FORMATS
from selection.web import AccessibleErrorsMixin

# The trace formats by their names in the page's language (the catalogue's titles are English; its
# ids, "mooncake", stay what `manage.py import-trace --format` takes and are shown as code).
TRACE_FORMAT_TITLES = {
    "kvselect": _("kvselect request log (CSV or JSONL)"),
    "mooncake": _("Mooncake trace (JSONL)"),
    "azure": _("Azure LLM inference trace (CSV)"),
    "burstgpt": _("BurstGPT trace (CSV)"),
}


def trace_format_title(name: str) -> str:
    """A trace format's title in the active language (an unknown one: its catalogue title or id)."""
    if name in TRACE_FORMAT_TITLES:
        return str(TRACE_FORMAT_TITLES[name])
    found = FORMATS.get(name)
    return found.title if found else str(name or "")


class TraceUploadForm(AccessibleErrorsMixin, forms.Form):
    file = forms.FileField(
        label=_("Production trace"),
        help_text=_(
            "kvselect's request log (CSV or JSONL), a Mooncake trace (JSONL), an Azure LLM inference trace or "
            "a BurstGPT trace (CSV); .gz accepted. Larger files: manage.py import-trace FILE --selection ID."
        ),
    )
    format = forms.ChoiceField(
        label=_("Format"),
        required=False,
        choices=[("", _("detect from the file"))]
        + [(f.name, TRACE_FORMAT_TITLES.get(f.name, f.title)) for f in FORMATS.values()],
    )

    def clean_file(self):
        handle = self.cleaned_data["file"]
        limit = settings.KVSELECT_MAX_TRACE_UPLOAD_BYTES
        if handle.size > limit:
            raise forms.ValidationError(
                _("This file is larger than %(mib)s MiB: import it with manage.py import-trace instead.")
                % {"mib": limit // 2**20}
            )
        return handle
