"""The demo's checks of its signed record: Poppler's pdfsig and kvselect's own verification must both
pass, because pdfsig also calls every signature valid on a PDF with an edit appended after the
last signature (issue 20 item 10; the demo runs `report_verification` before `check_pdfsig`). The
record is stored as kvselect stores it: a PDF kvselect did not issue never verifies (issue 35)."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest
from django.core.management.base import CommandError
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

from selection.certificates import signing
from selection.management.commands.demo import Command
from tests.support import signed_records
from tests.support.environment import IN_CI


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return signing.issue_dev_certificates(
        tmp_path_factory.mktemp("certs"), signed_records.NAMES, signed_records.PASSPHRASE
    )


@pytest.fixture(scope="module")
def record(certs):
    return signed_records.signed_record(certs)


@pytest.fixture
def signed(record, selection, owners, media):
    signed_records.store_record(selection, owners, record)
    return record.signed


def appended_edit(pdf: bytes) -> bytes:
    """An incremental update after the last signature that draws new text on page 1."""
    writer = IncrementalPdfFileWriter(io.BytesIO(pdf))
    page = writer.root["/Pages"]["/Kids"][0].get_object()
    extra = writer.add_object(generic.StreamObject(stream_data=b"BT /F1 24 Tf 100 100 Td (APPROVED BY NOBODY) Tj ET"))
    contents = page.raw_get("/Contents")
    page["/Contents"] = generic.ArrayObject(
        (list(contents) if isinstance(contents, generic.ArrayObject) else [contents]) + [extra]
    )
    writer.update_container(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def need_pdfsig():
    if not shutil.which("pdfsig"):
        if IN_CI:
            pytest.fail("pdfsig (poppler-utils) is missing in CI")
        pytest.skip("pdfsig (poppler-utils) is not installed")


@pytest.fixture
def trusted(certs, settings):
    settings.KVSELECT_TRUST_ROOTS = [str(certs.ca_certificate)]


def demo_checks(path) -> None:
    command = Command()
    command.report_verification(path)
    command.check_pdfsig(path)


def pdfsig_valid(path) -> int:
    return subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=120).stdout.count(
        "Signature is Valid"
    )


@pytest.mark.django_db
def test_the_demo_checks_pass_a_record_signed_three_times(signed, trusted, tmp_path):
    path = tmp_path / "record.pdf"
    path.write_bytes(signed)
    demo_checks(path)


@pytest.mark.django_db
def test_the_demo_checks_fail_an_edit_appended_after_the_last_signature(signed, trusted, tmp_path):
    path = tmp_path / "edited.pdf"
    path.write_bytes(appended_edit(signed))
    assert pdfsig_valid(path) == 3  # pdfsig alone still calls all three valid: its check alone passed this file
    Command().check_pdfsig(path)  # (it does not raise)
    with pytest.raises(CommandError, match="does not verify") as refused:
        demo_checks(path)
    assert "modifications=OTHER" in str(refused.value) or "OTHER" in str(refused.value)
