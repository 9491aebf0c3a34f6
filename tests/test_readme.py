"""The README says what the product does: the demo's port and processes, the upload-token page."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readmes_upload_token_page_and_variable_are_the_pages():
    page = (ROOT / "templates/benchmarks/uploads.html").read_text(encoding="utf-8")
    title = re.search(r'{% block title %}{% translate "([^"]+)" %}', page).group(1)
    variable = re.search(r"Authorization: Token \$(\w+)", page).group(1)
    assert f"**{title}** page" in README
    assert README.count(f"${variable}") >= 1 and f"secrets.{variable}" in README
    assert not re.findall(r"Token \$(?!" + variable + r")\w+", README)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_passes_the_port_on():
    out = subprocess.run(["make", "-n", "demo", "PORT=8001"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert 'scripts/demo.sh --port "8001"' in out.stdout
    assert "make demo PORT=8001" in README and "Ctrl+C" in README
