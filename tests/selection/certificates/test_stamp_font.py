"""The stamp's font engine (selection.certificates.signing.fonts): every stamp of a record is drawn in
its CJK face, parsed once per process instead of once per signature, and the stamp embeds exactly
what pyHanko's own engine embeds."""

import datetime as dt
import io
import random
from pathlib import Path

import pyhanko.sign.signers.pdf_signer as pdf_signer
import pytest
from fontTools.ttLib import TTFont
from pyhanko.pdf_utils.font.opentype import GlyphAccumulatorFactory
from pyhanko.pdf_utils.reader import PdfFileReader
from weasyprint import HTML

from selection.certificates import signing
from selection.certificates.signing import fonts
from selection.certificates.signing import sign as sign_module

PASS = "stamp-font"
NAMES = {"business": "张伟", "platform": "Ada Lovelace"}
WORDS = signing.StampWords(heading="已数字签名（PAdES）", role="业务负责人")
TRUETYPE = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return signing.issue_dev_certificates(tmp_path_factory.mktemp("certs"), NAMES, PASS)


@pytest.fixture(scope="module")
def unsigned_pdf():
    pdf = HTML(string="<h1>Record</h1>" + "<p>Decision text.</p>" * 20).write_pdf()
    return signing.prepare_signature_fields(
        pdf, {"business": (0, 40, 60, 220, 140), "platform": (0, 240, 60, 420, 140)}
    )


@pytest.fixture(scope="module")
def cjk_font(tmp_path_factory):
    font = signing.cjk_stamp_font(tmp_path_factory.mktemp("fonts"))
    assert font is not None  # scripts/install-system-deps.sh installs fonts-noto-cjk
    return font


@pytest.fixture
def at_a_fixed_time(monkeypatch):
    """The stamp shows the signing time: fixed, so two signatures shape the same text."""

    class Fixed(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 12, 7, 9, 30, 15, tzinfo=dt.timezone.utc)

    monkeypatch.setattr(pdf_signer, "datetime", Fixed)


def _sign(pdf: bytes, certs, role: str, font, words=None) -> bytes:
    random.seed(37)  # pyHanko draws the subset's six-letter prefix at random
    p12 = certs.pkcs12[role].read_bytes()
    return signing.sign_pdf(pdf, p12, PASS, role, NAMES[role], role, "approve", stamp_font=font, stamp_words=words)


def _embedded_fonts(pdf: bytes, field: str) -> list[dict]:
    """Each font of the field's stamp: its name, font program, widths and ToUnicode map."""
    reader = PdfFileReader(io.BytesIO(pdf))
    widget = next(f.get_object() for f in reader.root["/AcroForm"]["/Fields"] if f.get_object()["/T"] == field)
    found, stack = [], [widget["/AP"]["/N"]]
    while stack:  # pyHanko nests the text box in form XObjects
        xobject = stack.pop()
        resources = xobject.get("/Resources")
        resources = resources.get_object() if resources is not None else {}
        for font in (resources.get("/Font") or {}).values():
            font = font.get_object()
            cid_font = font["/DescendantFonts"][0].get_object()
            descriptor = cid_font["/FontDescriptor"].get_object()
            program = (descriptor.get("/FontFile3") or descriptor.get("/FontFile2")).get_object().data
            found.append(
                {
                    "name": str(font["/BaseFont"]),
                    "program": program if "/FontFile3" in descriptor else _without_save_time(program),
                    "widths": str(cid_font["/W"]),
                    "to_unicode": font["/ToUnicode"].get_object().data,
                    "descriptor": str({k: v for k, v in descriptor.items() if not k.startswith("/FontFile")}),
                }
            )
        stack.extend(x.get_object() for x in (resources.get("/XObject") or {}).values())
    return found


def _without_save_time(truetype: bytes) -> bytes:
    """A TrueType program as saved with no modification time (fontTools stamps its head table on saving)."""
    font = TTFont(io.BytesIO(truetype), recalcTimestamp=False)
    font["head"].modified = 0
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()


def _with_pyhankos_engine(monkeypatch):
    monkeypatch.setattr(
        sign_module, "stamp_font_engine", lambda path, font_size: GlyphAccumulatorFactory(str(path), font_size)
    )


@pytest.mark.parametrize("role, words", [("business", WORDS), ("platform", None)])
def test_a_stamp_embeds_what_pyhankos_own_engine_embeds(
    unsigned_pdf, certs, cjk_font, at_a_fixed_time, monkeypatch, role, words
):
    """The cached engine subsets only the CFF program pyHanko embeds: the same bytes, widths and ToUnicode."""
    ours = _embedded_fonts(_sign(unsigned_pdf, certs, role, cjk_font, words), role)
    _with_pyhankos_engine(monkeypatch)
    theirs = _embedded_fonts(_sign(unsigned_pdf, certs, role, cjk_font, words), role)
    assert ours and all("NotoSansCJKsc-Regular" in font["name"] for font in ours), ours
    assert ours == theirs


@pytest.mark.skipif(not TRUETYPE.is_file(), reason="no DejaVu Sans (fonts-dejavu-core)")
def test_a_truetype_stamp_font_embeds_what_pyhankos_own_engine_embeds(
    unsigned_pdf, certs, at_a_fixed_time, monkeypatch
):
    """A TrueType face (KVSELECT_STAMP_FONT may name one) keeps every table pyHanko embeds."""
    ours = _embedded_fonts(_sign(unsigned_pdf, certs, "platform", TRUETYPE), "platform")
    _with_pyhankos_engine(monkeypatch)
    theirs = _embedded_fonts(_sign(unsigned_pdf, certs, "platform", TRUETYPE), "platform")
    assert ours and all("DejaVuSans" in font["name"] for font in ours), ours
    assert ours == theirs


def test_every_stamp_of_a_record_is_drawn_in_the_cjk_face_and_verifies(unsigned_pdf, certs, cjk_font):
    """Two signatures in one process (the second from the cache): both stamps in the CJK face, both valid."""
    pdf = _sign(unsigned_pdf, certs, "business", cjk_font, WORDS)
    pdf = _sign(pdf, certs, "platform", cjk_font)
    for role in ("business", "platform"):
        names = [font["name"] for font in _embedded_fonts(pdf, role)]
        assert names and all("NotoSansCJKsc-Regular" in name for name in names), names
    report = signing.verify_pdf(pdf, [certs.ca_certificate.read_bytes()])
    assert len(report.signatures) == 2 and all(s.intact and s.valid for s in report.signatures)


def test_the_font_file_is_read_once_per_version(tmp_path, cjk_font):
    """Later signatures take the bytes and the covered code points from the cache; a replaced file is read again."""
    font = tmp_path / "stamp.otf"
    font.write_bytes(cjk_font.read_bytes())
    assert fonts.font_covers(font, "张伟 Ada") and not fonts.font_covers(font, "\U0001fae0")
    before = fonts._code_points.cache_info()
    assert fonts.font_covers(font, "李娜")
    assert fonts._code_points.cache_info().hits == before.hits + 1
    assert fonts._code_points.cache_info().misses == before.misses

    if TRUETYPE.is_file():
        font.write_bytes(TRUETYPE.read_bytes())  # DejaVu Sans has no CJK
        assert not fonts.font_covers(font, "张伟")
