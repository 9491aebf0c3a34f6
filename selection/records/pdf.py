"""Render a decision record to PDF with WeasyPrint, and find its signature boxes.

Django's template engine (autoescaping on) renders ``templates/records/record.html``; user text
is always text. WeasyPrint fetches through ``RestrictedURLFetcher``: only ``data:`` URIs and
files inside the repository's ``templates/`` and ``static/`` directories, never the network or
other files - defence in depth should anything ever reach the HTML unescaped.

The template marks each signature area with ``id="sigfield-<role>"``; after layout its position
is read from WeasyPrint's anchors and converted to PDF points, so ``selection.signing`` can
create the visible signature fields exactly where the template drew them.
No Django models and no pyHanko here.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.template import Context, Engine
from django.utils import timezone, translation
from weasyprint import HTML
from weasyprint.urls import URLFetcher

from selection.domain.records import build_record_context

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = REPO_ROOT / "templates"
STATIC_DIR = REPO_ROOT / "static"
RECORD_TEMPLATE = "records/record.html"
PX_TO_PT = 0.75  # CSS px are 1/96 in, PDF points 1/72 in
SIGFIELD_PREFIX = "sigfield-"

# A box is (page index from 0, x1, y1, x2, y2) in PDF points, origin bottom-left (pyHanko's).
Box = tuple[int, float, float, float, float]


class RecordRenderError(ValueError):
    """The record could not be rendered; the message names the cause."""


class RestrictedURLFetcher(URLFetcher):
    """Allow ``data:`` URIs and files under the given directories; refuse everything else."""

    def __init__(self, allowed_dirs: tuple[Path, ...] = (TEMPLATE_DIR, STATIC_DIR)):
        super().__init__(allowed_protocols={"data", "file"}, allow_redirects=False)
        self.allowed_dirs = tuple(d.resolve() for d in allowed_dirs)
        self.refused: list[str] = []  # what the document tried to load and did not get

    def is_allowed(self, url: str) -> bool:
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme == "data":
            return True
        if scheme != "file":
            return False
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            return False
        path = Path(unquote(parts.path)).resolve()
        return any(path.is_relative_to(d) for d in self.allowed_dirs)

    def fetch(self, url, headers=None):
        if not self.is_allowed(url):
            self.refused.append(url)
            log.warning("record PDF: refused to fetch %s", url[:200])
            raise ValueError(f"record PDF may not fetch {url[:200]!r}")
        return super().fetch(url, headers)


@dataclass(frozen=True)
class RenderedRecord:
    pdf: bytes
    signature_boxes: dict[str, Box]  # role (business, platform, security, seal) -> box
    page_count: int
    refused_urls: list[str] = field(default_factory=list)


def _engine() -> Engine:
    return Engine(
        dirs=[str(TEMPLATE_DIR)],
        autoescape=True,
        debug=False,
        libraries={"i18n": "django.templatetags.i18n", "kvselect": "selection.templatetags.kvselect"},
    )


def _svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def render_record_html(context: dict) -> str:
    """Validate the context (see selection.domain.records) and render the template to HTML."""
    ctx = build_record_context(context)
    for test in ctx["validation"]:
        for chart in test.get("charts", []):
            # Charts are images (data: URIs), never inline markup: an SVG cannot inject HTML.
            chart["data_uri"] = _svg_data_uri(chart["svg"])
    # use_l10n=False: numbers render the same everywhere; the text is in the record's language
    # (not the request's), so the PDF reads the same whoever renders it.
    # Times are written in the time zone of the architect who sent the record to review (UTC for
    # older snapshots), with the zone named next to each one.
    with translation.override(ctx["record"].get("language") or "en"), timezone.override(record_zone(ctx)):
        return _engine().get_template(RECORD_TEMPLATE).render(Context(ctx, use_l10n=False))


def record_zone(ctx: dict) -> ZoneInfo:
    try:
        return ZoneInfo(str(ctx["record"].get("time_zone") or "UTC"))
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return ZoneInfo("UTC")


def html_to_pdf(html: str, fetcher: RestrictedURLFetcher | None = None) -> RenderedRecord:
    """Lay out HTML (base URL: templates/records/) and return the PDF and signature boxes."""
    fetcher = fetcher or RestrictedURLFetcher()
    base_url = (TEMPLATE_DIR / "records").as_uri() + "/"
    try:
        document = HTML(string=html, base_url=base_url, url_fetcher=fetcher).render()
    except Exception as exc:
        raise RecordRenderError(f"layout failed: {exc}") from exc
    boxes: dict[str, Box] = {}
    for index, page in enumerate(document.pages):
        for name, (x1, y1, x2, y2) in page.anchors.items():
            if name.startswith(SIGFIELD_PREFIX) and name[len(SIGFIELD_PREFIX) :] not in boxes:
                boxes[name[len(SIGFIELD_PREFIX) :]] = (
                    index,
                    round(x1 * PX_TO_PT, 2),
                    round((page.height - y2) * PX_TO_PT, 2),
                    round(x2 * PX_TO_PT, 2),
                    round((page.height - y1) * PX_TO_PT, 2),
                )
    pdf = document.write_pdf()
    return RenderedRecord(pdf, boxes, len(document.pages), list(fetcher.refused))


def render_record(context: dict, fetcher: RestrictedURLFetcher | None = None) -> RenderedRecord:
    """Render a record context to an unsigned PDF plus where each signature box sits."""
    rendered = html_to_pdf(render_record_html(context), fetcher)
    missing = [o["role"] for o in context.get("owners", []) if o.get("role") not in rendered.signature_boxes]
    if missing:
        raise RecordRenderError(f"template: no signature box for role(s) {missing}")
    return rendered
