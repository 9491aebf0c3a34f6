"""The signature stamp's font: the CJK face (`cjk_stamp_font`), whether it has a glyph for every
character of a stamp (`font_covers`), and the font engine pyHanko draws the stamp with
(`stamp_font_engine`), which embeds the subset of the face that the stamp uses.

Every stamp of a record is drawn in that face (see `sign._stamp_text_style`), so each of a record's
signatures embeds a subset of Noto Sans CJK SC (16 MB, 65,535 glyphs). pyHanko's
`GlyphAccumulatorFactory` opened and parsed the file again for every signature, and fontTools'
subsetter then decompiled and subset every table of it only for pyHanko to embed the CFF program
alone (FontFile3; the font descriptor and the widths are read from the whole face before): the GSUB,
GPOS and GDEF tables, which the subsetter converts for fonts beyond 64k glyphs even though pyHanko's
options drop them, the cmap, hmtx, vmtx and OS/2 tables. The coverage check parsed the cmap once
more. Together about 0.35 s of CPU per signature against 0.03 s for the whole signature in a
standard PDF font (`benchmarks/perf/signing.py`).

Now kept per process, keyed by the file's path, modification time and size (a replaced file is read
again): its bytes and the code points it maps; and the subsetter is given the CFF program alone.
What each signature still pays, about 0.1 s, is fontTools parsing the CFF program's charset and
charstring index and the widths (hmtx, vmtx) of all 65,535 glyphs, and subsetting the CFF program:
the subsetter rewrites the font it subsets, so one parsed font cannot serve two signatures. The
embedded program, widths and ToUnicode map are byte for byte pyHanko's own
(tests/selection/certificates/test_stamp_font.py).
"""

from __future__ import annotations

import functools
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from fontTools.ttLib import TTCollection, TTFont
from pyhanko.pdf_utils.font.opentype import GlyphAccumulator, GlyphAccumulatorFactory

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


@dataclass(frozen=True)
class _StampFont(GlyphAccumulatorFactory):
    """`GlyphAccumulatorFactory` reading the font from this process's cache instead of the file."""

    def create_font_engine(self, writer, obj_stream=None) -> GlyphAccumulator:
        if obj_stream is None and writer.stream_xrefs and self.create_objstream_if_needed:
            obj_stream = writer.prepare_object_stream()
        return _StampGlyphs(
            writer=writer,
            font_handle=io.BytesIO(_font_bytes(*_file_key(self.font_file))),
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
