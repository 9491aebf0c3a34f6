"""The trace upload form: a file and, optionally, its format (detected otherwise)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from benchmarks.traces.catalog import FORMATS
from selection.web import AccessibleErrorsMixin


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
        choices=[("", _("detect from the file"))] + [(f.name, f.title) for f in FORMATS.values()],
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
