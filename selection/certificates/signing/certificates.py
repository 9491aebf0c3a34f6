"""A certificate's public facts (`certificate_info`, `pkcs12_certificate`, `bundle_certificates`), which
trust root certifies it (`trust_root_of`), and a PKCS#12 loaded as a signer (`load_signer`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable

from asn1crypto import crl as asn1_crl
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID
from pyhanko.sign import signers
from pyhanko_certvalidator import CertificateValidator, ValidationContext
from pyhanko_certvalidator.errors import RevokedError

from selection.certificates.signing.base import DEV_ORGANISATION, SigningError


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


def load_asn1_cert(data: bytes) -> asn1_x509.Certificate:
    if data.lstrip().startswith(b"-----BEGIN"):
        data = x509.load_pem_x509_certificate(data).public_bytes(serialization.Encoding.DER)
    return asn1_x509.Certificate.load(data)


def load_asn1_crl(data: bytes) -> asn1_crl.CertificateList:
    if data.lstrip().startswith(b"-----BEGIN"):
        data = x509.load_pem_x509_crl(data).public_bytes(serialization.Encoding.DER)
    return asn1_crl.CertificateList.load(data)


def subject_line(cert: asn1_x509.Certificate) -> str:
    return cert.subject.native.get("common_name") or cert.subject.human_friendly


def _is_development(cert: x509.Certificate) -> bool:
    def marked(name: x509.Name) -> bool:
        organisations = [a.value for a in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        common_names = [a.value for a in name.get_attributes_for_oid(NameOID.COMMON_NAME)]
        return DEV_ORGANISATION in organisations or any("DEVELOPMENT CA" in str(cn) for cn in common_names)

    return marked(cert.issuer) or marked(cert.subject)


def info_of(cert: x509.Certificate) -> CertificateInfo:
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
    return info_of(cert)


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
    roots = [load_asn1_cert(r) for r in trust_roots]
    if not roots:
        return None
    context = ValidationContext(
        trust_roots=roots,
        crls=[load_asn1_crl(c) for c in crls],
        allow_fetching=allow_fetching,
        revocation_mode="soft-fail",
    )
    validator = CertificateValidator(
        load_asn1_cert(certificate),
        intermediate_certs=[load_asn1_cert(c) for c in intermediates],
        validation_context=context,
    )
    path = None
    for usage in ("digital_signature", "non_repudiation"):
        try:
            path = run_coroutine(validator.async_validate_usage({usage}))
            break
        except RevokedError as exc:
            raise SigningError(f"certificate: revoked ({exc})") from exc
        except Exception:  # any path-building or usage failure: not certified by these roots for this usage
            continue
    return anchor_info(path) if path is not None else None


def run_coroutine(coroutine: Any) -> Any:
    """Run one of certvalidator's coroutines to its end from synchronous code, also from a thread whose
    event loop is running (an ASGI server, a browser-driven test), where asyncio.run() refuses."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def anchor_info(path) -> CertificateInfo | None:
    """The trust anchor of a certvalidator path, when it is a certificate."""
    anchor = getattr(path, "trust_anchor", None)
    cert = getattr(getattr(anchor, "authority", None), "certificate", None)
    return certificate_info(cert.dump()) if cert is not None else None


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
