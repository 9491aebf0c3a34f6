"""REST: the caller's signing certificate (GET) and enrolling an uploaded one (PUT)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from selection.certificates.forms import MAX_CERTIFICATE_BYTES
from selection.certificates.services import current_certificate, enrol_certificate
from selection.models import SigningCertificate


class SigningCertificateSerializer(serializers.ModelSerializer):
    class Meta:
        model = SigningCertificate
        fields = [
            "sha256",
            "subject",
            "common_name",
            "issuer",
            "trust_root",
            "not_before",
            "not_after",
            "development",
            "source",
            "enrolled_at",
            "certificate_pem",
        ]
        read_only_fields = fields


class CertificateUploadSerializer(serializers.Serializer):
    certificate = serializers.CharField(
        help_text="The public certificate, PEM (optionally followed by its intermediates); or a file upload",
        max_length=MAX_CERTIFICATE_BYTES,
        trim_whitespace=False,
    )

    def to_internal_value(self, data):
        upload = data.get("certificate") if hasattr(data, "get") else None
        if hasattr(upload, "read"):
            if upload.size > MAX_CERTIFICATE_BYTES:
                raise serializers.ValidationError({"certificate": ["larger than 64 KB: not a certificate"]})
            content = upload.read()
            return {"certificate": content}
        value = super().to_internal_value(data)
        return {"certificate": value["certificate"].encode()}

    def validate(self, attrs):
        if b"PRIVATE KEY" in attrs["certificate"]:
            raise serializers.ValidationError({"certificate": ["holds a private key: send only the certificate"]})
        return attrs


class MyCertificateView(APIView):
    parser_classes = [JSONParser, MultiPartParser, FormParser]

    @extend_schema(responses={200: SigningCertificateSerializer})
    def get(self, request):
        current = current_certificate(request.user)
        if current is None:
            return Response({"detail": "No signing certificate enrolled: PUT one."}, status=404)
        return Response(SigningCertificateSerializer(current).data)

    @extend_schema(request=CertificateUploadSerializer, responses={200: SigningCertificateSerializer})
    def put(self, request):
        serializer = CertificateUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            enrolled = enrol_certificate(user=request.user, certificate=serializer.validated_data["certificate"])
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return Response(SigningCertificateSerializer(enrolled).data)
