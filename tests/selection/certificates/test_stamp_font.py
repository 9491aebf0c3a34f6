"""The stamp's font engine (selection.certificates.signing.fonts): every stamp of a record is drawn in
its CJK face, parsed once per process instead of once per signature. Against pyHanko's own engine: the
same text operators, widths, ToUnicode map and font descriptor, the same glyphs under the same CIDs
with the same outlines and hints in the embedded program (HarfBuzz's subset), and the same pixels."""

import datetime as dt
import io
import random
import subprocess
from pathlib import Path

import pyhanko.sign.signers.pdf_signer as pdf_signer
import pytest
from fontTools.cffLib import CFFFontSet
from fontTools.pens.recordingPen import RecordingPen
from fontTools.ttLib import TTFont
from pyhanko.pdf_utils.font.opentype import GlyphAccumulatorFactory
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.pdf_utils.writer import PdfFileWriter
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
    """The field's stamp: each form XObject's content stream, then each font's name, program, widths,
    ToUnicode map and descriptor."""
    reader = PdfFileReader(io.BytesIO(pdf))
    widget = next(f.get_object() for f in reader.root["/AcroForm"]["/Fields"] if f.get_object()["/T"] == field)
    found, stack = [], [widget["/AP"]["/N"]]
    while stack:  # pyHanko nests the text box in form XObjects
        xobject = stack.pop()
        found.append({"content": xobject.data})
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
                    "program": _glyphs_by_cid(program) if "/FontFile3" in descriptor else _without_save_time(program),
                    "widths": str(cid_font["/W"]),
                    "to_unicode": font["/ToUnicode"].get_object().data,
                    "descriptor": str({k: v for k, v in descriptor.items() if not k.startswith("/FontFile")}),
                }
            )
        stack.extend(x.get_object() for x in (resources.get("/XObject") or {}).values())
    return found


def _glyphs_by_cid(cff_program: bytes) -> dict:
    """A CID-keyed CFF program's glyphs: each CID's outline and hints (its font dict's private values).
    Of .notdef only that it is there: HarfBuzz keeps its outline, fontTools empties it, and no stamp draws
    it (`font_covers` sends a text the face lacks glyphs for to a standard font)."""
    cff = CFFFontSet()
    cff.decompile(io.BytesIO(cff_program), None)
    top = cff[0]
    glyphs = {"ROS": top.ROS}
    for gid, name in enumerate(top.charset):
        pen = RecordingPen()
        top.CharStrings[name].draw(pen)
        private = top.FDArray[top.FDSelect[gid]].Private.rawDict
        glyphs[name] = (pen.value if gid else "", {k: v for k, v in private.items() if k != "Subrs"})
    return glyphs


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


def _pixels(pdf: bytes, tmp_path: Path, name: str) -> bytes:
    path = tmp_path / f"{name}.pdf"
    path.write_bytes(pdf)
    subprocess.run(["pdftoppm", "-r", "200", "-f", "1", "-l", "1", str(path), str(tmp_path / name)], check=True)
    return next(tmp_path.glob(f"{name}*.ppm")).read_bytes()


@pytest.mark.parametrize("role, words", [("business", WORDS), ("platform", None)])
def test_a_cjk_stamp_is_what_pyhankos_own_engine_draws(
    unsigned_pdf, certs, cjk_font, at_a_fixed_time, monkeypatch, tmp_path, role, words
):
    """The cached engine (HarfBuzz subsets the face) against pyHanko's (fontTools subsets it): the same stamp."""
    ours = _sign(unsigned_pdf, certs, role, cjk_font, words)
    _with_pyhankos_engine(monkeypatch)
    theirs = _sign(unsigned_pdf, certs, role, cjk_font, words)
    stamp = _embedded_fonts(ours, role)
    names = [font["name"] for font in stamp if "name" in font]
    assert len(names) == 1 and names[0].endswith("+NotoSansCJKsc-Regular-Identity-H"), names
    assert stamp == _embedded_fonts(theirs, role)
    assert _pixels(ours, tmp_path, "ours") == _pixels(theirs, tmp_path, "theirs")
    assert _pixels(ours, tmp_path, "ours") != _pixels(unsigned_pdf, tmp_path, "unsigned")  # the stamp is drawn


def test_a_text_is_shaped_and_mapped_back_to_its_characters_as_pyhanko_does_it(cjk_font):
    """Glyph by glyph, and a cluster of several glyphs (A with a combining circle, 가 with a tone mark),
    which pyHanko maps back through the face's cmap: the same operators, advances and ToUnicode entries."""
    text = "Ada A\u20dd 가\u302e 张伟 2026-12-07"
    ours = fonts.stamp_font_engine(cjk_font).create_font_engine(PdfFileWriter())
    theirs = GlyphAccumulatorFactory(str(cjk_font)).create_font_engine(PdfFileWriter())
    assert ours.shape(text) == theirs.shape(text)
    assert ours._cid_to_unicode == theirs._cid_to_unicode and "A\u20dd" not in ours._cid_to_unicode.values()


@pytest.mark.skipif(not TRUETYPE.is_file(), reason="no DejaVu Sans (fonts-dejavu-core)")
def test_a_truetype_stamp_font_embeds_what_pyhankos_own_engine_embeds(
    unsigned_pdf, certs, at_a_fixed_time, monkeypatch
):
    """A TrueType face (KVSELECT_STAMP_FONT may name one) keeps every table pyHanko embeds."""
    ours = _embedded_fonts(_sign(unsigned_pdf, certs, "platform", TRUETYPE), "platform")
    _with_pyhankos_engine(monkeypatch)
    theirs = _embedded_fonts(_sign(unsigned_pdf, certs, "platform", TRUETYPE), "platform")
    names = [font["name"] for font in ours if "name" in font]
    assert names and all("DejaVuSans" in name for name in names), names
    assert ours == theirs


def test_every_stamp_of_a_record_is_drawn_in_the_cjk_face_and_verifies(unsigned_pdf, certs, cjk_font, tmp_path):
    """Two signatures in one process (the second from the cache): both stamps in the CJK face, each an
    incremental update, both valid to kvselect's verification and to pdfsig."""
    first = _sign(unsigned_pdf, certs, "business", cjk_font, WORDS)
    parsed = fonts._cid_keyed_face.cache_info().misses
    pdf = _sign(first, certs, "platform", cjk_font)
    assert fonts._cid_keyed_face.cache_info().misses == parsed  # the second signature parses no font
    assert first.startswith(unsigned_pdf) and pdf.startswith(first) and len(pdf) > len(first)
    for role in ("business", "platform"):
        names = [font["name"] for font in _embedded_fonts(pdf, role) if "name" in font]
        assert names and all("NotoSansCJKsc-Regular" in name for name in names), names
    report = signing.verify_pdf(pdf, [certs.ca_certificate.read_bytes()])
    assert len(report.signatures) == 2 and all(s.intact and s.valid for s in report.signatures)
    path = tmp_path / "signed.pdf"
    path.write_bytes(pdf)
    out = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert out.count("Signature Validation: Signature is Valid.") == 2, out


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
