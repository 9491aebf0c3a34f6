"""The owners' signing command installs as a wheel the server offers (issue 37 item 5): pip accepts it
and installs the command; the server serves it without a login; the record page's commands name the
server's own URL, not a configured default port; the command keeps quiet about DSA's deprecation."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest
from django.test import Client

from selection.records import signing_client

ROOT = Path(__file__).resolve().parents[3]


def test_the_wheel_is_a_valid_reproducible_wheel_pip_installs(tmp_path):
    built = signing_client.wheel()
    assert built.filename == "kvselect_sign-0.1.0-py3-none-any.whl"
    assert signing_client._build.__wrapped__(signing_client._fingerprint(signing_client.CLIENT_DIR)) == built
    names = zipfile.ZipFile(BytesIO(built.content)).namelist()
    assert "kvselect_sign/cli.py" in names and "kvselect_sign-0.1.0.dist-info/entry_points.txt" in names
    wheel = tmp_path / built.filename
    wheel.write_bytes(built.content)
    target = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (target / "kvselect_sign" / "cli.py").read_bytes() == (
        ROOT / "clients/kvselect-sign/src/kvselect_sign/cli.py"
    ).read_bytes()
    assert (
        "kvselect-sign = kvselect_sign.cli:main" in (target / "bin" / "kvselect-sign").read_text()
        or (target / "bin" / "kvselect-sign").exists()
    )
    metadata = (target / "kvselect_sign-0.1.0.dist-info" / "METADATA").read_text()
    assert "Requires-Dist: pyhanko==0.38.*" in metadata and 'extra == "pkcs11"' in metadata


@pytest.mark.django_db
def test_the_server_offers_the_wheel_without_a_login():
    built = signing_client.wheel()
    response = Client().get(f"/clients/{built.filename}")
    assert response.status_code == 200 and response.content == built.content
    assert Client().get("/clients/kvselect_sign-9.9-py3-none-any.whl").status_code == 404


def test_the_command_keeps_quiet_about_dsas_deprecation():
    code = (
        "import kvselect_sign, warnings; "
        "warnings.warn('DSA is deprecated and will be removed in a future release', UserWarning)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "clients/kvselect-sign/src")},
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == ""
