"""Verification of a realistic record is fast and exactly as strict as pyHanko's own analysis.

The record is what kvselect issues: WeasyPrint layout, matplotlib charts (benchmarks.charts, as
run_charts draws them), three fields prepared up front and three owner signatures. WeasyPrint
gives every page one /Resources holding every chart's Form XObjects, which is what made pyHanko
0.38's all-paths table explode (issue 17); the hand-written sample chart does not.
"""

import io
import time

import pytest
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.diff_analysis import DEFAULT_DIFF_POLICY

from selection.certificates import signing
from selection.certificates.signing import modifications
from selection.records.pdf import render_record
from tests.support.record_context import sample_record_context, with_drawn_charts

ROLES = ("business", "platform", "security")
NAMES = {"business": "张伟", "platform": "Priya Raman", "security": "Sam Okafor"}
PASS = "pw-for-tests"


def _signed(tmp_path, n_charts: int, n_manifest: int) -> tuple[bytes, bytes, int]:
    certs = signing.issue_dev_certificates(tmp_path, NAMES, PASS)
    rendered = render_record(with_drawn_charts(sample_record_context(n_charts=n_charts, n_manifest=n_manifest)))
    pdf = signing.prepare_signature_fields(rendered.pdf, rendered.signature_boxes)
    for role in ROLES:
        pdf = signing.sign_pdf(pdf, certs.pkcs12[role].read_bytes(), PASS, role, NAMES[role], role, "approve")
    return pdf, certs.ca_certificate.read_bytes(), rendered.page_count


@pytest.fixture(scope="module")
def big_record(tmp_path_factory):
    return _signed(tmp_path_factory.mktemp("big"), n_charts=10, n_manifest=270)


@pytest.fixture(scope="module")
def small_record(tmp_path_factory):
    return _signed(tmp_path_factory.mktemp("small"), n_charts=2, n_manifest=6)


def test_twenty_pages_ten_charts_three_signatures_verify_without_the_path_explosion(big_record):
    """A guard against pyHanko's all-paths table coming back (it took minutes), not a speed figure:
    the figure (about 1 s of CPU on a busy 2-core box) is measured by `benchmarks/perf/record.py`."""
    pdf, ca, pages = big_record
    assert pages >= 20
    signing.verify_pdf(pdf, [ca])  # warm imports
    cpu = time.process_time()
    report = signing.verify_pdf(pdf, [ca])
    cpu = time.process_time() - cpu
    assert report.all_ok, report.as_text()
    assert [s.modification_level for s in report.signatures] == ["FORM_FILLING", "FORM_FILLING", "NONE"]
    assert cpu < 5.0, f"verification took {cpu:.2f} s of CPU"


def test_on_demand_usage_table_equals_pyhankos_for_every_reference(small_record):
    """Fails if pyHanko renames the private attribute the fast path fills (it would silently fall
    back to pyHanko's own, slow table) or if the two tables ever disagree."""
    pdf, _, _ = small_record
    theirs = PdfFileReader(io.BytesIO(pdf), strict=False)
    ours = PdfFileReader(io.BytesIO(pdf), strict=False)
    revisions = theirs.xrefs.total_revisions
    refs = {ref for rev in range(revisions) for ref in theirs.xrefs.explicit_refs_in_revision(rev)}
    # the revisions whose signatures have later revisions to judge (business, platform)
    for rev in range(2, revisions - 1):
        full = theirs.get_historical_resolver(rev)
        full._load_reverse_xref_cache()
        lazy = ours.get_historical_resolver(rev)
        signing.install_on_demand_usages(lazy)
        assert isinstance(lazy._indirect_object_access_cache, signing.UsagesOfRef), (
            "pyHanko changed its reverse-reference table: the fast path is no longer used"
        )
        for ref in refs:
            assert lazy._get_usages_of_ref(ref) == full._get_usages_of_ref(ref), (rev, ref)


def test_verification_uses_the_fast_path(small_record, monkeypatch):
    """The diff policy verify_pdf passes really installs the on-demand table on each signed revision."""
    pdf, ca, _ = small_record
    installed = []
    original = modifications.install_on_demand_usages

    def spy(resolver):
        original(resolver)
        installed.append(type(resolver._indirect_object_access_cache))

    monkeypatch.setattr(modifications, "install_on_demand_usages", spy)
    assert signing.verify_pdf(pdf, [ca]).all_ok
    assert installed and set(installed) == {signing.UsagesOfRef}


def test_indexed_object_stream_reader_reads_the_same_objects(small_record):
    pdf, _, _ = small_record
    plain = PdfFileReader(io.BytesIO(pdf), strict=False)
    indexed = signing.ObjStmIndexReader(io.BytesIO(pdf), strict=False)
    for rev in range(plain.xrefs.total_revisions):
        for ref in plain.xrefs.explicit_refs_in_revision(rev):
            assert repr(indexed.get_object(ref)) == repr(plain.get_object(ref)), ref


def _append(pdf: bytes, edit) -> bytes:
    writer = IncrementalPdfFileWriter(io.BytesIO(pdf))
    edit(writer)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _add_annotation(writer):
    page_ref = writer.root["/Pages"].raw_get("/Kids")[0]
    page = page_ref.get_object()
    rect = generic.ArrayObject([generic.FloatObject(v) for v in (100, 100, 400, 140)])
    annot = writer.add_object(
        generic.DictionaryObject(
            {
                generic.NameObject("/Type"): generic.NameObject("/Annot"),
                generic.NameObject("/Subtype"): generic.NameObject("/FreeText"),
                generic.NameObject("/Rect"): rect,
                generic.NameObject("/Contents"): generic.TextStringObject("Decision revoked"),
                generic.NameObject("/DA"): generic.TextStringObject("/Helv 18 Tf 1 0 0 rg"),
                generic.NameObject("/P"): page_ref,
            }
        )
    )
    page["/Annots"] = generic.ArrayObject(list(page.get("/Annots", [])) + [annot])
    writer.update_container(page)


def _redraw_shared_xobject(writer):
    """Swap one Form XObject in the /Resources every page shares (reached by every page)."""
    resources_ref = writer.root["/Pages"]["/Kids"][0].get_object().raw_get("/Resources")
    xobjects = resources_ref.get_object()["/XObject"]
    name = next(iter(xobjects))
    xobjects[name] = writer.add_object(
        generic.StreamObject(
            {
                generic.NameObject("/Type"): generic.NameObject("/XObject"),
                generic.NameObject("/Subtype"): generic.NameObject("/Form"),
                generic.NameObject("/BBox"): xobjects[name]["/BBox"],
            },
            stream_data=b"1 0 0 rg 0 0 50 50 re f",
        )
    )
    writer.mark_update(resources_ref)


@pytest.mark.parametrize("edit", [_add_annotation, _redraw_shared_xobject])
def test_an_edit_after_the_last_signature_voids_every_signature(big_record, edit):
    pdf, ca, _ = big_record
    report = signing.verify_pdf(_append(pdf, edit), [ca])
    assert len(report.signatures) == len(ROLES) and not report.all_ok
    for sig in report.signatures:
        assert sig.intact and sig.valid and not sig.covers_whole_document
        assert sig.modification_level == "OTHER" and not sig.ok


def _retitle(writer):
    """Change the document title in /Info (what a viewer shows in its title bar)."""
    info = writer.trailer["/Info"]
    info["/Title"] = generic.TextStringObject("Decision revoked")
    writer.mark_update(writer.trailer.raw_get("/Info"))


def _xmp_subject(writer):
    """Give the XMP packet a subject (dc:description) only: /Info has none, so pyHanko's writer
    leaves /Info alone and writes it into the XMP it regenerates."""
    writer.document_meta.subject = "Decision revoked"
    writer.update_root()  # an identical catalog: makes the writer write a revision


@pytest.mark.parametrize("edit", [_retitle, _xmp_subject])
def test_a_metadata_edit_after_the_last_signature_is_refused(small_record, edit):
    """pyHanko's default rules accept any /Info edit and any well-formed XMP as LTA_UPDATES; kvselect
    only lets a later revision rewrite the modification date and the producer."""
    pdf, ca, _ = small_record
    assert signing.verify_pdf(pdf, [ca]).all_ok
    edited = _append(pdf, edit)
    pyhanko_verdict = signing.verify_pdf(edited, [ca], diff_policy=DEFAULT_DIFF_POLICY)
    assert pyhanko_verdict.signatures[-1].modification_level == "LTA_UPDATES"
    report = signing.verify_pdf(edited, [ca])
    assert not report.all_ok
    assert {s.modification_level for s in report.signatures} == {"OTHER"}


def test_the_strict_policy_keeps_every_rule_of_pyhankos_default_in_order():
    def kind(rule):
        return type(getattr(rule, "rule", rule))

    ours = [kind(r) for r in signing.DIFF_POLICY.global_rules]
    theirs = [kind(r) for r in DEFAULT_DIFF_POLICY.global_rules]
    assert len(ours) == len(theirs)
    assert all(issubclass(a, b) for a, b in zip(ours, theirs, strict=True))
    assert signing.DIFF_POLICY.form_rule is DEFAULT_DIFF_POLICY.form_rule
