"""The decision-record PDF: content, CJK text, SIMULATED banner, escaping, URL fetching, and
the full render -> three owner signatures -> seal -> verify pipeline (checked by pdfsig too)."""

import subprocess

import pytest

from selection.certificates import signing
from selection.domain import records
from selection.records.pdf import (
    TEMPLATE_DIR,
    RecordRenderError,
    RestrictedURLFetcher,
    html_to_pdf,
    render_record,
    render_record_html,
)
from tests.support.record_context import sample_record_context

BANNER = "SIMULATED — not for procurement"
PASS = "pw-for-tests"


def _pdftotext(pdf: bytes, tmp_path, page: int | None = None) -> str:
    path = tmp_path / "r.pdf"
    path.write_bytes(pdf)
    args = ["pdftotext", "-enc", "UTF-8"]
    if page is not None:
        args += ["-f", str(page), "-l", str(page)]
    return subprocess.run(args + [str(path), "-"], capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def rendered():
    return render_record(sample_record_context(simulated=True, n_charts=2))


def test_sections_in_order_with_cjk_name_and_metric_names(rendered, tmp_path):
    text = _pdftotext(rendered.pdf, tmp_path)
    headings = [
        "1. Decision and rationale",
        "2. Risk boundary",
        "3. Business constraints",
        "4. Scenario, reasons and weights",
        "5. Gates",
        "6. Candidates and screening",
        "7. Capacity plan",
        "8. Validation results",
        "9. Scores, TOPSIS",
        "10. Rollout rules",
        "11. Evidence and responsibility",
        "12. Evidence manifest",
        "13. Owners and approvals",
        "14. Review and re-evaluation",
        "15. Signatures",
    ]
    positions = [text.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "张伟" in text and "李娜" in text
    assert "vllm:kv_cache_usage_perc" in text
    assert "engine major version change" in text  # merged re-evaluation trigger
    assert "11.5 % >10 %" in text  # capacity deviation flagged
    # chart SVGs are drawn: their own title text (not the caption) is in the PDF
    assert "KV-cache usage — Concurrency stress" in text


def test_simulated_banner_on_every_page(rendered, tmp_path):
    assert rendered.page_count >= 3
    for page in range(1, rendered.page_count + 1):
        assert BANNER in _pdftotext(rendered.pdf, tmp_path, page), f"page {page}"


def test_measured_record_has_no_banner(tmp_path):
    pdf = render_record(sample_record_context(simulated=False, n_charts=0)).pdf
    text = _pdftotext(pdf, tmp_path)
    assert "SIMULATED" not in text and "MEASURED" in text


def test_signature_boxes_sit_on_the_last_page_inside_it(rendered):
    assert set(rendered.signature_boxes) == {"business", "platform", "security", "seal"}
    for page, x1, y1, x2, y2 in rendered.signature_boxes.values():
        assert page == rendered.page_count - 1
        assert 0 < x1 < x2 < 595.3 and 0 < y1 < y2 < 841.9  # A4 in points
        assert 60 < y2 - y1 < 100  # the 28 mm .sigfield box


def test_full_pipeline_three_owners_and_seal_verified_by_us_and_pdfsig(rendered, tmp_path):
    names = {o["role"]: o["name"] for o in sample_record_context()["owners"]}
    names["seal"] = "kvselect organisational seal"
    certs = signing.issue_dev_certificates(tmp_path / "certs", names, PASS)
    pdf = signing.prepare_signature_fields(rendered.pdf, rendered.signature_boxes)
    for role in ("business", "platform", "security", "seal"):
        pdf = signing.sign_pdf(pdf, certs.pkcs12[role].read_bytes(), PASS, role, names[role], role, "approved")
    report = signing.verify_pdf(pdf, [certs.ca_certificate.read_bytes()])
    assert report.all_ok, report.as_text()
    assert [s.signer_common_name for s in report.signatures] == [
        names["business"],
        names["platform"],
        names["security"],
        names["seal"],
    ]
    path = tmp_path / "signed.pdf"
    path.write_bytes(pdf)
    out = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert out.count("Signature is Valid.") == 4, out
    # the visible stamps are drawn; the record text (and the banner) is still there
    text = _pdftotext(pdf, tmp_path, rendered.page_count)
    assert "Digitally signed (PAdES)" in text and "Security owner" in text and BANNER in text


def test_user_text_is_escaped_not_markup(tmp_path):
    ctx = sample_record_context(n_charts=0)
    ctx["owners"][2]["name"] = "<script>alert(1)</script>"
    html = render_record_html(ctx)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)</script>" in _pdftotext(render_record(ctx).pdf, tmp_path)


def test_urls_in_user_text_are_neither_fetched_nor_rendered(tmp_path):
    ctx = sample_record_context(n_charts=0)
    ctx["decision"]["summary"] = '<img src="http://127.0.0.1:9/leak.png"> <img src="file:///etc/passwd">'
    ctx["observer"]["name"] = '<link rel="stylesheet" href="file:///etc/passwd">'
    fetcher = RestrictedURLFetcher()
    rendered = render_record(ctx, fetcher)
    # escaped: nothing was even attempted (only the template's own CSS was loaded)
    assert fetcher.refused == []
    text = _pdftotext(rendered.pdf, tmp_path)
    assert '<img src="http://127.0.0.1:9/leak.png">' in text
    assert "root:x:0:0" not in text


def test_fetcher_refuses_network_and_foreign_files_even_in_raw_html(tmp_path):
    secret = tmp_path / "secret.css"
    secret.write_text("body { color: red } h1::after { content: 'LEAKED-SECRET' }")
    html = (
        f'<html><head><link rel="stylesheet" href="{secret.as_uri()}"></head><body>'
        '<h1>x</h1><img src="http://127.0.0.1:9/a.png"><img src="file:///etc/passwd">'
        '<img src="https://example.com/b.svg"></body></html>'
    )
    fetcher = RestrictedURLFetcher()
    rendered = html_to_pdf(html, fetcher)
    assert set(fetcher.refused) == {
        secret.as_uri(),
        "http://127.0.0.1:9/a.png",
        "file:///etc/passwd",
        "https://example.com/b.svg",
    }
    assert "LEAKED-SECRET" not in _pdftotext(rendered.pdf, tmp_path)


@pytest.mark.parametrize(
    "url,allowed",
    [
        ("data:image/svg+xml;base64,PHN2Zy8+", True),
        ((TEMPLATE_DIR / "records" / "record.css").as_uri(), True),
        ((TEMPLATE_DIR / "records" / ".." / ".." / ".." / "etc" / "passwd").as_uri(), False),
        ("file:///etc/passwd", False),
        ("file://evil.example/share/x.css", False),
        ("http://127.0.0.1/x.png", False),
        ("ftp://example.com/x", False),
    ],
)
def test_fetcher_allow_list(url, allowed):
    assert RestrictedURLFetcher().is_allowed(url) is allowed


def test_context_validation_lists_every_problem():
    with pytest.raises(records.RecordContextError) as err:
        records.build_record_context({"record": {"id": "x"}})
    assert "decision: missing" in str(err.value) and "owners: missing" in str(err.value)

    ctx = sample_record_context(simulated=True)
    ctx["simulated"] = False
    ctx["rollout"]["headroom"]["percent"] = 35
    ctx["rollout"]["monitoring"] = [m for m in ctx["rollout"]["monitoring"] if m["signal"] != "swap"]
    ctx["owners"] = ctx["owners"][:2]
    ctx["manifest"][0]["sha256"] = "abc"
    with pytest.raises(records.RecordContextError) as err:
        records.build_record_context(ctx)
    problems = err.value.problems
    assert any(p.startswith("simulated:") for p in problems)
    assert any(p.startswith("rollout.headroom.percent") for p in problems)
    assert "rollout.monitoring: no alert for signal 'swap'" in problems
    assert any("'security' owner" in p for p in problems)
    assert "manifest[0].sha256: must be 64 lowercase hex characters" in problems


def test_simulated_is_derived_from_the_manifest():
    ctx = sample_record_context(simulated=False)
    ctx["manifest"][1]["provenance"] = "SIMULATED"
    ctx.pop("simulated")
    assert records.build_record_context(ctx)["simulated"] is True


def test_capacity_deviation():
    assert records.capacity_deviation(100, 111) == pytest.approx(11.0)
    assert records.capacity_deviation(100, None) is None
    built = records.build_record_context(sample_record_context())
    flags = [r["flagged"] for r in built["capacity"][0]["rows"]]
    assert flags == [False, False, True]


def test_missing_signature_box_is_an_error(monkeypatch):
    ctx = sample_record_context(n_charts=0)
    import selection.records.pdf as rp

    real = rp.render_record_html
    monkeypatch.setattr(rp, "render_record_html", lambda c: real(c).replace('id="sigfield-security"', 'id="gone"'))
    with pytest.raises(RecordRenderError, match="security"):
        rp.render_record(ctx)
