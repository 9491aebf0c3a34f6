"""The page crawler (issue 37 item 2): every page a person reaches from a selection, as they see it.

It starts from a few pages (the dashboard, a selection's overview, the verify page, the profile),
follows every same-site link in what the page shows, and opens each page once per person and
language. On each it records what `tests.e2e.pagechecks` refuses: a 5xx, a document wider than the
1280 px viewport, a table wider than its scrolling box, code in visible text, and on a Chinese page
English words and ASCII punctuation after Chinese text. Downloads (PDF, JSON, YAML, Parquet), the
admin, the API, logging out and switching language are not followed.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import urldefrag, urljoin, urlsplit

from tests.e2e import pagechecks

VIEWPORT_WIDTH = 1280
# not pages: downloads, the admin, the API, session changes, polled fragments and actions
SKIPPED = re.compile(
    r"/(?:admin|api|i18n|static|media)/|/accounts/logout/|\.(?:pdf|json|yml|yaml|parquet|p7s|csv|txt|zip|whl)(?:$|\?)"
    r"|/(?:pdf|download|artifacts?|raw|status|progress|log|export)/"
)
# The page's visible text, outside code blocks: text nodes, one line per block element, and the
# labels people read on controls (title, placeholder, aria-label, alt). Closed <details> count:
# opening them is one click away. An SVG chart's <metadata> (its format and the tool that drew it) is
# never rendered. A frozen record's text shown in the language it was written in (`data-written-in`,
# "en" on a Chinese page: a signed document is never re-worded) is the record's, not the page's: it is
# checked where the page's language is the record's.
VISIBLE_TEXT = """() => {
  const page = (document.documentElement.lang || '').slice(0, 2);
  const skip = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'CODE', 'PRE', 'KBD', 'SAMP', 'TEXTAREA',
                        'METADATA']);
  const lines = [];
  let line = [];
  const flush = () => { if (line.length) { lines.push(line.join('')); line = []; } };
  const walk = (node) => {
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) { line.push(child.textContent); continue; }
      if (child.nodeType !== Node.ELEMENT_NODE || skip.has(child.tagName.toUpperCase())) continue;
      const written = child.getAttribute('data-written-in');
      if (written && written.slice(0, 2) !== page) continue;
      if (child.classList.contains('visually-hidden') && child.closest('label') === null) { walk(child); continue; }
      const display = getComputedStyle(child).display;
      const block = !display.startsWith('inline') && display !== 'contents';
      if (block) flush();
      for (const attr of ['title', 'placeholder', 'aria-label', 'alt']) {
        const value = child.getAttribute(attr);
        if (value) { flush(); lines.push(value); }
      }
      walk(child);
      if (block) flush(); else line.push(' ');
    }
  };
  walk(document.body);
  flush();
  return lines.map(l => l.replace(/\\s+/g, ' ').trim()).filter(Boolean).join('\\n');
}"""
LINKS = """() => Array.from(document.querySelectorAll('a[href]'))
  .filter(a => !a.hasAttribute('download'))
  .map(a => a.href)"""
WIDTH = "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
# Scrolling boxes (a table's wrapper) whose content is wider than the box: the page fits, but
# columns (the next step, the latency figures) sit off-screen to the right.
SCROLLERS = """() => Array.from(document.querySelectorAll('main *'))
  .filter(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX) && e.clientWidth > 0
               && e.scrollWidth > e.clientWidth + 4 && !e.closest('pre, code, .code'))
  .map(e => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')} ${e.scrollWidth} px in ${e.clientWidth} px`
            + ` (${(e.querySelector('caption, th') || e).textContent.trim().slice(0, 40)})`)"""


# a stored file's random suffix (run-1_cLNrC4f.json) and a hash or its prefix (a069dcf9…) differ on every run
HASHLIKE = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{5,}\b")


def baseline_key(kind: str, what: str) -> str:
    """`what` as the baseline keys it: file names FILE, hashes HASH, every other number #, and a line
    up to its first "; " (a verdict's detail says after it why it was inconclusive or client-bound,
    which differs between runs on a loaded machine: the same untranslated sentence either way)."""
    text = pagechecks.FILE_NAME.sub("FILE", " ".join(what.split()))
    text = re.sub(r"\d+", "#", HASHLIKE.sub("HASH", text))
    return f"{kind}\t" + settled(text, kind)


# A verdict's outcome and its signs differ between crawls of simulated runs on a loaded machine.
OUTCOMES = re.compile(
    r"未通过|通过|无定论|未验证|不适用|数据不足|容得下|容不下"
    r"|\b(?:pass|fail|inconclusive|not judged|insufficient data)\b"
)


def settled(text: str, kind: str) -> str:
    """A keyed text without what varies from run to run: outcome words (OUTCOME), the sign of a
    number, and for English lines what follows the first "; " or "client-bound (" (why a run was
    inconclusive)."""
    text = re.sub(r"[+\-−](?=#)", "", OUTCOMES.sub("OUTCOME", text))
    if kind == "english":
        text = text.split("; ")[0].split("client-bound (")[0]
    return text


def read_baseline(path) -> set[str]:
    """The baseline's lines (`baseline_key`s), without its comments and blank lines."""
    lines = (line.rstrip("\n") for line in open(path, encoding="utf-8"))
    return {line for line in lines if line.strip() and not line.startswith("#")}


@dataclass
class Finding:
    """One refused thing on one page, as a person (in a language) met it."""

    kind: str  # "5xx", "width", "scroll", "identifier", "english", "punctuation"
    path: str
    who: str
    language: str
    what: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.path} ({self.who}, {self.language}): {self.what}"


@dataclass
class Crawl:
    """A crawl's pages and findings; `allowed` holds what users typed (names, labels, notes)."""

    base: str
    allowed: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    visited: dict[tuple[str, str], int] = field(default_factory=dict)  # (who, language) -> pages
    seconds: float = 0.0

    def in_scope(self, url: str, scope: Iterable[str]) -> bool:
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.base or SKIPPED.search(parts.path + ("?" + parts.query)):
            return False
        return any(parts.path == prefix or parts.path.startswith(prefix) for prefix in scope)

    def crawl(
        self,
        page,
        who: str,
        language: str,
        seeds: Iterable[str],
        scope: Iterable[str],
        once_per_kind: Callable[[str], str] | None = None,
        limit: int = 400,
    ) -> None:
        """Open every page reachable from `seeds` inside `scope` (path prefixes) as the logged-in
        `page`; with `once_per_kind`, only the first page of each kind it names."""
        started = time.monotonic()
        scope = list(scope)
        queue = deque(urljoin(self.base, seed) for seed in seeds)
        seen = set(queue)
        kinds = {once_per_kind(url) for url in queue} if once_per_kind else set()
        count = 0
        while queue and count < limit:
            url = queue.popleft()
            count += 1
            for link in self.check_page(page, url, who, language):
                link = urldefrag(link)[0]
                if link in seen or not self.in_scope(link, scope):
                    continue
                seen.add(link)
                if once_per_kind:
                    if once_per_kind(link) in kinds:
                        continue
                    kinds.add(once_per_kind(link))
                queue.append(link)
        self.visited[(who, language)] = self.visited.get((who, language), 0) + count
        self.seconds += time.monotonic() - started

    def check_page(self, page, url: str, who: str, language: str) -> list[str]:
        """Open `url`, check it, and return the links it offers."""
        response = page.goto(url, wait_until="load")
        if response is None:
            return []
        if response.status >= 500:
            self.add("5xx", url[len(self.base) :], who, language, f"HTTP {response.status}")
            return []
        if "text/html" not in (response.headers.get("content-type") or ""):
            return []
        self.check_current(page, who, language)
        return page.evaluate(LINKS) if response.status < 400 else []

    def check_current(self, page, who: str, language: str) -> None:
        """Check the page as it is now (after a form's redirect, with its flash message)."""
        path = page.url[len(self.base) :]
        width = page.evaluate(WIDTH)
        if width > VIEWPORT_WIDTH:
            self.add("width", path, who, language, f"document {width} px wide")
        for box in page.evaluate(SCROLLERS):
            self.add("scroll", path, who, language, box)
        self.check_text(page.evaluate(VISIBLE_TEXT), path, who, language)

    def check_text(self, text: str, path: str, who: str, language: str) -> None:
        for found in pagechecks.identifiers(text, self.allowed):
            self.add("identifier", path, who, language, found)
        if language.startswith("zh"):
            for line in pagechecks.english_phrases(text, self.allowed):
                self.add("english", path, who, language, line)
            for found in pagechecks.punctuation(text):
                self.add("punctuation", path, who, language, found)

    def add(self, kind: str, path: str, who: str, language: str, what: str) -> None:
        self.findings.append(Finding(kind, path, who, language, what))

    def baseline_keys(self, kinds: Iterable[str]) -> set[str]:
        """The distinct findings of `kinds` as baseline lines: kind, a tab, what was found with its
        numbers (ids, counts, timings) written #, so the same defect on another run keys the same."""
        wanted = set(kinds)
        return {baseline_key(f.kind, f.what) for f in self.findings if f.kind in wanted}

    def report(self, kinds: Iterable[str] | None = None) -> str:
        """The findings of `kinds` (all by default), each distinct (kind, what) once with where it was seen."""
        wanted = set(kinds) if kinds is not None else None
        grouped: dict[tuple[str, str], list[Finding]] = {}
        for finding in self.findings:
            if wanted is None or finding.kind in wanted:
                grouped.setdefault((finding.kind, finding.what), []).append(finding)
        lines = []
        for (kind, what), found in sorted(grouped.items()):
            where = sorted({f"{f.path} ({f.who}, {f.language})" for f in found})
            more = f" and {len(where) - 3} more" if len(where) > 3 else ""
            lines.append(f"[{kind}] {what}\n      on {', '.join(where[:3])}{more}")
        return "\n".join(lines)
