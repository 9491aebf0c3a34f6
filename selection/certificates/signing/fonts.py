"""The signature stamp's font: the CJK face (`cjk_stamp_font`), whether it has a glyph for every
character of a stamp (`font_covers`), and the font engine pyHanko draws the stamp with
(`stamp_font_engine`), which embeds the subset of the face that the stamp uses.

Every stamp of a record is drawn in that face (see `sign._stamp_text_style`), so each of a record's
signatures embeds a subset of Noto Sans CJK SC (16 MB, 65,535 glyphs). pyHanko's
`GlyphAccumulatorFactory` read and parsed the file again for every signature (the CFF program's
charset and charstring index, the widths of every glyph), and fontTools' subsetter then decompiled
and subset every table of it (GSUB, GPOS and GDEF too: its conversion for fonts beyond 64k glyphs
runs before pyHanko's options drop them) only for pyHanko to embed the CFF program alone; the coverage
check parsed the cmap once more. About 0.35 s of CPU per signature, against 0.03 s for the whole
signature in a standard PDF font (`benchmarks/perf/signing.py`).

Now, per process and per font file (its path, modification time and size: a replaced file is read
again): the file's bytes, the code points it maps, and for a CID-keyed CFF face (Noto Sans CJK's
kind) HarfBuzz's face and each glyph's CID and width. Each signature then shapes with HarfBuzz as
pyHanko does and has HarfBuzz cut the subset from the parsed face (a few milliseconds; fontTools'
subsetter rewrites the font it subsets, so a font it parsed cannot serve two signatures): a later
signature costs what one in a standard font costs. The first in a process pays the parse, about
0.2 s. What reaches the PDF is what pyHanko's own engine writes (the text operators, widths,
ToUnicode map and font descriptor), and the embedded program holds the same glyphs under the same
CIDs with the same outlines and hints, rendered to the same pixels (.notdef, which no stamp draws,
keeps its outline); tests/selection/certificates/test_stamp_font.py holds both engines to that. Any
other face (TrueType, or a CFF face keyed by glyph names) takes pyHanko's engine from the cached
bytes, the subsetter given only what pyHanko embeds.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path

import uharfbuzz as hb
from fontTools.ttLib import TTCollection, TTFont
from pyhanko.pdf_utils.font.api import FontEngine
from pyhanko.pdf_utils.font.opentype import CIDFontType0, GlyphAccumulator, GlyphAccumulatorFactory

log = logging.getLogger("selection.certificates.signing")

# Debian's fonts-noto-cjk (scripts/install-system-deps.sh): a collection, of which pyHanko can
# embed only single faces, so the Simplified Chinese face is extracted once into a cache.
CJK_COLLECTIONS = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",)
CJK_FACE = "Noto Sans CJK SC"


def cjk_stamp_font(cache_dir: Path) -> Path | None:
    """An OpenType face covering Latin and CJK for signature stamps, or None where there is none.

    Extracted from the system's Noto Sans CJK collection into `cache_dir` on first use (about a
    second); later calls find the file.
    """
    target = Path(cache_dir) / "NotoSansCJKsc-Regular.otf"
    if target.is_file():
        return target

    for source in CJK_COLLECTIONS:
        if not Path(source).is_file():
            continue
        for font in TTCollection(source, lazy=True).fonts:
            if font["name"].getDebugName(1) == CJK_FACE:
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
                font.save(partial)
                partial.replace(target)  # atomic: a concurrent signer never reads half a font
                return target
    log.warning("no CJK font for signature stamps (looked for %s in %s)", CJK_FACE, ", ".join(CJK_COLLECTIONS))
    return None


def _file_key(font_path: Path | str) -> tuple[str, int, int]:
    """The cache key of a font file: its path, modification time and size (a replaced file is another key)."""
    stat = os.stat(font_path)
    return str(font_path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=4)
def _font_bytes(path: str, _mtime_ns: int, _size: int) -> bytes:
    return Path(path).read_bytes()


@functools.lru_cache(maxsize=4)
def _code_points(path: str, mtime_ns: int, size: int) -> frozenset[int]:
    with TTFont(io.BytesIO(_font_bytes(path, mtime_ns, size)), lazy=True) as font:
        return frozenset((font.getBestCmap() or {}).keys())


def font_covers(font_path: Path | str, text: str) -> bool:
    """Whether the font has a glyph for every character of `text` but white space."""
    code_points = _code_points(*_file_key(font_path))
    return all(ord(ch) in code_points for ch in text if not ch.isspace())


# What fontTools' subsetter must keep of a CFF-based face for pyHanko to embed its subset: the CFF
# program (CIDFontType0C); the pseudo-table GlyphOrder is no table.
_CFF_EMBEDDED = frozenset({"CFF ", "GlyphOrder"})


class _StampGlyphs(GlyphAccumulator):
    """pyHanko's glyph accumulator, which gives the subsetter of a CFF-based face only the CFF program.

    A TrueType face (KVSELECT_STAMP_FONT may name one) is embedded whole-file, every table subset, as
    pyHanko does it: what the subsetter keeps depends on the other tables (its kern table is dropped
    only where there is a GPOS table)."""

    def _extract_subset(self, options=None):
        if self.cff_charset is not None:
            for tag in [tag for tag in self.tt.keys() if tag not in _CFF_EMBEDDED]:
                del self.tt[tag]
        super()._extract_subset(options)


class _CidKeyedFace:
    """A CID-keyed CFF face (Noto Sans CJK's kind), parsed once per process: what every stamp's engine
    reads and nothing writes (HarfBuzz's face and font, the glyph names, each glyph's CID and width).
    The parsed tables are not kept: about 9 MB of Python objects for Noto Sans CJK, beside its bytes."""

    def __init__(self, data: bytes):
        self._data = data
        self.hb_face = hb.Face(data)
        self.hb_font = hb.Font(self.hb_face)
        with TTFont(io.BytesIO(data), lazy=True) as font:
            self.ps_name = next(record.toUnicode() for record in font["name"].names if record.nameID == 6)
            self.units_per_em = font["head"].unitsPerEm
            glyph_order = font.getGlyphOrder()
            metrics = font["hmtx"].metrics
            self._cids = array("I", (int(name[3:]) if name.startswith("cid") else 0 for name in glyph_order))
            self._widths = array("i", (metrics[name][0] for name in glyph_order))
        self.glyph_names = TTFont()  # pyHanko's ToUnicode fallback asks the font for a glyph's name
        self.glyph_names.setGlyphOrder(glyph_order)
        self._reverse_cmap: dict[str, set[int]] | None = None
        self._lock = threading.Lock()

    def cid_and_width(self, glyph_id: int) -> tuple[int, int]:
        """A glyph's CID and advance width (font units), as pyHanko reads them from the CFF charset and hmtx."""
        return self._cids[glyph_id], self._widths[glyph_id]

    @property
    def reverse_cmap(self) -> dict[str, set[int]]:
        """Each glyph name's code points: for pyHanko's ToUnicode fallback (a cluster of several glyphs)."""
        with self._lock:
            if self._reverse_cmap is None:
                with TTFont(io.BytesIO(self._data), lazy=True) as font:
                    self._reverse_cmap = font["cmap"].buildReversed()
            return self._reverse_cmap

    def subset(self, glyph_ids) -> TTFont:
        """The face cut down to `glyph_ids` by HarfBuzz (the same glyphs, keyed by the same CIDs)."""
        request = hb.SubsetInput()
        request.glyph_set.update(glyph_ids)
        request.flags = hb.SubsetFlags.NO_LAYOUT_CLOSURE  # as pyHanko's fontTools options: no GSUB closure
        return TTFont(io.BytesIO(hb.subset(self.hb_face, request).blob.data))


@functools.lru_cache(maxsize=4)
def _cid_keyed_face(path: str, mtime_ns: int, size: int) -> _CidKeyedFace | None:
    """The parsed face, or None where it is not a CID-keyed CFF face."""
    data = _font_bytes(path, mtime_ns, size)
    with TTFont(io.BytesIO(data), lazy=True) as font:
        if "CFF " not in font or getattr(font["CFF "].cff[0], "ROS", None) is None:
            return None
    return _CidKeyedFace(data)


class _CidKeyedStampGlyphs(GlyphAccumulator):
    """pyHanko's glyph accumulator on a face parsed once per process, subsetting with HarfBuzz.

    `GlyphAccumulator.__init__` parses the whole font, which is what this saves: it sets the same
    attributes from the cached face. Shaping, the widths, the ToUnicode map and the PDF font objects
    are pyHanko's; the embedded CFF program is HarfBuzz's subset of the face (fontTools' subsetter
    parses and rewrites all 65,535 glyphs' entries for each subset) with each glyph under its CID."""

    def __init__(self, writer, face: _CidKeyedFace, font_size, obj_stream=None):
        FontEngine.__init__(
            self, writer, face.ps_name, embedded_subset=True, obj_stream=obj_stream, font_size=font_size
        )
        self._face = face
        self.hb_font = face.hb_font
        self.tt = face.glyph_names  # read only, by pyHanko's ToUnicode fallback
        self._font_ref = writer.allocate_placeholder()
        self.cff_charset = None
        self.use_raw_gids = False
        self.features = None
        self.units_per_em = face.units_per_em
        self._glyphs: dict[int, tuple[int, int]] = {}
        self._cid_to_unicode: dict[int, str] = {}
        # `stamp_font_engine` sets none of these: HarfBuzz guesses script and direction, as in pyHanko
        self.ot_language_tag = self.ot_script_tag = self.writing_direction = self.bcp47_lang_code = None
        self._subset_created = self._write_prepared = False

    @property
    def _reverse_cmap(self):
        return self._face.reverse_cmap

    def _get_cid_and_width(self, glyph_id: int) -> tuple[int, int]:
        result = self._glyphs[glyph_id] = self._face.cid_and_width(glyph_id)
        return result

    def _extract_subset(self, options=None):
        self.cidfont_obj = CIDFontType0(self._face.subset(self._glyphs.keys()), self._face.ps_name, self.subset_prefix)


@dataclass(frozen=True)
class _StampFont(GlyphAccumulatorFactory):
    """`GlyphAccumulatorFactory` reading the font from this process's cache instead of the file."""

    def create_font_engine(self, writer, obj_stream=None) -> GlyphAccumulator:
        if obj_stream is None and writer.stream_xrefs and self.create_objstream_if_needed:
            obj_stream = writer.prepare_object_stream()
        key = _file_key(self.font_file)
        face = _cid_keyed_face(*key)
        if face is not None:
            return _CidKeyedStampGlyphs(writer, face, self.font_size, obj_stream)
        return _StampGlyphs(
            writer=writer,
            font_handle=io.BytesIO(_font_bytes(*key)),
            font_size=self.font_size,
            ot_script_tag=self.ot_script_tag,
            ot_language_tag=self.ot_language_tag,
            writing_direction=self.writing_direction,
            bcp47_lang_code=self.bcp47_lang_code,
            obj_stream=obj_stream,
        )


def stamp_font_engine(font_path: Path | str, font_size: int = 10) -> GlyphAccumulatorFactory:
    """The font engine factory for a stamp in the OpenType face at `font_path` (pyHanko's `TextBoxStyle.font`)."""
    return _StampFont(str(font_path), font_size=font_size)
