"""REST API for decision records: lifecycle, download, and verification of any PDF."""

from __future__ import annotations

import base64

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import FileResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from selection.domain import procurement
from selection.domain import tie_ground as tie_domain
from selection.domain.records import OWNER_ROLES
from selection.models import DecisionRecord
from selection.records.forms import MAX_CMS_BYTES
from selection.records.open_items import as_rows, close_open_item, record_blockers
from selection.records.services import (
    DRAFT_FIELDS,
    approve,
    comment,
    complete_signature,
    create_draft,
    frozen_tie_ground,
    prepare_signature,
    sign,
    sign_with_hsm,
    signature_request_document,
    start_reevaluation,
    start_review,
    update_draft,
)
from selection.records.verification import verification_report
from selection.selectors import open_items_for, selections_for

MAX_PDF_BYTES = 50 * 1024 * 1024


class RecordSerializer(serializers.ModelSerializer):
    approvals = serializers.SerializerMethodField()
    simulated = serializers.BooleanField(read_only=True)
    superseded_by = serializers.SerializerMethodField(help_text="The record that supersedes this one (or its draft)")
    open_items = serializers.SerializerMethodField(
        help_text="Each owner's 'not ready' (raised when review starts): open, resolved or waived with a reason"
    )
    procurement_summary = serializers.SerializerMethodField(
        help_text="Page 1 of the record as it was frozen: what the choice rests on, every constraint the chosen "
        "engine misses, and its fit to each constraint (pass only when the figure is within its limit and its "
        "run's verdicts on it passed; fail when it is outside or a verdict failed; not_validated otherwise)"
    )
    procurement_blockers = serializers.SerializerMethodField(
        help_text="Why the record is not ready for procurement (empty: ready): not_signed, simulated, "
        "development_certificate, open_items"
    )
    tie_choice = serializers.IntegerField(
        source="tie_choice_id",
        min_value=1,
        max_value=2**63 - 1,
        required=False,
        allow_null=True,
        help_text="Only when the scores tie: the id of the tied candidate this record chooses (with tie_ground). "
        "A draft under a tie without both is refused, naming the field.",
    )
    tie_ground = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=tie_domain.MAX_GROUND_CHARS,
        help_text="Only when the scores tie: the ground for choosing tie_choice, in full (at least "
        f"{tie_domain.MIN_GROUND_CHARS} characters). The record says 'tied on the evidence; chosen on the stated "
        "ground: ...'; the business owner confirms it when approving (confirm_tie_ground).",
    )
    tie_ground_stated = serializers.SerializerMethodField(
        help_text="Who stated the ground and when (null: no choice among tied candidates), and, once the record "
        "is frozen, the statement it carries and the business owner's confirmation"
    )

    class Meta:
        model = DecisionRecord
        fields = [
            "id",
            "selection",
            "version",
            "status",
            "decision",
            "rationale",
            "applies_to",
            "does_not_apply_to",
            "review_by",
            "include_simulated",
            "snapshot_sha256",
            "pdf_sha256",
            "signed_sha256",
            "simulated",
            "supersedes",
            "created_at",
            "review_started_at",
            "signed_at",
            "approvals",
            "superseded_by",
            "reevaluation_due_since",
            "reevaluation_reasons",
            "open_items",
            "procurement_summary",
            "procurement_blockers",
            "tie_choice",
            "tie_ground",
            "tie_ground_stated",
        ]
        read_only_fields = [f for f in fields if f not in DRAFT_FIELDS]

    def get_approvals(self, obj) -> list[dict]:
        return [
            {
                "role": a.role,
                "user": a.user.get_username(),
                "approved_at": a.approved_at,
                "signed_at": a.signed_at,
                "certificate_sha256": a.certificate_sha256,
                "development_certificate": a.development_certificate,
            }
            for a in obj.approvals.select_related("user")
        ]

    def get_open_items(self, obj) -> list[dict]:
        return as_rows(obj)

    def get_procurement_summary(self, obj) -> dict:
        summary = (obj.snapshot or {}).get("summary") or {}
        return {
            "rests_on": summary.get("rests_on") or "",
            "misses": list(summary.get("misses") or []),
            "fit": [
                {key: row.get(key) for key in ("key", "constraint", "required", "observed", "status", "runs")}
                for row in summary.get("fit") or []
            ],
        }

    def get_tie_ground_stated(self, obj) -> dict | None:
        if obj.tie_choice_id is None:
            return None
        frozen = frozen_tie_ground(obj) or {}
        confirmed = obj.approvals.filter(confirmed_tie_ground__isnull=False).select_related("user").first()
        return {
            "by": obj.tie_ground_by.get_username() if obj.tie_ground_by else None,
            "at": obj.tie_ground_at,
            "statement": frozen.get("statement"),
            "confirmed_by": confirmed.user.get_username() if confirmed else None,
            "confirmed_at": confirmed.approved_at if confirmed else None,
        }

    def get_procurement_blockers(self, obj) -> list[str]:
        return record_blockers(obj)

    def get_superseded_by(self, obj) -> int | None:
        successor = DecisionRecord.objects.filter(supersedes=obj).values_list("pk", flat=True).first()
        return successor


def record_for(request, record_id: int) -> DecisionRecord:
    return get_object_or_404(DecisionRecord.objects.filter(selection__in=selections_for(request.user)), pk=record_id)


def record_visible(request, record_id: int) -> bool:
    return DecisionRecord.objects.filter(pk=record_id, selection__in=selections_for(request.user)).exists()


def _call(fn, **kwargs):
    try:
        return fn(**kwargs)
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc)) from exc


class SelectionRecordsView(APIView):
    @extend_schema(responses=RecordSerializer(many=True))
    def get(self, request, selection_id: int):
        selection = get_object_or_404(selections_for(request.user), pk=selection_id)
        return Response(RecordSerializer(selection.records.all(), many=True).data)

    @extend_schema(request=RecordSerializer, responses={201: RecordSerializer})
    def post(self, request, selection_id: int):
        selection = get_object_or_404(selections_for(request.user), pk=selection_id)
        serializer = RecordSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        supersedes = None
        if request.data.get("supersedes"):
            supersedes = get_object_or_404(selection.records, pk=request.data["supersedes"])
        record = _call(
            create_draft, selection=selection, user=request.user, supersedes=supersedes, **serializer.validated_data
        )
        return Response(RecordSerializer(record).data, status=status.HTTP_201_CREATED)


class RecordActionSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=["start_review", "approve", "comment", "start_reevaluation"])
    role = serializers.ChoiceField(
        choices=list(OWNER_ROLES), required=False, help_text="approve: the owner role you approve as (required)"
    )
    comment = serializers.CharField(required=False, allow_blank=True)
    confirm_tie_ground = serializers.BooleanField(
        required=False,
        default=False,
        help_text="approve as business owner of a record chosen among tied candidates: you confirm its stated "
        "ground (refused without it)",
    )


class RecordDetailView(APIView):
    parser_classes = [JSONParser, FormParser, MultiPartParser]

    @extend_schema(responses=RecordSerializer)
    def get(self, request, record_id: int):
        return Response(RecordSerializer(record_for(request, record_id)).data)

    @extend_schema(request=RecordSerializer, responses=RecordSerializer)
    def patch(self, request, record_id: int):
        record = record_for(request, record_id)
        serializer = RecordSerializer(record, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        record = _call(update_draft, record=record, user=request.user, **serializer.validated_data)
        return Response(RecordSerializer(record).data)

    @extend_schema(request=RecordActionSerializer, responses=RecordSerializer)
    def post(self, request, record_id: int):
        record = record_for(request, record_id)
        serializer = RecordActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        action = serializer.validated_data["action"]
        if action == "start_review":
            record = _call(start_review, record=record, user=request.user)
        elif action == "start_reevaluation":
            successor = _call(start_reevaluation, record=record, user=request.user)
            return Response(RecordSerializer(successor).data, status=status.HTTP_201_CREATED)
        elif action == "approve":
            if "role" not in serializer.validated_data:
                raise serializers.ValidationError({"role": "required to approve"})
            record = _call(
                approve,
                record=record,
                user=request.user,
                role=serializer.validated_data["role"],
                comment_text=serializer.validated_data.get("comment", ""),
                confirm_tie_ground=serializer.validated_data.get("confirm_tie_ground", False),
            )
        else:
            _call(comment, record=record, user=request.user, text=serializer.validated_data.get("comment", ""))
        return Response(RecordSerializer(record).data)


class RecordSignSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=list(OWNER_ROLES))
    pkcs12 = serializers.FileField(
        required=False,
        help_text="Development CA only: your PKCS#12 (.p12) certificate and key. Refused once a "
        "non-development trust root is configured: sign owner-side (signature-request/, signature/)",
    )
    passphrase = serializers.CharField(
        write_only=True, required=False, allow_blank=True, help_text="The PKCS#12's, used once, never stored"
    )
    pin = serializers.CharField(
        write_only=True,
        required=False,
        help_text="Sign with your key in the organisation's HSM (KVSELECT_HSM_KEYS): its PIN, used once, never stored",
    )

    def validate(self, attrs):
        if ("pkcs12" in attrs) == ("pin" in attrs):
            raise serializers.ValidationError(
                {"pkcs12": "give either pkcs12 (and passphrase, development CA only) or pin (the HSM's)"}
            )
        return attrs


class RecordSignView(APIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(request={"multipart/form-data": RecordSignSerializer}, responses=RecordSerializer)
    def post(self, request, record_id: int):
        record = record_for(request, record_id)
        serializer = RecordSignSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if "pin" in data:
            record = _call(sign_with_hsm, record=record, user=request.user, role=data["role"], pin=data["pin"])
        else:
            record = _call(
                sign,
                record=record,
                user=request.user,
                role=data["role"],
                pkcs12=data["pkcs12"].read(1_000_000),
                passphrase=data.get("passphrase", ""),
            )
        return Response(RecordSerializer(record).data)


class SignatureRequestInputSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=list(OWNER_ROLES))


class RecordSignatureRequestView(APIView):
    """Owner-side signing, call 1 of 2: prepare your signature revision and get what to sign."""

    parser_classes = [JSONParser, FormParser, MultiPartParser]

    @extend_schema(request=SignatureRequestInputSerializer, responses={201: dict})
    def post(self, request, record_id: int):
        record = record_for(request, record_id)
        serializer = SignatureRequestInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        prepared = _call(prepare_signature, record=record, user=request.user, role=serializer.validated_data["role"])
        return Response(signature_request_document(prepared), status=status.HTTP_201_CREATED)


class SignatureUploadSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=list(OWNER_ROLES))
    cms = serializers.CharField(help_text="Base64 of the DER CMS kvselect-sign made over signed_attributes")

    def validate_cms(self, value: str) -> bytes:
        try:
            data = base64.b64decode(value, validate=True)
        except ValueError as exc:
            raise serializers.ValidationError("not base64") from exc
        if not data or len(data) > MAX_CMS_BYTES:
            raise serializers.ValidationError(f"must be 1 byte to {MAX_CMS_BYTES // 1024} KiB of DER")
        return data


class RecordSignatureView(APIView):
    """Owner-side signing, call 2 of 2: upload the CMS; kvselect checks and embeds it."""

    parser_classes = [JSONParser, FormParser, MultiPartParser]

    @extend_schema(request=SignatureUploadSerializer, responses=RecordSerializer)
    def post(self, request, record_id: int):
        record = record_for(request, record_id)
        serializer = SignatureUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        record = _call(complete_signature, record=record, user=request.user, role=data["role"], cms=data["cms"])
        return Response(RecordSerializer(record).data)


class RecordPdfView(APIView):
    @extend_schema(responses={(200, "application/pdf"): bytes})
    def get(self, request, record_id: int):
        record = record_for(request, record_id)
        source = record.signed_pdf or record.pdf
        if not source:
            return Response(
                {"detail": "No PDF yet: the record is rendered once all three owners approved."}, status=404
            )
        response = FileResponse(
            source.open("rb"),
            content_type="application/pdf",
            as_attachment=True,
            filename=f"decision-record-{record.selection_id}-v{record.version}.pdf",
        )
        response["Cache-Control"] = "private, no-transform"
        return response


class OpenItemSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    key = serializers.CharField(read_only=True, help_text="section.item of the project checks, e.g. readiness.logs")
    section = serializers.CharField(read_only=True)
    item = serializers.CharField(read_only=True)
    note = serializers.CharField(read_only=True)
    owner_roles = serializers.ListField(child=serializers.CharField(), read_only=True)
    status = serializers.CharField(read_only=True)
    reason = serializers.CharField(read_only=True)
    decided_by = serializers.CharField(read_only=True)
    decided_at = serializers.DateTimeField(read_only=True, allow_null=True)


class OpenItemCloseSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=[procurement.RESOLVED, procurement.WAIVED])
    reason = serializers.CharField(
        max_length=procurement.MAX_REASON_CHARS, help_text="How it was resolved (the evidence), or why it may be waived"
    )


class RecordOpenItemsView(APIView):
    @extend_schema(responses=OpenItemSerializer(many=True))
    def get(self, request, record_id: int):
        return Response(OpenItemSerializer(as_rows(record_for(request, record_id)), many=True).data)


class OpenItemView(APIView):
    """Resolve or waive one open item: the owner who confirms its section (another team's item is a 404)."""

    @extend_schema(request=OpenItemCloseSerializer, responses=OpenItemSerializer)
    def post(self, request, item_id: int):
        item = get_object_or_404(open_items_for(request.user), pk=item_id)
        serializer = OpenItemCloseSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        item = _call(close_open_item, item=item, user=request.user, **serializer.validated_data)
        row = next(row for row in as_rows(item.record) if row["id"] == item.pk)
        return Response(OpenItemSerializer(row).data)


class VerifySerializer(serializers.Serializer):
    file = serializers.FileField()


class RecordVerifyView(APIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(request={"multipart/form-data": VerifySerializer}, responses={200: dict})
    def post(self, request):
        serializer = VerifySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        handle = serializer.validated_data["file"]
        if handle.size > MAX_PDF_BYTES:
            return Response({"file": [f"larger than {MAX_PDF_BYTES // (1024 * 1024)} MiB"]}, status=413)
        data = handle.read()
        if not data.startswith(b"%PDF"):
            return Response({"file": ["not a PDF (it does not start with %PDF)"]}, status=400)
        report = verification_report(data)
        issued = report.get("record")
        if issued and not record_visible(request, issued["id"]):
            # do not leak another team's selection
            report["record"] = {"issued_by_kvselect": report["matches_known_record"], "simulated": issued["simulated"]}
            report["open_items"] = []  # their notes are the other team's: the count stays
        return Response(report)
