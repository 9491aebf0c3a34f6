"""Verifying any PDF: each signature's signer, time, integrity and trust, and whether kvselect issued it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from django.conf import settings

from selection.models import DecisionRecord
from selection.records import signing


def trust_roots() -> list[bytes]:
    """CA certificates trusted for verification: KVSELECT_TRUST_ROOTS files plus the dev CA if issued."""

    paths = [Path(p) for p in getattr(settings, "KVSELECT_TRUST_ROOTS", [])]
    dev_ca = Path(settings.VAR_DIR) / "dev-certs" / "dev-ca.pem"
    if dev_ca.exists():
        paths.append(dev_ca)
    return [p.read_bytes() for p in paths if p.exists()]


def verification_report(pdf_bytes: bytes) -> dict[str, Any]:
    """Each signature's signer, time, intact/valid/trusted, and whether kvselect issued this document."""
    known = set(DecisionRecord.objects.exclude(signed_sha256="").values_list("signed_sha256", flat=True))
    report = signing.verify_pdf(pdf_bytes, trust_roots(), known_hashes=known)
    data = report.as_dict()
    record = DecisionRecord.objects.filter(signed_sha256=hashlib.sha256(pdf_bytes).hexdigest()).first()
    data["record"] = (
        {"selection": record.selection.name, "version": record.version, "status": record.status} if record else None
    )
    return data
