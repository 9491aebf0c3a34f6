"""PAdES signing and verification of decision-record PDFs, and a development CA.

This is the ONLY module that imports pyHanko (pinned to 0.38.* in pyproject.toml): everything
pyHanko-specific stays behind the pure functions below so an upgrade touches one file.

- ``prepare_signature_fields`` adds empty, visible signature fields at the boxes the record
  template laid out (one incremental update), so each owner signs an existing field by name.
- ``sign_pdf`` appends one PAdES baseline signature (B-B, subfilter ETSI.CAdES.detached) as an
  incremental update with a visible box showing "signed", the role, the signer and the time.
  Owners sign in sequence (business, platform, security), an organisational seal last.
- ``verify_pdf`` reports every signature: intact, valid, trusted against the given roots, the
  coverage / modification level, and the document's SHA-256.
- ``issue_dev_certificates`` creates a clearly-labelled development CA and one PKCS#12 per
  owner (never for production).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from fontTools.ttLib import TTCollection, TTFont
from pyhanko.pdf_utils.font.opentype import GlyphAccumulatorFactory
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.pdf_utils.text import TextBoxStyle
from pyhanko.sign import fields as sig_fields
from pyhanko.sign import signers
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko.stamp import TextStampStyle
from pyhanko_certvalidator import ValidationContext

log = logging.getLogger(__name__)

DEV_CA_COMMON_NAME = "kvselect DEVELOPMENT CA \u2014 not for production"
DEV_ORGANISATION = "kvselect development (not for production)"
ROLE_LABELS = {
    "business": "Business owner",
    "platform": "Platform owner",
    "security": "Security owner",
    "seal": "Organisational seal",
}
# What may be appended after a signature without voiding it (pyHanko ModificationLevel names).
ALLOWED_LATER_CHANGES = ("NONE", "LTA_UPDATES", "FORM_FILLING")

# A box is (page index starting at 0, x1, y1, x2, y2) in PDF points, origin bottom-left.
Box = tuple[int, float, float, float, float]


class SigningError(ValueError):
    """Signing or certificate handling failed; the message says which input and why."""


# --------------------------------------------------------------------------- signing


def _check_box(name: str, box: Sequence) -> Box:
    if len(box) != 5:
        raise SigningError(f"{name}: box must be (page, x1, y1, x2, y2), got {box!r}")
    page, x1, y1, x2, y2 = box
    if int(page) < 0 or x2 <= x1 or y2 <= y1:
        raise SigningError(f"{name}: box must have page >= 0, x2 > x1 and y2 > y1, got {box!r}")
    return int(page), float(x1), float(y1), float(x2), float(y2)


def _open_writer(pdf_bytes: bytes) -> IncrementalPdfFileWriter:
    try:
        return IncrementalPdfFileWriter(io.BytesIO(pdf_bytes), strict=False)
    except Exception as exc:  # pyHanko raises several parser error types
        raise SigningError(f"pdf: cannot be parsed for an incremental update ({exc})") from exc


def existing_signature_fields(pdf_bytes: bytes) -> dict[str, bool]:
    """Map each signature field's name to whether it is already signed."""
    reader = PdfFileReader(io.BytesIO(pdf_bytes), strict=False)
    return {
        name: value is not None for name, value, _ref in sig_fields.enumerate_sig_fields(reader, filled_status=None)
    }


def prepare_signature_fields(pdf_bytes: bytes, boxes: Mapping[str, Sequence]) -> bytes:
    """Add empty visible signature fields (name -> box) in one incremental update."""
    if not boxes:
        return pdf_bytes
    writer = _open_writer(pdf_bytes)
    present = existing_signature_fields(pdf_bytes)
    for name, box in boxes.items():
        if name in present:
            raise SigningError(f"field_name: signature field {name!r} already exists")
        page, x1, y1, x2, y2 = _check_box(name, box)
        sig_fields.append_signature_field(writer, sig_fields.SigFieldSpec(name, on_page=page, box=(x1, y1, x2, y2)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def load_signer(pkcs12_bytes: bytes, passphrase: str | bytes | None) -> signers.SimpleSigner:
    """Load a PKCS#12 into a pyHanko signer; a wrong passphrase or bad file is a SigningError."""
    if not pkcs12_bytes:
        raise SigningError("pkcs12: the certificate file is empty")
    pw = passphrase.encode() if isinstance(passphrase, str) else passphrase
    try:
        signer = signers.SimpleSigner.load_pkcs12_data(pkcs12_bytes, other_certs=(), passphrase=pw)
    except Exception as exc:
        raise SigningError(
            "pkcs12: cannot open the certificate file - wrong passphrase or not a PKCS#12 "
            "file containing a private key and certificate"
        ) from exc
    # pyHanko's loaders return None on some failures instead of raising: assert the result.
    if signer is None or signer.signing_cert is None or signer.signing_key is None:
        raise SigningError("pkcs12: the file holds no usable private key and certificate")
    return signer


# Debian's fonts-noto-cjk (scripts/install-system-deps.sh): a collection, of which pyHanko can
# embed only single faces, so the Simplified Chinese face is extracted once into a cache.
CJK_COLLECTIONS = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",)
CJK_FACE = "Noto Sans CJK SC"


def cjk_stamp_font(cache_dir: Path) -> Path | None:
    """An OpenType face covering Latin and CJK for signature stamps, or None where there is none.

    Extracted from the system's Noto Sans CJK collection into `cache_dir` on first use (about a
    second); later calls find the file.
    """
    target = Path(cache_dir) / "NotoSansCJKsc-Regular.otf"
    if target.is_file():
        return target

    for source in CJK_COLLECTIONS:
        if not Path(source).is_file():
            continue
        for font in TTCollection(source, lazy=True).fonts:
            if font["name"].getDebugName(1) == CJK_FACE:
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
                font.save(partial)
                partial.replace(target)  # atomic: a concurrent signer never reads half a font
                return target
    log.warning("no CJK font for signature stamps (looked for %s in %s)", CJK_FACE, ", ".join(CJK_COLLECTIONS))
    return None


def _font_covers(font_path: Path, text: str) -> bool:

    with TTFont(font_path, lazy=True) as font:
        cmap = font.getBestCmap() or {}
    return all(ord(ch) in cmap for ch in text if not ch.isspace())


def _stamp_text_style(signer_line: str, stamp_font: Path | str | None) -> tuple[str, TextBoxStyle | None]:
    """The signer line and the font to draw it in.

    Latin-1 text uses a standard PDF font (nothing embedded, fast). Other scripts use
    `stamp_font`, embedded as a subset, when it has every glyph; otherwise the stamp says where
    the name is (the record template prints it in any script above the signature box).
    """
    try:
        signer_line.encode("latin-1")
        return signer_line, None
    except UnicodeEncodeError:
        pass
    if stamp_font is not None and _font_covers(Path(stamp_font), signer_line):
        return signer_line, TextBoxStyle(font=GlyphAccumulatorFactory(str(stamp_font), font_size=10))
    return "signer: see name above", None


def sign_pdf(
    pdf_bytes: bytes,
    pkcs12_bytes: bytes,
    passphrase: str | bytes | None,
    field_name: str,
    signer_name: str,
    role: str,
    reason: str,
    box: Sequence | None = None,
    stamp_font: Path | str | None = None,
) -> bytes:
    """Append one PAdES B-B signature into ``field_name`` as an incremental update.

    The field must exist (see ``prepare_signature_fields``) unless ``box`` gives
    (page, x1, y1, x2, y2) in points to create it. The visible appearance shows the role,
    the signer and the signing time; a signer name outside Latin-1 needs ``stamp_font`` (an
    OpenType file with its glyphs, see ``cjk_stamp_font``).
    """
    if not field_name:
        raise SigningError("field_name: must be a non-empty string")
    signer = load_signer(pkcs12_bytes, passphrase)
    present = existing_signature_fields(pdf_bytes)
    if present.get(field_name):
        raise SigningError(f"field_name: signature field {field_name!r} is already signed")
    new_field_spec = None
    if field_name not in present:
        if box is None:
            raise SigningError(f"box: field {field_name!r} does not exist; give (page, x1, y1, x2, y2)")
        page, x1, y1, x2, y2 = _check_box(field_name, box)
        new_field_spec = sig_fields.SigFieldSpec(field_name, on_page=page, box=(x1, y1, x2, y2))

    role_label = ROLE_LABELS.get(role, role)
    cert_cn = signer.signing_cert.subject.native.get("common_name", "")
    signer_line, text_box_style = _stamp_text_style(cert_cn or signer_name, stamp_font)
    stamp_style = TextStampStyle(
        stamp_text=("Digitally signed (PAdES)\n%(role)s\n%(signer_line)s\n%(ts)s"),
        timestamp_format="%Y-%m-%d %H:%M:%S UTC",
        border_width=0,
        background=None,
        **({"text_box_style": text_box_style} if text_box_style is not None else {}),
    )
    meta = signers.PdfSignatureMetadata(
        field_name=field_name,
        md_algorithm="sha256",
        subfilter=sig_fields.SigSeedSubFilter.PADES,
        reason=f"{role_label}: {reason}" if reason else role_label,
        name=signer_name,
    )
    pdf_signer = signers.PdfSigner(meta, signer=signer, stamp_style=stamp_style, new_field_spec=new_field_spec)
    writer = _open_writer(pdf_bytes)
    try:
        out = pdf_signer.sign_pdf(
            writer,
            appearance_text_params={
                "role": role_label,
                "signer_line": signer_line,
            },
            in_place=False,
        )
    except SigningError:
        raise
    except Exception as exc:
        raise SigningError(f"pdf: signing field {field_name!r} failed ({exc})") from exc
    return out.getvalue()


# --------------------------------------------------------------------------- verification


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

    @property
    def ok(self) -> bool:
        """Intact, valid, trusted, and whatever was appended later only filled in (signed)
        form fields or added validation data - never changed the content."""
        return (
            self.intact
            and self.valid
            and self.trusted
            and self.docmdp_ok is not False
            and self.modification_level in ALLOWED_LATER_CHANGES
        )


@dataclass(frozen=True)
class VerificationReport:
    """All signatures of one PDF plus its hash (and, if known, whether kvselect issued it)."""

    sha256: str
    signatures: list[SignatureReport] = field(default_factory=list)
    error: str | None = None
    matches_known_record: bool | None = None  # None: no list of issued hashes was given

    @property
    def all_ok(self) -> bool:
        return self.error is None and bool(self.signatures) and all(s.ok for s in self.signatures)

    def as_dict(self) -> dict:
        data = asdict(self)
        for sig in data["signatures"]:
            if sig["signing_time"] is not None:
                sig["signing_time"] = sig["signing_time"].isoformat()
        data["all_ok"] = self.all_ok
        return data

    def as_text(self) -> str:
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
            when = s.signing_time.isoformat() if s.signing_time else "unknown"
            lines.append(
                f"#{i} field={s.field} signer={s.signer_common_name!r} time={when} "
                f"intact={s.intact} valid={s.valid} trusted={s.trusted} "
                f"coverage={s.coverage} whole_document={s.covers_whole_document} "
                f"modifications={s.modification_level}" + (f" error={s.error}" if s.error else "")
            )
        lines.append("result: " + ("ALL SIGNATURES OK" if self.all_ok else "NOT VERIFIED"))
        return "\n".join(lines)


def _asn1_cert(data: bytes) -> asn1_x509.Certificate:
    if data.lstrip().startswith(b"-----BEGIN"):
        data = x509.load_pem_x509_certificate(data).public_bytes(serialization.Encoding.DER)
    return asn1_x509.Certificate.load(data)


def _enum_name(value) -> str | None:
    return None if value is None else getattr(value, "name", str(value))


def verify_pdf(
    pdf_bytes: bytes,
    trust_roots: Iterable[bytes],
    known_hashes: Iterable[str] | None = None,
) -> VerificationReport:
    """Verify every signature against ``trust_roots`` (DER or PEM certificates).

    ``known_hashes`` (SHA-256 hex of PDFs kvselect issued) lets the caller say whether this
    exact file is one of them; verification itself needs no database.
    """
    digest = hashlib.sha256(pdf_bytes).hexdigest()
    known = None if known_hashes is None else digest in {h.lower() for h in known_hashes}
    try:
        roots = [_asn1_cert(r) for r in trust_roots]
    except Exception as exc:
        raise SigningError(f"trust_roots: not a DER or PEM certificate ({exc})") from exc
    try:
        reader = PdfFileReader(io.BytesIO(pdf_bytes), strict=False)
        embedded = list(reader.embedded_signatures)
    except Exception as exc:
        return VerificationReport(digest, [], f"not a readable PDF ({exc})", known)

    reports = []
    for sig in embedded:
        name = sig.field_name
        vc = ValidationContext(trust_roots=roots, allow_fetching=False)
        try:
            status = validate_pdf_signature(sig, signer_validation_context=vc)
        except Exception as exc:  # a damaged signature must fail, not crash the report
            reports.append(
                SignatureReport(
                    name, None, None, False, False, False, None, False, None, None, None, f"{type(exc).__name__}: {exc}"
                )
            )
            continue
        coverage = _enum_name(status.coverage)
        cn = status.signing_cert.subject.native.get("common_name") if status.signing_cert else None
        reason = sig.sig_object.get("/Reason")
        reports.append(
            SignatureReport(
                field=name,
                signer_common_name=cn,
                signing_time=status.signer_reported_dt,
                intact=bool(status.intact),
                valid=bool(status.valid),
                trusted=bool(status.trusted),
                coverage=coverage,
                covers_whole_document=coverage == "ENTIRE_FILE",
                modification_level=_enum_name(status.modification_level),
                docmdp_ok=status.docmdp_ok,
                reason=str(reason) if reason is not None else None,
            )
        )
    return VerificationReport(digest, reports, None, known)


# --------------------------------------------------------------------------- development CA


@dataclass(frozen=True)
class DevCertificatePaths:
    ca_certificate: Path  # PEM; give it to verify_pdf as a trust root
    pkcs12: dict[str, Path]  # role -> PKCS#12 file protected by the passphrase


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, DEV_ORGANISATION),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
        ]
    )


def issue_dev_certificates(
    out_dir: str | Path,
    names: Mapping[str, str],
    passphrase: str,
    valid_days: int = 825,
) -> DevCertificatePaths:
    """Create a development CA and a PKCS#12 per role (role -> person name) under ``out_dir``.

    Every subject carries "DEVELOPMENT" so nobody mistakes these for production identities.
    """
    if not names:
        raise SigningError("names: give at least one role -> person name")
    if not passphrase:
        raise SigningError("passphrase: must not be empty")
    for role, person in names.items():
        if not person or not str(person).strip():
            raise SigningError(f"names.{role}: person name must not be empty")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=valid_days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(DEV_CA_COMMON_NAME, "development certificate authority")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = out / "dev-ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    p12_paths: dict[str, Path] = {}
    for role, person in names.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(str(person), f"{ROLE_LABELS.get(role, role)} (DEVELOPMENT)"))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                # digitalSignature + contentCommitment (non-repudiation)
                x509.KeyUsage(True, True, False, False, False, False, False, False, False),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False)
            .sign(ca_key, hashes.SHA256())
        )
        blob = pkcs12.serialize_key_and_certificates(
            name=f"{role}: {person}".encode(),
            key=key,
            cert=cert,
            cas=[ca_cert],
            encryption_algorithm=serialization.BestAvailableEncryption(passphrase.encode()),
        )
        path = out / f"{role}.p12"
        path.write_bytes(blob)
        path.chmod(0o600)
        p12_paths[role] = path
    return DevCertificatePaths(ca_path, p12_paths)
