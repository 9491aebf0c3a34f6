"""Per-selection CI upload tokens: created (shown once, stored as a SHA-256 hash) and revoked."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from selection.audit import audit
from selection.models import Selection, UploadToken, hash_token
from selection.selectors import require_editor


@transaction.atomic
def create_upload_token(*, selection: Selection, user, name: str) -> tuple[UploadToken, str]:
    """Returns the token row and the raw token, which is never stored and shown only once."""
    require_editor(user, selection)
    if not name.strip():
        raise ValidationError({"name": "A name is required (e.g. 'github-actions')."})
    raw = UploadToken.generate()
    token = UploadToken.objects.create(
        selection=selection, name=name.strip(), key_hash=hash_token(raw), key_hint=raw[:8], created_by=user
    )
    audit(selection, user, "token.created", field="upload_token", new={"name": token.name, "hint": token.key_hint})
    return token, raw


@transaction.atomic
def revoke_upload_token(*, token: UploadToken, user) -> None:
    require_editor(user, token.selection)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit(token.selection, user, "token.revoked", field="upload_token", old={"name": token.name})
