"""The text a reader sees in a record's HTML (the HTML its PDF is rendered from), as the page crawler reads
it (tests/e2e/crawler.VISIBLE_TEXT), without a browser: code, styles and scripts left out, one line per
block (a paragraph, a list item, a table cell)."""

from __future__ import annotations

from html.parser import HTMLParser

SKIPPED = frozenset({"script", "style", "noscript", "template", "code", "pre", "kbd", "samp", "textarea", "title"})
INLINE = frozenset({"a", "span", "strong", "em", "b", "i", "small", "sup", "sub", "abbr", "br", "img", "code"})


class _VisibleText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self._line: list[str] = []
        self._skipping = 0

    def _flush(self) -> None:
        text = " ".join("".join(self._line).split())
        if text:
            self.lines.append(text)
        self._line = []

    def handle_starttag(self, tag, attrs):
        if tag in SKIPPED:
            self._skipping += 1
        elif tag not in INLINE:
            self._flush()

    def handle_endtag(self, tag):
        if tag in SKIPPED:
            self._skipping = max(0, self._skipping - 1)
            if tag == "code":
                self._line.append(" ")
        elif tag not in INLINE:
            self._flush()

    def handle_data(self, data):
        if not self._skipping:
            self._line.append(data)


def visible_lines(html: str) -> list[str]:
    """The lines of visible text in `html`, code blocks and styles left out."""
    parser = _VisibleText()
    parser.feed(html)
    parser.close()
    parser._flush()
    return parser.lines
