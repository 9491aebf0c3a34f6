"""Open items and the procurement summary on a real record: raised from each owner's "not ready" when
review starts, closed (resolved or waived with a reason) only by the owner of the section, audited,
and keeping the record from procurement until then; the summary frozen in the snapshot."""

import subprocess
from types import SimpleNamespace

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from selection.models import AuditEntry, Selection
from selection.records.open_items import close_open_item, record_blockers, with_item_states
from selection.records.rendering import render_pdf
from selection.records.services import approve, create_draft, sign, start_review
from selection.records.verification import Verification
from selection.setup.next_step import next_step
from selection.setup.services import update_selection
from tests.support.builders import DEV_PASSPHRASE as PASSPHRASE
from tests.support.builders import ROLES, decided_selection, enrol_owners

pytestmark = pytest.mark.django_db

CHECKS = {
    "readiness": {
        "logs": {"status": "not_ready", "note": "error logs not yet queryable per tenant"},
        "monitoring": {"status": "ready", "note": "alerts loaded"},
    },
    "security": {"audit_trail": {"status": "not_ready", "note": "config changes not yet in git"}},
}


@pytest.fixture
def in_review(architect, team, owners, engines, dev_certs, settings):
    enrol_owners(owners, dev_certs, PASSPHRASE, settings)
    selection = decided_selection(architect, team, owners, engines)
    update_selection(
        selection=selection,
        user=architect,
        monthly_budget="48000.00",
        budget_currency="USD",
        vendor_support="Community only; platform team on call",
        delivery_owner="Platform team",
    )
    record = create_draft(selection=selection, user=architect, project_checks=CHECKS)
    return start_review(record=record, user=architect)


def test_review_raises_an_open_item_for_each_not_ready(in_review, architect):
    items = {item.key: item for item in in_review.open_items.all()}
    assert set(items) == {"readiness.logs", "security.audit_trail"}
    assert items["readiness.logs"].owner_roles == ["platform"] and items["readiness.logs"].status == "open"
    assert items["security.audit_trail"].owner_roles == ["security"]
    summary = in_review.snapshot["summary"]
    assert [i["key"] for i in summary["open_items"]] == ["readiness.logs", "security.audit_trail"]
    started = AuditEntry.objects.get(action="record.review_started")
    assert started.new["open_items"] == ["readiness.logs", "security.audit_trail"]


def test_the_summary_states_fit_budget_licence_and_the_tests_that_did_not_pass(in_review):
    summary = in_review.snapshot["summary"]
    fit = {row["key"]: row for row in summary["fit"]}
    winner = in_review.snapshot["basis"]["candidate"]
    stress = in_review.citations.filter(run__test="concurrency_stress", candidate_id=winner).get().run
    ttft = stress.points.get(concurrency=200).ttft_ms["p95"]
    assert fit["ttft"]["status"] == "pass" and fit["ttft"]["runs"] == [f"run-{stress.pk}"]
    assert fit["ttft"]["required"] == "≤ 800 ms" and fit["ttft"]["observed"] == f"{ttft:,.0f} ms"
    assert fit["context"]["status"] == "not_validated" and fit["context"]["observed"] == ""
    assert fit["gpu_budget"]["status"] == "pass" and fit["gpu_budget"]["configuration"]
    assert fit["team"]["status"] == "not_validated" and fit["team"]["required"] == "3 people"
    assert fit["team"]["observed"].startswith("documented complexity: ")  # the catalog's, never a pass
    assert summary["budget"] == {"monthly": "48,000.00", "currency": "USD"}
    assert summary["cost_per_mtok"]["runs"] == [f"run-{stress.pk}"]
    assert summary["licence"]["value"] == "Apache-2.0"  # vLLM and SGLang: the catalog's licence
    assert summary["licence"]["source"].startswith("https://")
    assert summary["vendor_support"] == "Community only; platform team on call"
    assert summary["delivery_owner"] == "Platform team"
    gaps = {gap["test"]: gap["outcome"] for gap in summary["test_gaps"]}
    assert gaps["Swap-out and recovery"] == "not run" and gaps["Tenant isolation"] == "not run"
    assert gaps["Concurrency stress"] == "insufficient data"  # an upload with no pass criteria judged


def test_only_the_owner_of_the_section_closes_an_item(in_review, owners, architect):
    logs = in_review.open_items.get(key="readiness.logs")
    for user in (owners["security"], owners["business"], architect):
        with pytest.raises(PermissionDenied, match="platform owner"):
            close_open_item(item=logs, user=user, status="resolved", reason="done")
    logs.refresh_from_db()
    assert logs.status == "open" and not AuditEntry.objects.filter(action__startswith="record.open_item").exists()


def test_a_waiver_without_a_reason_changes_nothing(in_review, owners):
    logs = in_review.open_items.get(key="readiness.logs")
    with pytest.raises(ValidationError) as excinfo:
        close_open_item(item=logs, user=owners["platform"], status="waived", reason="   ")
    assert "reason" in excinfo.value.message_dict
    logs.refresh_from_db()
    assert logs.status == "open" and logs.decided_by is None


def test_waived_and_resolved_items_are_audited_and_cannot_be_closed_twice(in_review, owners):
    logs = in_review.open_items.get(key="readiness.logs")
    close_open_item(item=logs, user=owners["platform"], status="waived", reason="per-tenant logs ship in stage 2")
    logs.refresh_from_db()
    assert (logs.status, logs.decided_by) == ("waived", owners["platform"])
    entry = AuditEntry.objects.get(action="record.open_item_waived")
    assert entry.justification == "per-tenant logs ship in stage 2" and entry.field.endswith("readiness.logs")
    with pytest.raises(ValidationError, match="already waived"):
        close_open_item(item=logs, user=owners["platform"], status="resolved", reason="now done")


def test_open_items_keep_the_record_from_procurement_until_each_is_closed(in_review, owners):
    assert "open_items" in record_blockers(in_review)
    report = SimpleNamespace(all_ok=True, development_certificates=False)
    assert not Verification(report, in_review, exact=True).procurement_ready
    close_open_item(
        item=in_review.open_items.get(key="readiness.logs"), user=owners["platform"], status="resolved", reason="ok"
    )
    assert not Verification(report, in_review, exact=True).procurement_ready  # the security item is still open
    close_open_item(
        item=in_review.open_items.get(key="security.audit_trail"),
        user=owners["security"],
        status="waived",
        reason="accepted for the pilot: changes reviewed by hand",
    )
    assert Verification(report, in_review, exact=True).procurement_ready
    assert record_blockers(in_review) == ["not_signed"]


def test_the_pdf_shows_each_item_as_it_stands_when_rendered(in_review, owners):
    close_open_item(
        item=in_review.open_items.get(key="readiness.logs"), user=owners["platform"], status="resolved", reason="fixed"
    )
    context = with_item_states(in_review.snapshot, in_review)
    states = {i["key"]: (i["status"], i["reason"]) for i in context["summary"]["open_items"]}
    assert states == {"readiness.logs": ("resolved", "fixed"), "security.audit_trail": ("open", "")}
    assert in_review.snapshot["summary"]["open_items"][0]["status"] == "open"  # the frozen snapshot is untouched


def test_api_lists_and_closes_open_items_with_object_permissions(in_review, owners, outsider):
    api = APIClient()
    api.force_authenticate(owners["platform"])
    listed = api.get(f"/api/v1/records/{in_review.pk}/open-items/")
    assert listed.status_code == 200 and [i["key"] for i in listed.json()] == ["readiness.logs", "security.audit_trail"]
    detail = api.get(f"/api/v1/records/{in_review.pk}/").json()
    assert detail["procurement_blockers"] == ["not_signed", "open_items"]
    logs = in_review.open_items.get(key="readiness.logs")
    bad = api.post(f"/api/v1/open-items/{logs.pk}/", {"status": "waived", "reason": ""}, format="json")
    assert bad.status_code == 400 and "reason" in bad.json()
    closed = api.post(
        f"/api/v1/open-items/{logs.pk}/", {"status": "resolved", "reason": "logs queryable"}, format="json"
    )
    assert closed.status_code == 200 and closed.json()["status"] == "resolved"
    audit = in_review.open_items.get(key="security.audit_trail")
    assert api.post(f"/api/v1/open-items/{audit.pk}/", {"status": "waived", "reason": "x"}).status_code == 403
    api.force_authenticate(outsider)
    assert api.post(f"/api/v1/open-items/{audit.pk}/", {"status": "waived", "reason": "x"}).status_code == 404
    assert api.get(f"/api/v1/records/{in_review.pk}/open-items/").status_code == 404


def test_record_page_lists_items_and_the_owner_closes_one(client, in_review, owners):
    url = reverse("selection:record", args=[in_review.selection_id, in_review.pk])
    client.force_login(owners["platform"])
    page = client.get(url).content.decode()
    assert 'data-open-item="readiness.logs"' in page and "data-procurement-blockers" in page
    assert "data-procurement-summary" in page and "48,000.00 USD per month" in page
    logs = in_review.open_items.get(key="readiness.logs")
    action = reverse("selection:record-open-item", args=[in_review.selection_id, in_review.pk, logs.pk])
    assert action in page  # the platform owner gets the form for the platform item ...
    audit = in_review.open_items.get(key="security.audit_trail")
    other = reverse("selection:record-open-item", args=[in_review.selection_id, in_review.pk, audit.pk])
    assert other not in page  # ... not for the security owner's
    response = client.post(action, {"status": "waived", "reason": "logs per tenant in stage 2"})
    assert response.status_code == 302
    logs.refresh_from_db()
    assert logs.status == "waived"
    assert client.post(other, {"status": "waived", "reason": "not mine"}).status_code == 403


def test_the_rendered_record_opens_with_the_summary_and_each_item_as_it_stands(in_review, owners, tmp_path):
    close_open_item(
        item=in_review.open_items.get(key="readiness.logs"),
        user=owners["platform"],
        status="waived",
        reason="per-tenant logs ship in stage 2",
    )
    for role in ROLES:
        approve(record=in_review, user=owners[role], role=role)
    record = render_pdf(in_review)
    path = tmp_path / "record.pdf"
    path.write_bytes(record.pdf.open("rb").read())
    pages = [
        " ".join(
            subprocess.run(
                ["pdftotext", "-f", str(n), "-l", str(n), str(path), "-"], capture_output=True, text=True, check=True
            ).stdout.split()
        )
        for n in (1, 2)
    ]
    assert "Procurement summary" in pages[0] and "Fit against each constraint" in pages[0]
    assert "waived — per-tenant logs ship in stage 2" in pages[0]
    assert "Security checklist: audit trail" in pages[0] and "open: blocks procurement" in pages[0]
    assert "48,000.00 USD per month" in pages[0] and "Apache-2.0" in pages[0]
    assert "1. Decision and rationale" in pages[1]


def test_the_next_step_of_a_signed_record_names_its_open_items(in_review, owners, dev_certs):
    for role in ROLES:
        approve(record=in_review, user=owners[role], role=role)
    for role in ROLES:
        sign(
            record=in_review,
            user=owners[role],
            role=role,
            pkcs12=dev_certs.pkcs12[role].read_bytes(),
            passphrase=PASSPHRASE,
        )
    Selection.objects.filter(pk=in_review.selection_id).update(scenario_accepted=True)  # not what this tests
    step = next_step(Selection.objects.get(pk=in_review.selection_id), gate_count=1)
    assert "not for procurement" in step.label
    assert "2 open items are neither resolved nor waived" in step.hint


@pytest.mark.parametrize(
    "language, unstated", [("en", "Security checklist: permissions"), ("zh-hans", "安全检查清单：权限")]
)
def test_the_record_page_names_open_project_checks_in_words(client, in_review, architect, language, unstated):
    """Never by their keys (security.permissions): the record page's open project checks name each item
    as a reader does, in the page's language."""
    from tests.e2e import pagechecks

    client.force_login(architect)
    client.cookies["django_language"] = language
    record = client.get(reverse("selection:record", args=[in_review.selection_id, in_review.pk])).content.decode()
    start = record.index('<dd class="warn">', record.index("data-written-in"))
    checks = record[start : record.index("</dd>", start)]
    assert unstated in checks and pagechecks.identifiers(checks) == [], checks
