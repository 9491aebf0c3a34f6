"""PAdES signing and verification of decision-record PDFs, and a development CA.

This is the ONLY module that imports pyHanko (pinned to 0.38.* in pyproject.toml): everything
pyHanko-specific stays behind the pure functions below so an upgrade touches one file.

- ``certificate_info``, ``pkcs12_certificate`` and ``trust_root_of`` read a certificate's public
  facts (the SHA-256 fingerprint each signature field is checked against) and which trust root
  certifies it: what an owner's enrolment stores.
- ``prepare_signature_fields`` adds empty, visible signature fields at the boxes the record
  template laid out (one incremental update), so each owner signs an existing field by name.
- ``sign_pdf`` appends one PAdES baseline signature (subfilter ETSI.CAdES.detached) as an
  incremental update with a visible box showing "signed", the role, the signer and the time; it
  refuses a key whose certificate is not the expected (enrolled) one. B-B by default; B-T with an
  RFC 3161 timestamp, B-LT with the chain and revocation data in the document's DSS. Owners sign
  in sequence (business, platform, security), an organisational seal last.
- ``verify_pdf`` reports every signature, offline: intact, valid, trusted and by which root (a
  development CA flagged), signed by the owner named for its field, the coverage / modification
  level, the PAdES level reached, and the document's SHA-256. The modification analysis is
  pyHanko's in linear time (see "modification analysis" below), and stricter about metadata: after
  a signature, only the modification dates and the producer may change.
- ``issue_dev_certificates`` creates a clearly-labelled development CA (with its CRL and a
  development time-stamping authority) and one PKCS#12 per owner; ``issue_certificate`` issues
  one more from it (never for production).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import gc
import hashlib
import io
import logging
import os
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from asn1crypto import cms
from asn1crypto import crl as asn1_crl
from asn1crypto import keys as asn1_keys
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from fontTools.ttLib import TTCollection, TTFont
from lxml import etree
from pkcs11.exceptions import PinIncorrect, PinLenRange, PKCS11Error
from pyhanko.config.pkcs11 import TokenCriteria
from pyhanko.pdf_utils import generic, misc
from pyhanko.pdf_utils.decode_limits import DecodePurpose
from pyhanko.pdf_utils.font.opentype import GlyphAccumulatorFactory
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import HistoricalResolver, PdfFileReader, RawPdfPath
from pyhanko.pdf_utils.text import TextBoxStyle
from pyhanko.sign import fields as sig_fields
from pyhanko.sign import signers
from pyhanko.sign.diff_analysis import (
    DEFAULT_DIFF_POLICY,
    CatalogModificationRule,
    DocInfoRule,
    DSSCompareRule,
    FormUpdatingRule,
    GenericFieldModificationRule,
    MetadataUpdateRule,
    ModificationLevel,
    ObjectStreamRule,
    SigFieldCreationRule,
    SigFieldModificationRule,
    StandardDiffPolicy,
    SuspiciousModification,
    XrefStreamRule,
)
from pyhanko.sign.diff_analysis.constants import ACROFORM_EXEMPT_STRICT_COMPARISON, ROOT_EXEMPT_STRICT_COMPARISON
from pyhanko.sign.fields import MDPPerm
from pyhanko.sign.general import find_unique_cms_attribute
from pyhanko.sign.pkcs11 import PKCS11Signer, open_pkcs11_session
from pyhanko.sign.signers.pdf_byterange import PreparedByteRangeDigest
from pyhanko.sign.signers.pdf_signer import PdfTBSDocument, PostSignInstructions, PreSignValidationStatus
from pyhanko.sign.timestamps import DummyTimeStamper, HTTPTimeStamper
from pyhanko.sign.validation import EmbeddedPdfSignature, validate_pdf_signature, validate_pdf_timestamp
from pyhanko.sign.validation.dss import DocumentSecurityStore
from pyhanko.sign.validation.errors import NoDSSFoundError
from pyhanko.sign.validation.generic_cms import validate_sig_integrity
from pyhanko.stamp import TextStampStyle
from pyhanko_certvalidator import CertificateValidator, ValidationContext
from pyhanko_certvalidator.errors import RevokedError
from pyhanko_certvalidator.registry import SimpleCertificateStore

from selection.domain import record_integrity as integrity
from selection.domain.record_integrity import Finding, RevisionEntry, RevisionFacts, SigningOrder
from selection.domain.roles import ROLE_LABELS

log = logging.getLogger(__name__)

DEV_CA_COMMON_NAME = "kvselect DEVELOPMENT CA \u2014 not for production"
DEV_TSA_COMMON_NAME = "kvselect DEVELOPMENT TSA \u2014 not for production"
DEV_ORGANISATION = "kvselect development (not for production)"
SEAL_FIELD = "seal"  # the organisational seal's field: signed last, by a configured seal certificate
# What may be appended after a signature without voiding it (pyHanko ModificationLevel names): later
# signatures after any but the last; after the last, only validation data and document timestamps.
ALLOWED_LATER_CHANGES = ("NONE", "LTA_UPDATES", "FORM_FILLING")
ALLOWED_AFTER_LAST = ("NONE", "LTA_UPDATES")
# The first signature certifies the document (DocMDP): later signatures in the existing fields and
# validation data stay allowed; conforming readers flag any other change.
CERTIFICATION_PERMISSION = MDPPerm.FILL_FORMS

# A box is (page index starting at 0, x1, y1, x2, y2) in PDF points, origin bottom-left.
Box = tuple[int, float, float, float, float]


class SigningError(ValueError):
    """Signing or certificate handling failed; the message says which input and why."""


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class CertificateInfo:
    """The public facts of one X.509 certificate, as kvselect shows and compares them."""

    sha256: str  # of the DER encoding: what each signature field is checked against
    subject: str  # RFC 4514
    common_name: str
    issuer: str
    not_before: dt.datetime
    not_after: dt.datetime
    is_ca: bool
    development: bool  # issued by (or is) a kvselect development CA: never for procurement
    pem: str

    @property
    def short(self) -> str:
        return f"{self.common_name or self.subject} (SHA-256 {self.sha256[:16]}…)"


def _asn1_cert(data: bytes) -> asn1_x509.Certificate:
    if data.lstrip().startswith(b"-----BEGIN"):
        data = x509.load_pem_x509_certificate(data).public_bytes(serialization.Encoding.DER)
    return asn1_x509.Certificate.load(data)


def _asn1_crl(data: bytes) -> asn1_crl.CertificateList:
    if data.lstrip().startswith(b"-----BEGIN"):
        data = x509.load_pem_x509_crl(data).public_bytes(serialization.Encoding.DER)
    return asn1_crl.CertificateList.load(data)


def _subject_line(cert: asn1_x509.Certificate) -> str:
    return cert.subject.native.get("common_name") or cert.subject.human_friendly


def _is_development(cert: x509.Certificate) -> bool:
    def marked(name: x509.Name) -> bool:
        organisations = [a.value for a in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        common_names = [a.value for a in name.get_attributes_for_oid(NameOID.COMMON_NAME)]
        return DEV_ORGANISATION in organisations or any("DEVELOPMENT CA" in str(cn) for cn in common_names)

    return marked(cert.issuer) or marked(cert.subject)


def _info(cert: x509.Certificate) -> CertificateInfo:
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    common_names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return CertificateInfo(
        sha256=cert.fingerprint(hashes.SHA256()).hex(),
        subject=cert.subject.rfc4514_string(),
        common_name=str(common_names[0].value) if common_names else "",
        issuer=cert.issuer.rfc4514_string(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        is_ca=is_ca,
        development=_is_development(cert),
        pem=cert.public_bytes(serialization.Encoding.PEM).decode("ascii"),
    )


def certificate_info(data: bytes) -> CertificateInfo:
    """The first certificate of a PEM (or DER) file; a SigningError naming ``certificate`` otherwise."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            cert = x509.load_pem_x509_certificates(data)[0]
        else:
            cert = x509.load_der_x509_certificate(data)
    except ValueError as exc:
        raise SigningError("certificate: not a PEM or DER X.509 certificate") from exc
    return _info(cert)


def bundle_certificates(data: bytes) -> list[bytes]:
    """Every certificate of a PEM bundle (or the one DER certificate), DER-encoded."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return [c.public_bytes(serialization.Encoding.DER) for c in x509.load_pem_x509_certificates(data)]
        return [x509.load_der_x509_certificate(data).public_bytes(serialization.Encoding.DER)]
    except ValueError as exc:
        raise SigningError("certificate: not a PEM or DER X.509 certificate") from exc


def pkcs12_certificate(pkcs12_bytes: bytes, passphrase: str | bytes | None) -> CertificateInfo:
    """The signing certificate inside a PKCS#12 (a wrong passphrase is a SigningError naming pkcs12)."""
    signer = load_signer(pkcs12_bytes, passphrase)
    return certificate_info(signer.signing_cert.dump())


def trust_root_of(
    certificate: bytes,
    trust_roots: Iterable[bytes],
    intermediates: Iterable[bytes] = (),
    crls: Iterable[bytes] = (),
    *,
    allow_fetching: bool = False,
) -> CertificateInfo | None:
    """The root among ``trust_roots`` that certifies ``certificate`` for signing (digital signature
    or non-repudiation) now, through ``intermediates`` if needed; None when none does.

    ``crls`` (DER or PEM) are checked: a certificate one of them revokes is a SigningError naming
    ``certificate`` and saying when and why. Missing revocation data is not an error here (soft-fail);
    nothing is fetched unless ``allow_fetching``."""
    roots = [_asn1_cert(r) for r in trust_roots]
    if not roots:
        return None
    context = ValidationContext(
        trust_roots=roots,
        crls=[_asn1_crl(c) for c in crls],
        allow_fetching=allow_fetching,
        revocation_mode="soft-fail",
    )
    validator = CertificateValidator(
        _asn1_cert(certificate), intermediate_certs=[_asn1_cert(c) for c in intermediates], validation_context=context
    )
    path = None
    for usage in ("digital_signature", "non_repudiation"):
        try:
            path = _run_coroutine(validator.async_validate_usage({usage}))
            break
        except RevokedError as exc:
            raise SigningError(f"certificate: revoked ({exc})") from exc
        except Exception:  # any path-building or usage failure: not certified by these roots for this usage
            continue
    return _anchor_info(path) if path is not None else None


def _run_coroutine(coroutine: Any) -> Any:
    """Run one of certvalidator's coroutines to its end from synchronous code, also from a thread whose
    event loop is running (an ASGI server, a browser-driven test), where asyncio.run() refuses."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _anchor_info(path) -> CertificateInfo | None:
    """The trust anchor of a certvalidator path, when it is a certificate."""
    anchor = getattr(path, "trust_anchor", None)
    cert = getattr(getattr(anchor, "authority", None), "certificate", None)
    return certificate_info(cert.dump()) if cert is not None else None


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


class _OfflineEmbeddingIsIntended(logging.Filter):
    """kvselect embeds the revocation data it holds (the CRLs it is given) without fetching on
    purpose; pyHanko warns about that on every signature."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "fetching is not allowed" not in record.getMessage()


logging.getLogger("pyhanko.sign.signers.pdf_signer").addFilter(_OfflineEmbeddingIsIntended())


@dataclass(frozen=True)
class ValidationMaterial:
    """What a signature embeds for long-term validation (PAdES B-LT): the signer's chain up to one
    of ``trust_roots`` and its revocation data (``crls``, DER or PEM; fetched from the CA only when
    ``allow_fetching``). Without revocation data the chain is embedded and the level stays B-T."""

    trust_roots: Sequence[bytes]
    crls: Sequence[bytes] = ()
    allow_fetching: bool = False

    def validation_context(self) -> ValidationContext:
        return ValidationContext(
            trust_roots=[_asn1_cert(r) for r in self.trust_roots],
            crls=[_asn1_crl(c) for c in self.crls],
            allow_fetching=self.allow_fetching,
        )


def http_timestamper(url: str):
    """An RFC 3161 time-stamping client for ``url`` (pass it to ``sign_pdf`` as ``timestamper``)."""
    if not url.startswith(("http://", "https://")):
        raise SigningError(f"tsa_url: must be an http(s) URL, got {url!r}")
    return HTTPTimeStamper(url)


def dev_timestamper(cert_dir: str | Path):
    """The development TSA issued by ``issue_dev_certificates`` (in-process: no network, dev only)."""
    folder = Path(cert_dir)
    try:
        tsa_cert = _asn1_cert((folder / DEV_TSA_CERT).read_bytes())
        key = serialization.load_pem_private_key((folder / DEV_TSA_KEY).read_bytes(), password=None)
        ca = _asn1_cert((folder / DEV_CA_CERT).read_bytes())
    except (OSError, ValueError) as exc:
        raise SigningError(f"tsa: no development time-stamping authority under {folder} ({exc})") from exc
    tsa_key = asn1_keys.PrivateKeyInfo.load(
        key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return DummyTimeStamper(tsa_cert=tsa_cert, tsa_key=tsa_key, certs_to_embed=SimpleCertificateStore.from_certs([ca]))


def _signature_setup(
    field_name: str,
    signer_name: str,
    role: str,
    reason: str,
    certificate: asn1_x509.Certificate,
    stamp_font: Path | str | None,
    validation_material: ValidationMaterial | None = None,
    *,
    certify: bool = False,
) -> tuple[signers.PdfSignatureMetadata, TextStampStyle, dict[str, str]]:
    """The signature dictionary's metadata, the visible stamp and its text for one owner's field; the
    document's first signature (``certify``) is its certification signature (DocMDP, form filling
    and signing allowed after it)."""
    role_label = ROLE_LABELS.get(role, role)
    cert_cn = certificate.subject.native.get("common_name", "")
    signer_line, text_box_style = _stamp_text_style(cert_cn or signer_name, stamp_font)
    stamp_style = TextStampStyle(
        stamp_text=("Digitally signed (PAdES)\n%(role)s\n%(signer_line)s\n%(ts)s"),
        timestamp_format="%Y-%m-%d %H:%M:%S UTC",
        border_width=0,
        background=None,
        **({"text_box_style": text_box_style} if text_box_style is not None else {}),
    )
    ltv = {}
    if validation_material is not None:
        ltv = {"embed_validation_info": True, "validation_context": validation_material.validation_context()}
    meta = signers.PdfSignatureMetadata(
        field_name=field_name,
        md_algorithm="sha256",
        subfilter=sig_fields.SigSeedSubFilter.PADES,
        reason=f"{role_label}: {reason}" if reason else role_label,
        name=signer_name,
        certify=certify,
        docmdp_permissions=CERTIFICATION_PERMISSION,
        **ltv,
    )
    return meta, stamp_style, {"role": role_label, "signer_line": signer_line}


def _new_field_spec(pdf_bytes: bytes, field_name: str, box: Sequence | None):
    """None when ``field_name`` is an empty field of the document; its spec when ``box`` creates it."""
    if not field_name:
        raise SigningError("field_name: must be a non-empty string")
    present = existing_signature_fields(pdf_bytes)
    if present.get(field_name):
        raise SigningError(f"field_name: signature field {field_name!r} is already signed")
    if field_name in present:
        return None
    if box is None:
        raise SigningError(f"box: field {field_name!r} does not exist; give (page, x1, y1, x2, y2)")
    page, x1, y1, x2, y2 = _check_box(field_name, box)
    return sig_fields.SigFieldSpec(field_name, on_page=page, box=(x1, y1, x2, y2))


def _check_expected(certificate: asn1_x509.Certificate, expected_sha256: str | None, field_name: str, what: str):
    if expected_sha256 is None:
        return
    actual = certificate.sha256.hex()
    if actual != expected_sha256.lower():
        raise SigningError(
            f"{what}: this certificate ({_subject_line(certificate)}, SHA-256 {actual[:16]}…) is not "
            f"the enrolled certificate for field {field_name!r} (SHA-256 {expected_sha256[:16]}…)"
        )


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
    *,
    expected_certificate_sha256: str | None = None,
    timestamper=None,
    validation_material: ValidationMaterial | None = None,
) -> bytes:
    """Append one PAdES signature into ``field_name`` with the key of a PKCS#12, as an incremental update.

    The field must exist (see ``prepare_signature_fields``) unless ``box`` gives
    (page, x1, y1, x2, y2) in points to create it. The visible appearance shows the role,
    the signer and the signing time; a signer name outside Latin-1 needs ``stamp_font`` (an
    OpenType file with its glyphs, see ``cjk_stamp_font``).

    ``expected_certificate_sha256`` refuses any key whose certificate is not that one (an owner
    signs only with their enrolled certificate). With a ``timestamper`` (``http_timestamper``,
    ``dev_timestamper``) the signature carries an RFC 3161 timestamp (PAdES B-T); with
    ``validation_material`` the chain and revocation data follow in the document's DSS (B-LT).
    """
    if not field_name:
        raise SigningError("field_name: must be a non-empty string")
    signer = load_signer(pkcs12_bytes, passphrase)
    _check_expected(signer.signing_cert, expected_certificate_sha256, field_name, "pkcs12")
    return sign_pdf_with(
        pdf_bytes,
        signer,
        field_name,
        signer_name,
        role,
        reason,
        box,
        stamp_font,
        timestamper=timestamper,
        validation_material=validation_material,
    )


def sign_pdf_with(
    pdf_bytes: bytes,
    signer: signers.Signer,
    field_name: str,
    signer_name: str,
    role: str,
    reason: str,
    box: Sequence | None = None,
    stamp_font: Path | str | None = None,
    *,
    timestamper=None,
    validation_material: ValidationMaterial | None = None,
) -> bytes:
    """``sign_pdf`` with a signer already opened: a PKCS#12's (``load_signer``) or a token's (``pkcs11_session``)."""
    new_field_spec = _new_field_spec(pdf_bytes, field_name, box)
    meta, stamp_style, text = _signature_setup(
        field_name,
        signer_name,
        role,
        reason,
        signer.signing_cert,
        stamp_font,
        validation_material,
        certify=not any(existing_signature_fields(pdf_bytes).values()),
    )
    pdf_signer = signers.PdfSigner(
        meta, signer=signer, stamp_style=stamp_style, new_field_spec=new_field_spec, timestamper=timestamper
    )
    writer = _open_writer(pdf_bytes)
    try:
        out = pdf_signer.sign_pdf(writer, appearance_text_params=text, in_place=False)
    except SigningError:
        raise
    except PKCS11Error as exc:
        raise SigningError(f"token: signing field {field_name!r} failed ({type(exc).__name__}: {exc})") from exc
    except Exception as exc:
        raise SigningError(f"pdf: signing field {field_name!r} failed ({exc})") from exc
    return out.getvalue()


def add_document_timestamp(
    pdf_bytes: bytes, *, timestamper, validation_material: ValidationMaterial | None = None
) -> bytes:
    """Append a PAdES document timestamp (and the TSA's validation data in the DSS): the long-term
    archival update (LTA) a signed record may receive after its last signature and still verify."""
    if timestamper is None:
        raise SigningError("timestamper: a document timestamp needs a time-stamping authority")
    context = validation_material.validation_context() if validation_material is not None else None
    stamper = signers.PdfTimeStamper(timestamper, field_name=f"doc-timestamp-{os.urandom(4).hex()}")
    try:
        out = stamper.timestamp_pdf(_open_writer(pdf_bytes), MD_ALGORITHM, validation_context=context, in_place=False)
    except Exception as exc:
        raise SigningError(f"pdf: the document timestamp failed ({exc})") from exc
    return out.getvalue()


# --------------------------------------------------------------------------- PKCS#11 tokens and HSMs


@dataclass(frozen=True)
class Pkcs11Key:
    """Where a signing key lives on a PKCS#11 token (smart card, YubiKey, HSM, SoftHSM). Nothing secret:
    the PIN is given each time the key is used."""

    module: str  # path to the PKCS#11 module (.so), e.g. /usr/lib/softhsm/libsofthsm2.so
    key_label: str
    token_label: str | None = None  # the token to use, by label ...
    slot: int | None = None  # ... or by slot number
    cert_label: str | None = None  # the certificate object on the token; default: the key's label


@contextmanager
def pkcs11_session(key: Pkcs11Key, pin: str | None, certificate: bytes | None = None) -> Iterator[signers.Signer]:
    """A pyHanko signer for ``key``, logged in with ``pin``; the session is closed on exit.

    ``certificate`` (PEM or DER) is the signer's certificate when the token holds only the key;
    otherwise it is read from the token (``cert_label``, default the key's label). A wrong PIN, a
    missing module, token or key is a SigningError naming ``pin``, ``module``, ``token`` or ``key_label``.
    """
    if not Path(key.module).is_file():
        raise SigningError(f"module: no PKCS#11 module at {key.module}")
    criteria = TokenCriteria(label=key.token_label) if key.token_label else None
    try:
        session = open_pkcs11_session(key.module, slot_no=key.slot, token_criteria=criteria, user_pin=pin)
    except (PinIncorrect, PinLenRange) as exc:
        raise SigningError("pin: the token refused the PIN (wrong PIN): nothing was signed") from exc
    except PKCS11Error as exc:
        where = f"label {key.token_label!r}" if key.token_label else f"slot {key.slot}"
        raise SigningError(
            f"token: cannot open the token with {where} in {key.module} ({type(exc).__name__}: {exc})"
        ) from exc
    except Exception as exc:  # pyHanko's own "no token matching" error and the module loader's
        where = f"label {key.token_label!r}" if key.token_label else f"slot {key.slot}"
        raise SigningError(f"token: no usable token with {where} in {key.module} ({exc})") from exc
    try:
        try:
            signer = PKCS11Signer(
                session,
                key_label=key.key_label,
                cert_label=key.cert_label or key.key_label,
                signing_cert=_asn1_cert(certificate) if certificate else None,
                # hash here, sign the digest on the token (CKM_ECDSA, CKM_RSA_PKCS): what every token
                # offers; SoftHSM2 and many cards lack the combined CKM_ECDSA_SHA256
                use_raw_mechanism=True,
            )
            if signer.signing_cert is None:
                raise SigningError(f"key_label: no certificate on the token for key {key.key_label!r}")
        except SigningError:
            raise
        except Exception as exc:  # the key or certificate object is missing, or ambiguous
            raise SigningError(f"key_label: {key.key_label!r} on the token: {exc}") from exc
        yield signer
    finally:
        session.close()


# --------------------------------------------------------------------------- owner-side signing
#
# pyHanko's interrupted signing: the server prepares the revision that holds the owner's signature
# (its appearance, the signature dictionary, a reserved /Contents) and the CMS signed attributes over
# that revision's /ByteRange digest; the owner signs those attributes on their own machine (token or
# local PKCS#12) and returns the CMS; the server checks it and embeds it. The key never leaves the owner.

# Hex characters reserved for the CMS in the prepared revision: 16 KiB of DER, room for the owner's
# chain and the RFC 3161 timestamp token the server adds (a CMS that does not fit is refused).
RESERVED_SIGNATURE_BYTES = 32768
MD_ALGORITHM = "sha256"


@dataclass(frozen=True)
class PreparedSignature:
    """One owner's signature revision, ready for its CMS: what the server keeps until it comes back."""

    pdf: bytes  # the record with the owner's signature dictionary and a zero-filled /Contents
    document_digest: bytes  # SHA-256 over the revision's /ByteRange
    signed_attributes: bytes  # DER of the CMS signed attributes the owner signs (messageDigest = document_digest)
    reserved_start: int
    reserved_end: int


def prepare_owner_signature(
    pdf_bytes: bytes,
    certificate: bytes,
    field_name: str,
    signer_name: str,
    role: str,
    reason: str,
    stamp_font: Path | str | None = None,
) -> PreparedSignature:
    """Prepare ``field_name``'s signature for the owner of ``certificate`` (PEM or DER), who signs it elsewhere."""
    if not field_name:
        raise SigningError("field_name: must be a non-empty string")
    present = existing_signature_fields(pdf_bytes)
    if field_name not in present:
        raise SigningError(f"field_name: the record has no signature field {field_name!r}")
    if present[field_name]:
        raise SigningError(f"field_name: signature field {field_name!r} is already signed")
    try:
        cert = _asn1_cert(certificate)
    except ValueError as exc:
        raise SigningError("certificate: not a PEM or DER X.509 certificate") from exc
    placeholder = signers.ExternalSigner(
        signing_cert=cert, cert_registry=SimpleCertificateStore.from_certs([cert]), signature_value=bytes(512)
    )
    meta, stamp_style, text = _signature_setup(
        field_name, signer_name, role, reason, cert, stamp_font, certify=not any(present.values())
    )
    pdf_signer = signers.PdfSigner(meta, signer=placeholder, stamp_style=stamp_style)

    async def prepare():
        digest, _tbs, output = await pdf_signer.async_digest_doc_for_signing(
            _open_writer(pdf_bytes),
            existing_fields_only=True,
            bytes_reserved=RESERVED_SIGNATURE_BYTES,
            appearance_text_params=text,
        )
        attributes = await placeholder.signed_attrs(digest.document_digest, MD_ALGORITHM, use_pades=True)
        return digest, attributes, output

    try:
        digest, attributes, output = _run_coroutine(prepare())
    except SigningError:
        raise
    except Exception as exc:
        raise SigningError(f"pdf: preparing field {field_name!r} failed ({exc})") from exc
    return PreparedSignature(
        pdf=output.getvalue(),
        document_digest=digest.document_digest,
        signed_attributes=attributes.dump(),
        reserved_start=digest.reserved_region_start,
        reserved_end=digest.reserved_region_end,
    )


def message_digest_of(signed_attributes: bytes) -> bytes:
    """The messageDigest (the document digest) that DER signed attributes commit to."""
    try:
        attributes = cms.CMSAttributes.load(signed_attributes)
        return bytes(find_unique_cms_attribute(attributes, "message_digest").native)
    except Exception as exc:
        raise SigningError("signed_attributes: not DER CMS signed attributes with a messageDigest") from exc


def sign_attributes(signer: signers.Signer, signed_attributes: bytes) -> bytes:
    """The owner's side: a CMS (DER) over the prepared ``signed_attributes``, made with ``signer``'s key
    (``load_signer`` for a local PKCS#12, ``pkcs11_session`` for a token). Refuses attributes prepared
    for another certificate, so an owner sees the mistake before uploading."""
    message_digest_of(signed_attributes)
    attributes = cms.CMSAttributes.load(signed_attributes)
    named = _signing_certificate_hash(attributes)
    if named is not None and named != hashlib.sha256(signer.signing_cert.dump()).digest():
        raise SigningError(
            "certificate: these attributes were prepared for another certificate than this key's "
            f"({_subject_line(signer.signing_cert)}): prepare the signature again, or use your enrolled key"
        )
    try:
        content = _run_coroutine(signer.async_sign_prescribed_attributes(MD_ALGORITHM, attributes))
    except SigningError:
        raise
    except PKCS11Error as exc:
        raise SigningError(f"token: signing failed ({type(exc).__name__}: {exc})") from exc
    return content.dump()


def _signing_certificate_hash(attributes) -> bytes | None:
    """The SHA-256 of the certificate the signing-certificate-v2 attribute names (None: not there)."""
    try:
        value = find_unique_cms_attribute(attributes, "signing_certificate_v2")
        ess = value["certs"][0]
    except Exception:
        return None
    algorithm = ess["hash_algorithm"]["algorithm"].native
    return bytes(ess["cert_hash"].native) if algorithm == "sha256" else None


def _owner_signer_info(cms_bytes: bytes) -> tuple[cms.SignerInfo, asn1_x509.Certificate, list]:
    """The one SignerInfo of an uploaded CMS, the certificate it names and the CMS's other certificates."""
    try:
        content = cms.ContentInfo.load(cms_bytes)
        if content["content_type"].native != "signed_data":
            raise ValueError("not SignedData")
        signed_data = content["content"]
        infos = list(signed_data["signer_infos"])
        certs = [c.chosen for c in signed_data["certificates"] or [] if c.name == "certificate"]
        content.native  # noqa: B018 - parse everything now: a truncated or damaged CMS fails here
    except Exception as exc:
        raise SigningError("cms: not a DER CMS SignedData (the .p7s kvselect-sign writes)") from exc
    if len(infos) != 1:
        raise SigningError(f"cms: holds {len(infos)} signatures, expected exactly one")
    info = infos[0]
    sid = info["sid"]
    for cert in certs:
        if sid.name == "issuer_and_serial_number":
            if cert.issuer == sid.chosen["issuer"] and cert.serial_number == sid.chosen["serial_number"].native:
                return info, cert, certs
        elif cert.key_identifier == sid.chosen.native:
            return info, cert, certs
    raise SigningError("cms: the signer's certificate is not in the CMS")


def check_owner_signature(
    prepared: PreparedSignature, cms_bytes: bytes, expected_certificate_sha256: str, older_digests: Iterable[bytes] = ()
) -> tuple[cms.SignerInfo, asn1_x509.Certificate, list]:
    """Refuse an uploaded CMS unless it is the enrolled certificate's valid signature over exactly the
    prepared attributes; each refusal names ``cms`` and says which check failed."""
    info, cert, certs = _owner_signer_info(cms_bytes)
    actual = cert.sha256.hex()
    if actual != expected_certificate_sha256.lower():
        raise SigningError(
            f"cms: signed with {_subject_line(cert)} (certificate SHA-256 {actual[:16]}…), which is not the "
            f"enrolled certificate of this owner (SHA-256 {expected_certificate_sha256[:16]}…): sign with your "
            "enrolled key"
        )
    theirs = info["signed_attrs"]
    try:
        digest = bytes(find_unique_cms_attribute(theirs, "message_digest").native)
    except Exception as exc:
        raise SigningError("cms: the signature has no messageDigest attribute") from exc
    if digest != prepared.document_digest:
        if digest in set(older_digests):
            raise SigningError(
                "cms: this signature is over an older revision of the record, prepared before the one now "
                "waiting for your signature: fetch the current attributes and sign again"
            )
        raise SigningError(
            f"cms: this signature is over another document digest ({digest.hex()[:16]}…), not the revision "
            f"prepared for you ({prepared.document_digest.hex()[:16]}…)"
        )
    if theirs.untag().dump() != cms.CMSAttributes.load(prepared.signed_attributes).dump():
        raise SigningError("cms: the signed attributes differ from the ones kvselect prepared: sign them unchanged")
    if info["digest_algorithm"]["algorithm"].native != MD_ALGORITHM:
        raise SigningError(f"cms: digest algorithm {info['digest_algorithm']['algorithm'].native}, expected sha256")
    try:
        _intact, valid = validate_sig_integrity(info, cert, "data", prepared.document_digest)
    except Exception as exc:
        raise SigningError(f"cms: the signature cannot be checked ({exc})") from exc
    if not valid:
        raise SigningError("cms: the signature does not verify with the enrolled certificate's public key")
    return info, cert, certs


def check_prepared_revision(prepared: PreparedSignature, base: bytes | None = None) -> None:
    """Refuse a prepared revision whose bytes are not the ones prepared: its /ByteRange digest must be
    the digest kept when it was prepared (what the owner's CMS commits to), and it must extend ``base``
    (the record it was prepared on), with the reserved /Contents still empty. Whoever can write the
    storage between prepare and upload cannot get an owner's signature embedded into another revision."""
    data, start, end = prepared.pdf, prepared.reserved_start, prepared.reserved_end
    if not 0 < start < end <= len(data) or data[start : start + 1] != b"<" or data[end - 1 : end] != b">":
        raise SigningError("prepared: the prepared revision no longer has its reserved signature space where it was")
    if set(data[start + 1 : end - 1]) - {ord("0")}:
        raise SigningError("prepared: the prepared revision's signature space is not empty")
    if base is not None and not data.startswith(base):
        raise SigningError("prepared: the prepared revision does not extend the record it was prepared on")
    digest = hashlib.new(MD_ALGORITHM, data[:start] + data[end:]).digest()
    if digest != prepared.document_digest:
        raise SigningError(
            f"prepared: the prepared revision changed since it was prepared (its digest is {digest.hex()[:16]}…, "
            f"the one kept when it was prepared {prepared.document_digest.hex()[:16]}…): nothing was embedded; "
            "prepare the signature again"
        )


def _signer_chain(cert: asn1_x509.Certificate, certs: Sequence, context: ValidationContext | None) -> list:
    """The certificates between the signer and its trust root, out of those the owner's CMS carries: the
    validated path's intermediates with a validation context, else the issuer chain by name. Nothing else
    the owner put in the CMS reaches the record."""
    if context is not None:
        validator = CertificateValidator(cert, intermediate_certs=list(certs), validation_context=context)
        try:
            path = _run_coroutine(validator.async_validate_usage(set()))
        except Exception:  # refused later with pyHanko's own reason, when the long-term data is collected
            path = None
        if path is not None:
            return [c for c in path.iter_certs(include_root=False) if c.sha256 != cert.sha256]
    chain, current = [], cert
    by_subject = {c.subject.dump(): c for c in certs if c.self_signed == "no" and c.sha256 != cert.sha256}
    while current.issuer.dump() in by_subject and len(chain) < 8:
        current = by_subject.pop(current.issuer.dump())
        chain.append(current)
    return chain


def _check_embedded(output: bytes, prepared: PreparedSignature) -> None:
    """The embedded signature covers exactly the prepared revision and its digest (what was checked)."""
    reader = PdfFileReader(io.BytesIO(output), strict=False)
    expected = [0, prepared.reserved_start, prepared.reserved_end, len(prepared.pdf) - prepared.reserved_end]
    for sig in reader.embedded_signatures:
        if list(sig.byte_range) == expected:
            if sig.compute_digest(MD_ALGORITHM) != prepared.document_digest:
                break
            return
    raise SigningError("cms: the embedded signature does not cover the prepared revision: nothing was stored")


def finish_owner_signature(
    prepared: PreparedSignature,
    cms_bytes: bytes,
    expected_certificate_sha256: str,
    *,
    base: bytes | None = None,
    older_digests: Iterable[bytes] = (),
    timestamper=None,
    validation_material: ValidationMaterial | None = None,
) -> bytes:
    """Embed an owner's CMS into the revision prepared for it, after ``check_prepared_revision`` (the
    revision is byte for byte the one prepared on ``base``) and ``check_owner_signature``.

    The owner's signed attributes and signature value are embedded as signed, with the signer's
    certificate chain only (other certificates in the CMS are dropped); the server adds what PAdES lets
    a third party add: the RFC 3161 signature timestamp (an unsigned attribute, B-T) and the chain and
    revocation data in the DSS (B-LT), as ``sign_pdf`` does. The result is checked to carry the
    signature over the prepared digest before it is returned.
    """
    check_prepared_revision(prepared, base)
    info, cert, certs = check_owner_signature(prepared, cms_bytes, expected_certificate_sha256, older_digests)
    context = validation_material.validation_context() if validation_material is not None else None
    chain = _signer_chain(cert, certs, context)
    embedder = signers.ExternalSigner(
        signing_cert=cert,
        cert_registry=SimpleCertificateStore.from_certs(chain),
        signature_value=bytes(info["signature"].native),
        signature_mechanism=info["signature_algorithm"],
        embed_roots=False,
    )

    async def finish() -> bytes:
        content = await embedder.async_sign_prescribed_attributes(
            MD_ALGORITHM, cms.CMSAttributes.load(prepared.signed_attributes), timestamper=timestamper
        )
        instructions = None
        if context is not None:
            instructions = await _long_term_instructions(cert, chain, timestamper, context)
        output = io.BytesIO(prepared.pdf)
        digest = PreparedByteRangeDigest(prepared.document_digest, prepared.reserved_start, prepared.reserved_end)
        await PdfTBSDocument.async_finish_signing(
            output, digest, content, post_sign_instr=instructions, validation_context=context
        )
        return output.getvalue()

    try:
        output = _run_coroutine(finish())
    except SigningError:
        raise
    except Exception as exc:
        raise SigningError(f"cms: cannot be embedded ({exc})") from exc
    _check_embedded(output, prepared)
    return output


async def _long_term_instructions(cert, certs: list, timestamper, context: ValidationContext) -> PostSignInstructions:
    """What pyHanko's signing session collects before a B-LT signature, collected when the CMS arrives."""
    validator = CertificateValidator(cert, intermediate_certs=certs, validation_context=context)
    signer_path = await validator.async_validate_usage(
        set(signers.PdfSignatureMetadata(field_name="x").signer_key_usage)
    )
    ts_paths = [path async for path in timestamper.validation_paths(context)] if timestamper is not None else None
    status = PreSignValidationStatus(
        signer_path=signer_path,
        validation_paths=[signer_path, *(ts_paths or [])],
        ts_validation_paths=ts_paths,
        ocsps_to_embed=context.ocsps,
        crls_to_embed=context.crls,
    )
    return PostSignInstructions(validation_info=status, timestamp_md_algorithm=MD_ALGORITHM)


# --------------------------------------------------------------------------- modification analysis
#
# pyHanko checks what each revision after a signature changed (a later revision may only fill
# signature fields). For every object a later revision overrides it needs every path from the
# trailer to that object in the signed revision, and pyHanko 0.38 precomputes that table for
# *every* object by enumerating *every* path: cost = number of paths, not objects. WeasyPrint
# gives all pages one /Resources dictionary holding every Form XObject of the document, and each
# XObject's /Resources points at the shared /Font dictionary, so each font object is reached by
# pages x (XObjects + 1) paths (21 x 226 = 4,746 in a 21-page, 10-chart record) and the whole
# font subtree is walked that often - again for each signed revision. The table below gives the
# same answer (checked entry by entry against pyHanko's) but computes the entry for one reference
# when the analysis asks for it, walking only objects from which that reference can be reached:
# one linear pass over the graph plus the (few) paths to the catalog, info, metadata and the
# field a signing revision overrides. The rules and the verdicts are pyHanko's, unchanged.

_TRAILER = object()  # the trailer's node in the reference graph


def _structure_of(resolver: HistoricalResolver, ref):
    """``ref`` as ``resolver``'s revision has it, for reading which references it holds.

    An object unchanged since that revision is the reader's own parsed copy, shared by every revision,
    instead of the copy each HistoricalResolver makes of every object it is asked for (re-pointing each
    reference at itself): the index walks every object of every revision the analysis compares, and
    those copies were a quarter of a 58-page record's verification. Objects changed later, and
    encrypted ones, go through the resolver as before."""
    if ref in resolver.cache:
        return resolver.cache[ref]
    changes = resolver.reader.__dict__.setdefault("_kvs_last_change", {})  # per reader: the same for every revision
    if ref not in changes:
        try:
            changes[ref] = resolver.reader.xrefs.get_last_change(ref)
        except KeyError:
            changes[ref] = None
    last_change = changes[ref]
    if last_change is None or last_change > resolver.revision:
        return resolver(ref)
    obj = resolver.reader.get_object(ref, transparent_decrypt=False)
    return resolver(ref) if isinstance(obj, generic.DecryptedObjectProxy) else obj


def _reference_parents(resolver: HistoricalResolver) -> dict:
    """ref -> the refs (or the trailer) whose structure holds it: one linear pass over the revision's graph."""
    parents: dict = defaultdict(set)
    todo = [(_TRAILER, resolver.trailer_view)]
    seen = set()
    while todo:
        node, obj = todo.pop()
        stack = [obj]
        while stack:
            o = stack.pop()
            if isinstance(o, generic.IndirectObject):
                ref = o.reference
                parents[ref].add(node)
                if ref not in seen:
                    seen.add(ref)
                    todo.append((ref, _structure_of(resolver, ref)))
            elif isinstance(o, generic.DictionaryObject):
                stack.extend(o.values())
            elif isinstance(o, generic.ArrayObject):
                stack.extend(o)
    return parents


def _page_tree_paths(root) -> dict:
    """ref -> its canonical path in the page tree, as pyHanko maps it."""
    pages_ref = root.raw_get("/Pages")
    page_tree = {}
    pages_path = ("/Root", "/Pages")
    if isinstance(pages_ref, generic.IndirectObject):
        page_tree[pages_ref.reference] = pages_path

    def walk_pages(node, path):
        for ix, kid in enumerate(node["/Kids"]):
            kid_path = path + ("/Kids", ix)
            if isinstance(kid, generic.IndirectObject):
                if kid.reference in page_tree:
                    raise misc.PdfReadError("Circular reference in page tree in mapping stage")
                page_tree[kid.reference] = kid_path
            kid = kid.get_object()
            if kid.get("/Type", None) == "/Pages":
                walk_pages(kid, kid_path)

    walk_pages(pages_ref.get_object(), pages_path)
    return page_tree


def _struct_tree_members(root) -> set:
    """The refs of the structure tree's elements, as pyHanko collects them."""
    struct = set()

    def walk_struct(elem):
        try:
            children = elem["/K"]
        except KeyError:
            return
        if not isinstance(children, generic.ArrayObject):
            children = (children,)
        for child in children:
            child_ref = None
            if isinstance(child, generic.IndirectObject):
                child_ref = child.reference
                child = child.get_object()
            if not isinstance(child, generic.DictionaryObject):
                continue
            try:
                if child["/Type"] != "/StructElem":
                    continue
            except KeyError:
                pass
            if child_ref is not None:
                if child_ref in struct:
                    raise misc.PdfReadError("Circular reference in structure tree in mapping stage")
                struct.add(child_ref)
            walk_struct(child)

    try:
        walk_struct(root.raw_get("/StructTreeRoot").get_object())
    except KeyError:
        pass
    return struct


class UsagesOfRef(dict):
    """ref -> {RawPdfPath}: the same answer as pyHanko 0.38's HistoricalResolver
    `_load_reverse_xref_cache`, but each entry is computed when first asked for, by walking only
    the objects from which that reference can be reached."""

    def __init__(self, resolver: HistoricalResolver):
        super().__init__()
        self.resolver = resolver
        self._parents: dict | None = None
        self._page_tree: dict | None = None
        self._struct_tree: set | None = None

    def __bool__(self):  # pyHanko does `cache or {}`: an empty lazy table must stay in use
        return True

    # -- one linear pass over the revision's graph -------------------------------------------
    def _index(self):
        if self._parents is not None:
            return
        self._parents = _reference_parents(self.resolver)
        root = self.resolver.root
        # the same canonical page-tree paths and structure-tree members as pyHanko
        self._page_tree = _page_tree_paths(root)
        self._struct_tree = _struct_tree_members(root)

    def _ancestors(self, target) -> set:
        found, todo = {target}, [target]
        parents = self._parents
        while todo:
            for parent in parents.get(todo.pop(), ()):
                if parent is not _TRAILER and parent not in found:
                    found.add(parent)
                    todo.append(parent)
        return found

    # -- the paths to one reference, by pyHanko's own rules ------------------------------------
    def __missing__(self, target):
        self._index()
        if target not in self._parents:
            raise KeyError(target)  # not reachable: pyHanko's table has no entry either
        relevant = self._ancestors(target)
        resolver, page_tree, struct_tree = self.resolver, self._page_tree, self._struct_tree
        found: set = set()
        on_path: set = set()

        def walk(obj, path, is_struct):  # one frame per step, like pyHanko's own walk
            if isinstance(obj, generic.IndirectObject):
                ref = obj.reference
                if ref not in relevant or ref in on_path:
                    return  # no path from here reaches the target, or a cycle
                if ref == target:
                    found.add(path)  # a path through the target cannot reach it again
                    return
                if page_tree.get(ref, path) != path:
                    return  # page-tree nodes only via their canonical path
                if not is_struct and ref in struct_tree:
                    return
                on_path.add(ref)
                try:
                    walk(resolver(ref), path, is_struct)
                finally:
                    on_path.discard(ref)
            elif isinstance(obj, generic.DictionaryObject):
                for k, v in obj.items():
                    if k == "/Parent" or (is_struct and k == "/P"):
                        continue
                    walk(v, path + (k,), is_struct or (path == ("/Root", "/StructTreeRoot") and k == "/K"))
            elif isinstance(obj, generic.ArrayObject):
                for ix, v in enumerate(obj):
                    walk(v, path + (ix,), is_struct)

        walk(resolver.trailer_view, (), False)
        result = {RawPdfPath(*p) for p in found}
        self[target] = result
        return result


def install_on_demand_usages(resolver: HistoricalResolver) -> None:
    """Give `resolver` the on-demand table, unless pyHanko already built its own."""
    if getattr(resolver, "_indirect_object_access_cache", "absent") is None:
        resolver._indirect_object_access_cache = UsagesOfRef(resolver)


class ObjStmIndexReader(PdfFileReader):
    """A reader that parses each object stream's header once.

    pyHanko 0.38 re-reads an object stream's header from the start for every object it takes from
    it; WeasyPrint (pydyf) puts every non-stream object of the record (~500) into one object
    stream, so reading the document once costs ~N^2/2 header entries (0.5 s of CPU for the demo
    record). Only the common case is handled here; anything unusual (an index out of range, an
    object missing from the header, a damaged header or object) is left to pyHanko's own method,
    so the result is the same object or the same error.
    """

    def _get_object_from_stream(self, idnum, stmnum, idx):
        if self.strict:  # strict mode also checks each object's position: pyHanko's method
            return super()._get_object_from_stream(idnum, stmnum, idx)
        indexes = self.__dict__.setdefault("_kvs_objstm_index", {})
        entry = indexes.get(stmnum)
        if entry is None:
            entry = indexes[stmnum] = self._kvs_index_objstm(stmnum)
        if entry is not False:
            data, first, offsets, count = entry
            offset = offsets.get(idnum)
            if offset is not None and 0 <= idx < count:
                stream = io.BytesIO(data)
                stream.seek(first + offset)
                try:
                    obj = generic.read_object(stream, generic.Reference(idnum, 0, self))
                except (misc.PdfStreamError, misc.PdfReadError):
                    obj = None
                if obj is not None and not isinstance(obj, (generic.StreamObject, generic.IndirectObject)):
                    return obj
        return super()._get_object_from_stream(idnum, stmnum, idx)

    def _kvs_index_objstm(self, stmnum):
        try:
            stream = generic.Reference(stmnum, 0, self).get_object()
            if not isinstance(stream, generic.StreamObject) or stream.get("/Type") != "/ObjStm":
                return False
            count, first = int(stream["/N"]), int(stream["/First"])
            data = stream.read_data(DecodePurpose.OBJECT_STREAM)
        except Exception:
            return False
        header = io.BytesIO(data)
        offsets: dict[int, int] = {}
        for _ in range(count):
            try:
                misc.read_non_whitespace(header, seek_back=True)
                objnum = generic.NumberObject.read_from_stream(header)
                misc.read_non_whitespace(header, seek_back=True)
                offset = generic.NumberObject.read_from_stream(header)
            except Exception:  # damaged: the objects after this point go to pyHanko's method
                break
            offsets.setdefault(int(objnum), int(offset))  # pyHanko takes the first match
        return data, first, offsets, count


# What a signing or validation-data (DSS) revision rewrites in the document's metadata; anything
# else changed in /Info or the XMP after a signature (a new title, author, subject...) voids it.
# pyHanko's own rules accept any /Info edit and any well-formed XMP at LTA_UPDATES, so a retitled
# record still said "all signatures OK".
MUTABLE_INFO_KEYS = frozenset({"/ModDate", "/Producer"})
_XMP_NS = "http://ns.adobe.com/xap/1.0/"
_PDF_NS = "http://ns.adobe.com/pdf/1.3/"
_RDF_NS = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
MUTABLE_XMP_PROPERTIES = frozenset({f"{{{_XMP_NS}}}ModifyDate", f"{{{_XMP_NS}}}MetadataDate", f"{{{_PDF_NS}}}Producer"})


def _in_revision(resolver: HistoricalResolver, obj):
    """`obj` as this revision has it: an indirect reference read from a historical revision points at
    the reader (the newest revision), so it is resolved through the revision's own resolver."""
    return resolver(obj.reference) if isinstance(obj, generic.IndirectObject) else obj


def _info_entries(resolver: HistoricalResolver) -> dict[str, str]:
    info = _in_revision(resolver, resolver.trailer_view.raw_get("/Info") if "/Info" in resolver.trailer_view else None)
    if not isinstance(info, generic.DictionaryObject):
        return {}
    return {str(key): repr(_in_revision(resolver, value)) for key, value in info.items()}


def _xmp_properties(resolver: HistoricalResolver) -> dict[str, str]:
    """Every property of the XMP packet (attributes and elements of each rdf:Description)."""
    root = _in_revision(resolver, resolver.trailer_view.raw_get("/Root"))
    metadata = _in_revision(resolver, root.raw_get("/Metadata")) if "/Metadata" in root else None
    if not isinstance(metadata, generic.StreamObject):
        return {}
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    xml = etree.fromstring(metadata.read_data(DecodePurpose.XMP_METADATA), parser=parser)
    properties: dict[str, str] = {}
    for description in xml.iter(f"{{{_RDF_NS}}}Description"):
        for name, value in description.attrib.items():
            if name != f"{{{_RDF_NS}}}about":
                properties[name] = value
        for child in description:
            properties[str(child.tag)] = etree.tostring(child, method="c14n").decode()
    return properties


def _refuse_changes(what: str, before: Mapping[str, str], after: Mapping[str, str], mutable: frozenset) -> None:
    changed = sorted(k for k in before.keys() | after.keys() if k not in mutable and before.get(k) != after.get(k))
    if changed:
        raise SuspiciousModification(f"{what} changed after signing: {', '.join(changed)}")


class StrictDocInfoRule(DocInfoRule):
    """pyHanko's /Info rule, refusing any change but the modification date and the producer."""

    def apply(self, old, new):
        _refuse_changes("/Info", _info_entries(old), _info_entries(new), MUTABLE_INFO_KEYS)
        yield from super().apply(old, new)


class StrictMetadataRule(MetadataUpdateRule):
    """pyHanko's XMP rule (well-formed XML, no entities), refusing any change to a property but
    the modification and metadata dates and the producer."""

    def apply(self, old, new):
        updates = list(super().apply(old, new))  # the syntax checks come first
        _refuse_changes("XMP metadata", _xmp_properties(old), _xmp_properties(new), MUTABLE_XMP_PROPERTIES)
        yield from updates


class _OnDemandUsagesDiffPolicy(StandardDiffPolicy):
    """pyHanko's default diff policy with the on-demand table (same walking rules, same verdicts),
    and /Info and XMP edits after a signature refused (see StrictDocInfoRule)."""

    def review_file(self, reader, base_revision, field_mdp_spec=None, doc_mdp=None):
        if isinstance(base_revision, int):
            base_revision = reader.get_historical_resolver(base_revision)
        install_on_demand_usages(base_revision)
        return super().review_file(reader, base_revision, field_mdp_spec=field_mdp_spec, doc_mdp=doc_mdp)

    def apply(self, old, new, field_mdp_spec=None, doc_mdp=None):
        install_on_demand_usages(old)
        return super().apply(old, new, field_mdp_spec=field_mdp_spec, doc_mdp=doc_mdp)


# DEFAULT_DIFF_POLICY's rules, in its order, with the two metadata rules made strict (a test
# checks this list against pyHanko's, so an upgrade that adds a rule is noticed).
DIFF_POLICY = _OnDemandUsagesDiffPolicy(
    global_rules=[
        CatalogModificationRule(),
        StrictDocInfoRule().as_qualified(ModificationLevel.LTA_UPDATES),
        XrefStreamRule().as_qualified(ModificationLevel.LTA_UPDATES),
        ObjectStreamRule().as_qualified(ModificationLevel.LTA_UPDATES),
        DSSCompareRule().as_qualified(ModificationLevel.LTA_UPDATES),
        StrictMetadataRule().as_qualified(ModificationLevel.LTA_UPDATES),
    ],
    form_rule=DEFAULT_DIFF_POLICY.form_rule,
    reject_object_freeing=DEFAULT_DIFF_POLICY.reject_object_freeing,
    ignore_orphaned_objects=DEFAULT_DIFF_POLICY.ignore_orphaned_objects,
    ignore_identical_objects=DEFAULT_DIFF_POLICY.ignore_identical_objects,
)

# The revision that adds a document's first signature is compared with the unsigned document before
# it, which pyHanko's rules do not expect: a first signature also sets the form's /SigFlags
# (SignaturesExist, AppendOnly) and, certifying, adds the catalog's /Perms naming it (DocMDP). The
# same rules otherwise; those two keys are let through here and checked in `_first_signature_changes`.
FIRST_SIGNATURE_POLICY = _OnDemandUsagesDiffPolicy(
    global_rules=[CatalogModificationRule(ignored_keys=ROOT_EXEMPT_STRICT_COMPARISON | {"/Perms"})]
    + DIFF_POLICY.global_rules[1:],
    form_rule=FormUpdatingRule(
        field_rules=[SigFieldCreationRule(), SigFieldModificationRule(), GenericFieldModificationRule()],
        ignored_acroform_keys=ACROFORM_EXEMPT_STRICT_COMPARISON | {"/SigFlags"},
    ),
    reject_object_freeing=True,
    ignore_orphaned_objects=True,
    ignore_identical_objects=True,
)


# --------------------------------------------------------------------------- verification

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


def _read_dss(reader: PdfFileReader) -> DocumentSecurityStore | None:
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


def _validation_context(roots: list, dss: DocumentSecurityStore | None, *, offline: bool) -> ValidationContext:
    """Trust from ``roots``; revocation data only from the document's DSS, required (hard-fail) when
    ``offline`` - what PAdES B-LT promises - and used when present otherwise (soft-fail). Nothing is fetched."""
    kwargs = {"trust_roots": roots, "allow_fetching": False, "revocation_mode": "hard-fail" if offline else "soft-fail"}
    return dss.as_validation_context(dict(kwargs)) if dss is not None else ValidationContext(**kwargs)


def _validate(sig, roots: list, dss: DocumentSecurityStore | None, policy, *, offline: bool):
    """pyHanko's validation of one signature (see ``_validation_context``)."""
    return validate_pdf_signature(
        sig,
        signer_validation_context=_validation_context(roots, dss, offline=offline),
        ts_validation_context=_validation_context(roots, dss, offline=offline),
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


def _signature_report(
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
    anchor = _anchor_info(status.validation_path) if status.trusted else None
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
        timestamp_authority=_subject_line(ts.signing_cert) if ts is not None and ts.signing_cert else None,
        expected_signer=expected,
        signed_by_owner=signed_by_owner,
        certification=_enum_name(sig.docmdp_level) if _is_certification(sig) else None,
    )


def _is_certification(sig) -> bool:
    references = sig.sig_object.get("/Reference") or []
    return any(str(ref.get("/TransformMethod")) == "/DocMDP" for ref in references)


def _failed_report(name: str, exc: Exception) -> SignatureReport:
    """A signature that could not even be checked: it fails with pyHanko's reason."""
    return SignatureReport(
        name, None, None, False, False, False, None, False, None, None, None, f"{type(exc).__name__}: {exc}"
    )


# --------------------------------------------------------------------------- revision by revision
#
# The facts record_integrity judges: for each revision after the rendered PDF (or after the first
# signature), pyHanko's difference analysis against the revision before it, and which signature
# fields it added or filled with what.


def _field_values(resolver) -> dict[str, str | None]:
    """Each signature field of a revision and what fills it: None (empty), "/Sig", "/DocTimeStamp", or ""."""
    values: dict[str, str | None] = {}
    for raw_name, value, _ref in sig_fields.enumerate_sig_fields(resolver, filled_status=None):
        name, value = str(raw_name), _in_revision(resolver, value)
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
                stamp, validation_context=_validation_context(roots, dss, offline=False), diff_policy=policy
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
        roots = [_asn1_cert(r) for r in trust_roots]
    except Exception as exc:
        raise SigningError(f"trust_roots: not a DER or PEM certificate ({exc})") from exc
    try:
        reader = ObjStmIndexReader(io.BytesIO(pdf_bytes), strict=False)
        embedded, unreadable = _embedded_signatures(reader)
    except Exception as exc:
        return VerificationReport(digest, [], f"not a readable PDF ({exc})", known)
    dss = _read_dss(reader)
    policy = diff_policy or DIFF_POLICY
    reports = [_failed_report(name, exc) for name, exc in unreadable]
    for sig in (s for s in embedded if s.sig_object_type == "/Sig"):
        try:
            reports.append(_signature_report(sig, roots, dss, policy, record))
        except Exception as exc:  # a damaged signature must fail, not crash the report
            reports.append(_failed_report(sig.field_name, exc))
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


# --------------------------------------------------------------------------- development CA

# File names under the development CA's folder (issue_dev_certificates).
DEV_CA_CERT = "dev-ca.pem"
DEV_CA_KEY = "dev-ca-key.pem"
DEV_CA_CRL = "dev-ca.crl"
DEV_TSA_CERT = "dev-tsa.pem"
DEV_TSA_KEY = "dev-tsa-key.pem"
DEV_SEAL_CERT = "seal.pem"  # the development organisational seal's certificate (its key is in seal.p12)
# Named in every development certificate so validators know where revocation data lives; never
# fetched (.invalid): the CRL travels in each signed record's DSS.
DEV_CRL_URL = "http://crl.kvselect.invalid/dev-ca.crl"


@dataclass(frozen=True)
class DevCertificatePaths:
    ca_certificate: Path  # PEM; give it to verify_pdf as a trust root
    pkcs12: dict[str, Path]  # role -> PKCS#12 file protected by the passphrase
    ca_key: Path  # PEM, private: issues owner certificates and the CRL
    crl: Path  # PEM: the development CA's (empty) revocation list, embedded in B-LT records
    tsa_certificate: Path  # PEM: the development time-stamping authority (RSA, timeStamping EKU)
    tsa_key: Path
    seal_certificate: Path | None = None  # PEM: the development organisational seal's, when "seal" was issued


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, DEV_ORGANISATION),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
        ]
    )


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _private_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _leaf(subject: x509.Name, key, ca_cert: x509.Certificate, ca_key, until: dt.datetime, *, tsa: bool = False):
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(min(until, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            # digitalSignature, plus contentCommitment (non-repudiation) for people
            x509.KeyUsage(True, not tsa, False, False, False, False, False, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False)
        .add_extension(
            x509.CRLDistributionPoints(
                [x509.DistributionPoint([x509.UniformResourceIdentifier(DEV_CRL_URL)], None, None, None)]
            ),
            False,
        )
    )
    if tsa:  # RFC 3161: the only extended key usage, critical
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
    return builder.sign(ca_key, hashes.SHA256())


def _owner_pkcs12(person: str, unit: str, passphrase: str, ca_cert, ca_key, until: dt.datetime, label: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _leaf(_name(str(person), unit), key, ca_cert, ca_key, until)
    blob = pkcs12.serialize_key_and_certificates(
        name=label.encode(),
        key=key,
        cert=cert,
        cas=[ca_cert],
        encryption_algorithm=serialization.BestAvailableEncryption(passphrase.encode()),
    )
    return blob, cert


def _dev_crl(ca_cert: x509.Certificate, ca_key) -> bytes:
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now)
        .next_update(ca_cert.not_valid_after_utc)  # a development CRL for the CA's whole life: offline years later
        .add_extension(x509.CRLNumber(1), False)
        .sign(ca_key, hashes.SHA256())
    )
    return crl.public_bytes(serialization.Encoding.PEM)


def issue_dev_certificates(
    out_dir: str | Path,
    names: Mapping[str, str],
    passphrase: str,
    valid_days: int = 825,
) -> DevCertificatePaths:
    """Create a development CA, its CRL, a development TSA and a PKCS#12 per role (role -> person
    name) under ``out_dir``. The CA key is kept (mode 0600) to issue owners' certificates later.

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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = out / DEV_CA_CERT
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(out / DEV_CA_KEY, _private_pem(ca_key))
    (out / DEV_CA_CRL).write_bytes(_dev_crl(ca_cert, ca_key))
    tsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # pyHanko's test TSA is RSA-only
    tsa_cert = _leaf(_name(DEV_TSA_COMMON_NAME, "time-stamping authority"), tsa_key, ca_cert, ca_key, until, tsa=True)
    (out / DEV_TSA_CERT).write_bytes(tsa_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(out / DEV_TSA_KEY, _private_pem(tsa_key))

    p12_paths: dict[str, Path] = {}
    seal_path = None
    for role, person in names.items():
        unit = f"{ROLE_LABELS.get(role, role)} (DEVELOPMENT)"
        blob, cert = _owner_pkcs12(str(person), unit, passphrase, ca_cert, ca_key, until, f"{role}: {person}")
        path = out / f"{role}.p12"
        _write_private(path, blob)
        p12_paths[role] = path
        if role == SEAL_FIELD:  # the seal's certificate is configuration: verification pins seals to it
            seal_path = out / DEV_SEAL_CERT
            seal_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return DevCertificatePaths(
        ca_path, p12_paths, out / DEV_CA_KEY, out / DEV_CA_CRL, out / DEV_TSA_CERT, out / DEV_TSA_KEY, seal_path
    )


def issue_certificate(
    ca_dir: str | Path, person: str, passphrase: str, valid_days: int = 825
) -> tuple[bytes, CertificateInfo]:
    """A new signing key and certificate for ``person`` from the development CA under ``ca_dir``:
    the PKCS#12 (protected by ``passphrase``; kvselect never keeps it) and its certificate."""
    if not person or not person.strip():
        raise SigningError("person: the certificate needs a name")
    if len(passphrase or "") < 8:
        raise SigningError("passphrase: at least 8 characters")
    folder = Path(ca_dir)
    try:
        ca_cert = x509.load_pem_x509_certificate((folder / DEV_CA_CERT).read_bytes())
        ca_key = serialization.load_pem_private_key((folder / DEV_CA_KEY).read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise SigningError(f"ca: no certificate authority that can issue under {folder} ({exc})") from exc
    until = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=valid_days)
    blob, cert = _owner_pkcs12(person, "Owner (DEVELOPMENT)", passphrase, ca_cert, ca_key, until, person)
    return blob, _info(cert)
