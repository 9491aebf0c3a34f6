"""A run page's verdict details as a person reads them (issue 37 item 2): an engine metric a detail was read
from is code in every language (vllm:request_queue_time_seconds is the name to look up on /metrics), and a
soak's drift detail reads in Chinese on a Chinese page, however the run ended (pass, fail, or an interval
across the limit). The crawler's rules (tests/e2e/pagechecks.py) judge the text outside code."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from benchmarks.harness.queueing import queue_wait_verdict
from benchmarks.harness.workloads import stability
from benchmarks.models import BenchmarkRun
from selection.templatetags.kvselect import metrics_as_code
from tests.e2e import pagechecks

QUEUE_FIGURES = {"metric": "vllm:request_queue_time_seconds", "n": 40, "mean_ms": 12.5, "p95_ms": 31.0}
# late TPOT p99 against early: within the limit, beyond it, and an interval across it
DRIFTS = {"pass": [10.5] * 30, "fail": [20.0] * 30, "inconclusive": [10.0] * 29 + [13.0]}


class VisibleText(HTMLParser):
    """What the crawler reads of a page: text outside code blocks and the labels on controls."""

    SKIPPED = {"code", "pre", "kbd", "samp", "script", "style", "template", "textarea"}

    def __init__(self):
        super().__init__()
        self.depth, self.lines = 0, []

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIPPED:
            self.depth += 1
        labels = ("title", "placeholder", "aria-label", "alt")
        self.lines += [value for name, value in attrs if name in labels and value]

    def handle_endtag(self, tag):
        if tag in self.SKIPPED:
            self.depth -= 1

    def handle_data(self, data):
        if not self.depth and data.strip():
            self.lines.append(" ".join(data.split()))


def visible(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    return "\n".join(parser.lines)


@pytest.fixture
def soak_run(candidate):
    verdicts = [
        queue_wait_verdict({**QUEUE_FIGURES, "p95_bounds_ms": [25.0, 50.0]}, 200.0),
        queue_wait_verdict({**QUEUE_FIGURES, "n": 3, "p95_bounds_ms": [25.0, 50.0]}, 200.0),
    ]
    for outcome, late in DRIFTS.items():
        verdicts.append(stability._drift_verdict("tpot_p99_drift", [10.0] * 30, late, 99, 25.0, "TPOT"))
        assert verdicts[-1]["status"] == outcome, verdicts[-1]["detail"]
    return BenchmarkRun.objects.create(
        candidate=candidate, test="stability", origin="validation", status="succeeded", verdicts=verdicts
    )


def verdict_list(client, user, run, language: str) -> str:
    """The run page's pass criteria (its list of verdicts) as HTML, the page seen in `language`."""
    client.force_login(user)
    client.cookies["django_language"] = language
    response = client.get(reverse("selection:run", args=[run.candidate.selection_id, run.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index('<ul class="verdicts">')
    return html[start : html.index("</ul>", start)]


@pytest.mark.django_db
def test_the_queue_wait_metric_is_code_on_an_english_run_page(client, architect, soak_run):
    html = verdict_list(client, architect, soak_run, "en")
    assert "<code>vllm:request_queue_time_seconds</code>" in html
    text = visible(html)
    assert "queue wait p95 31.0 ms (its histogram bucket 25–50 ms)" in text
    assert pagechecks.identifiers(text) == []


@pytest.mark.django_db
def test_queue_wait_and_drift_details_read_in_chinese_on_a_chinese_run_page(client, architect, soak_run):
    text = visible(verdict_list(client, architect, soak_run, "zh-hans"))
    assert "排队等待 p95 为 31.0 ms" in text and "TPOT p99 10.0 → 20.0 ms" in text
    assert pagechecks.english_phrases(text) == [] and pagechecks.identifiers(text) == []
    assert pagechecks.punctuation(text) == []


def test_engine_metrics_are_set_as_code_and_the_rest_escaped():
    assert metrics_as_code("n=40 (vllm:request_queue_time_seconds) <b>") == (
        "n=40 (<code>vllm:request_queue_time_seconds</code>) &lt;b&gt;"
    )
    assert metrics_as_code("from trtllm_request_queue_time_seconds", "mono") == (
        'from <code class="mono">trtllm_request_queue_time_seconds</code>'
    )
    assert metrics_as_code("see https://x.org/vllm:a_b and vLLM 0.11") == "see https://x.org/vllm:a_b and vLLM 0.11"


def test_the_record_sets_the_metric_a_detail_names_in_its_code_styling():
    from selection.records.pdf import render_record_html
    from tests.support.record_context import sample_record_context

    ctx = sample_record_context(n_charts=0)
    judged = queue_wait_verdict({**QUEUE_FIGURES, "p95_bounds_ms": [25.0, 50.0]}, 200.0)
    row = {"criterion": "Queue wait p95", "detail": judged["detail"], "status": "pass", "outcome": "pass"}
    ctx["validation"][0] |= {"judged": [row]}
    ctx["validation"][1] |= {"judged": [], "verdicts": [f"Queue wait p95: pass — {judged['detail']}"]}
    html = render_record_html(ctx)
    assert html.count('<code class="mono">vllm:request_queue_time_seconds</code>') == 2
    section = html[html.index("8. Validation results") :]
    text = visible(section[: section.index("<h2")])
    assert "vllm:request_queue_time_seconds" not in text
    assert [line for line in text.splitlines() if "queue wait p95" in line and pagechecks.identifiers(line)] == []
