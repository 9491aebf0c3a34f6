"""The record as a reader gets it, built like the demo's (three candidates, every scenario-C
criterion, runs of every test): every column is on the page, missing scores read "—", the ranking
method is stated, every verdict is printed, the tests come in the articles' order, the manifest
lists each stored file with its SHA-256, and the approvals table says who approved when."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser

import pytest

from benchmarks import suite
from benchmarks.models import Artifact
from selection.records.pdf import html_to_pdf, render_record_html
from selection.records.rendering import render_pdf, with_approvals
from selection.records.services import approve, create_draft, start_review
from tests.support.builders import ROLES
from tests.support.records import STRESS_VERDICTS

pytestmark = pytest.mark.django_db


class TableHeaders(HTMLParser):
    """Every table's header cells (<th>), as text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "th":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "th" and self._cell is not None:
            self.tables[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def words_on_the_page(pdf: bytes, tmp_path) -> tuple[str, list[str]]:
    """Every word pdftotext finds inside its page, run together without spaces (a cell may wrap
    or break a word), and the words that reach beyond the page's edges."""
    path = tmp_path / "record.pdf"
    path.write_bytes(pdf)
    out = subprocess.run(
        ["pdftotext", "-bbox", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout
    inside, outside = [], []
    word_re = re.compile(r'<word xMin="([\d.-]+)" yMin="[^"]+" xMax="([\d.-]+)"[^>]*>(.*?)</word>')
    for page in re.finditer(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', out, re.S):
        width = float(page.group(1))
        for x_min, x_max, word in word_re.findall(page.group(3)):
            (outside if float(x_min) < 0 or float(x_max) > width + 0.5 else inside).append(word)
    unescape = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'"}
    text = "".join(inside)
    for entity, char in unescape.items():
        text = text.replace(entity, char)
    return text, outside


def test_the_demo_like_record_keeps_every_column_on_the_page(demo_like, architect, owners, tmp_path):
    record = start_review(record=create_draft(selection=demo_like, user=architect), user=architect)
    snapshot = record.snapshot
    assert len(snapshot["scores"]["criteria"]) >= 9  # scenario C weighs nine or ten criteria
    html = render_record_html(with_approvals(snapshot, []))
    parser = TableHeaders()
    parser.feed(html)
    headers = [h for table in parser.tables for h in table if h]
    assert "Weighted total (decides)" in headers and "TOPSIS (second opinion)" in headers and "Rank" in headers
    assert {"Action", "Owner", "Provenance", "Approved"} <= set(headers)
    text, outside = words_on_the_page(html_to_pdf(html).pdf, tmp_path)
    assert outside == []
    for header in headers:
        assert "".join(header.split()) in text, f"column header {header!r} is not on the page"


def test_the_record_states_its_scores_and_evidence_fully(demo_like, architect):
    record = start_review(record=create_draft(selection=demo_like, user=architect), user=architect)
    snapshot = record.snapshot
    scores = snapshot["scores"]
    # item 17: a missing score is None ("—" in the PDF), never 0.0; llama.cpp has no swap-out run
    llama = next(row for row in scores["rows"] if row["candidate"].startswith("llama.cpp"))
    session = scores["criteria"].index("Session recovery consistency")
    assert llama["values"][session] is None
    assert all(row["total"] is not None for row in scores["rows"])
    # item 18: which method decides, and what TOPSIS says
    assert scores["method"].startswith("The weighted sum decides")
    assert scores["method"] not in scores["sensitivity"] + snapshot["decision"]["rationale"]  # stated once
    # item 23: the scoring snapshot's hash and rules version travel with the scores
    assert len(snapshot["score"]["inputs_hash"]) == 64 and snapshot["score"]["rules_version"].startswith("kvselect")
    # item 22: every verdict, not the first six
    stress = next(v for v in snapshot["validation"] if v["test"] == "Concurrency stress")
    assert len(stress["verdicts"]) == len(STRESS_VERDICTS) == 8
    # issue 27: in words, never as identifiers (a name the label table lacks reads as its words)
    assert stress["verdicts"][0] == "No failed requests: pass — zero_errors detail"
    assert stress["verdicts"][-1] == "kv peak below ceiling: pass — kv_peak_below_ceiling detail"
    assert stress["summary"] == "8 verdicts: 7 pass, 1 fail."
    # item 23: the tests in the articles' order (they were run in the reverse order)
    numbers = {test.title: test.number for test in suite.TESTS}
    order = [numbers[v["test"]] for v in snapshot["validation"]]
    assert order == sorted(order) and order[0] == 1 and order[-1] == 5
    # item 23: each per-request Parquet file with its SHA-256 in the manifest
    artifacts = [m for m in snapshot["manifest"] if m["kind"] == "artifact"]
    stored = Artifact.objects.filter(run__candidate__selection=demo_like, kind=Artifact.Kind.REQUESTS)
    assert {a["sha256"] for a in artifacts} == {a.sha256 for a in stored} and len(artifacts) == stored.count() == 14
    assert all(".parquet" in a["name"] for a in artifacts)
    # item 23: every alert says what to do
    assert all(m["action"] for m in snapshot["rollout"]["monitoring"])


def test_the_rendered_record_prints_missing_scores_its_scoring_snapshot_and_its_title(
    demo_like, architect, owners, tmp_path
):
    record = start_review(record=create_draft(selection=demo_like, user=architect), user=architect)
    for role in ROLES:
        record = approve(record=record, user=owners[role], role=role)
    record = render_pdf(record)
    path = tmp_path / "record.pdf"
    path.write_bytes(record.pdf.open("rb").read())
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True).stdout
    flat = " ".join(text.split())
    # item 17: a missing score prints as "—" (it printed 0.0)
    row = flat.split("Weighted total (decides)")[0].rsplit("Session recovery consistency", 1)[1]
    assert row.split() == ["1.000", "1.000", "—"]  # SGLang, vLLM, llama.cpp (no swap-out run)
    # item 23: the rules version and the inputs hash beside the scores
    score = record.snapshot["score"]
    assert f"Scoring rules {score['rules_version']}" in flat and score["inputs_hash"] in flat.replace(" ", "")
    # item 23: the title names the record once ("DR-1-v1 v1" before)
    info = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True).stdout
    title = next(line for line in info.splitlines() if line.startswith("Title:"))
    record_id = record.snapshot["record"]["id"]
    assert title.split(":", 1)[1].strip() == f"{record_id} — {demo_like.name}"
