"""Forms of the profile page: upload a signing certificate, or have the configured CA issue one."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from selection.web import AccessibleErrorsMixin

MAX_CERTIFICATE_BYTES = 64 * 1024


class CertificateUploadForm(AccessibleErrorsMixin, forms.Form):
    certificate = forms.FileField(
        label=_("Your signing certificate (public part: .pem, .crt or .cer)"),
        help_text=_(
            "Only the certificate, never the key. A PEM file may carry its intermediate certificates after it."
        ),
    )

    def clean_certificate(self) -> bytes:
        handle = self.cleaned_data["certificate"]
        if handle.size > MAX_CERTIFICATE_BYTES:
            raise forms.ValidationError(_("This file is larger than 64 KB: a certificate is a few kilobytes."))
        data = handle.read()
        if b"PRIVATE KEY" in data:
            raise forms.ValidationError(
                _("This file holds a private key. Upload only the certificate; keep your key to yourself.")
            )
        return data


class CertificateIssueForm(AccessibleErrorsMixin, forms.Form):
    """The passphrase protecting the PKCS#12 kvselect hands over once and never keeps."""

    passphrase = forms.CharField(
        label=_("Passphrase for the new key"),
        min_length=8,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=_("At least 8 characters. You need it each time you sign; kvselect does not keep it."),
    )
    confirm = forms.CharField(
        label=_("Passphrase again"), strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"})
    )

    def clean(self):
        data = super().clean()
        if data.get("passphrase") and data.get("confirm") is not None and data["passphrase"] != data["confirm"]:
            self.add_error("confirm", _("the two passphrases differ"))
        return data
