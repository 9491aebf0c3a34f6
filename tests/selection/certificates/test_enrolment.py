"""Owners enrol their signing certificate on their profile (upload, or issued by the configured CA)."""

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from selection.certificates import signing
from selection.certificates.services import current_certificate, enrol_certificate, issue_certificate
from selection.models import SigningCertificate

PASS = "enrol-pass-1"


@pytest.fixture(scope="module")
def dev_ca(tmp_path_factory):
    return signing.issue_dev_certificates(
        tmp_path_factory.mktemp("ca"), {"business": "Bea", "platform": "Pat", "security": "Sid"}, PASS
    )


@pytest.fixture
def trusted(dev_ca, settings):
    settings.KVSELECT_TRUST_ROOTS = [str(dev_ca.ca_certificate)]
    return dev_ca


def _pem(certs, role) -> bytes:
    return signing.pkcs12_certificate(certs.pkcs12[role].read_bytes(), PASS).pem.encode()


def test_an_owner_enrols_and_replaces_a_certificate_audited_in_their_selections(trusted, selection, selection_owners):
    bea = selection_owners["business"]
    first = enrol_certificate(user=bea, certificate=_pem(trusted, "business"))
    assert current_certificate(bea) == first and first.development and first.common_name == "Bea"
    assert first.trust_root == signing.DEV_CA_COMMON_NAME
    assert enrol_certificate(user=bea, certificate=_pem(trusted, "business")) == first  # idempotent
    second = enrol_certificate(user=bea, certificate=_pem(trusted, "security"))
    first.refresh_from_db()
    assert current_certificate(bea) == second and first.replaced_at is not None
    entries = selection.audit.filter(action="owner.certificate_enrolled").order_by("id")
    assert [e.new["sha256"] for e in entries] == [first.sha256, second.sha256]
    assert entries[1].old == {"sha256": first.sha256}


@pytest.mark.parametrize(
    "data,message",
    [
        (b"not a certificate", "not a PEM or DER X.509 certificate"),
        ("ca", "this is a CA certificate"),
        ("untrusted", "not certified for signing by a trust root"),
    ],
)
def test_enrolment_refuses_bad_certificates_naming_the_field(trusted, selection_owners, tmp_path, data, message):
    if data == "ca":
        data = trusted.ca_certificate.read_bytes()
    elif data == "untrusted":
        other = signing.issue_dev_certificates(tmp_path, {"business": "Mallory"}, PASS)
        data = _pem(other, "business")
    with pytest.raises(ValidationError) as excinfo:
        enrol_certificate(user=selection_owners["business"], certificate=data)
    assert message in excinfo.value.message_dict["certificate"][0]
    assert not SigningCertificate.objects.exists()


def test_one_certificate_is_current_for_one_user_only(trusted, selection_owners):
    enrol_certificate(user=selection_owners["business"], certificate=_pem(trusted, "business"))
    with pytest.raises(ValidationError, match="another user's enrolled certificate"):
        enrol_certificate(user=selection_owners["platform"], certificate=_pem(trusted, "business"))


def test_the_configured_ca_issues_a_key_once_and_enrols_its_certificate(trusted, selection_owners, settings):
    settings.KVSELECT_DEV_CA_DIR = str(trusted.ca_certificate.parent)
    pat = selection_owners["platform"]
    blob, enrolled = issue_certificate(user=pat, passphrase="a-long-passphrase")
    assert (
        signing.pkcs12_certificate(blob, "a-long-passphrase").sha256
        == enrolled.sha256
        == current_certificate(pat).sha256
    )
    assert enrolled.source == "issued" and enrolled.development
    with pytest.raises(ValidationError) as excinfo:
        issue_certificate(user=pat, passphrase="short")
    assert "passphrase" in excinfo.value.message_dict


def test_profile_page_enrols_an_upload_and_refuses_a_private_key(client, trusted, selection, selection_owners):
    bea = selection_owners["business"]
    client.force_login(bea)
    page = client.get(reverse("selection:profile")).content.decode()
    assert "No certificate enrolled yet" in page and "Support bot" in page
    pem = _pem(trusted, "business")
    response = client.post(reverse("selection:profile"), {"certificate": SimpleUploadedFile("bea.pem", pem)})
    assert response.status_code == 302
    page = client.get(reverse("selection:profile")).content.decode()
    assert current_certificate(bea).sha256 in page and "development certificate — not for procurement" in page
    key = b"-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"
    response = client.post(reverse("selection:profile"), {"certificate": SimpleUploadedFile("k.pem", key)})
    assert response.status_code == 400 and "holds a private key" in response.content.decode()


def test_profile_issue_downloads_the_pkcs12_once(client, trusted, selection_owners, settings):
    settings.KVSELECT_DEV_CA_DIR = str(trusted.ca_certificate.parent)
    client.force_login(selection_owners["security"])
    assert "Issue and download my key" in client.get(reverse("selection:profile")).content.decode()
    mismatch = client.post(reverse("selection:certificate-issue"), {"passphrase": "abcdefgh1", "confirm": "x"})
    assert mismatch.status_code == 400 and "the two passphrases differ" in mismatch.content.decode()
    response = client.post(reverse("selection:certificate-issue"), {"passphrase": "abcdefgh1", "confirm": "abcdefgh1"})
    assert response.status_code == 200 and response["Content-Type"] == "application/x-pkcs12"
    assert response["Cache-Control"] == "no-store"
    info = signing.pkcs12_certificate(response.content, "abcdefgh1")
    assert current_certificate(selection_owners["security"]).sha256 == info.sha256


def test_api_reads_and_enrols_the_callers_certificate(trusted, selection_owners):
    api = APIClient()
    api.force_authenticate(selection_owners["platform"])
    assert api.get("/api/v1/me/certificate/").status_code == 404
    bad = api.put("/api/v1/me/certificate/", {"certificate": "junk"}, format="json")
    assert bad.status_code == 400 and "certificate" in bad.json()
    response = api.put("/api/v1/me/certificate/", {"certificate": _pem(trusted, "platform").decode()}, format="json")
    assert response.status_code == 200 and response.json()["development"] is True
    assert api.get("/api/v1/me/certificate/").json()["sha256"] == response.json()["sha256"]
