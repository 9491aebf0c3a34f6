"""Admin: read-mostly views for operators. Day-to-day edits go through the audited web forms.

Nothing here deletes evidence a decision record stands on: a candidate cited by a record in
review or signed cannot be deleted (the PROTECT citation is listed instead), selections are
archived rather than deleted, and every deletion that is allowed is audited and removes its files.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction

from selection.audit import audit
from selection.models import (
    AuditEntry,
    Candidate,
    Constraints,
    CriterionWeight,
    DecisionRecord,
    Engine,
    Gate,
    Membership,
    RecordApproval,
    Selection,
    SigningCertificate,
    Team,
    UploadToken,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "member_count"]
    search_fields = ["name"]
    inlines = [MembershipInline]

    @admin.display(description="members")
    def member_count(self, team: Team) -> int:
        return team.members.count()


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]
    autocomplete_fields = ["user", "team"]


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ViewOnlyAdmin(admin.ModelAdmin):
    """Every field shown, nothing added, changed or deleted, whoever is logged in."""

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ConstraintsInline(ReadOnlyInline):
    model = Constraints


class WeightInline(ReadOnlyInline):
    model = CriterionWeight
    fields = ["criterion", "weight", "source", "justification", "updated_by", "updated_at"]
    readonly_fields = fields


class GateInline(ReadOnlyInline):
    model = Gate


class CandidateInline(ReadOnlyInline):
    model = Candidate
    fields = ["engine", "engine_version", "label", "endpoint_url", "gpu_model", "gpu_count", "kv_precision"]
    readonly_fields = fields


@admin.register(Selection)
class SelectionAdmin(admin.ModelAdmin):
    """Status and names are editable here; constraints, weights and gates only through the audited forms."""

    list_display = ["name", "team", "status", "scenario", "scenario_accepted", "updated_at"]
    list_filter = ["status", "scenario", "team"]
    search_fields = ["name", "description"]
    readonly_fields = [
        "scenario",
        "scenario_reasons",
        "scenario_mix",
        "scenario_accepted",
        "created_by",
        "created_at",
        "updated_at",
    ]
    inlines = [ConstraintsInline, WeightInline, GateInline, CandidateInline]
    actions = ["archive"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # a selection is archived, never deleted: its audit trail and records stay

    @admin.action(description="Archive the selected selections (kept, with their evidence and audit trail)")
    def archive(self, request, queryset) -> None:
        with transaction.atomic():
            for selection in queryset.exclude(status=Selection.Status.ARCHIVED).select_for_update():
                old = selection.status
                Selection.objects.filter(pk=selection.pk).update(status=Selection.Status.ARCHIVED)
                audit(selection, request.user, "selection.archived", field="status", old=old, new="archived")


@admin.register(AuditEntry)
class AuditEntryAdmin(ViewOnlyAdmin):
    """Append-only: nobody edits or deletes the audit trail, not even in the admin."""

    list_display = ["at", "selection", "actor", "action", "field"]
    list_filter = ["action"]
    search_fields = ["selection__name", "field", "justification"]
    date_hierarchy = "at"


@admin.register(Engine)
class EngineAdmin(admin.ModelAdmin):
    """The catalog is loaded from its versioned fixture; edit the fixture, not these rows."""

    list_display = ["name", "slug", "catalog_version"]
    search_fields = ["name", "slug"]
    readonly_fields = ["slug", "name", "catalog_version", "data"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Candidate)
class CandidateAdmin(admin.ModelAdmin):
    list_display = ["__str__", "selection", "engine", "engine_version", "gpu_model", "gpu_count", "kv_precision"]
    list_filter = ["engine", "kv_precision"]
    search_fields = ["label", "selection__name", "model_name"]
    exclude = ["api_key_encrypted"]
    # the screen override is kept through the audited form only (selection.candidates.screening)
    readonly_fields = ["selection", "measured_capacity", "created_at", "screen_override"]

    def delete_model(self, request, obj: Candidate) -> None:
        self.delete_queryset(request, [obj])

    def delete_queryset(self, request, queryset) -> None:
        """Through the service: audited, the runs' files removed, refused for cited evidence. The
        service is imported here: the admin is loaded by `django.setup()`, so a module-level import
        would load the candidates' services (validation dispatch, probing, scoring) into every
        `manage.py` command, `verify-record` included (issue 39)."""
        from selection.candidates.services import delete_candidate

        for candidate in queryset:
            try:
                delete_candidate(candidate=candidate, user=request.user)
            except ValidationError as error:
                self.message_user(request, "; ".join(error.messages), messages.ERROR)


@admin.register(UploadToken)
class UploadTokenAdmin(admin.ModelAdmin):
    """Tokens are created in the app (shown once); here they can only be inspected."""

    list_display = ["name", "selection", "key_hint", "created_by", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "selection__name", "key_hint"]
    readonly_fields = ["selection", "name", "key_hint", "created_by", "created_at", "last_used_at"]

    def has_add_permission(self, request) -> bool:
        return False


class RecordApprovalInline(ReadOnlyInline):
    model = RecordApproval
    fields = [
        "role",
        "user",
        "approved_at",
        "signed_at",
        "certificate_subject",
        "certificate_sha256",
        "development_certificate",
        "comment",
    ]
    readonly_fields = fields


@admin.register(DecisionRecord)
class DecisionRecordAdmin(ViewOnlyAdmin):
    """View-only, for every record and every user including superusers.

    Drafts are edited through the audited record workflow; a record that left draft is frozen, and
    a signed one is immutable (database triggers enforce the same, this keeps the admin honest).
    """

    list_display = ["__str__", "selection", "status", "created_by", "created_at", "signed_at"]
    list_filter = ["status"]
    search_fields = ["selection__name", "decision"]
    inlines = [RecordApprovalInline]


@admin.register(SigningCertificate)
class SigningCertificateAdmin(ViewOnlyAdmin):
    """Owners enrol on their profile (audited in every selection they own); here they can only be inspected."""

    list_display = ["user", "common_name", "sha256", "trust_root", "development", "enrolled_at", "replaced_at"]
    list_filter = ["development", "source"]
    search_fields = ["user__username", "common_name", "sha256"]
