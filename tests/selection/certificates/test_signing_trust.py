"""Who signed, under which root, and for how long it verifies (selection.certificates.signing).

Owner binding (a field checked against the certificate its owner enrolled), the trust root named
and a development CA flagged, and the PAdES level: B-B, B-T with an RFC 3161 timestamp from
pyHanko's in-process test TSA, B-LT with the chain and the CA's CRL in the DSS, verified offline.
"""

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from weasyprint import HTML

from selection.certificates import signing
from selection.certificates.signing import ExpectedSigner, SigningError

ROLES = ("business", "platform", "security")
NAMES = {"business": "张伟", "platform": "Priya Raman", "security": "Jonas Berg"}
PASS = "correct horse"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return signing.issue_dev_certificates(tmp_path_factory.mktemp("certs"), NAMES, PASS)


@pytest.fixture(scope="module")
def ca(certs):
    return certs.ca_certificate.read_bytes()


@pytest.fixture(scope="module")
def fingerprints(certs):
    return {role: signing.pkcs12_certificate(certs.pkcs12[role].read_bytes(), PASS).sha256 for role in ROLES}


@pytest.fixture(scope="module")
def owners(fingerprints):
    return {role: ExpectedSigner(NAMES[role], fingerprints[role]) for role in ROLES}


@pytest.fixture(scope="module")
def unsigned_pdf():
    pdf = HTML(string="<h1>Record</h1>" + "<p>The decision.</p>" * 30).write_pdf()
    return signing.prepare_signature_fields(
        pdf, {r: (0, 40 + 130 * i, 60, 160 + 130 * i, 140) for i, r in enumerate(ROLES)}
    )


def _sign_all(pdf, certs, keys=None, **options):
    for role in ROLES:
        p12 = certs.pkcs12[(keys or {}).get(role, role)].read_bytes()
        pdf = signing.sign_pdf(pdf, p12, PASS, role, NAMES[role], role, "approve", **options)
    return pdf


@pytest.fixture(scope="module")
def signed_pdf(unsigned_pdf, certs):
    return _sign_all(unsigned_pdf, certs)


def test_signing_refuses_a_key_that_is_not_the_enrolled_one(unsigned_pdf, certs, fingerprints):
    with pytest.raises(SigningError, match="pkcs12: this certificate .*Priya Raman.* is not the enrolled certificate"):
        signing.sign_pdf(
            unsigned_pdf,
            certs.pkcs12["platform"].read_bytes(),
            PASS,
            "business",
            "张伟",
            "business",
            "approve",
            expected_certificate_sha256=fingerprints["business"],
        )
    pdf = signing.sign_pdf(
        unsigned_pdf,
        certs.pkcs12["business"].read_bytes(),
        PASS,
        "business",
        "张伟",
        "business",
        "approve",
        expected_certificate_sha256=fingerprints["business"],
    )
    assert signing.existing_signature_fields(pdf)["business"]


def test_each_field_is_checked_against_its_owners_certificate(signed_pdf, ca, owners, fingerprints):
    report = signing.verify_pdf(signed_pdf, [ca], expected_signers=owners)
    assert report.all_ok, report.as_text()
    for sig in report.signatures:
        assert sig.signed_by_owner and sig.signer_certificate_sha256 == fingerprints[sig.field]
        assert sig.owner_check == f"signed by the named owner ({NAMES[sig.field]})"


def test_a_record_signed_by_a_non_owner_fails_on_that_field(unsigned_pdf, certs, ca, owners):
    """张伟's field signed with Priya Raman's key: intact, valid and trusted, but not the owner."""
    pdf = _sign_all(unsigned_pdf, certs, keys={"business": "platform"})
    report = signing.verify_pdf(pdf, [ca], expected_signers=owners)
    business, platform, security = report.signatures
    assert business.intact and business.valid and business.trusted
    assert business.signed_by_owner is False and not business.ok
    assert business.owner_check == "signed by someone else: this field is 张伟's"
    assert platform.ok and security.ok
    assert not report.all_ok
    assert "owner: signed by someone else: this field is 张伟's" in report.as_text()


def test_an_owners_field_left_unsigned_fails_the_record(unsigned_pdf, certs, ca, owners):
    pdf = signing.sign_pdf(unsigned_pdf, certs.pkcs12["business"].read_bytes(), PASS, "business", "x", "business", "r")
    report = signing.verify_pdf(pdf, [ca], expected_signers=owners)
    assert report.signatures[0].ok and report.unsigned_fields == ["platform", "security"]
    assert not report.all_ok and "field=security: NOT SIGNED" in report.as_text()


def test_without_named_owners_nothing_is_claimed(signed_pdf, ca):
    report = signing.verify_pdf(signed_pdf, [ca])
    assert report.all_ok and {s.signed_by_owner for s in report.signatures} == {None}


def test_the_trust_root_is_named_and_the_development_ca_flagged(signed_pdf, ca):
    report = signing.verify_pdf(signed_pdf, [ca])
    for sig in report.signatures:
        assert sig.trust_root == signing.DEV_CA_COMMON_NAME and sig.development_certificate
        assert sig.level == "B-B" and sig.timestamp is None
    assert report.development_certificates
    assert "[DEVELOPMENT CERTIFICATE - NOT FOR PROCUREMENT]" in report.as_text()


def _production_ca(tmp_path):
    """A CA with no development marker, and one owner's PKCS#12 from it."""
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Example Corp Signing CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Wei Zhang")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    blob = pkcs12.serialize_key_and_certificates(
        b"owner", key, cert, [ca_cert], serialization.BestAvailableEncryption(PASS.encode())
    )
    return ca_cert.public_bytes(serialization.Encoding.PEM), blob


def test_a_production_root_is_named_and_not_flagged(unsigned_pdf, tmp_path):
    root, p12 = _production_ca(tmp_path)
    pdf = signing.sign_pdf(unsigned_pdf, p12, PASS, "business", "Wei Zhang", "business", "approve")
    sig = signing.verify_pdf(pdf, [root]).signatures[0]
    assert sig.ok and sig.trust_root == "Example Corp Signing CA" and not sig.development_certificate
    info = signing.pkcs12_certificate(p12, PASS)
    assert not info.development and signing.trust_root_of(info.pem.encode(), [root]).common_name == (
        "Example Corp Signing CA"
    )


def test_a_timestamped_b_lt_record_verifies_offline(unsigned_pdf, certs, ca, owners):
    material = signing.ValidationMaterial([ca], [certs.crl.read_bytes()])
    pdf = _sign_all(
        unsigned_pdf,
        certs,
        timestamper=signing.dev_timestamper(certs.ca_certificate.parent),
        validation_material=material,
    )
    report = signing.verify_pdf(pdf, [ca], expected_signers=owners)  # offline: nothing is ever fetched
    assert report.all_ok, report.as_text()
    for sig in report.signatures:
        assert sig.level == "B-LT" and sig.timestamp is not None
        assert sig.timestamp_authority == signing.DEV_TSA_COMMON_NAME
    assert "level: B-LT (timestamp " in report.as_text()


def test_without_revocation_data_a_timestamped_record_is_b_t(unsigned_pdf, certs, ca):
    pdf = signing.sign_pdf(
        unsigned_pdf,
        certs.pkcs12["business"].read_bytes(),
        PASS,
        "business",
        "张伟",
        "business",
        "approve",
        timestamper=signing.dev_timestamper(certs.ca_certificate.parent),
        validation_material=signing.ValidationMaterial([ca], crls=()),
    )
    sig = signing.verify_pdf(pdf, [ca]).signatures[0]
    assert sig.ok and sig.level == "B-T" and sig.timestamp is not None


def test_certificate_facts_and_refusals(certs, ca, tmp_path):
    info = signing.certificate_info(ca)
    assert info.is_ca and info.development and info.common_name == signing.DEV_CA_COMMON_NAME
    with pytest.raises(SigningError, match="^certificate: not a PEM or DER"):
        signing.certificate_info(b"hello")
    blob, issued = signing.issue_certificate(certs.ca_certificate.parent, "Ana Silva", "a-long-passphrase")
    assert signing.pkcs12_certificate(blob, "a-long-passphrase").sha256 == issued.sha256
    assert issued.development and not issued.is_ca
    assert signing.trust_root_of(issued.pem.encode(), [ca]).sha256 == info.sha256
    other = signing.issue_dev_certificates(tmp_path, {"business": "Mallory"}, "x")
    assert signing.trust_root_of(issued.pem.encode(), [other.ca_certificate.read_bytes()]) is None
    with pytest.raises(SigningError, match="passphrase"):
        signing.issue_certificate(certs.ca_certificate.parent, "Ana Silva", "short")
