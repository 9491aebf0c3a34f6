"""Forms of the comparison and decision-record pages (drafts, comments, signing, verification)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from selection.domain import project_checks as checks_domain
from selection.domain import tie_ground as tie_domain
from selection.models import Candidate, DecisionRecord
from selection.web import AccessibleErrorsMixin

MAX_PKCS12_BYTES = 1_000_000
MAX_CMS_BYTES = 64 * 1024  # an owner's CMS is a few KiB; the prepared revision reserves 16 KiB
MAX_PDF_BYTES = 50 * 1024 * 1024
TIE_FIELDS = (tie_domain.CHOICE_FIELD, tie_domain.GROUND_FIELD)


STATUS_CHOICES = [("not_stated", _("not stated")), ("ready", _("ready")), ("not_ready", _("not ready"))]
READINESS_LABELS = {
    "permissions": _("Permissions"),
    "monitoring": _("Monitoring"),
    "logs": _("Logs"),
    "capacity": _("Capacity"),
    "rollback": _("Rollback plan"),
}
SECURITY_LABELS = {"permissions": _("Permissions"), "logs": _("Logs"), "audit_trail": _("Audit trail")}
WATCH_LABELS = {"capacity": _("Watches capacity"), "cost": _("Watches cost"), "stability": _("Watches stability")}
AFFECTED_LABELS = {
    "applications": _("Affected applications"),
    "teams": _("Affected teams"),
    "data": _("Affected data"),
}


class RecordDraftForm(AccessibleErrorsMixin, forms.ModelForm):
    """The draft's fields, and the project checks the owners confirm (stored as `project_checks`)."""

    pilot_result = forms.CharField(
        label=_("Does the business accept the pilot's results?"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("The business owner's view of the pilot, in a sentence or two."),
    )
    rollout_stages = forms.CharField(
        label=_("Staged rollout"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_(
            "One stage per line: name | traffic % | gating metric | who decides. Left empty: 5 %, 25 %, 50 %, "
            "100 % gated by the latency budget and the error rate, decided by the business owner."
        ),
    )

    def __init__(self, *args, tied=None, **kwargs):
        """`tied`: the candidates the scores tie between; the two fields of a choice among them (which tied
        candidate, the ground for choosing it) are shown only then, or while the draft holds one."""
        super().__init__(*args, **kwargs)
        self._tie_fields(list(tied or []))
        current = checks_domain.empty()
        try:
            current = checks_domain.normalise(
                self.initial.get("project_checks") or getattr(self.instance, "project_checks", None) or {}
            )
        except checks_domain.ProjectChecksError:
            pass
        for key, label in AFFECTED_LABELS.items():
            self.fields[f"affected_{key}"] = forms.CharField(
                label=label,
                required=False,
                widget=forms.Textarea(attrs={"rows": 2}),
                help_text=_("One per line."),
                initial="\n".join(current["affected"][key]),
            )
        for section, labels in (("readiness", READINESS_LABELS), ("security", SECURITY_LABELS)):
            for item, label in labels.items():
                self.fields[f"{section}_{item}"] = forms.ChoiceField(
                    label=label, choices=STATUS_CHOICES, required=False, initial=current[section][item]["status"]
                )
                self.fields[f"{section}_{item}_note"] = forms.CharField(
                    label=_("%(item)s: how") % {"item": label},
                    required=False,
                    max_length=500,
                    initial=current[section][item]["note"],
                )
        self.fields["pilot_result"].initial = current["acceptance"]["pilot_result"]
        self.fields["rollout_stages"].initial = checks_domain.stages_text(current["acceptance"]["stages"])
        for area, label in WATCH_LABELS.items():
            self.fields[f"watch_{area}"] = forms.CharField(
                label=label,
                required=False,
                max_length=120,
                initial=current["watch"][area],
                help_text=_("Left empty: the selection's post-launch observer."),
            )

    def _tie_fields(self, tied: list) -> None:
        current = self.instance.tie_choice_id if self.instance.pk else None
        if not tied and current is None:
            del self.fields["tie_choice"], self.fields["tie_ground"]
            return
        ids = [c.pk for c in tied] + ([current] if current is not None else [])
        choice = self.fields["tie_choice"]
        choice.queryset = Candidate.objects.filter(pk__in=ids).select_related("engine")
        choice.label_from_instance = lambda candidate: candidate.display_name
        choice.required = self.fields["tie_ground"].required = False  # the service refuses in words, on the field
        if tied:
            choice.help_text = _(
                "The scores tie between %(names)s: the evidence names no winner. The record may choose one of them "
                "only on a ground you state; it says “tied on the evidence; chosen on the stated ground”."
            ) % {"names": ", ".join(c.display_name for c in tied)}

    def groups(self):
        """(title, bound fields) per part of the form, for the template."""
        draft = [self[name] for name in self.Meta.fields if name in self.fields and name not in TIE_FIELDS]
        tie = [self[name] for name in TIE_FIELDS if name in self.fields]
        return [
            (_("Decision"), draft),
            *([(_("The scores tie: which tied candidate, and the ground for choosing it"), tie)] if tie else []),
            (_("1. Affected applications, teams and data"), [self[f"affected_{k}"] for k in AFFECTED_LABELS]),
            (
                _("2. Platform readiness (the platform owner confirms)"),
                [self[f"readiness_{i}{s}"] for i in READINESS_LABELS for s in ("", "_note")],
            ),
            (
                _("3. Business acceptance and the pace of expansion (the business owner confirms)"),
                [self["pilot_result"], self["rollout_stages"]],
            ),
            (
                _("Security checklist (the security owner confirms)"),
                [self[f"security_{i}{s}"] for i in SECURITY_LABELS for s in ("", "_note")],
            ),
            (_("Who watches after launch"), [self[f"watch_{a}"] for a in WATCH_LABELS]),
        ]

    def clean(self):
        data = super().clean()
        try:
            stages = checks_domain.parse_stages(data.get("rollout_stages") or "")
        except checks_domain.ProjectChecksError as exc:
            for problem in exc.problems:
                self.add_error("rollout_stages", problem.split(": ", 1)[1])
            return data
        raw = {
            "affected": {
                key: [line for line in (data.get(f"affected_{key}") or "").splitlines() if line.strip()]
                for key in AFFECTED_LABELS
            },
            "readiness": {
                item: {
                    "status": data.get(f"readiness_{item}") or "not_stated",
                    "note": data.get(f"readiness_{item}_note"),
                }
                for item in READINESS_LABELS
            },
            "acceptance": {"pilot_result": data.get("pilot_result") or "", "stages": stages},
            "security": {
                item: {
                    "status": data.get(f"security_{item}") or "not_stated",
                    "note": data.get(f"security_{item}_note"),
                }
                for item in SECURITY_LABELS
            },
            "watch": {area: data.get(f"watch_{area}") or "" for area in WATCH_LABELS},
        }
        try:
            data["project_checks"] = checks_domain.normalise(raw)
        except checks_domain.ProjectChecksError as exc:
            self.add_error(None, "; ".join(exc.problems))
        return data

    class Meta:
        model = DecisionRecord
        fields = [
            "decision",
            "rationale",
            "applies_to",
            "does_not_apply_to",
            "review_by",
            "include_simulated",
            *TIE_FIELDS,
        ]
        labels = {
            "decision": _("Chosen candidate"),  # the group is "Decision": not the same word twice
            "include_simulated": _("Include SIMULATED evidence (the record will not be signable for procurement)"),
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
            "tie_ground": forms.Textarea(attrs={"rows": 4, "maxlength": tie_domain.MAX_GROUND_CHARS}),
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


class SignatureUploadForm(AccessibleErrorsMixin, forms.Form):
    """The CMS kvselect-sign made on the owner's machine (.p7s): no key, no passphrase."""

    cms = forms.FileField(
        label=_("Your signature (signature.p7s from kvselect-sign)"),
        help_text=_("Checked against your enrolled certificate and the revision prepared for you, then embedded."),
    )

    def clean_cms(self):
        handle = self.cleaned_data["cms"]
        if handle.size > MAX_CMS_BYTES:
            raise forms.ValidationError(_("This file is larger than 64 KB: a signature is a few kilobytes."))
        return handle


class HsmSignForm(AccessibleErrorsMixin, forms.Form):
    """The PIN of the owner's key in the organisation's HSM: used once in the request, never stored."""

    pin = forms.CharField(
        label=_("HSM PIN"),
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_("Unlocks your key in the organisation's HSM for this signature; never stored."),
    )


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
