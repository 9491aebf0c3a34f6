"""PAdES signing, verification and the development CA (selection.signing).

pdfsig (Poppler) is the independent cross-check: it must call every signature valid, and
invalid after one flipped byte. The dev CA is not in pdfsig's NSS database, so pdfsig reports
the issuer as untrusted; we assert on "Signature Validation" only.
"""

import io
import re
import shutil
import subprocess

import pytest
from weasyprint import HTML

from selection.certificates import signing
from selection.certificates.signing import SigningError

ROLES = ("business", "platform", "security", "seal")
NAMES = {"business": "张伟", "platform": "Ada Lovelace", "security": "Sam Okafor", "seal": "kvselect seal"}
PASS = "correct horse"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return signing.issue_dev_certificates(tmp_path_factory.mktemp("certs"), NAMES, PASS)


@pytest.fixture(scope="module")
def ca(certs):
    return certs.ca_certificate.read_bytes()


@pytest.fixture(scope="module")
def unsigned_pdf():
    html = "<h1>Record</h1>" + "<p>Decision text that must not change.</p>" * 40
    pdf = HTML(string=html).write_pdf()
    boxes = {role: (0, 40 + 130 * i, 60, 160 + 130 * i, 140) for i, role in enumerate(ROLES)}
    return signing.prepare_signature_fields(pdf, boxes)


@pytest.fixture(scope="module")
def revisions(unsigned_pdf, certs):
    """The PDF after each signature, in order business, platform, security, seal."""
    out, pdf = [], unsigned_pdf
    for role in ROLES:
        pdf = signing.sign_pdf(
            pdf, certs.pkcs12[role].read_bytes(), PASS, role, NAMES[role], role, "approve the engine choice"
        )
        out.append(pdf)
    return out


def _pdfsig(pdf: bytes, tmp_path) -> str:
    path = tmp_path / "doc.pdf"
    path.write_bytes(pdf)
    proc = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60)
    return proc.stdout + proc.stderr


def _flip_byte_in_first_revision(pdf: bytes, unsigned_len: int) -> bytes:
    """Flip one byte inside a content stream of the original (unsigned) revision."""
    start = pdf.index(b"stream", 0, unsigned_len) + 40
    assert start < unsigned_len
    data = bytearray(pdf)
    data[start] ^= 0x01
    return bytes(data)


def test_three_owners_and_seal_verify_intact_valid_trusted(revisions, ca):
    report = signing.verify_pdf(revisions[-1], [ca])
    assert [s.field for s in report.signatures] == list(ROLES)
    assert [s.signer_common_name for s in report.signatures] == [NAMES[r] for r in ROLES]
    for sig in report.signatures:
        assert sig.intact and sig.valid and sig.trusted, sig
        assert sig.signing_time is not None
        assert sig.docmdp_ok is not False
    # only the last signature covers the whole file; earlier ones saw form filling only
    assert [s.covers_whole_document for s in report.signatures] == [False, False, False, True]
    assert {s.modification_level for s in report.signatures[:-1]} == {"FORM_FILLING"}
    assert report.signatures[0].reason.startswith("Business owner")
    assert report.all_ok
    assert re.fullmatch(r"[0-9a-f]{64}", report.sha256)
    assert "ALL SIGNATURES OK" in report.as_text()
    assert report.as_dict()["all_ok"] is True


def test_each_signature_is_an_incremental_update(unsigned_pdf, revisions):
    previous = unsigned_pdf
    for pdf in revisions:
        assert pdf.startswith(previous) and len(pdf) > len(previous)
        previous = pdf


def test_pdfsig_agrees_every_signature_valid(revisions, tmp_path):
    out = _pdfsig(revisions[-1], tmp_path)
    assert out.count("Signature Validation: Signature is Valid.") == len(ROLES), out
    assert out.count("Signature Type: ETSI.CAdES.detached") == len(ROLES)
    assert "Total document signed" in out
    for name in NAMES.values():
        assert f"Signer Certificate Common Name: {name}" in out


def test_flipped_byte_fails_every_signature_in_both_verifiers(unsigned_pdf, revisions, ca, tmp_path):
    tampered = _flip_byte_in_first_revision(revisions[-1], len(unsigned_pdf))
    report = signing.verify_pdf(tampered, [ca])
    assert len(report.signatures) == len(ROLES)
    assert all(not s.intact and not s.ok for s in report.signatures), report.as_text()
    assert not report.all_ok
    out = _pdfsig(tampered, tmp_path)
    assert "Signature is Valid" not in out, out
    assert out.count("Signature Validation: Signature is Invalid.") == len(ROLES) or out.count(
        "Signature Validation: Digest Mismatch."
    ) == len(ROLES), out


def test_content_appended_after_signing_voids_every_signature(revisions, ca):
    """A "shadow" incremental update that draws new text on page 1 keeps each signature's
    bytes intact, so the verifier must judge the later revision itself (pdfsig only says
    "Not total document signed" here)."""
    import io

    from pyhanko.pdf_utils import generic
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    writer = IncrementalPdfFileWriter(io.BytesIO(revisions[-1]))
    page = writer.root["/Pages"]["/Kids"][0].get_object()
    extra = writer.add_object(generic.StreamObject(stream_data=b"BT /F1 24 Tf 100 100 Td (APPROVED BY NOBODY) Tj ET"))
    contents = page.raw_get("/Contents")
    page["/Contents"] = generic.ArrayObject(
        (list(contents) if isinstance(contents, generic.ArrayObject) else [contents]) + [extra]
    )
    writer.update_container(page)
    out = io.BytesIO()
    writer.write(out)

    report = signing.verify_pdf(out.getvalue(), [ca])
    assert len(report.signatures) == len(ROLES)
    for sig in report.signatures:
        assert sig.intact and sig.valid and not sig.covers_whole_document
        assert sig.modification_level == "OTHER" and not sig.ok
    assert not report.all_ok


def test_unknown_root_is_intact_and_valid_but_not_trusted(revisions, tmp_path):
    other = signing.issue_dev_certificates(tmp_path, {"business": "Mallory"}, "x")
    report = signing.verify_pdf(revisions[-1], [other.ca_certificate.read_bytes()])
    assert all(s.intact and s.valid and not s.trusted for s in report.signatures)
    assert not report.all_ok


def test_known_hashes_say_whether_kvselect_issued_the_file(revisions, ca):
    import hashlib

    digest = hashlib.sha256(revisions[-1]).hexdigest()
    assert signing.verify_pdf(revisions[-1], [ca], known_hashes=[digest]).matches_known_record
    assert signing.verify_pdf(revisions[-1], [ca], known_hashes=["0" * 64]).matches_known_record is False
    assert signing.verify_pdf(revisions[-1], [ca]).matches_known_record is None


def test_not_a_pdf_is_reported_not_raised(ca):
    report = signing.verify_pdf(b"hello, not a pdf", [ca])
    assert report.error and not report.signatures and not report.all_ok


@pytest.mark.parametrize(
    "blob,passphrase",
    [
        ("right-file", "wrong passphrase"),
        ("garbage", PASS),
        ("empty", PASS),
    ],
)
def test_bad_pkcs12_or_passphrase_is_a_clear_signing_error(unsigned_pdf, certs, blob, passphrase):
    data = {"right-file": certs.pkcs12["business"].read_bytes(), "garbage": b"\x30\x03junk", "empty": b""}[blob]
    with pytest.raises(SigningError, match="pkcs12"):
        signing.sign_pdf(unsigned_pdf, data, passphrase, "business", "x", "business", "r")


def test_a_signed_field_cannot_be_signed_again(revisions, certs):
    with pytest.raises(SigningError, match="already signed"):
        signing.sign_pdf(revisions[0], certs.pkcs12["platform"].read_bytes(), PASS, "business", "x", "business", "r")


def test_new_field_needs_a_box_and_then_signs(unsigned_pdf, certs, ca):
    p12 = certs.pkcs12["platform"].read_bytes()
    with pytest.raises(SigningError, match="box"):
        signing.sign_pdf(unsigned_pdf, p12, PASS, "extra", "x", "platform", "r")
    with pytest.raises(SigningError, match="x2 > x1"):
        signing.sign_pdf(unsigned_pdf, p12, PASS, "extra", "x", "platform", "r", box=(0, 50, 50, 10, 10))
    pdf = signing.sign_pdf(unsigned_pdf, p12, PASS, "extra", "x", "platform", "r", box=(0, 300, 300, 450, 360))
    sigs = signing.verify_pdf(pdf, [ca]).signatures
    assert [s.field for s in sigs] == ["extra"] and sigs[0].ok


def test_dev_ca_is_clearly_marked_and_keys_are_private(certs):
    from cryptography import x509

    ca_cert = x509.load_pem_x509_certificate(certs.ca_certificate.read_bytes())
    assert "DEVELOPMENT CA" in ca_cert.subject.rfc4514_string()
    assert "not for production" in ca_cert.subject.rfc4514_string()
    for path in (*certs.pkcs12.values(), certs.ca_key, certs.tsa_key):
        assert path.stat().st_mode & 0o077 == 0
    tsa = x509.load_pem_x509_certificate(certs.tsa_certificate.read_bytes())
    usage = tsa.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert usage.critical and list(usage.value) == [x509.oid.ExtendedKeyUsageOID.TIME_STAMPING]
    crl = x509.load_pem_x509_crl(certs.crl.read_bytes())
    assert crl.is_signature_valid(ca_cert.public_key()) and len(crl) == 0


def test_dev_certificates_reject_empty_inputs(tmp_path):
    with pytest.raises(SigningError, match="passphrase"):
        signing.issue_dev_certificates(tmp_path, {"business": "A"}, "")
    with pytest.raises(SigningError, match="names.business"):
        signing.issue_dev_certificates(tmp_path, {"business": " "}, "pw")


def test_pdfsig_is_installed():
    # The cross-check above is only meaningful with Poppler present (scripts/install-system-deps.sh).
    assert shutil.which("pdfsig"), "poppler-utils (pdfsig) is not installed"


def _stamp_appearance(pdf: bytes, field: str) -> tuple[bytes, set[str]]:
    """The decoded appearance stream of a signature field's widget, and its fonts' base names."""
    from pyhanko.pdf_utils.reader import PdfFileReader

    reader = PdfFileReader(io.BytesIO(pdf))
    for annot_ref in reader.root["/AcroForm"]["/Fields"]:
        widget = annot_ref.get_object()
        if widget.get("/T") == field:
            appearance = widget["/AP"]["/N"]
            fonts = set()
            stack = [appearance]
            while stack:  # pyHanko nests the text box in form XObjects
                xobject = stack.pop()
                resources = xobject.get("/Resources")
                if resources is None:
                    continue
                resources = resources.get_object() if hasattr(resources, "get_object") else resources
                for font in (resources.get("/Font") or {}).values():
                    fonts.add(str(font.get_object()["/BaseFont"]))
                stack.extend(x.get_object() for x in (resources.get("/XObject") or {}).values())
            return appearance.data, fonts
    raise AssertionError(f"no widget {field}")


def test_a_cjk_signer_name_is_drawn_in_an_embedded_cjk_font(unsigned_pdf, certs, ca, tmp_path):
    """张伟's stamp embeds a subset of Noto Sans CJK (extracted once from the system collection); a Latin
    name's stamp beside it is drawn in the same face (walk p8: one record's stamps looked different), and
    without a CJK font the stamp points to the name."""
    font = signing.cjk_stamp_font(tmp_path / "fonts")
    assert font is not None and font.stat().st_size > 1_000_000  # system-deps installs fonts-noto-cjk
    assert signing.cjk_stamp_font(tmp_path / "fonts") == font  # cached
    cjk = signing.sign_pdf(
        unsigned_pdf,
        certs.pkcs12["business"].read_bytes(),
        PASS,
        "business",
        NAMES["business"],
        "business",
        "approve",
        stamp_font=font,
    )
    _, fonts = _stamp_appearance(cjk, "business")
    assert any("NotoSansCJK" in name for name in fonts), fonts
    assert signing.verify_pdf(cjk, [ca]).signatures[0].valid

    latin = signing.sign_pdf(
        unsigned_pdf,
        certs.pkcs12["platform"].read_bytes(),
        PASS,
        "platform",
        NAMES["platform"],
        "platform",
        "approve",
        stamp_font=font,
    )
    _, fonts = _stamp_appearance(latin, "platform")
    assert fonts and all("NotoSansCJK" in name for name in fonts), fonts

    without = signing.sign_pdf(
        unsigned_pdf, certs.pkcs12["business"].read_bytes(), PASS, "business", NAMES["business"], "business", "approve"
    )
    data, fonts = _stamp_appearance(without, "business")
    assert not any("NotoSansCJK" in name for name in fonts)


def test_a_stamp_is_written_in_the_words_it_is_given(unsigned_pdf, certs, ca, tmp_path):
    """Walk p8: the stamp's heading and role in the record's language (the caller translates them), in the
    CJK face with the CJK name; the signature dictionary keeps its English reason."""
    font = signing.cjk_stamp_font(tmp_path / "fonts")
    words = signing.StampWords(heading="已数字签名（PAdES）", role="平台负责人")
    pdf = signing.sign_pdf(
        unsigned_pdf,
        certs.pkcs12["platform"].read_bytes(),
        PASS,
        "platform",
        NAMES["platform"],
        "platform",
        "approve",
        stamp_font=font,
        stamp_words=words,
    )
    _, fonts = _stamp_appearance(pdf, "platform")
    assert fonts and all("NotoSansCJK" in name for name in fonts), fonts
    path = tmp_path / "signed.pdf"
    path.write_bytes(pdf)
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True).stdout
    assert "已数字签名（PAdES）" in text and "平台负责人" in text and NAMES["platform"] in text, text
    assert "Digitally signed" not in text
    report = signing.verify_pdf(pdf, [ca])
    assert report.signatures[0].valid
    english = signing.sign_pdf(
        unsigned_pdf, certs.pkcs12["platform"].read_bytes(), PASS, "platform", NAMES["platform"], "platform", "approve"
    )
    path.write_bytes(english)
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True).stdout
    assert signing.STAMP_HEADING in text and "Platform owner" in text
