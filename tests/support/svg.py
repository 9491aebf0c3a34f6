"""Reading the charts' SVG back in tests: the texts, and which colour each legend entry has."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
COLOUR = re.compile(r"(?:stroke|fill):\s*(#[0-9a-fA-F]{6})")


def texts(svg: str) -> list[str]:
    """Every <text> of the chart, one per drawn line (a wrapped label is several)."""
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG}svg"
    return ["".join(node.itertext()) for node in root.iter(f"{SVG}text")]


def _colour(group: ET.Element) -> str | None:
    for node in group.iter():
        for found in COLOUR.findall(node.get("style") or ""):
            if found.lower() != "#ffffff":
                return found.lower()
    return None


def legend_colours(svg: str) -> dict[str, str]:
    """{legend label: the colour of its swatch}; a wrapped label's lines are joined by a space.

    A legend is a group `legend_N` holding, per entry, the swatch (a line or a patch) and then its
    text: the colour of the last swatch names the text that follows it.
    """
    root = ET.fromstring(svg.encode())
    found: dict[str, str] = {}
    for legend in root.iter(f"{SVG}g"):
        if not (legend.get("id") or "").startswith("legend_"):
            continue
        colour = None
        for child in legend:
            ident = child.get("id") or ""
            if ident.startswith("text_"):
                label = " ".join("".join(t.itertext()) for t in child.iter(f"{SVG}text"))
                if colour is not None:
                    found[label] = colour
            else:
                colour = _colour(child) or colour
    return found


def colours_used(svg: str) -> set[str]:
    """Every colour the chart fills or strokes with (lower case)."""
    return {c.lower() for c in COLOUR.findall(svg)}
