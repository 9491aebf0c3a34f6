"""The procurement summary is the record's first page and fits on it: the longest summary the
builder can write (every constraint, each beside a verdict that did not pass, all eight tests not
passed, all eight open items waived with long reasons, every free text at its printed limit, a
200-character title, SIMULATED evidence and a development certificate to explain), in both languages."""

import subprocess

import pytest

from selection.records.pdf import render_record, render_record_html
from tests.support.record_context import sample_record_context, sample_summary

FILLER = {
    "en": "Support contract with 24x7 escalation, a named engineer and quarterly reviews of the service. " * 6,
    "zh-hans": "支持合同包含全天候升级通道、指定工程师以及每季度一次的服务评审。" * 12,
}
TESTS = [
    "Concurrency stress",
    "Long context",
    "Swap-out and recovery",
    "Prefix reuse",
    "Long-run stability",
    "Overload and rejection",
    "Model switch and rollback",
    "Tenant isolation",
]


def longest_summary(language: str) -> dict:
    filler = FILLER[language]
    summary = sample_summary(open_items=8, long_text=True)
    summary["licence"]["terms"] = summary["vendor_support"] = filler
    summary["delivery_owner"] = filler
    summary["test_gaps"] = [
        {
            "test": title,
            "outcome": "failed",
            "detail": "eviction_exercised, continuation_correct, " * 4,
            "run": "run-1234",
        }
        for title in TESTS
    ]
    for row in summary["fit"]:  # each figure beside a verdict of its run that did not pass, each a failed part
        row.update(
            status="not_validated",
            unsettled=[f"{row['constraint']}: inconclusive (run-1234)"],
            parts=["TTFT p95: fail"],
        )
    # what the choice rests on and every constraint it misses, each at its printed limit
    summary["rests_on"] = filler
    summary["misses"] = [filler] * 6
    for item in summary["open_items"]:
        item.update(note=filler, status="waived", reason=filler, decided_by="Priya Raman")
    return summary


def page_text(pdf: bytes, page: int, tmp_path) -> str:
    path = tmp_path / "record.pdf"
    path.write_bytes(pdf)
    args = ["pdftotext", "-enc", "UTF-8", "-f", str(page), "-l", str(page), str(path), "-"]
    return " ".join(subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout.split())


@pytest.mark.parametrize(
    ("language", "heading", "last_line", "section_one"),
    [
        ("en", "Procurement summary", "Annex A: every term and reason in full.", "1. Decision and rationale"),
        ("zh-hans", "采购摘要", "全文见附录 A。", "1. 决策与理由"),
    ],
)
def test_the_longest_summary_fits_the_first_page_alone(language, heading, last_line, section_one, tmp_path):
    context = sample_record_context(simulated=True, n_charts=0)
    context["owners"][0]["development_certificate"] = True
    context["record"]["language"] = language
    context["record"]["title"] = ("Inference engine for customer-service chat " * 5)[:200]
    context["summary"] = longest_summary(language)
    rendered = render_record(context)
    first, second = page_text(rendered.pdf, 1, tmp_path), page_text(rendered.pdf, 2, tmp_path)
    assert heading in first and last_line in first  # the whole summary is on page 1 ...
    assert "Tenant isolation" in first and "audit_trail" in first
    assert section_one not in first and section_one in second  # ... and the record starts on page 2


def test_a_record_without_a_summary_renders_as_before(tmp_path):
    rendered = render_record(sample_record_context(simulated=False, n_charts=0))
    assert "Procurement summary" not in page_text(rendered.pdf, 1, tmp_path)


def test_the_record_states_every_term_and_waiver_reason_in_full_in_annex_a():
    """The walk's N1: page 1 read "… under the existing cloud contrac…" and "waived — Per-tenant error logs
    ship in sprint 12; the…", and the full texts were nowhere in the signed PDF."""
    context = sample_record_context(simulated=False, n_charts=0)
    context["summary"] = sample_summary(open_items=1)
    terms = "Apache-2.0 engine; no commercial licence; 8×H100 reserved instances under the existing cloud contract."
    reason = "Per-tenant error logs ship in sprint 12; the gateway keeps them until then. " * 3
    context["summary"]["licence"]["terms"] = terms
    context["summary"]["open_items"][0].update(status="waived", reason=reason, decided_by="Priya Raman")
    html = render_record_html(context)
    page_one = html[: html.index("</section>")]
    assert terms not in page_one and "under the existing cloud contr" in page_one and "(Annex A)" in page_one
    annex = html[html.index('id="annex-a"') :]
    assert terms in annex and reason.strip() in " ".join(annex.split())


def test_screened_out_candidates_are_never_ranked_in_the_record():
    """The walk's n3: the PDF ranked screened-out candidates 2 and 3 while the page said "screened out"."""
    context = sample_record_context(simulated=False, n_charts=0)
    rows = context["scores"]["rows"]
    rows[1].update(screened_out=True, rank=2)
    html = render_record_html(context)
    ranks = html[html.index("Rank</th>") : html.index("</tr>", html.index("Rank</th>"))]
    assert "screened out" in ranks and ">2<" not in ranks
