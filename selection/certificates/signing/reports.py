"""Verification reports: the expected signers and the record's policy, one report per signature (intact,
valid, trusted, by whom, coverage, PAdES level) and the document's `VerificationReport`."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import asdict, dataclass, field
from typing import Mapping

from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko.sign.validation.dss import DocumentSecurityStore
from pyhanko.sign.validation.errors import NoDSSFoundError
from pyhanko_certvalidator import ValidationContext

from selection.certificates.signing.base import ALLOWED_AFTER_LAST, ALLOWED_LATER_CHANGES, SEAL_FIELD
from selection.certificates.signing.certificates import anchor_info, certificate_info, subject_line
from selection.domain.record_integrity import Finding, RevisionEntry
from selection.domain.roles import ROLE_LABELS

log = logging.getLogger("selection.certificates.signing")  # one logger name for the package, as before


PADES_SUBFILTER = "/ETSI.CAdES.detached"


@dataclass(frozen=True)
class ExpectedSigner:
    """Who must sign one field: the owner's name and their enrolled certificate's SHA-256."""

    name: str
    certificate_sha256: str


@dataclass(frozen=True)
class RecordPolicy:
    """What kvselect knows about the record a file claims to be: who signs which field, in order, the
    organisational seal certificates a seal may be made with, and where the PDF kvselect rendered ends."""

    owners: Mapping[str, ExpectedSigner]  # field -> owner, in signing order
    seal_certificates: frozenset[str] = frozenset()  # SHA-256 of each configured organisational seal certificate
    rendered_length: int | None = None  # the file's first bytes are the rendered PDF's (None: not known)


@dataclass(frozen=True)
class SignatureReport:
    """One signature as a verifier sees it."""

    field: str
    signer_common_name: str | None
    signing_time: dt.datetime | None
    intact: bool
    valid: bool
    trusted: bool
    coverage: str | None  # ENTIRE_FILE, ENTIRE_REVISION, CONTIGUOUS_BLOCK_FROM_START, UNCLEAR
    covers_whole_document: bool  # only the last signature covers the whole file
    modification_level: str | None  # NONE, LTA_UPDATES, FORM_FILLING, ANNOTATIONS, OTHER
    docmdp_ok: bool | None
    reason: str | None
    error: str | None = None
    signer_certificate_sha256: str | None = None
    trust_root: str | None = None  # the root that validated the signer's chain (its common name)
    trust_root_sha256: str | None = None
    development_certificate: bool = False  # the signer or its root is a kvselect development CA's
    level: str | None = None  # PAdES baseline level reached: B-B, B-T (timestamped), B-LT (verifiable offline)
    timestamp: dt.datetime | None = None  # the time an RFC 3161 timestamp proves
    timestamp_authority: str | None = None
    expected_signer: str | None = None  # the owner named for this field (the seal: "Organisational seal")
    signed_by_owner: bool | None = None  # None: no owner is named for this field
    certification: str | None = None  # the DocMDP permission this signature certifies the document with
    last: bool = False  # the document's last signature: only validation data may follow it

    @property
    def ok(self) -> bool:
        """Intact, valid, trusted, signed by the owner named for the field (when one is), and whatever
        was appended later only added signatures in existing fields (validation data and document
        timestamps only, after the last signature) - never changed the content."""
        allowed = ALLOWED_AFTER_LAST if self.last else ALLOWED_LATER_CHANGES
        return (
            self.intact
            and self.valid
            and self.trusted
            and self.docmdp_ok is not False
            and self.modification_level in allowed
            and self.signed_by_owner is not False
        )

    @property
    def owner_check(self) -> str:
        if self.signed_by_owner is None:
            return "no owner named for this field"
        if self.field == SEAL_FIELD and self.expected_signer == ROLE_LABELS[SEAL_FIELD]:
            if self.signed_by_owner:
                return "sealed with a configured organisational seal certificate"
            return "signed by someone else: not a configured organisational seal certificate"
        if self.signed_by_owner:
            return f"signed by the named owner ({self.expected_signer})"
        if self.expected_signer is None:
            return "signed by someone else: no owner signs this field"
        return f"signed by someone else: this field is {self.expected_signer}'s"


def describe_finding(finding: Finding) -> str:
    """A finding in plain words, for logs and the default text report (pages and the command word it
    through their message catalogue)."""
    where = f"revision {finding.revision}: " if finding.revision is not None else ""
    params = [f"field {finding.field}"] if finding.field else []
    params += [f"fields {', '.join(finding.fields)}"] if finding.fields else []
    params += [f"expected {finding.expected}"] if finding.expected else []
    params += [finding.detail] if finding.detail else []
    return f"{where}{finding.code.replace('_', ' ')}" + (f" ({'; '.join(params)})" if params else "")


@dataclass(frozen=True)
class VerificationReport:
    """All signatures of one PDF plus its hash (and, if known, whether kvselect issued it)."""

    sha256: str
    signatures: list[SignatureReport] = field(default_factory=list)
    error: str | None = None
    matches_known_record: bool | None = None  # None: no list of issued hashes was given
    unsigned_fields: list[str] = field(default_factory=list)  # owners' fields nobody signed
    findings: list[Finding] = field(default_factory=list)  # why the document fails beyond its signatures
    revisions: list[RevisionEntry] = field(default_factory=list)  # each revision judged, after the rendered PDF

    @property
    def all_ok(self) -> bool:
        return (
            self.error is None
            and bool(self.signatures)
            and not self.unsigned_fields
            and not self.findings
            and all(s.ok for s in self.signatures)
        )

    @property
    def development_certificates(self) -> bool:
        return any(s.development_certificate for s in self.signatures)

    @property
    def certification(self) -> str | None:
        """The DocMDP permission the document is certified with (by its first signature), if it is."""
        return next((s.certification for s in self.signatures if s.certification), None)

    def as_dict(self) -> dict:
        data = asdict(self)
        for sig, report in zip(data["signatures"], self.signatures, strict=True):
            for key in ("signing_time", "timestamp"):
                if sig[key] is not None:
                    sig[key] = sig[key].isoformat()
            sig["ok"] = report.ok
        for entry, revision in zip(data["revisions"], self.revisions, strict=True):
            entry["ok"] = revision.ok
        data["all_ok"] = self.all_ok
        data["development_certificates"] = self.development_certificates
        data["certification"] = self.certification
        return data

    def as_text(self, describe=describe_finding) -> str:
        lines = [f"document sha256: {self.sha256}"]
        if self.matches_known_record is not None:
            lines.append(
                "issued by kvselect: " + ("yes" if self.matches_known_record else "NO - not a record kvselect issued")
            )
        if self.error:
            lines.append(f"error: {self.error}")
        if not self.signatures:
            lines.append("signatures: none")
        for i, s in enumerate(self.signatures, 1):
            lines += _signature_lines(i, s)
        for name in self.unsigned_fields:
            lines.append(f"field={name}: NOT SIGNED")
        if self.signatures:
            certified = f"{self.certification} (DocMDP, by the first signature)" if self.certification else "none"
            lines.append(f"certification: {certified}")
        for entry in self.revisions:
            lines.append(f"revision {entry.index}: {entry.kind}" + (f" ({entry.field})" if entry.field else ""))
        lines += [f"problem: {describe(finding)}" for finding in self.findings]
        lines.append("result: " + ("ALL SIGNATURES OK" if self.all_ok else "NOT VERIFIED"))
        return "\n".join(lines)


def _signature_lines(i: int, s: SignatureReport) -> list[str]:
    when = s.signing_time.isoformat() if s.signing_time else "unknown"
    lines = [
        f"#{i} field={s.field} signer={s.signer_common_name!r} time={when} "
        f"intact={s.intact} valid={s.valid} trusted={s.trusted} "
        f"coverage={s.coverage} whole_document={s.covers_whole_document} "
        f"modifications={s.modification_level}" + (f" error={s.error}" if s.error else "")
    ]
    if s.signer_certificate_sha256:
        lines.append(f"   certificate SHA-256 {s.signer_certificate_sha256}")
    root = s.trust_root or "none (not trusted)"
    flag = " [DEVELOPMENT CERTIFICATE - NOT FOR PROCUREMENT]" if s.development_certificate else ""
    lines.append(f"   trust root: {root}{flag}")
    lines.append(f"   owner: {s.owner_check}")
    stamp = ""
    if s.timestamp:
        stamp = f" (timestamp {s.timestamp.isoformat()} by {s.timestamp_authority or 'unknown TSA'})"
    lines.append(f"   level: {s.level or 'none'}{stamp}")
    return lines


def _enum_name(value) -> str | None:
    return None if value is None else getattr(value, "name", str(value))


def read_security_store(reader: PdfFileReader) -> DocumentSecurityStore | None:
    try:
        return DocumentSecurityStore.read_dss(reader)
    except NoDSSFoundError:
        return None
    except Exception as exc:  # a damaged DSS: verify as if there were none
        log.warning("unreadable document security store: %s", exc)
        return None


def _timestamp_ok(status) -> bool:
    ts = status.timestamp_validity
    return ts is not None and bool(ts.intact and ts.valid and ts.trusted)


def validation_context_for(roots: list, dss: DocumentSecurityStore | None, *, offline: bool) -> ValidationContext:
    """Trust from ``roots``; revocation data only from the document's DSS, required (hard-fail) when
    ``offline`` - what PAdES B-LT promises - and used when present otherwise (soft-fail). Nothing is fetched."""
    kwargs = {"trust_roots": roots, "allow_fetching": False, "revocation_mode": "hard-fail" if offline else "soft-fail"}
    return dss.as_validation_context(dict(kwargs)) if dss is not None else ValidationContext(**kwargs)


def _validate(sig, roots: list, dss: DocumentSecurityStore | None, policy, *, offline: bool):
    """pyHanko's validation of one signature (see ``validation_context_for``)."""
    return validate_pdf_signature(
        sig,
        signer_validation_context=validation_context_for(roots, dss, offline=offline),
        ts_validation_context=validation_context_for(roots, dss, offline=offline),
        diff_policy=policy,
    )


def _owner_verdict(name: str, fingerprint: str | None, record: RecordPolicy | None) -> tuple[bool | None, str | None]:
    """(signed by whom the record names for ``name``, who that is): an owner's enrolled certificate, or for
    the seal one of the configured organisational seal certificates. (None, None) without a record."""
    if record is None:
        return None, None
    owner = record.owners.get(name)
    if owner is None and name == SEAL_FIELD:
        return fingerprint is not None and fingerprint in record.seal_certificates, ROLE_LABELS[SEAL_FIELD]
    return owner is not None and fingerprint == owner.certificate_sha256.lower(), owner.name if owner else None


def signature_report(
    sig, roots: list, dss: DocumentSecurityStore | None, policy, record: RecordPolicy | None
) -> SignatureReport:
    name = sig.field_name
    status, long_term = None, False
    if dss is not None and (dss.crls or dss.ocsps):
        status = _validate(sig, roots, dss, policy, offline=True)
        long_term = bool(status.trusted)
        if not status.trusted:
            status = None  # not verifiable from the DSS alone: say whether it is trusted at all
    if status is None:
        status = _validate(sig, roots, dss, policy, offline=False)
    coverage = _enum_name(status.coverage)
    cert = status.signing_cert
    anchor = anchor_info(status.validation_path) if status.trusted else None
    signer_info = certificate_info(cert.dump()) if cert is not None else None
    level = None
    if status.intact and status.valid and str(sig.sig_object.get("/SubFilter")) == PADES_SUBFILTER:
        level = "B-B"
        if _timestamp_ok(status):
            level = "B-LT" if long_term else "B-T"
    ts = status.timestamp_validity
    fingerprint = signer_info.sha256 if signer_info else None
    signed_by_owner, expected = _owner_verdict(name, fingerprint, record)
    reason = sig.sig_object.get("/Reason")
    return SignatureReport(
        field=name,
        signer_common_name=cert.subject.native.get("common_name") if cert is not None else None,
        signing_time=status.signer_reported_dt,
        intact=bool(status.intact),
        valid=bool(status.valid),
        trusted=bool(status.trusted),
        coverage=coverage,
        covers_whole_document=coverage == "ENTIRE_FILE",
        modification_level=_enum_name(status.modification_level),
        docmdp_ok=status.docmdp_ok,
        reason=str(reason) if reason is not None else None,
        signer_certificate_sha256=fingerprint,
        trust_root=(anchor.common_name or anchor.subject) if anchor else None,
        trust_root_sha256=anchor.sha256 if anchor else None,
        development_certificate=bool((signer_info and signer_info.development) or (anchor and anchor.development)),
        level=level,
        timestamp=ts.timestamp if ts is not None and _timestamp_ok(status) else None,
        timestamp_authority=subject_line(ts.signing_cert) if ts is not None and ts.signing_cert else None,
        expected_signer=expected,
        signed_by_owner=signed_by_owner,
        certification=_enum_name(sig.docmdp_level) if _is_certification(sig) else None,
    )


def _is_certification(sig) -> bool:
    references = sig.sig_object.get("/Reference") or []
    return any(str(ref.get("/TransformMethod")) == "/DocMDP" for ref in references)


def failed_report(name: str, exc: Exception) -> SignatureReport:
    """A signature that could not even be checked: it fails with pyHanko's reason."""
    return SignatureReport(
        name, None, None, False, False, False, None, False, None, None, None, f"{type(exc).__name__}: {exc}"
    )
