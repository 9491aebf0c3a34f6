"""REST API for evidence: CI uploads, runs, per-request data."""

from __future__ import annotations

import io

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from benchmarks.api.permissions import is_upload_token
from benchmarks.api.serializers import (
    RunSerializer,
    RunSummarySerializer,
    StartValidationSerializer,
    UploadSerializer,
)
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.storage import StorageFailure
from benchmarks.validation.dispatch import CandidateArchived, request_cancel, start_validation
from benchmarks.validation.dispatch import ValidationError as RunValidationError
from benchmarks.validation.plan import validation_plan
from selection.models import Candidate
from selection.selectors import can_edit, selections_for


def candidate_for_request(request, candidate_id: int) -> Candidate:
    """404 for a candidate the user cannot see; 403 for an upload token of another selection."""
    candidate = get_object_or_404(Candidate.objects.select_related("selection", "engine"), pk=candidate_id)
    if is_upload_token(request.user):
        if candidate.selection_id != request.user.token.selection_id:
            raise PermissionDenied("This upload token belongs to another selection.")
        return candidate
    if not selections_for(request.user).filter(pk=candidate.selection_id).exists():
        raise Http404
    return candidate


def run_for_request(request, run_id: int) -> BenchmarkRun:
    run = get_object_or_404(BenchmarkRun.objects.select_related("candidate__selection"), pk=run_id)
    candidate_for_request(request, run.candidate_id)
    return run


class CandidateResultsView(APIView):
    parser_classes = [MultiPartParser, FormParser]
    allow_upload_token = True

    @extend_schema(responses=RunSummarySerializer(many=True))
    def get(self, request, candidate_id: int):
        candidate = candidate_for_request(request, candidate_id)
        runs = candidate.runs.prefetch_related("points", "artifacts")[:200]
        return Response(RunSummarySerializer(runs, many=True).data)

    @extend_schema(
        request={"multipart/form-data": UploadSerializer},
        responses={200: RunSerializer, 201: RunSerializer, 202: RunSerializer},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)],
    )
    def post(self, request, candidate_id: int):
        candidate = candidate_for_request(request, candidate_id)
        if not is_upload_token(request.user):
            if not can_edit(request.user, candidate.selection):
                raise PermissionDenied("Only architects (or the selection's upload tokens) can upload results.")
        upload = UploadSerializer(data=request.data)
        upload.is_valid(raise_exception=True)
        handle = upload.validated_data["file"]

        if handle.size > settings.KVSELECT_MAX_UPLOAD_BYTES:
            return Response(
                {"file": [f"{handle.size:,} bytes exceeds the limit of {settings.KVSELECT_MAX_UPLOAD_BYTES:,}"]},
                status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        outcome = _ingest(request, candidate, upload)
        if isinstance(outcome, Response):
            return outcome
        run, created = outcome
        run = BenchmarkRun.objects.prefetch_related("points", "artifacts").get(pk=run.pk)
        code = (
            status.HTTP_200_OK
            if not created
            else (status.HTTP_201_CREATED if run.status == BenchmarkRun.Status.SUCCEEDED else status.HTTP_202_ACCEPTED)
        )
        return Response(RunSerializer(run).data, status=code)


def _ingest(request, candidate, upload: UploadSerializer) -> tuple[BenchmarkRun, bool] | Response:
    """Ingest a validated upload: (run, created), or the refusal's response (bad file, storage failure)."""
    from benchmarks.uploads.ingest import IngestError, ingest_upload  # the parsers: loaded by an upload

    handle = upload.validated_data["file"]
    try:
        return ingest_upload(
            candidate=candidate,
            data=handle,
            filename=handle.name,
            test=upload.validated_data["test"],
            fmt=upload.validated_data.get("format") or None,
            label=upload.validated_data.get("label", ""),
            uploader=str(request.user) if is_upload_token(request.user) else request.user.get_username(),
            idempotency_key=request.headers.get("Idempotency-Key", ""),
        )
    except IngestError as exc:
        return Response({exc.field: [str(exc)]}, status=exc.status)
    except StorageFailure as exc:
        return Response({"detail": str(exc)}, status=status.HTTP_507_INSUFFICIENT_STORAGE)
    except ValueError as exc:  # the parsers' UnrecognisedFormat / FormatError
        body = {"file": [str(exc)]}
        if hasattr(exc, "refusals"):
            body["formats_tried"] = exc.refusals
        return Response(body, status=status.HTTP_400_BAD_REQUEST)


class RunDetailView(APIView):
    allow_upload_token = True

    @extend_schema(responses=RunSerializer)
    def get(self, request, run_id: int):
        run = run_for_request(request, run_id)
        return Response(RunSerializer(run).data)


class RunRequestsView(APIView):
    """Per-request records as Parquet (default) or CSV (`?as=csv`)."""

    allow_upload_token = True

    @extend_schema(
        parameters=[OpenApiParameter("as", str, enum=["parquet", "csv"])],
        responses={(200, "application/octet-stream"): bytes},
    )
    def get(self, request, run_id: int):
        run = run_for_request(request, run_id)
        artifact = run.artifacts.filter(kind=Artifact.Kind.REQUESTS).first()
        if artifact is None:
            return Response(
                {"detail": "This run has no per-request records (the file held summaries only)."}, status=404
            )
        if request.query_params.get("as", "parquet") == "csv":
            import pyarrow.csv as pacsv  # loaded by the one download that converts
            import pyarrow.parquet as pq

            with artifact.file.open("rb") as handle:
                table = pq.read_table(handle)
            buffer = io.BytesIO()
            pacsv.write_csv(table, buffer)
            response = HttpResponse(buffer.getvalue(), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-requests.csv"'
            return response
        return FileResponse(
            artifact.file.open("rb"),
            as_attachment=True,
            filename=f"run-{run.pk}-requests.parquet",
            content_type="application/vnd.apache.parquet",
        )


class CandidateValidationsView(APIView):
    """GET the validation plan (eight tests, parameters from the constraints); POST starts one test."""

    @extend_schema(responses={200: dict})
    def get(self, request, candidate_id: int):

        candidate = candidate_for_request(request, candidate_id)
        return Response(validation_plan(candidate))

    @extend_schema(request=StartValidationSerializer, responses={202: RunSerializer})
    def post(self, request, candidate_id: int):

        candidate = candidate_for_request(request, candidate_id)
        serializer = StartValidationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            run = start_validation(
                candidate=candidate,
                user=request.user,
                test=serializer.validated_data["test"],
                params=serializer.validated_data.get("params"),
                label=serializer.validated_data.get("label", ""),
            )
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        except RunValidationError as exc:
            field, _, message = str(exc).partition(": ")
            code = status.HTTP_409_CONFLICT if isinstance(exc, CandidateArchived) else status.HTTP_400_BAD_REQUEST
            return Response({field: [message]}, status=code)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class RunCancelView(APIView):
    @extend_schema(request=None, responses=RunSerializer)
    def post(self, request, run_id: int):

        run = run_for_request(request, run_id)
        try:
            run = request_cancel(run, request.user)
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(RunSerializer(run).data)
