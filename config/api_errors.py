"""JSON errors that always name the field and the problem."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import DATABASE_RETRY_AFTER_S
from config.uploads import UploadSpoolFailure, storage_detail

logger = logging.getLogger(__name__)


def exception_handler(exc, context):
    if isinstance(exc, (OperationalError, InterfaceError)):
        # The database is restarting or unreachable: the transaction rolled back, so the client
        # may simply retry (with the same Idempotency-Key for uploads).
        logger.warning("database unavailable during %s: %s", context.get("view").__class__.__name__, exc)
        return Response(
            {
                "detail": "The database is temporarily unavailable; nothing was stored. "
                f"Retry in {DATABASE_RETRY_AFTER_S} s."
            },
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
    if isinstance(exc, UploadSpoolFailure):  # the disk refused the spooled body: nothing was stored
        logger.error("upload not stored (%s): %s", context.get("view").__class__.__name__, exc.error)
        return Response({"detail": storage_detail(exc.error)}, status=status.HTTP_507_INSUFFICIENT_STORAGE)
    if isinstance(exc, DataError):
        # Input the database cannot hold or compare (a NUL character in PostgreSQL text, a number
        # out of range) that the serializers let through: the client's problem, not a server error.
        return Response(
            {"detail": f"A value in the request cannot be stored or looked up: {str(exc).strip()[:200]}"},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    response = drf_exception_handler(exc, context)
    if response is not None and not isinstance(response.data, dict):
        response.data = {"detail": response.data}
    return response
