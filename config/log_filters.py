"""Logging filters: what the server log says about expected refusals."""

from __future__ import annotations

import logging

EXPECTED_STATUSES = (403,)  # a PermissionDenied the page explains ("Only architects ..."), not an error


class ExpectedRefusals(logging.Filter):
    """Keep the one-line "Forbidden (Permission denied): /path" of an expected refusal, without the
    traceback Django attaches to it (an operator reads a traceback as a crash)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) in EXPECTED_STATUSES:
            record.exc_info = None
            record.exc_text = None
        return True
