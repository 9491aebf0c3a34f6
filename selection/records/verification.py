"""Verifying any PDF as a kvselect decision record: each signature's signer, time, integrity, trust
root and owner, the PAdES level, every revision after the PDF kvselect rendered, and which record it is.

A file is tied to its record by content, not by what it claims: either it is exactly a signed record
kvselect stored, or it extends (by incremental updates) the PDF kvselect rendered for a record. A PDF
that is neither is "not a kvselect record" and never verifies. For a record, the owners its frozen
snapshot names, with their enrolled certificates, are checked field by field and in signing order, a
seal only against the configured organisational seal certificates, and every revision after the
rendered PDF must be the next owner's signature or validation data (``record_integrity``). "Ready for
procurement" also needs the file to be byte for byte the signed record kvselect stored, plus at most
its own later validation data and document timestamps.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any

from django.utils.translation import gettext as _

from selection.certificates import signing
from selection.certificates.trust import seal_certificates, trust_roots
from selection.domain import record_integrity as integrity
from selection.domain.records import OWNER_ROLES
from selection.i18n import role_name
from selection.models import DecisionRecord, SigningCertificate
from selection.records.open_items import as_rows, unresolved

_EOF = re.compile(rb"%%EOF[ \t]*(?:\r\n|\r|\n)?")

# Findings about the file as a whole (record_integrity's are about its revisions).
NOT_A_KVSELECT_RECORD = "not_a_kvselect_record"
OWNERS_NOT_CHECKED = "owners_not_checked"


@dataclass(frozen=True)
class Verification:
    report: signing.VerificationReport
    record: DecisionRecord | None  # the record this file is, or extends
    exact: bool  # the file is exactly the signed record kvselect stored
    lta_extended: bool = False  # the stored signed record followed only by its own validation data / timestamps

    @property
    def stored(self) -> bool:
        """The file is the signed record kvselect stored (by SHA-256), plus at most its own LTA updates."""
        return self.exact or self.lta_extended

    @property
    def simulated(self) -> bool | None:
        return None if self.record is None else self.record.simulated

    @property
    def open_items(self) -> int:
        """The record's open items (owners' "not ready") neither resolved nor waived."""
        return 0 if self.record is None else unresolved(self.record)

    @property
    def superseded(self) -> bool:
        return self.record is not None and self.record.status == DecisionRecord.Status.SUPERSEDED

    @property
    def procurement_ready(self) -> bool:
        """Every signature verifies, by the named owners, on measured evidence, under a non-development CA;
        the file is the signed record kvselect stored; it is not superseded; and every open item of the
        record is resolved or waived with a reason."""
        return (
            self.report.all_ok
            and self.record is not None
            and self.stored
            and not self.superseded
            and not self.record.simulated
            and not self.report.development_certificates
            and not self.open_items
        )


@dataclass(frozen=True)
class Issued:
    """Which record a file is: the record, whether the file is exactly its stored signed PDF, and where the
    rendered PDF and the stored signed PDF end inside the file (None: the file does not start with it)."""

    record: DecisionRecord | None
    exact: bool = False
    rendered_end: int | None = None
    stored_end: int | None = None


def _prefixes(pdf_bytes: bytes) -> dict[str, int]:
    """SHA-256 of each prefix of the file that ends a revision (after %%EOF, with or without its end of line)."""
    ends = {end for m in _EOF.finditer(pdf_bytes) for end in (m.start() + len(b"%%EOF"), m.end())}
    ends.add(len(pdf_bytes))
    return {hashlib.sha256(pdf_bytes[:end]).hexdigest(): end for end in sorted(ends, reverse=True)}


def issued_record(pdf_bytes: bytes) -> Issued:
    """The record this file is exactly (signed), extends (its first revisions are the signed record kvselect
    stored, or the PDF kvselect rendered), or an empty Issued when kvselect did not issue it."""
    prefixes = _prefixes(pdf_bytes)
    records = DecisionRecord.objects.select_related("selection")
    record = records.filter(signed_sha256__in=list(prefixes)).order_by("-signed_at", "-pk").first()
    if record is None:
        record = records.filter(pdf_sha256__in=list(prefixes)).first()
    if record is None:
        return Issued(None)
    stored_end = prefixes.get(record.signed_sha256) if record.signed_sha256 else None
    return Issued(
        record,
        exact=stored_end == len(pdf_bytes),
        rendered_end=prefixes.get(record.pdf_sha256) if record.pdf_sha256 else None,
        stored_end=stored_end,
    )


def issued_record_for(pdf_bytes: bytes) -> tuple[DecisionRecord | None, bool]:
    """The record this file is exactly (signed) or extends, and whether it is exactly the stored signed PDF."""
    issued = issued_record(pdf_bytes)
    return issued.record, issued.exact


def expected_signers(record: DecisionRecord | None) -> dict[str, signing.ExpectedSigner] | None:
    """Each owner's field and the certificate the record's snapshot names for it, in signing order (None: unknown)."""
    if record is None or not record.snapshot:
        return None
    named = {
        o["role"]: signing.ExpectedSigner(o["name"], o["certificate_sha256"])
        for o in record.snapshot.get("owners", [])
        if o.get("certificate_sha256")
    }
    return {role: named[role] for role in OWNER_ROLES if role in named} or None


def seal_fingerprints() -> frozenset[str]:
    """The configured organisational seal certificates a seal may be made with - never one a person enrolled
    (a certificate issued on a profile, or uploaded by an owner, can never seal)."""
    configured = {signing.certificate_info(data).sha256 for data in seal_certificates()}
    people = set(SigningCertificate.objects.filter(sha256__in=configured).values_list("sha256", flat=True))
    return frozenset(configured - people)


def _record_policy(issued: Issued) -> signing.RecordPolicy | None:
    owners = expected_signers(issued.record)
    if owners is None:
        return None
    return signing.RecordPolicy(owners, seal_certificates=seal_fingerprints(), rendered_length=issued.rendered_end)


def verify_document(pdf_bytes: bytes, roots: list[bytes] | None = None) -> Verification:
    """Verify ``pdf_bytes`` against ``roots`` (default: the configured trust roots) as a kvselect record."""
    issued = issued_record(pdf_bytes)
    known = set(DecisionRecord.objects.exclude(signed_sha256="").values_list("signed_sha256", flat=True))
    policy = _record_policy(issued)
    report = signing.verify_pdf(pdf_bytes, trust_roots() if roots is None else roots, known_hashes=known, record=policy)
    if issued.record is None:
        report = replace(report, findings=[integrity.Finding(NOT_A_KVSELECT_RECORD), *report.findings])
    elif policy is None:
        report = replace(report, findings=[integrity.Finding(OWNERS_NOT_CHECKED), *report.findings])
    lta_extended = (
        not issued.exact
        and issued.stored_end is not None
        and bool(report.revisions)
        and integrity.stored_then_lta_only(report.revisions, issued.stored_end)
    )
    return Verification(report, issued.record, issued.exact, lta_extended)


def _field_label(name: str | None) -> str:
    if name is None:
        return ""
    label = role_name(name)
    return label if label != name else f"“{name}”"


def finding_message(finding: integrity.Finding) -> str:
    """A finding in words, in the active language (the page, the API and verify-record)."""
    params = {
        "revision": finding.revision,
        "field": _field_label(finding.field),
        "fields": ", ".join(_field_label(name) for name in finding.fields),
        "expected": _field_label(finding.expected),
        "detail": finding.detail,
    }
    messages = {
        NOT_A_KVSELECT_RECORD: _(
            "Not a kvselect record: this file is neither a signed record kvselect stored nor built on a PDF "
            "kvselect rendered, so who signed it cannot be checked against a record."
        ),
        OWNERS_NOT_CHECKED: _(
            "The record names no signing certificates for its owners (signed before enrolment): who signed "
            "cannot be checked."
        ),
        integrity.CHANGES_DOCUMENT: _(
            "Revision %(revision)s changes the document beyond a signature or validation data: %(detail)s"
        ),
        integrity.NEW_FIELD: _(
            "Revision %(revision)s adds signature fields the record kvselect rendered does not have: %(fields)s."
        ),
        integrity.SEVERAL_SIGNATURES: _("Revision %(revision)s fills several signature fields at once: %(fields)s."),
        integrity.OUT_OF_ORDER: _(
            "Revision %(revision)s signs the %(field)s field out of order (business, platform, security, then "
            "the seal)."
        )
        if not finding.expected
        else _("Revision %(revision)s signs the %(field)s field, but the %(expected)s signs next."),
        integrity.NOT_A_SIGNING_FIELD: _(
            "Revision %(revision)s signs the %(field)s field, which no owner and no seal signs."
        ),
        integrity.OTHER_FIELDS_CHANGED: _(
            "Revision %(revision)s signs the %(field)s field and also changes: %(fields)s."
        ),
        integrity.FORM_FILLED_WITHOUT_SIGNATURE: _(
            "Revision %(revision)s changes form fields without a signature: %(fields)s."
        ),
        integrity.UNREADABLE_SIGNATURE: _(
            "Revision %(revision)s fills the %(field)s field with something that is not a signature over that revision."
        ),
        integrity.TIMESTAMP_IN_RECORD_FIELD: _(
            "Revision %(revision)s puts a document timestamp into the %(field)s field of the record."
        ),
        integrity.TRAILING_BYTES: _(
            "%(detail)s bytes after the last revision belong to no revision (an update that lenient readers "
            "may still show)."
        ),
        integrity.UNREADABLE_REVISION: _("The file's revisions cannot be read one by one: %(detail)s"),
        integrity.DOCUMENT_TIMESTAMP_INVALID: _(
            "The document timestamp in the %(field)s field does not verify: %(detail)s"
        ),
    }
    message = messages.get(finding.code)
    return message % params if message is not None else signing.describe_finding(finding)


def _finding_rows(report: signing.VerificationReport) -> list[dict[str, Any]]:
    return [
        {
            "code": f.code,
            "message": finding_message(f),
            "revision": f.revision,
            "field": f.field,
            "fields": list(f.fields),
            "detail": f.detail,
        }
        for f in report.findings
    ]


def verification_json(verification: Verification) -> dict[str, Any]:
    """What verify-record --json prints: the report, the findings in words and the record's verdicts."""
    record = verification.record
    out = verification.report.as_dict()
    out["findings"] = _finding_rows(verification.report)
    out["record"] = (
        {
            "id": f"DR-{record.selection_id}-v{record.version}",
            "exact": verification.exact,
            "stored": verification.stored,
        }
        if record
        else None
    )
    out["kvselect_record"] = record is not None
    out["simulated"] = verification.simulated
    out["superseded"] = verification.superseded
    out["unresolved_open_items"] = verification.open_items
    out["procurement_ready"] = verification.procurement_ready
    return out


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
            "stored": verification.stored,
        }
        if record
        else None
    )
    data["findings"] = _finding_rows(verification.report)
    data["kvselect_record"] = record is not None
    data["owners_checked"] = expected_signers(record) is not None
    data["stored"] = verification.stored
    data["superseded"] = verification.superseded
    data["simulated"] = verification.simulated
    data["open_items"] = as_rows(record) if record else []
    data["unresolved_open_items"] = verification.open_items
    data["procurement_ready"] = verification.procurement_ready
    return data
