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


def lines_in(svg: str, colour: str) -> list[list[tuple[float, float]]]:
    """The vertices of every line the chart draws in `colour` that joins two points or more: an open
    path of straight segments stroked in that colour, outside <defs> (a marker's shape) and the legend
    (its swatches). Bars are closed shapes and markers are <use> of a <defs> shape, so in a latency
    chart these are the series' lines from one load point to another."""
    root = ET.fromstring(svg.encode())
    skipped = {
        id(node)
        for group in root.iter()
        if group.tag == f"{SVG}defs" or (group.get("id") or "").startswith("legend_")
        for node in group.iter()
    }
    stroke = re.compile(r"(?:^|;)\s*stroke:\s*" + re.escape(colour) + r"\b", re.IGNORECASE)
    found = []
    for path in root.iter(f"{SVG}path"):
        d = path.get("d") or ""
        if id(path) in skipped or not stroke.search(path.get("style") or "") or re.search(r"[^MLml\s\d.eE+-]", d):
            continue  # not this colour's line, or a curve, an arc, a closed shape
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", d)]
        points = list(zip(numbers[::2], numbers[1::2], strict=True))
        if len({(round(x, 2), round(y, 2)) for x, y in points}) > 1:
            found.append(points)
    return found
