"""Verifying any PDF: each signature's signer, time, integrity, trust root and owner, the PAdES
level, and which record kvselect issued it from.

A file is tied to its record by content, not by what it claims: either it is exactly a signed
record kvselect issued, or it extends (by incremental updates) the PDF kvselect rendered for a
record. The owners that record's frozen snapshot names, with their enrolled certificates, are
then checked field by field - so a copy of a rendered record signed with someone else's key
fails on that field even though its signature is intact, valid and trusted.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from selection.certificates import signing
from selection.certificates.trust import trust_roots
from selection.models import DecisionRecord
from selection.records.open_items import as_rows, unresolved

_EOF = re.compile(rb"%%EOF[ \t]*(?:\r\n|\r|\n)?")


@dataclass(frozen=True)
class Verification:
    report: signing.VerificationReport
    record: DecisionRecord | None  # the record this file is, or extends
    exact: bool  # the file is exactly the signed record kvselect issued

    @property
    def simulated(self) -> bool | None:
        return None if self.record is None else self.record.simulated

    @property
    def open_items(self) -> int:
        """The record's open items (owners' "not ready") neither resolved nor waived."""
        return 0 if self.record is None else unresolved(self.record)

    @property
    def procurement_ready(self) -> bool:
        """Every signature verifies, by the named owners, on measured evidence, under a non-development CA,
        and every open item of the record is resolved or waived with a reason."""
        return (
            self.report.all_ok
            and self.record is not None
            and not self.record.simulated
            and not self.report.development_certificates
            and not self.open_items
        )


def issued_record_for(pdf_bytes: bytes) -> tuple[DecisionRecord | None, bool]:
    """The record this file is exactly (signed) or extends (its first revisions are the PDF kvselect rendered)."""
    digest = hashlib.sha256(pdf_bytes).hexdigest()
    record = DecisionRecord.objects.filter(signed_sha256=digest).select_related("selection").first()
    if record is not None:
        return record, True
    ends = {end for m in _EOF.finditer(pdf_bytes) for end in (m.start() + len(b"%%EOF"), m.end())}
    prefixes = {hashlib.sha256(pdf_bytes[:end]).hexdigest() for end in ends}
    record = DecisionRecord.objects.filter(pdf_sha256__in=prefixes).select_related("selection").first()
    return record, False


def expected_signers(record: DecisionRecord | None) -> dict[str, signing.ExpectedSigner] | None:
    """Each owner's field and the certificate the record's snapshot names for it (None: unknown)."""
    if record is None or not record.snapshot:
        return None
    return {
        o["role"]: signing.ExpectedSigner(o["name"], o["certificate_sha256"])
        for o in record.snapshot.get("owners", [])
        if o.get("certificate_sha256")
    } or None


def verify_document(pdf_bytes: bytes, roots: list[bytes] | None = None) -> Verification:
    """Verify ``pdf_bytes`` against ``roots`` (default: the configured trust roots) and its record's owners."""
    record, exact = issued_record_for(pdf_bytes)
    known = set(DecisionRecord.objects.exclude(signed_sha256="").values_list("signed_sha256", flat=True))
    report = signing.verify_pdf(
        pdf_bytes,
        trust_roots() if roots is None else roots,
        known_hashes=known,
        expected_signers=expected_signers(record),
    )
    return Verification(report, record, exact)


def verification_report(pdf_bytes: bytes) -> dict[str, Any]:
    """The verification as plain data (the API's and the verify page's)."""
    verification = verify_document(pdf_bytes)
    data = verification.report.as_dict()
    record = verification.record
    data["record"] = (
        {
            "id": record.pk,
            "selection": record.selection.name,
            "version": record.version,
            "status": record.status,
            "simulated": record.simulated,
            "exact": verification.exact,
        }
        if record
        else None
    )
    data["owners_checked"] = expected_signers(record) is not None
    data["simulated"] = verification.simulated
    data["open_items"] = as_rows(record) if record else []
    data["unresolved_open_items"] = verification.open_items
    data["procurement_ready"] = verification.procurement_ready
    return data
