"""`verify_pdf`: every signature checked offline, revision by revision (the facts `record_integrity`
judges: pyHanko's difference analysis of each revision and the fields it added or filled)."""

from __future__ import annotations

import gc
import hashlib
import io
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterable, Iterator, Mapping

from pyhanko.pdf_utils import generic, misc
from pyhanko.pdf_utils.reader import HistoricalResolver, PdfFileReader
from pyhanko.sign import fields as sig_fields
from pyhanko.sign.diff_analysis import (
    StandardDiffPolicy,
    SuspiciousModification,
)
from pyhanko.sign.validation import EmbeddedPdfSignature, validate_pdf_timestamp
from pyhanko.sign.validation.dss import DocumentSecurityStore

from selection.certificates.signing.base import SEAL_FIELD, SigningError
from selection.certificates.signing.certificates import load_asn1_cert
from selection.certificates.signing.modifications import (
    DIFF_POLICY,
    FIRST_SIGNATURE_POLICY,
    ObjStmIndexReader,
    in_revision,
)
from selection.certificates.signing.reports import (
    ExpectedSigner,
    RecordPolicy,
    VerificationReport,
    failed_report,
    read_security_store,
    signature_report,
    validation_context_for,
)
from selection.domain import record_integrity as integrity
from selection.domain.record_integrity import Finding, RevisionEntry, RevisionFacts, SigningOrder

# --------------------------------------------------------------------------- revision by revision
#
# The facts record_integrity judges: for each revision after the rendered PDF (or after the first
# signature), pyHanko's difference analysis against the revision before it, and which signature
# fields it added or filled with what.


def _field_values(resolver) -> dict[str, str | None]:
    """Each signature field of a revision and what fills it: None (empty), "/Sig", "/DocTimeStamp", or ""."""
    values: dict[str, str | None] = {}
    for raw_name, value, _ref in sig_fields.enumerate_sig_fields(resolver, filled_status=None):
        name, value = str(raw_name), in_revision(resolver, value)
        if value is None:
            values[name] = None
        elif isinstance(value, generic.DictionaryObject):
            values[name] = str(value.get("/Type", "/Sig"))
        else:
            values[name] = ""
    return values


def _first_signature_changes(old: HistoricalResolver, new: HistoricalResolver) -> str:
    """What the first signature's revision changed in /SigFlags and /Perms beyond what a first
    (certification) signature sets; "" when nothing."""

    def flags(resolver) -> int:
        form = resolver.root.get("/AcroForm")
        value = form.get("/SigFlags", 0) if isinstance(form, generic.DictionaryObject) else 0
        return int(value) if isinstance(value, int) else -1

    before, after = flags(old), flags(new)
    if after < 0 or after & ~3 or before & ~after:
        return f"/SigFlags changed from {before} to {after}"
    perms_before, perms_after = old.root.get("/Perms"), new.root.get("/Perms")
    if perms_after is not None and perms_before is None:
        if not isinstance(perms_after, generic.DictionaryObject) or set(perms_after.keys()) != {"/DocMDP"}:
            return "/Perms holds more than the certification signature (DocMDP)"
    elif perms_before is not None and not isinstance(perms_after, type(perms_before)):
        return "/Perms changed"
    return ""


def _diff(reader: PdfFileReader, revision: int, first: bool, policy) -> tuple[str, str, frozenset]:
    """(pyHanko's modification level, its reason when OTHER, the changed fields) of ``revision`` against
    the revision before it."""
    old, new = reader.get_historical_resolver(revision - 1), reader.get_historical_resolver(revision)
    try:
        result = (FIRST_SIGNATURE_POLICY if first else policy).apply(old, new)
        extra = _first_signature_changes(old, new) if first else ""
    except (SuspiciousModification, misc.PdfError) as exc:
        return "OTHER", str(exc), frozenset()
    except Exception as exc:  # a structure pyHanko cannot compare: not a change it can vouch for
        return "OTHER", f"{type(exc).__name__}: {exc}", frozenset()
    if extra:
        return "OTHER", extra, frozenset()
    return result.modification_level.name, "", frozenset(result.changed_form_fields)


def _revision_facts(
    reader: PdfFileReader, revision: int, before: dict, after: dict, signed_in: Mapping[str, int], policy
) -> RevisionFacts:
    filled = [name for name, kind in after.items() if kind is not None and before.get(name) is None]
    # a signature counts where its byte range ends with the revision that adds it (not a copied one)
    signed = tuple(n for n in filled if after[n] == "/Sig" and signed_in.get(n) == revision)
    stamped = tuple(n for n in filled if after[n] == "/DocTimeStamp" and signed_in.get(n) == revision)
    first = not any(kind is not None for kind in before.values())
    level, detail, changed = _diff(reader, revision, first and bool(signed), policy)
    return RevisionFacts(
        index=revision,
        offset=int(reader.xrefs.get_startxref_for_revision(revision)),
        level=level,
        detail=detail,
        changed_fields=changed,
        new_fields=frozenset(after) - frozenset(before),
        signed=signed,
        timestamped=stamped,
        unreadable=tuple(n for n in filled if n not in signed and n not in stamped),
    )


def _trailing_bytes(pdf_bytes: bytes, reader: PdfFileReader) -> int:
    """Bytes after the end of the last revision (its first %%EOF after its cross-reference section, and one
    end of line): what lenient readers may still parse, covered by no revision (incremental saving attacks)."""
    last = reader.xrefs.get_startxref_for_revision(reader.xrefs.total_revisions - 1)
    end = pdf_bytes.find(b"%%EOF", last)
    if end < 0:
        return 0  # pyHanko read it without a marker: nothing beyond what it read can be told apart
    end += len(b"%%EOF")
    for eol in (b"\r\n", b"\n", b"\r"):
        if pdf_bytes.startswith(eol, end):
            end += len(eol)
            break
    return len(pdf_bytes) - end


def _checked_from(reader: PdfFileReader, embedded: list, record: RecordPolicy | None) -> int:
    """The first revision to account for: the one after the rendered PDF, or the first signature's."""
    if record is not None and record.rendered_length is not None:
        xrefs, end = reader.xrefs, record.rendered_length
        return sum(1 for r in range(xrefs.total_revisions) if xrefs.get_startxref_for_revision(r) < end)
    return min((s.signed_revision for s in embedded), default=reader.xrefs.total_revisions)


def account_for_revisions(
    pdf_bytes: bytes, reader: PdfFileReader, embedded: list, record: RecordPolicy | None, policy
) -> tuple[list[RevisionEntry], list[Finding]]:
    """Judge every revision after the rendered PDF (``record_integrity``); without a rendered PDF, after
    the first signature, whose own revision is then the document as first signed."""
    start = _checked_from(reader, embedded, record)
    signed_in = {str(s.field_name): s.signed_revision for s in embedded}
    order = None
    if record is not None:
        rendered = None
        if record.rendered_length is not None and start > 0:
            rendered = frozenset(_field_values(reader.get_historical_resolver(start - 1)))
        order = SigningOrder(owners=tuple(record.owners), seal=SEAL_FIELD, rendered_fields=rendered)
    facts: list[RevisionFacts] = []
    total = reader.xrefs.total_revisions
    if start < total and (record is None or record.rendered_length is None):
        fields = _field_values(reader.get_historical_resolver(start))  # the document as first signed
        names = tuple(n for n, kind in fields.items() if kind is not None and signed_in.get(n) == start)
        facts.append(RevisionFacts(start, int(reader.xrefs.get_startxref_for_revision(start)), "NONE", signed=names))
        start += 1
    before = _field_values(reader.get_historical_resolver(start - 1)) if 0 < start < total else {}
    for revision in range(start, total):
        after = _field_values(reader.get_historical_resolver(revision))
        facts.append(_revision_facts(reader, revision, before, after, signed_in, policy))
        before = after
    return integrity.account_revisions(facts, order, _trailing_bytes(pdf_bytes, reader))


def _timestamp_findings(stamps: list, roots: list, dss: DocumentSecurityStore | None, policy) -> list[Finding]:
    """A document timestamp (PAdES LTA) must be intact, valid and by a trusted TSA, like a signature."""
    findings = []
    for stamp in stamps:
        try:
            status = validate_pdf_timestamp(
                stamp, validation_context=validation_context_for(roots, dss, offline=False), diff_policy=policy
            )
            problem = "" if status.intact and status.valid and status.trusted else "not intact, valid and trusted"
        except Exception as exc:  # a damaged timestamp fails, it does not crash the report
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            findings.append(Finding(integrity.DOCUMENT_TIMESTAMP_INVALID, field=stamp.field_name, detail=problem))
    return findings


def verify_pdf(
    pdf_bytes: bytes,
    trust_roots: Iterable[bytes],
    known_hashes: Iterable[str] | None = None,
    diff_policy: StandardDiffPolicy | None = None,
    expected_signers: Mapping[str, ExpectedSigner] | None = None,
    record: RecordPolicy | None = None,
) -> VerificationReport:
    """Verify every signature against ``trust_roots`` (DER or PEM certificates), offline, and account
    for every revision of the file.

    ``known_hashes`` (SHA-256 hex of PDFs kvselect issued) lets the caller say whether this exact file
    is one of them. ``record`` (or just ``expected_signers``: field -> owner and enrolled certificate)
    checks each field was signed by its owner in order and a seal only with a configured seal
    certificate - a field signed by anyone else, an owner's field left unsigned or a signature in a
    field that names no owner fails the document - and, with the rendered PDF's length, that nothing
    but the owners' signatures and validation data follows it (``record_integrity``). A document
    security store (PAdES B-LT) is the only source of revocation data; nothing is fetched.
    Verification itself needs no database.
    """
    if record is None and expected_signers is not None:
        record = RecordPolicy(owners=expected_signers)
    with _cyclic_gc_paused():
        return _verify_pdf(pdf_bytes, trust_roots, known_hashes, diff_policy, record)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one verification, which allocates a few hundred thousand
    short-lived parser objects: its passes over them were a quarter of a 58-page record's CPU time.
    Reference counting still frees them; the collector resumes (if it was on) when the report is built."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _embedded_signatures(reader: PdfFileReader) -> tuple[list, list[tuple[str, Exception]]]:
    """The document's signatures in signing order, and the filled signature fields that hold no readable
    signature (a forged signature dictionary without /Contents or /ByteRange: universal signature
    forgery), each with why - so one forged field fails as itself instead of hiding the others."""
    try:
        return list(reader.embedded_signatures), []
    except Exception:  # at least one is unreadable: read them one by one
        pass
    readable, unreadable = [], []
    for name, _value, field_ref in sig_fields.enumerate_sig_fields(reader, filled_status=True):
        try:
            sig = EmbeddedPdfSignature(reader, field_ref.get_object(), name)
            sig.signed_revision  # noqa: B018 - reads the /ByteRange: fails here when there is none
            readable.append(sig)
        except Exception as exc:
            unreadable.append((str(name), exc))
    return sorted(readable, key=lambda sig: sig.signed_revision), unreadable


def _verify_pdf(pdf_bytes, trust_roots, known_hashes, diff_policy, record) -> VerificationReport:
    digest = hashlib.sha256(pdf_bytes).hexdigest()
    known = None if known_hashes is None else digest in {h.lower() for h in known_hashes}
    try:
        roots = [load_asn1_cert(r) for r in trust_roots]
    except Exception as exc:
        raise SigningError(f"trust_roots: not a DER or PEM certificate ({exc})") from exc
    try:
        reader = ObjStmIndexReader(io.BytesIO(pdf_bytes), strict=False)
        embedded, unreadable = _embedded_signatures(reader)
    except Exception as exc:
        return VerificationReport(digest, [], f"not a readable PDF ({exc})", known)
    dss = read_security_store(reader)
    policy = diff_policy or DIFF_POLICY
    reports = [failed_report(name, exc) for name, exc in unreadable]
    for sig in (s for s in embedded if s.sig_object_type == "/Sig"):
        try:
            reports.append(signature_report(sig, roots, dss, policy, record))
        except Exception as exc:  # a damaged signature must fail, not crash the report
            reports.append(failed_report(sig.field_name, exc))
    if reports:
        reports[-1] = replace(reports[-1], last=True)
    stamps = [s for s in embedded if s.sig_object_type == "/DocTimeStamp"]
    try:
        entries, findings = account_for_revisions(pdf_bytes, reader, embedded, record, policy)
    except Exception as exc:  # a structure the accounting cannot read is not one it can vouch for
        entries, findings = [], [Finding(integrity.UNREADABLE_REVISION, detail=f"{type(exc).__name__}: {exc}")]
    findings += _timestamp_findings(stamps, roots, dss, policy)
    signed = {r.field for r in reports}
    unsigned = [name for name in (record.owners if record else {}) if name not in signed]
    return VerificationReport(digest, reports, None, known, unsigned, findings, entries)
