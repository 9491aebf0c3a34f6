"""A clearly labelled development CA (with its CRL and a development time-stamping authority), one
PKCS#12 per owner and more on demand: never for production."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from selection.certificates.signing.base import (
    DEV_CA_COMMON_NAME,
    DEV_ORGANISATION,
    DEV_TSA_COMMON_NAME,
    SEAL_FIELD,
    SigningError,
)
from selection.certificates.signing.certificates import CertificateInfo, info_of
from selection.domain.roles import ROLE_LABELS

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


def leaf_certificate(
    subject: x509.Name, key, ca_cert: x509.Certificate, ca_key, until: dt.datetime, *, tsa: bool = False
):
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
    cert = leaf_certificate(_name(str(person), unit), key, ca_cert, ca_key, until)
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
    tsa_cert = leaf_certificate(
        _name(DEV_TSA_COMMON_NAME, "time-stamping authority"), tsa_key, ca_cert, ca_key, until, tsa=True
    )
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
    return blob, info_of(cert)
