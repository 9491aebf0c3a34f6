"""Keys never leave their owners: owner-side signing (kvselect-sign with a SoftHSM2 token or a local
PKCS#12, the CMS uploaded), the server-side HSM, and the PKCS#12 upload kept for the development CA.

Each token is a real SoftHSM2 token initialised for the test (tests/support/softhsm.py) holding the
owner's development-CA key and certificate. Every refusal leaves the record as it was: no signature,
the same PDF, the request still waiting.
"""

import asyncio
import base64
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asn1crypto import cms as asn1_cms
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient
from weasyprint import HTML

from selection.certificates import signing
from selection.models import DecisionRecord, SignatureRequest
from selection.records.services import (
    complete_signature,
    create_draft,
    prepare_signature,
    sign,
    sign_with_hsm,
    signature_request_document,
    start_review,
)
from selection.records.verification import verification_report
from tests.support import lifecycle
from tests.support.softhsm import PIN, SOFTHSM_MODULE, softhsm_token

ROLES = ("business", "platform", "security")
PASSPHRASE = lifecycle.PASSPHRASE
CLIENT_SRC = Path(__file__).resolve().parents[3] / "clients" / "kvselect-sign" / "src"


@pytest.fixture
def approved(decided, architect, owners):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    return lifecycle.approve_all(record, owners)


@pytest.fixture
def softhsm_env(monkeypatch):
    """SOFTHSM2_CONF is set by each token; restore it after the test."""
    monkeypatch.setenv("SOFTHSM2_CONF", os.environ.get("SOFTHSM2_CONF", "/etc/softhsm/softhsm2.conf"))


def kvselect_sign(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The owner's command, run as its own process from the separately installable package."""
    environment = {**os.environ, "PYTHONPATH": str(CLIENT_SRC), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "kvselect_sign", *args], capture_output=True, text=True, env=environment, timeout=120
    )


def unchanged(record: DecisionRecord, role: str, before: str) -> bool:
    record.refresh_from_db()
    return record.signed_sha256 == before and not record.approvals.get(role=role).signed_at


def cms_with_p12(request: SignatureRequest, p12: bytes, passphrase: str = PASSPHRASE) -> bytes:
    return signing.sign_attributes(signing.load_signer(p12, passphrase), bytes(request.signed_attributes))


def foreign_cms(request: SignatureRequest, p12: bytes, passphrase: str) -> bytes:
    """A CMS over the request's attributes with any key, skipping sign_attributes' certificate check."""
    signer = signing.load_signer(p12, passphrase)
    attributes = asn1_cms.CMSAttributes.load(bytes(request.signed_attributes))
    return asyncio.run(signer.async_sign_prescribed_attributes("sha256", attributes)).dump()


def test_three_owners_sign_owner_side_with_a_token_and_a_local_pkcs12_and_the_record_verifies(
    approved, owners, dev_certs, tmp_path, softhsm_env
):
    """business: a SoftHSM2 token through kvselect-sign; platform: a local PKCS#12 through kvselect-sign;
    security: a token through `manage.py sign-record`. The server never sees a key."""
    record = approved
    token = softhsm_token(tmp_path / "hsm", dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE)
    for role in ("business", "platform"):
        request_file = tmp_path / f"{role}.json"
        request_file.write_text(
            json.dumps(signature_request_document(prepare_signature(record=record, user=owners[role], role=role)))
        )
        if role == "business":
            key = ["--pkcs11-module", SOFTHSM_MODULE, "--token-label", token.token_label, "--key-label", "owner"]
            env = {"KVSELECT_PIN": PIN}
        else:
            key, env = ["--pkcs12", str(dev_certs.pkcs12[role])], {"KVSELECT_PKCS12_PASSPHRASE": PASSPHRASE}
        out = tmp_path / f"{role}.p7s"
        result = kvselect_sign("--request", str(request_file), "--out", str(out), *key, env=env)
        assert result.returncode == 0, result.stderr
        record = complete_signature(record=record, user=owners[role], role=role, cms=out.read_bytes())
    softhsm_token(tmp_path / "hsm-security", dev_certs.pkcs12["security"].read_bytes(), PASSPHRASE, token_label="sec")
    os.environ["KVSELECT_PIN"] = PIN
    try:
        call_command(
            "sign-record", str(record.pk), "--user", "security", "--pkcs11-module", SOFTHSM_MODULE,
            "--token-label", "sec", "--key-label", "owner",
        )  # fmt: skip
    finally:
        del os.environ["KVSELECT_PIN"]
    record.refresh_from_db()
    assert record.status == DecisionRecord.Status.SIGNED
    with record.signed_pdf.open("rb") as handle:
        pdf = handle.read()
    report = verification_report(pdf)
    assert report["all_ok"] and report["owners_checked"], report
    assert [s["field"] for s in report["signatures"]] == list(ROLES)
    assert all(s["signed_by_owner"] for s in report["signatures"])
    assert not record.signature_requests.filter(completed_at__isnull=True).exists()
    path = tmp_path / "signed.pdf"
    path.write_bytes(pdf)
    pdfsig = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert pdfsig.count("Signature is Valid") == 3, pdfsig


def test_a_signature_by_another_owners_key_is_refused_and_nothing_is_stored(approved, owners, dev_certs):
    request = prepare_signature(record=approved, user=owners["business"], role="business")
    before = approved.signed_sha256
    # kvselect-sign's own check would stop this; a hand-made CMS over the same attributes reaches the server
    forged = foreign_cms(request, dev_certs.pkcs12["platform"].read_bytes(), PASSPHRASE)
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=forged)
    assert "not the enrolled certificate" in excinfo.value.message_dict["cms"][0]
    assert unchanged(approved, "business", before)
    request.refresh_from_db()
    assert request.completed_at is None and request.superseded_at is None


def test_kvselect_sign_refuses_attributes_prepared_for_another_certificate(approved, owners, dev_certs, tmp_path):
    request_file = tmp_path / "business.json"
    request_file.write_text(
        json.dumps(
            signature_request_document(prepare_signature(record=approved, user=owners["business"], role="business"))
        )
    )
    result = kvselect_sign(
        "--request", str(request_file), "--out", str(tmp_path / "x.p7s"), "--pkcs12", str(dev_certs.pkcs12["platform"]),
        env={"KVSELECT_PKCS12_PASSPHRASE": PASSPHRASE},
    )  # fmt: skip
    assert result.returncode == 1 and "not the one the record names for you" in result.stderr
    assert not (tmp_path / "x.p7s").exists()


def test_kvselect_sign_with_a_wrong_token_pin_signs_nothing(approved, owners, dev_certs, tmp_path, softhsm_env):
    token = softhsm_token(tmp_path / "hsm", dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE)
    request_file = tmp_path / "business.json"
    request = prepare_signature(record=approved, user=owners["business"], role="business")
    request_file.write_text(json.dumps(signature_request_document(request)))
    out = tmp_path / "business.p7s"
    key = ["--pkcs11-module", SOFTHSM_MODULE, "--token-label", token.token_label, "--key-label", "owner"]
    result = kvselect_sign("--request", str(request_file), "--out", str(out), *key, env={"KVSELECT_PIN": "0000"})
    assert result.returncode == 1 and "wrong PIN" in result.stderr and not out.exists()
    assert unchanged(approved, "business", approved.signed_sha256)


def test_a_certificate_that_is_not_enrolled_is_refused(approved, owners, dev_certs):
    request = prepare_signature(record=approved, user=owners["business"], role="business")
    stranger_p12, _info = signing.issue_certificate(dev_certs.ca_certificate.parent, "Mallory", "mallory-pass")
    cms = foreign_cms(request, stranger_p12, "mallory-pass")
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=cms)
    assert "Mallory" in excinfo.value.message_dict["cms"][0]
    assert unchanged(approved, "business", approved.signed_sha256)


def test_a_signature_over_another_digest_is_refused(approved, owners, dev_certs):
    prepare_signature(record=approved, user=owners["business"], role="business")
    p12 = dev_certs.pkcs12["business"].read_bytes()
    certificate = signing.pkcs12_certificate(p12, PASSPHRASE)
    other_pdf = signing.prepare_signature_fields(
        HTML(string="<p>another document</p>").write_pdf(), {"business": (0, 40, 60, 160, 140)}
    )
    other = signing.prepare_owner_signature(other_pdf, certificate.pem.encode(), "business", "x", "business", "r")
    cms = signing.sign_attributes(signing.load_signer(p12, PASSPHRASE), other.signed_attributes)
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=cms)
    assert "over another document digest" in excinfo.value.message_dict["cms"][0]
    assert unchanged(approved, "business", approved.signed_sha256)


def test_a_signature_for_an_older_prepared_revision_is_refused_as_stale(approved, owners, dev_certs):
    first = prepare_signature(record=approved, user=owners["business"], role="business")
    old_cms = cms_with_p12(first, dev_certs.pkcs12["business"].read_bytes())
    second = prepare_signature(record=approved, user=owners["business"], role="business")
    first.refresh_from_db()
    assert first.superseded_at is not None and second.document_digest != first.document_digest
    assert not first.prepared_pdf  # its revision can no longer be completed: the file goes, the digest stays
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=old_cms)
    assert "older revision" in excinfo.value.message_dict["cms"][0]
    assert unchanged(approved, "business", approved.signed_sha256)
    # the current one still signs
    record = complete_signature(
        record=approved,
        user=owners["business"],
        role="business",
        cms=cms_with_p12(second, dev_certs.pkcs12["business"].read_bytes()),
    )
    assert record.approvals.get(role="business").signed_at is not None
    second.refresh_from_db()
    assert second.completed_at is not None and not second.prepared_pdf


def test_a_prepared_revision_edited_in_storage_is_refused_and_nothing_is_stored(approved, owners, dev_certs):
    """Security review B4: whoever can write the media storage between prepare and upload cannot get the
    owner's valid signature embedded into another revision: the embed step checks the kept digest."""
    request = prepare_signature(record=approved, user=owners["business"], role="business")
    cms = cms_with_p12(request, dev_certs.pkcs12["business"].read_bytes())
    with request.prepared_pdf.open("rb") as handle:
        prepared = handle.read()
    needle = f"Approves decision record v{approved.version}".encode()
    assert needle in prepared
    edited = prepared.replace(needle, f"REJECTS  decision record v{approved.version}".encode())
    with open(request.prepared_pdf.path, "wb") as handle:
        handle.write(edited)
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=cms)
    assert "changed since it was prepared" in excinfo.value.message_dict["cms"][0]
    assert unchanged(approved, "business", approved.signed_sha256)
    request.refresh_from_db()
    assert request.completed_at is None


def test_preparing_with_a_certificate_the_configured_crl_revokes_is_refused_before_signing(
    approved, owners, dev_certs, settings, tmp_path
):
    """Review O3: the owner hears it before signing, not when the CMS comes back."""
    ca_cert = x509.load_pem_x509_certificate(dev_certs.ca_certificate.read_bytes())
    ca_key = serialization.load_pem_private_key(dev_certs.ca_key.read_bytes(), password=None)
    enrolled = signing.pkcs12_certificate(dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE)
    serial = x509.load_pem_x509_certificate(enrolled.pem.encode()).serial_number
    revoked = x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(ca_cert.not_valid_before_utc)
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(ca_cert.not_valid_before_utc)
        .next_update(ca_cert.not_valid_after_utc)
        .add_revoked_certificate(revoked.build())
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "revoked.crl").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    settings.KVSELECT_CRLS = [str(tmp_path / "revoked.crl")]
    with pytest.raises(ValidationError, match="cannot sign: revoked"):
        prepare_signature(record=approved, user=owners["business"], role="business")
    assert not approved.signature_requests.exists()


def test_a_signature_that_does_not_verify_is_refused(approved, owners, dev_certs):
    request = prepare_signature(record=approved, user=owners["business"], role="business")
    cms = asn1_cms.ContentInfo.load(cms_with_p12(request, dev_certs.pkcs12["business"].read_bytes()))
    info = cms["content"]["signer_infos"][0]
    value = bytearray(info["signature"].native)
    value[-1] ^= 0x01
    info["signature"] = bytes(value)
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=cms.dump(force=True))
    message = excinfo.value.message_dict["cms"][0]
    assert "does not verify" in message or "cannot be checked" in message, message
    assert unchanged(approved, "business", approved.signed_sha256)


def test_garbage_instead_of_a_cms_is_refused_naming_the_field(approved, owners):
    prepare_signature(record=approved, user=owners["business"], role="business")
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=b"not a signature")
    assert "not a DER CMS SignedData" in excinfo.value.message_dict["cms"][0]


def test_an_upload_without_a_prepared_signature_is_refused(approved, owners, dev_certs):
    with pytest.raises(ValidationError) as excinfo:
        complete_signature(record=approved, user=owners["business"], role="business", cms=b"x")
    assert "prepare it first" in excinfo.value.message_dict["cms"][0]


def test_the_server_side_hsm_signs_with_the_pin_and_refuses_a_wrong_one(
    approved, owners, dev_certs, tmp_path, settings, softhsm_env
):
    key = softhsm_token(tmp_path / "hsm", dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE, token_label="org-hsm")
    settings.KVSELECT_PKCS11_MODULE = key.module
    settings.KVSELECT_HSM_KEYS = json.dumps({"business": {"token": "org-hsm", "key": "owner"}})
    with pytest.raises(ValidationError) as excinfo:
        sign_with_hsm(record=approved, user=owners["business"], role="business", pin="0000")
    assert "wrong PIN" in excinfo.value.message_dict["pin"][0]
    assert unchanged(approved, "business", approved.signed_sha256)
    record = sign_with_hsm(record=approved, user=owners["business"], role="business", pin=PIN)
    assert record.approvals.get(role="business").signed_at is not None
    with record.signed_pdf.open("rb") as handle:
        report = signing.verify_pdf(handle.read(), [dev_certs.ca_certificate.read_bytes()])
    assert report.all_ok and report.signatures[0].field == "business"
    with pytest.raises(ValidationError) as excinfo:  # the platform owner has no HSM key configured
        sign_with_hsm(record=record, user=owners["platform"], role="platform", pin=PIN)
    assert "No HSM key is configured" in excinfo.value.message_dict["pin"][0]


def test_an_hsm_key_whose_certificate_is_not_the_owners_is_refused(
    approved, owners, dev_certs, tmp_path, settings, softhsm_env
):
    softhsm_token(tmp_path / "hsm", dev_certs.pkcs12["platform"].read_bytes(), PASSPHRASE, token_label="org-hsm")
    settings.KVSELECT_PKCS11_MODULE = SOFTHSM_MODULE
    settings.KVSELECT_HSM_KEYS = json.dumps({"business": {"token": "org-hsm", "key": "owner"}})
    with pytest.raises(ValidationError) as excinfo:
        sign_with_hsm(record=approved, user=owners["business"], role="business", pin=PIN)
    assert "not your enrolled certificate" in excinfo.value.message_dict["pin"][0]
    assert unchanged(approved, "business", approved.signed_sha256)


def _production_root(folder: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Example Corp Signing Root")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = folder / "corp-root.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_the_pkcs12_upload_is_refused_once_a_production_root_is_configured(
    approved, owners, dev_certs, tmp_path, settings
):
    settings.KVSELECT_TRUST_ROOTS = [str(dev_certs.ca_certificate), str(_production_root(tmp_path))]
    with pytest.raises(ValidationError) as excinfo:
        sign(
            record=approved,
            user=owners["business"],
            role="business",
            pkcs12=dev_certs.pkcs12["business"].read_bytes(),
            passphrase=PASSPHRASE,
        )
    message = excinfo.value.message_dict["pkcs12"][0]
    assert "only for the development CA" in message and "Example Corp Signing Root" in message
    assert unchanged(approved, "business", approved.signed_sha256)
    # owner-side signing still works under the same configuration
    request = prepare_signature(record=approved, user=owners["business"], role="business")
    record = complete_signature(
        record=approved,
        user=owners["business"],
        role="business",
        cms=cms_with_p12(request, dev_certs.pkcs12["business"].read_bytes()),
    )
    assert record.approvals.get(role="business").signed_at is not None


def test_the_api_signs_owner_side_in_two_calls(approved, owners, dev_certs):
    client = APIClient()
    client.force_authenticate(owners["business"])
    response = client.post(f"/api/v1/records/{approved.pk}/signature-request/", {"role": "business"}, format="json")
    assert response.status_code == 201, response.json()
    request = response.json()
    assert request["role"] == "business" and len(request["document_digest"]) == 64
    signer = signing.load_signer(dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE)
    cms = signing.sign_attributes(signer, base64.b64decode(request["signed_attributes"]))
    bad = client.post(f"/api/v1/records/{approved.pk}/signature/", {"role": "business", "cms": "%%%"}, format="json")
    assert bad.status_code == 400 and "cms" in bad.json()
    response = client.post(
        f"/api/v1/records/{approved.pk}/signature/",
        {"role": "business", "cms": base64.b64encode(cms).decode()},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert [a["signed_at"] is not None for a in response.json()["approvals"] if a["role"] == "business"] == [True]
    again = client.post(
        f"/api/v1/records/{approved.pk}/signature/",
        {"role": "business", "cms": base64.b64encode(cms).decode()},
        format="json",
    )
    assert again.status_code == 400


def test_the_record_page_prepares_shows_the_commands_and_takes_the_signature(client, approved, owners, dev_certs):
    client.force_login(owners["business"])
    page = f"/selections/{approved.selection_id}/records/{approved.pk}/"
    assert "Prepare my signature" in client.get(page).content.decode()
    response = client.post(f"{page}sign/prepare/", {"role": "business"})
    assert response.status_code == 302
    html = client.get(page, HTTP_HOST="localhost:8123").content.decode()
    assert "kvselect-sign --request signature-request-" in html and "--pkcs11-module" in html
    # the server's own URL (issue 37 item 5), not a configured default port; the client from this server
    assert f"kvselect-sign --url http://localhost:8123 --record {approved.pk}" in html and ":8000" not in html
    assert "pip install http://localhost:8123/clients/kvselect_sign-0.1.0-py3-none-any.whl" in html
    download = client.get(f"{page}sign/request.json?role=business")
    assert download.status_code == 200
    request = json.loads(download.content)
    signer = signing.load_signer(dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE)
    cms = signing.sign_attributes(signer, base64.b64decode(request["signed_attributes"]))
    wrong = client.post(f"{page}sign/upload/", {"role": "business", "cms": SimpleUploadedFile("s.p7s", b"junk")})
    assert wrong.status_code == 400 and "not a DER CMS SignedData" in wrong.content.decode()
    assert f'data-page-url="{page}"' in wrong.content.decode()  # the refusal shows at the record's URL
    response = client.post(f"{page}sign/upload/", {"role": "business", "cms": SimpleUploadedFile("s.p7s", cms)})
    assert response.status_code == 302
    approved.refresh_from_db()
    assert approved.approvals.get(role="business").signed_at is not None
    after = client.get(page).content.decode()  # one signature of three: not yet a "signed PDF"
    assert "Download PDF (1 of 3 signatures)" in after and "Download signed PDF" not in after


def test_sign_record_refuses_a_user_who_is_not_the_roles_owner_and_signs_nothing(approved, owners, dev_certs, tmp_path):
    passphrase = tmp_path / "passphrase"
    passphrase.write_text(PASSPHRASE)
    with pytest.raises(CommandError, match="is not the business owner"):
        call_command(
            "sign-record", str(approved.pk), "--user", "platform", "--role", "business",
            "--pkcs12", str(dev_certs.pkcs12["platform"]), "--passphrase-file", str(passphrase),
        )  # fmt: skip
    assert unchanged(approved, "business", approved.signed_sha256)
    assert not approved.signature_requests.exists()


def test_refusals_carrying_digests_read_in_the_owners_language(approved, owners, dev_certs):
    """Walk m11: a refusal with a subject or digests was shown as the library wrote it, in English; it is
    a message whose figures stay as they are."""
    from django.utils import translation

    request = prepare_signature(record=approved, user=owners["business"], role="business")
    stranger_p12, _info = signing.issue_certificate(dev_certs.ca_certificate.parent, "Mallory", "mallory-pass")
    p12 = dev_certs.pkcs12["business"].read_bytes()
    other_pdf = signing.prepare_signature_fields(
        HTML(string="<p>another document</p>").write_pdf(), {"business": (0, 40, 60, 160, 140)}
    )
    certificate = signing.pkcs12_certificate(p12, PASSPHRASE)
    other = signing.prepare_owner_signature(other_pdf, certificate.pem.encode(), "business", "x", "business", "r")
    refusals = {}
    for case, cms in (
        ("stranger", foreign_cms(request, stranger_p12, "mallory-pass")),
        ("digest", signing.sign_attributes(signing.load_signer(p12, PASSPHRASE), other.signed_attributes)),
    ):
        for language in ("en", "zh-hans"):
            with translation.override(language), pytest.raises(ValidationError) as excinfo:
                complete_signature(record=approved, user=owners["business"], role="business", cms=cms)
            refusals[case, language] = excinfo.value.message_dict["cms"][0]
    assert refusals["stranger", "en"].startswith("signed with Mallory")
    assert refusals["stranger", "zh-hans"].startswith("签名所用证书为 Mallory")
    assert "不是该负责人登记的证书" in refusals["stranger", "zh-hans"]
    assert f"SHA-256 {approved.snapshot['owners'][0]['certificate_sha256'][:16]}…" in refusals["stranger", "zh-hans"]
    assert refusals["digest", "en"].startswith("this signature is over another document digest (")
    assert refusals["digest", "zh-hans"].startswith("该签名针对的是另一个文档摘要（")
    assert request.document_digest[:16] in refusals["digest", "zh-hans"]
    assert unchanged(approved, "business", approved.signed_sha256)


def test_the_library_refusals_with_figures_are_messages_with_a_chinese_translation():
    """Every SigningError the library builds with `refusal` keeps its English text and has a msgid the
    catalogue translates (the figures are params, never part of the msgid)."""
    from django.utils import translation

    from selection.certificates.signing.base import refusal
    from selection.i18n import message_text

    error = refusal("cms", "holds %(count)s signatures, expected exactly one", count=2)
    assert str(error) == "cms: holds 2 signatures, expected exactly one"
    with translation.override("zh-hans"):
        assert message_text(error.message) == "包含 2 个签名，应恰好为一个"
