from __future__ import annotations

from rest_framework.permissions import BasePermission


def is_upload_token(user) -> bool:
    return hasattr(user, "token") and not getattr(user, "pk", None)


class UploadTokenScope(BasePermission):
    """Upload tokens reach only views that opt in (`allow_upload_token = True`)."""

    message = "Upload tokens may only upload and read benchmark results of their own selection."

    def has_permission(self, request, view) -> bool:
        if is_upload_token(request.user):
            return bool(getattr(view, "allow_upload_token", False))
        return True
