"""Forms of the comparison and decision-record pages (drafts, comments, signing, verification)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from selection.models import DecisionRecord
from selection.web import AccessibleErrorsMixin

MAX_PKCS12_BYTES = 1_000_000
MAX_PDF_BYTES = 50 * 1024 * 1024


class RecordDraftForm(AccessibleErrorsMixin, forms.ModelForm):
    class Meta:
        model = DecisionRecord
        fields = ["decision", "rationale", "applies_to", "does_not_apply_to", "review_by", "include_simulated"]
        labels = {
            "include_simulated": _("Include SIMULATED evidence (the record will not be signable for procurement)")
        }
        help_texts = {
            "decision": _("Optional: left empty, the winner of the comparison is named."),
            "rationale": _("Why this engine, in your words; the scoring sentences are added automatically."),
            "applies_to": _("One item per line; left empty, derived from the constraints."),
            "does_not_apply_to": _("One item per line; left empty, derived from the constraints and capacity."),
            "review_by": _("Left empty: six months after review starts."),
        }
        widgets = {
            "rationale": forms.Textarea(attrs={"rows": 4}),
            "applies_to": forms.Textarea(attrs={"rows": 3}),
            "does_not_apply_to": forms.Textarea(attrs={"rows": 3}),
            "review_by": forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        }


class CommentForm(AccessibleErrorsMixin, forms.Form):
    text = forms.CharField(label=_("Comment"), widget=forms.Textarea(attrs={"rows": 3}), max_length=5000)


class SignForm(AccessibleErrorsMixin, forms.Form):
    """The owner's PKCS#12 and its passphrase: used once in the request, never stored or logged."""

    pkcs12 = forms.FileField(label=_("Your certificate (PKCS#12, .p12 / .pfx)"))
    passphrase = forms.CharField(
        label=_("Passphrase"),
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_("Used once to unlock the key for this signature; never stored."),
    )

    def clean_pkcs12(self):
        handle = self.cleaned_data["pkcs12"]
        if handle.size > MAX_PKCS12_BYTES:
            raise forms.ValidationError(_("This file is larger than 1 MB: a PKCS#12 file is a few kilobytes."))
        return handle


class VerifyForm(AccessibleErrorsMixin, forms.Form):
    file = forms.FileField(label=_("Signed PDF"), help_text=_("Any PDF; nothing is stored."))

    def clean_file(self):
        handle = self.cleaned_data["file"]
        if handle.size > MAX_PDF_BYTES:
            raise forms.ValidationError(_("This file is larger than 50 MB."))
        head = handle.read(5)
        handle.seek(0)
        if not head.startswith(b"%PDF"):
            raise forms.ValidationError(
                _("This is not a PDF (it does not start with %PDF). Upload the record's PDF file.")
            )
        return handle
