"""Per-selection CI upload tokens: `Authorization: Token kvs_...`, stored as SHA-256 hashes."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from selection.models import UploadToken, hash_token


class UploadTokenUser(AnonymousUser):
    """The identity behind an upload token: no user, one selection."""

    def __init__(self, token: UploadToken):
        super().__init__()
        self.token = token

    @property
    def is_authenticated(self) -> bool:  # authenticated, but only for its selection
        return True

    def __str__(self) -> str:
        return f"token:{self.token.name}"


class UploadTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].decode(errors="replace") != self.keyword:
            return None
        raw = header[1].decode(errors="replace")
        if not raw.startswith(UploadToken.PREFIX):
            return None  # a personal API token: DRF's TokenAuthentication handles it
        token = UploadToken.objects.select_related("selection").filter(key_hash=hash_token(raw)).first()
        if token is None or not token.active:
            raise exceptions.AuthenticationFailed("Invalid or revoked upload token.")
        UploadToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return UploadTokenUser(token), token

    def authenticate_header(self, request):
        return self.keyword


class UploadTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the upload token (drf-spectacular finds it by subclassing)."""

    target_class = UploadTokenAuthentication
    name = "uploadToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Per-selection CI upload token: `Token kvs_...`",
        }
