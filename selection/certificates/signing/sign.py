"""Signing on the server: empty visible signature fields at the record's boxes, the stamp's text and
font, validation material and time-stamping, `sign_pdf` / `sign_pdf_with` (PAdES baseline, B-B to
B-LT) and document timestamps."""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from asn1crypto import keys as asn1_keys
from asn1crypto import x509 as asn1_x509
from cryptography.hazmat.primitives import serialization
from pkcs11.exceptions import PKCS11Error
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.pdf_utils.text import TextBoxStyle
from pyhanko.sign import fields as sig_fields
from pyhanko.sign import signers
from pyhanko.sign.timestamps import DummyTimeStamper, HTTPTimeStamper
from pyhanko.stamp import TextStampStyle
from pyhanko_certvalidator import ValidationContext
from pyhanko_certvalidator.registry import SimpleCertificateStore

from selection.certificates.signing.base import MD_ALGORITHM, Box, SigningError, refusal
from selection.certificates.signing.certificates import load_asn1_cert, load_asn1_crl, load_signer, subject_line
from selection.certificates.signing.dev_ca import DEV_CA_CERT, DEV_TSA_CERT, DEV_TSA_KEY
from selection.certificates.signing.fonts import font_covers, stamp_font_engine
from selection.domain.messages import marked as _
from selection.domain.roles import ROLE_LABELS

log = logging.getLogger("selection.certificates.signing")  # one logger name for the package, as before
# The first signature certifies the document (DocMDP): later signatures in the existing fields and
# validation data stay allowed; conforming readers flag any other change.
CERTIFICATION_PERMISSION = sig_fields.MDPPerm.FILL_FORMS


def _check_box(name: str, box: Sequence) -> Box:
    if len(box) != 5:
        raise SigningError(f"{name}: box must be (page, x1, y1, x2, y2), got {box!r}")
    page, x1, y1, x2, y2 = box
    if int(page) < 0 or x2 <= x1 or y2 <= y1:
        raise SigningError(f"{name}: box must have page >= 0, x2 > x1 and y2 > y1, got {box!r}")
    return int(page), float(x1), float(y1), float(x2), float(y2)


def open_writer(pdf_bytes: bytes) -> IncrementalPdfFileWriter:
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
    writer = open_writer(pdf_bytes)
    present = existing_signature_fields(pdf_bytes)
    for name, box in boxes.items():
        if name in present:
            raise SigningError(f"field_name: signature field {name!r} already exists")
        page, x1, y1, x2, y2 = _check_box(name, box)
        sig_fields.append_signature_field(writer, sig_fields.SigFieldSpec(name, on_page=page, box=(x1, y1, x2, y2)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _stamp_text_style(signer_line: str, words: str, stamp_font: Path | str | None) -> tuple[str, TextBoxStyle | None]:
    """The signer line and the font to draw the stamp in (`words`: its other text, heading and role).

    With `stamp_font` (an OpenType face covering Latin and CJK, see `cjk_stamp_font`) every stamp is
    drawn in it, embedded as a subset, whatever script the signer's name or the record's language is
    written in: the stamps of one record look alike (a standard PDF font for the Latin names beside a
    CJK face for one Chinese name read as two designs, walk p8). Without it Latin-1 text uses a
    standard PDF font, and a name outside Latin-1 is replaced by where it stands (the record template
    prints it in any script above the signature box).
    """
    if stamp_font is not None and font_covers(stamp_font, signer_line + words):
        return signer_line, TextBoxStyle(font=stamp_font_engine(stamp_font, font_size=10))
    try:
        signer_line.encode("latin-1")
        return signer_line, None
    except UnicodeEncodeError:
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
            trust_roots=[load_asn1_cert(r) for r in self.trust_roots],
            crls=[load_asn1_crl(c) for c in self.crls],
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
        tsa_cert = load_asn1_cert((folder / DEV_TSA_CERT).read_bytes())
        key = serialization.load_pem_private_key((folder / DEV_TSA_KEY).read_bytes(), password=None)
        ca = load_asn1_cert((folder / DEV_CA_CERT).read_bytes())
    except (OSError, ValueError) as exc:
        raise SigningError(f"tsa: no development time-stamping authority under {folder} ({exc})") from exc
    tsa_key = asn1_keys.PrivateKeyInfo.load(
        key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return DummyTimeStamper(tsa_cert=tsa_cert, tsa_key=tsa_key, certs_to_embed=SimpleCertificateStore.from_certs([ca]))


# The stamp's heading in English: `StampWords` carries it (and the role) in the record's language.
STAMP_HEADING = "Digitally signed (PAdES)"


@dataclass(frozen=True)
class StampWords:
    """The visible stamp's fixed words in the record's language, translated by the caller (this package
    has no Django): its heading and the signer's role. A word left None is the English one. Only the
    drawn stamp uses them; the signature dictionary's name and reason stay as given."""

    heading: str | None = None
    role: str | None = None


def signature_setup(
    field_name: str,
    signer_name: str,
    role: str,
    reason: str,
    certificate: asn1_x509.Certificate,
    stamp_font: Path | str | None,
    validation_material: ValidationMaterial | None = None,
    *,
    certify: bool = False,
    stamp_words: StampWords | None = None,
) -> tuple[signers.PdfSignatureMetadata, TextStampStyle, dict[str, str]]:
    """The signature dictionary's metadata, the visible stamp and its text for one owner's field; the
    document's first signature (``certify``) is its certification signature (DocMDP, form filling
    and signing allowed after it). ``stamp_words`` writes the stamp in the record's language."""
    role_label = ROLE_LABELS.get(role, role)
    words = stamp_words or StampWords()
    heading = words.heading or STAMP_HEADING
    stamp_role = words.role or role_label
    cert_cn = certificate.subject.native.get("common_name", "")
    signer_line, text_box_style = _stamp_text_style(cert_cn or signer_name, heading + stamp_role, stamp_font)
    stamp_style = TextStampStyle(
        stamp_text="%(heading)s\n%(role)s\n%(signer_line)s\n%(ts)s",
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
    return meta, stamp_style, {"heading": heading, "role": stamp_role, "signer_line": signer_line}


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
        raise refusal(
            what,
            _(
                "this certificate (%(subject)s, SHA-256 %(actual)s…) is not the enrolled certificate for field "
                "%(field)s (SHA-256 %(expected)s…)"
            ),
            subject=subject_line(certificate),
            actual=actual[:16],
            field=repr(field_name),
            expected=expected_sha256[:16],
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
    stamp_words: StampWords | None = None,
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
        stamp_words=stamp_words,
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
    stamp_words: StampWords | None = None,
) -> bytes:
    """``sign_pdf`` with a signer already opened: a PKCS#12's (``load_signer``) or a token's (``pkcs11_session``)."""
    new_field_spec = _new_field_spec(pdf_bytes, field_name, box)
    meta, stamp_style, text = signature_setup(
        field_name,
        signer_name,
        role,
        reason,
        signer.signing_cert,
        stamp_font,
        validation_material,
        certify=not any(existing_signature_fields(pdf_bytes).values()),
        stamp_words=stamp_words,
    )
    pdf_signer = signers.PdfSigner(
        meta, signer=signer, stamp_style=stamp_style, new_field_spec=new_field_spec, timestamper=timestamper
    )
    writer = open_writer(pdf_bytes)
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
        out = stamper.timestamp_pdf(open_writer(pdf_bytes), MD_ALGORITHM, validation_context=context, in_place=False)
    except Exception as exc:
        raise SigningError(f"pdf: the document timestamp failed ({exc})") from exc
    return out.getvalue()
