"""`manage.py issue-dev-certs` and `manage.py verify-record` (dashed command names)."""

import hashlib
import json

import pytest
from django.core.management import call_command, get_commands
from django.core.management.base import CommandError

from selection.certificates import signing
from selection.models import DecisionRecord
from selection.records.pdf import render_record
from tests.support.record_context import sample_record_context


def test_dashed_commands_are_discovered():
    commands = get_commands()
    assert commands.get("issue-dev-certs") == "selection"
    assert commands.get("verify-record") == "selection"


@pytest.fixture
def dev_certs(tmp_path, capsys):
    call_command("issue-dev-certs", out=str(tmp_path), passphrase="pw", business="张伟")
    out = capsys.readouterr().out
    assert "DEVELOPMENT" in out and "business.p12" in out
    return tmp_path


def test_issue_refuses_to_overwrite_without_force(dev_certs):
    with pytest.raises(CommandError, match="--force"):
        call_command("issue-dev-certs", out=str(dev_certs), passphrase="pw")
    call_command("issue-dev-certs", out=str(dev_certs), passphrase="pw", force=True)


def test_random_passphrase_is_written_privately(tmp_path):
    call_command("issue-dev-certs", out=str(tmp_path))
    pw = (tmp_path / "passphrase.txt").read_text().strip()
    assert len(pw) >= 20 and (tmp_path / "passphrase.txt").stat().st_mode & 0o077 == 0
    signing.load_signer((tmp_path / "security.p12").read_bytes(), pw)


def _owners_snapshot(dev_certs, roles=("business", "platform", "security"), simulated=False) -> dict:
    """The frozen snapshot of a record whose owners enrolled the development certificates of `dev_certs`."""
    owners = []
    for role in roles:
        info = signing.pkcs12_certificate((dev_certs / f"{role}.p12").read_bytes(), "pw")
        owners.append({"role": role, "name": info.common_name, "certificate_sha256": info.sha256})
    return {"simulated": simulated, "owners": owners}


def _stored(selection, architect, rendered: bytes, signed: bytes, snapshot: dict) -> DecisionRecord:
    return DecisionRecord.objects.create(
        selection=selection,
        version=1,
        status=DecisionRecord.Status.SIGNED,
        created_by=architect,
        snapshot=snapshot,
        snapshot_sha256="d" * 64,
        pdf_sha256=hashlib.sha256(rendered).hexdigest(),
        signed_sha256=hashlib.sha256(signed).hexdigest(),
    )


def test_verify_record_signed_and_tampered(dev_certs, tmp_path, capsys, architect, selection):
    rendered = render_record(sample_record_context(n_charts=0))
    unsigned = signing.prepare_signature_fields(rendered.pdf, rendered.signature_boxes)
    pdf = unsigned
    for role in ("business", "platform", "security"):
        pdf = signing.sign_pdf(pdf, (dev_certs / f"{role}.p12").read_bytes(), "pw", role, role, role, "approved")
    good = tmp_path / "good.pdf"
    good.write_bytes(pdf)
    with pytest.raises(CommandError, match="not a kvselect record"):  # not stored: a PDF kvselect did not issue
        call_command("verify-record", str(good), trust=[str(dev_certs / "dev-ca.pem")])
    assert "record: NOT A KVSELECT RECORD" in capsys.readouterr().out
    _stored(selection, architect, unsigned, pdf, _owners_snapshot(dev_certs))
    call_command("verify-record", str(good), trust=[str(dev_certs / "dev-ca.pem")], json=True)
    report = json.loads(capsys.readouterr().out)
    assert report["all_ok"] and len(report["signatures"]) == 3 and report["kvselect_record"]
    assert report["signatures"][0]["signer_common_name"] == "张伟"
    assert [r["kind"] for r in report["revisions"]] == ["signature", "signature", "signature"]

    bad = tmp_path / "bad.pdf"
    data = bytearray(pdf)
    data[pdf.index(b"stream") + 40] ^= 1
    bad.write_bytes(bytes(data))
    with pytest.raises(CommandError, match="not verified"):
        call_command("verify-record", str(bad), trust=[str(dev_certs / "dev-ca.pem")])
    assert "NOT VERIFIED" in capsys.readouterr().out


def test_verify_record_flags_simulated_and_the_development_ca(dev_certs, tmp_path, capsys, architect, selection):
    """A record kvselect issued on SIMULATED evidence, signed under the development CA: both in the report."""
    rendered = render_record(sample_record_context(n_charts=0))
    unsigned = signing.prepare_signature_fields(rendered.pdf, rendered.signature_boxes)
    p12 = (dev_certs / "business.p12").read_bytes()
    pdf = signing.sign_pdf(unsigned, p12, "pw", "business", "张伟", "business", "ok")
    _stored(selection, architect, unsigned, pdf, _owners_snapshot(dev_certs, roles=("business",), simulated=True))
    path = tmp_path / "simulated.pdf"
    path.write_bytes(pdf)
    call_command("verify-record", str(path), trust=[str(dev_certs / "dev-ca.pem")])
    out = capsys.readouterr().out
    assert f"trust root: {signing.DEV_CA_COMMON_NAME} [DEVELOPMENT CERTIFICATE - NOT FOR PROCUREMENT]" in out
    assert "SIMULATED: the evidence comes from the simulator - not for procurement" in out
    assert "record: exactly the signed record" in out and "ready for procurement: no" in out
