"""kvselect-sign, the owners' command (clients/kvselect-sign): its options, its own checks before
signing, and the two API calls it makes (prepare, upload) against the real API views.

The signing itself with a SoftHSM2 token and a local PKCS#12, as a separate process, is covered in
tests/selection/records/test_owner_signing.py.
"""

import base64
import io
import json
import urllib.error
from urllib.parse import urlparse

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kvselect_sign import cli
from selection.records.services import create_draft, start_review
from tests.support import lifecycle

PASSPHRASE = lifecycle.PASSPHRASE


@pytest.fixture
def approved(decided, architect, owners):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    return lifecycle.approve_all(record, owners)


@pytest.mark.parametrize(
    "argv, complaint",
    [
        (["--pkcs12", "k.p12"], "give --request FILE or --url URL"),
        (["--request", "r.json", "--url", "http://x", "--pkcs12", "k.p12"], "give --request FILE or --url URL"),
        (["--url", "http://x", "--pkcs12", "k.p12"], "--url needs --record and --role"),
        (["--request", "r.json", "--pkcs12", "k.p12"], "--request needs --out"),
        (["--request", "r.json", "--out", "s.p7s"], "give --pkcs12 FILE or --pkcs11-module PATH"),
        (["--request", "r.json", "--out", "s.p7s", "--pkcs11-module", "m.so"], "needs --key-label"),
    ],
)
def test_incomplete_options_are_refused_before_anything_is_read(argv, complaint, capsys):
    with pytest.raises(SystemExit) as excinfo:
        cli.parse_args(argv)
    assert excinfo.value.code == 2 and complaint in capsys.readouterr().err


def test_a_request_whose_attributes_do_not_commit_to_its_digest_is_not_signed():
    signed_attributes = base64.b64encode(bytes.fromhex("3100")).decode()
    with pytest.raises(cli.SignError, match="no CMS signed attributes with a messageDigest"):
        cli.check_request({"signed_attributes": signed_attributes, "document_digest": "00" * 32})


def test_a_wrong_passphrase_is_named_and_nothing_is_written(approved, owners, dev_certs, tmp_path, monkeypatch, capsys):
    request = tmp_path / "r.json"
    request.write_text("{}")
    monkeypatch.setenv("KVSELECT_PKCS12_PASSPHRASE", "not it")
    out = tmp_path / "s.p7s"
    argv = ["--request", str(request), "--out", str(out), "--pkcs12", str(dev_certs.pkcs12["business"])]
    assert cli.main(argv) == 1
    assert "wrong passphrase" in capsys.readouterr().err and not out.exists()


def api_as_urlopen(monkeypatch) -> list[str]:
    """Route kvselect-sign's HTTP calls to the API views in this process; returns the paths called."""
    calls, client = [], APIClient()

    def urlopen(request, timeout):
        path = urlparse(request.full_url).path
        calls.append(path)
        client.credentials(HTTP_AUTHORIZATION=request.headers["Authorization"])
        response = client.post(path, json.loads(request.data), format="json")
        if response.status_code >= 400:
            raise urllib.error.HTTPError(request.full_url, response.status_code, "", {}, io.BytesIO(response.content))
        return io.BytesIO(response.content)

    monkeypatch.setattr(cli.urllib.request, "urlopen", urlopen)
    return calls


def test_with_url_it_prepares_signs_and_uploads_in_two_api_calls(approved, owners, dev_certs, monkeypatch, capsys):
    token = Token.objects.create(user=owners["business"])
    monkeypatch.setenv("KVSELECT_API_TOKEN", token.key)
    monkeypatch.setenv("KVSELECT_PKCS12_PASSPHRASE", PASSPHRASE)
    calls = api_as_urlopen(monkeypatch)
    argv = ["--url", "https://kvselect.example", "--record", str(approved.pk), "--role", "business"]
    assert cli.main([*argv, "--pkcs12", str(dev_certs.pkcs12["business"])]) == 0, capsys.readouterr().err
    assert calls == [f"/api/v1/records/{approved.pk}/signature-request/", f"/api/v1/records/{approved.pk}/signature/"]
    assert "as business owner: approved" in capsys.readouterr().out
    assert approved.approvals.get(role="business").signed_at is not None
    # the security owner cannot sign before the platform owner: the server's refusal is printed, exit 1
    monkeypatch.setenv("KVSELECT_API_TOKEN", Token.objects.create(user=owners["security"]).key)
    argv = ["--url", "https://kvselect.example", "--record", str(approved.pk), "--role", "security"]
    assert cli.main([*argv, "--pkcs12", str(dev_certs.pkcs12["security"])]) == 1
    assert "platform owner signs next" in capsys.readouterr().err
