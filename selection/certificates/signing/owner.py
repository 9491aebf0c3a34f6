"""Owner-side signing (pyHanko's interrupted signing): the server prepares the revision and the CMS
signed attributes, the owner signs them on their own machine, the server checks and embeds the CMS."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from asn1crypto import cms
from asn1crypto import x509 as asn1_x509
from pkcs11.exceptions import PKCS11Error
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import signers
from pyhanko.sign.general import find_unique_cms_attribute
from pyhanko.sign.signers.pdf_byterange import PreparedByteRangeDigest
from pyhanko.sign.signers.pdf_signer import PdfTBSDocument, PostSignInstructions, PreSignValidationStatus
from pyhanko.sign.validation.generic_cms import validate_sig_integrity
from pyhanko_certvalidator import CertificateValidator, ValidationContext
from pyhanko_certvalidator.registry import SimpleCertificateStore

from selection.certificates.signing.base import MD_ALGORITHM, SigningError, refusal
from selection.certificates.signing.certificates import load_asn1_cert, run_coroutine, subject_line
from selection.certificates.signing.sign import (
    StampWords,
    ValidationMaterial,
    existing_signature_fields,
    open_writer,
    signature_setup,
)
from selection.domain.messages import marked as _

# --------------------------------------------------------------------------- owner-side signing
#
# pyHanko's interrupted signing: the server prepares the revision that holds the owner's signature
# (its appearance, the signature dictionary, a reserved /Contents) and the CMS signed attributes over
# that revision's /ByteRange digest; the owner signs those attributes on their own machine (token or
# local PKCS#12) and returns the CMS; the server checks it and embeds it. The key never leaves the owner.

# Hex characters reserved for the CMS in the prepared revision: 16 KiB of DER, room for the owner's
# chain and the RFC 3161 timestamp token the server adds (a CMS that does not fit is refused).
RESERVED_SIGNATURE_BYTES = 32768


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
    stamp_words: StampWords | None = None,
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
        cert = load_asn1_cert(certificate)
    except ValueError as exc:
        raise SigningError("certificate: not a PEM or DER X.509 certificate") from exc
    placeholder = signers.ExternalSigner(
        signing_cert=cert, cert_registry=SimpleCertificateStore.from_certs([cert]), signature_value=bytes(512)
    )
    meta, stamp_style, text = signature_setup(
        field_name,
        signer_name,
        role,
        reason,
        cert,
        stamp_font,
        certify=not any(present.values()),
        stamp_words=stamp_words,
    )
    pdf_signer = signers.PdfSigner(meta, signer=placeholder, stamp_style=stamp_style)

    async def prepare():
        digest, _tbs, output = await pdf_signer.async_digest_doc_for_signing(
            open_writer(pdf_bytes),
            existing_fields_only=True,
            bytes_reserved=RESERVED_SIGNATURE_BYTES,
            appearance_text_params=text,
        )
        attributes = await placeholder.signed_attrs(digest.document_digest, MD_ALGORITHM, use_pades=True)
        return digest, attributes, output

    try:
        digest, attributes, output = run_coroutine(prepare())
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
            f"({subject_line(signer.signing_cert)}): prepare the signature again, or use your enrolled key"
        )
    try:
        content = run_coroutine(signer.async_sign_prescribed_attributes(MD_ALGORITHM, attributes))
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
        raise refusal("cms", _("holds %(count)s signatures, expected exactly one"), count=len(infos))
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
        raise refusal(
            "cms",
            _(
                "signed with %(subject)s (certificate SHA-256 %(actual)s…), which is not the enrolled certificate "
                "of this owner (SHA-256 %(expected)s…): sign with your enrolled key"
            ),
            subject=subject_line(cert),
            actual=actual[:16],
            expected=expected_certificate_sha256[:16],
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
        raise refusal(
            "cms",
            _(
                "this signature is over another document digest (%(digest)s…), not the revision prepared for you "
                "(%(prepared)s…)"
            ),
            digest=digest.hex()[:16],
            prepared=prepared.document_digest.hex()[:16],
        )
    if theirs.untag().dump() != cms.CMSAttributes.load(prepared.signed_attributes).dump():
        raise SigningError("cms: the signed attributes differ from the ones kvselect prepared: sign them unchanged")
    if info["digest_algorithm"]["algorithm"].native != MD_ALGORITHM:
        raise refusal(
            "cms",
            _("digest algorithm %(algorithm)s, expected sha256"),
            algorithm=str(info["digest_algorithm"]["algorithm"].native),
        )
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
        raise refusal(
            "prepared",
            _(
                "the prepared revision changed since it was prepared (its digest is %(digest)s…, the one kept when "
                "it was prepared %(kept)s…): nothing was embedded; prepare the signature again"
            ),
            digest=digest.hex()[:16],
            kept=prepared.document_digest.hex()[:16],
        )


def _signer_chain(cert: asn1_x509.Certificate, certs: Sequence, context: ValidationContext | None) -> list:
    """The certificates between the signer and its trust root, out of those the owner's CMS carries: the
    validated path's intermediates with a validation context, else the issuer chain by name. Nothing else
    the owner put in the CMS reaches the record."""
    if context is not None:
        validator = CertificateValidator(cert, intermediate_certs=list(certs), validation_context=context)
        try:
            path = run_coroutine(validator.async_validate_usage(set()))
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
        output = run_coroutine(finish())
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
