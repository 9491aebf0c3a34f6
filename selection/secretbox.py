"""Symmetric encryption for endpoint API keys at rest (Fernet, key derived from SECRET_KEY)."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def _fernet() -> Fernet:
    secret = getattr(settings, "KVSELECT_ENCRYPTION_KEY", "") or settings.SECRET_KEY
    digest = hashlib.sha256(("kvselect-api-keys:" + secret).encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ValueError("The stored endpoint API key cannot be decrypted (was SECRET_KEY rotated?)") from exc
