"""Steps 6-7 in the browser: comparison, decision records (draft -> review -> approve -> sign), verification."""

from __future__ import annotations

import hashlib

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from weasyprint import HTML

from benchmarks.models import BenchmarkRun, RunPoint
from selection.certificates import signing
from selection.domain.messages import render
from selection.models import AuditEntry, DecisionRecord, Membership, Selection
from selection.records.services import create_draft, start_review
from tests.support.builders import DEV_PASSPHRASE as PASSPHRASE
from tests.support.builders import ROLES, decided_selection, rescored
from tests.support.builders import stress_run as _stress_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(architect, team, enrolled_owners, engines):
    """Two candidates with measured concurrency-stress evidence, scored, owners enrolled: enough to draft
    a record and sign it (not the lifecycle world's selection, which is left unscored)."""
    return decided_selection(architect, team, enrolled_owners, engines)


def page(client, user, name, *args, **kwargs):
    client.force_login(user)
    return client.get(reverse(name, args=args), kwargs)


# --- comparison ------------------------------------------------------------------------------


def test_comparison_shows_scores_missing_evidence_rules_and_charts(client, decided, architect):
    response = page(client, architect, "selection:comparison", decided.pk)
    body = response.content.decode()
    assert response.status_code == 200
    score = decided.scores.get(include_simulated=False)
    winner = next(c for c in score.result["candidates"] if c["candidate"] == score.result["winner"])
    assert winner["label"] in body and "TOPSIS" in body
    assert "indicators missing" in body and "<code>kv_headroom_at_target</code>" in body  # named, never 0
    assert render(score.result["sentences"][0]).split(" (")[0] in body  # the sensitivity sentences
    assert "kv_headroom_at_target" in body  # the scoring rules table
    assert body.count("<svg") == 2  # dimension bars + TTFT/TPOT against concurrency
    assert reverse("selection:comparison-recompute", args=[decided.pk]) in body
    assert "not signable" in body  # the toggle is labelled
    assert "Next: draft the decision record" in body
    # which ranking decides, why, and what the other says (issue 16 item 18)
    assert "Ranking method" in body and render(score.result["method"]["sentence"]) in body.replace("&#x27;", "'")
    assert "second opinion" in body


def test_a_criterion_without_evidence_is_missing_not_zero():
    from django.template.loader import render_to_string

    from selection.scoring.views import comparison_table

    result = {
        "winner": "1",
        "weights": {"cache_reuse": 0.5},
        "gates": {"memory": 0.6},
        "candidates": [
            {
                "candidate": "1",
                "label": "A",
                "rank": 1,
                "dimensions": {"memory": {"score": 0.5, "score_upper": 0.9}},
                "criteria": {
                    "cache_reuse": {
                        "dimension": "memory",
                        "score": 0.5,
                        "score_upper": 0.9,
                        "status": "partial",
                        "coverage": 0.5,
                        "indicators": [],
                    }
                },
                "gates": [
                    {"dimension": "memory", "threshold": 0.6, "score": 0.5, "passed": False, "reason": "0.50 < 0.60"}
                ],
            },
            {
                "candidate": "2",
                "label": "B",
                "rank": 2,
                "dimensions": {"memory": {"score": None}},
                "criteria": {
                    "cache_reuse": {
                        "dimension": "memory",
                        "score": None,
                        "status": "missing",
                        "indicators": [{"indicator": "prefix_hit_rate", "status": "missing"}],
                    }
                },
                "gates": [],
            },
        ],
    }
    table = comparison_table(result)
    assert [c["label"] for c in table["columns"]] == ["A", "B"] and table["winner"]["label"] == "A"
    cells = table["dimensions"][0]["criteria"][0]["cells"]
    assert cells[0]["score"] == 0.5 and cells[1]["missing"] and cells[1]["score"] is None
    assert table["gates"][0]["cells"][0]["passed"] is False and table["gates"][0]["cells"][1]["passed"] is None
    assert table["missing"] == [[], ["prefix_hit_rate"]]
    html = render_to_string("selection/decision/_cell.html", {"cell": cells[1]})
    assert "missing" in html and "0.000" not in html


def test_comparison_reads_the_snapshot_and_the_task_rescores_new_evidence(client, decided, architect):
    first = decided.scores.get(include_simulated=False)
    assert page(client, architect, "selection:comparison", decided.pk).status_code == 200
    _stress_run(decided.candidates.get(engine__slug="sglang"), (10.0, 20.0))
    # the inputs changed (stamped, as every evidence hook does) and no rescoring was requested
    Selection.objects.filter(pk=decided.pk).update(inputs_changed_at=timezone.now())
    body = page(client, architect, "selection:comparison", decided.pk).content.decode()
    assert decided.scores.count() == 2  # a GET never rescores: the snapshot of both views stays
    assert 'data-scores-state="stale"' in body and "Recompute now" in body
    rescored(decided)  # what the task does when evidence arrives through an upload or a run
    latest = decided.scores.filter(include_simulated=False).first()
    assert latest.pk != first.pk and latest.inputs_hash != first.inputs_hash
    body = page(client, architect, "selection:comparison", decided.pk).content.decode()
    assert 'data-scores-state="current"' in body and "Recompute now" not in body


def test_comparison_empty_state_says_what_to_do(client, selection_with_constraints, architect):
    body = page(client, architect, "selection:comparison", selection_with_constraints.pk).content.decode()
    assert "add candidates and evidence" in body
    assert reverse("selection:candidates", args=[selection_with_constraints.pk]) in body


def test_including_simulated_evidence_is_labelled_not_signable(client, decided, architect):
    _stress_run(decided.candidates.get(engine__slug="sglang"), (20.0, 40.0), evidence="SIMULATED")
    rescored(decided)
    client.force_login(architect)
    body = client.get(reverse("selection:comparison", args=[decided.pk]), {"simulated": "1"}).content.decode()
    assert decided.scores.filter(include_simulated=True).first().signable is False
    assert "It is not signable and not for procurement" in body and "SIMULATED" in body
    measured = client.get(reverse("selection:comparison", args=[decided.pk])).content.decode()
    assert "It is not signable and not for procurement" not in measured


def test_recompute_is_for_architects_only(client, decided, architect, reviewer):
    url = reverse("selection:comparison-recompute", args=[decided.pk])
    client.force_login(reviewer)
    assert client.post(url).status_code == 403
    assert "comparison-recompute" not in page(client, reviewer, "selection:comparison", decided.pk).content.decode()
    client.force_login(architect)
    response = client.post(url, {"simulated": "1"})
    assert response.status_code == 302 and response["Location"].endswith("?simulated=1")
    assert decided.scores.filter(include_simulated=True).exists()


def test_another_team_gets_404_everywhere(client, decided, architect, outsider):
    record = create_draft(selection=decided, user=architect)
    client.force_login(outsider)
    for name, args in (
        ("selection:comparison", [decided.pk]),
        ("selection:records", [decided.pk]),
        ("selection:record", [decided.pk, record.pk]),
        ("selection:record-pdf", [decided.pk, record.pk]),
    ):
        assert client.get(reverse(name, args=args)).status_code == 404, name
    assert client.post(reverse("selection:records", args=[decided.pk]), {"rationale": "x"}).status_code == 404


# --- records ---------------------------------------------------------------------------------


def test_records_page_empty_state_and_reviewer_cannot_draft(client, decided, reviewer):
    body = page(client, reviewer, "selection:records", decided.pk).content.decode()
    assert "No decision record yet" in body and 'name="rationale"' not in body
    assert client.post(reverse("selection:records", args=[decided.pk]), {"rationale": "x"}).status_code == 403
    assert not DecisionRecord.objects.exists()


def test_review_lists_the_missing_sections(client, selection_with_constraints, architect):
    record = create_draft(selection=selection_with_constraints, user=architect)
    client.force_login(architect)
    response = client.post(
        reverse("selection:record-action", args=[selection_with_constraints.pk, record.pk]), {"action": "start_review"}
    )
    body = response.content.decode()
    assert response.status_code == 400 and "The record cannot go to review yet" in body
    record.refresh_from_db()
    assert record.status == "draft"
    with pytest.raises(ValidationError) as excinfo:
        start_review(record=record, user=architect)
    problems = excinfo.value.message_dict["snapshot"]
    assert problems and all(f"<li>{escape(p)}</li>" in body for p in problems)


def test_a_record_on_simulated_evidence_carries_the_banner(client, decided, architect, engines):
    _stress_run(decided.candidates.get(engine__slug="sglang"), (20.0, 40.0), evidence="SIMULATED")
    rescored(decided)
    client.force_login(architect)
    form = client.get(reverse("selection:records", args=[decided.pk])).content.decode()
    assert 'name="include_simulated"' in form and "SIMULATED — not for procurement" in form  # the warning
    client.post(reverse("selection:records", args=[decided.pk]), {"include_simulated": "on"})
    record = DecisionRecord.objects.get(selection=decided)
    assert record.include_simulated
    start_review(record=record, user=architect)
    record.refresh_from_db()
    assert record.simulated
    body = client.get(reverse("selection:record", args=[decided.pk, record.pk])).content.decode()
    assert "SIMULATED — not for procurement" in body
    listing = client.get(reverse("selection:records", args=[decided.pk])).content.decode()
    assert 'badge--simulated">SIMULATED<' in listing


def test_only_the_named_owner_sees_and_uses_approve(client, decided, architect, owners):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    url = reverse("selection:record-action", args=[decided.pk, record.pk])
    business = page(client, owners["business"], "selection:record", decided.pk, record.pk).content.decode()
    assert 'name="role" value="business"' in business and 'name="role" value="platform"' not in business
    architect_view = page(client, architect, "selection:record", decided.pk, record.pk).content.decode()
    assert 'value="approve"' not in architect_view
    client.force_login(owners["platform"])
    assert client.post(url, {"action": "approve", "role": "business"}).status_code == 403
    assert client.post(url, {"action": "approve", "role": "platform"}).status_code == 302
    assert list(record.approvals.values_list("role", flat=True)) == ["platform"]


def test_verify_rejects_a_file_that_is_not_a_pdf(client, make_user, team):
    procurement = make_user("paula", team, Membership.Role.PROCUREMENT)
    assert page(client, procurement, "selection:record-verify").status_code == 200
    response = client.post(
        reverse("selection:record-verify"), {"file": SimpleUploadedFile("x.pdf", b"hello, not a pdf")}
    )
    assert response.status_code == 400 and "This is not a PDF" in response.content.decode()
    response = client.post(reverse("selection:record-verify"), {"file": SimpleUploadedFile("y.pdf", b"%PDF-1.7 junk")})
    body = response.content.decode()
    assert response.status_code == 400 and "could not be read as a PDF" in body and "All 0" not in body


def test_full_flow_draft_review_approve_sign_download_verify(
    client, decided, architect, owners, dev_certs, settings, make_user, team
):
    settings.KVSELECT_TRUST_ROOTS = [str(dev_certs.ca_certificate)]
    client.force_login(architect)
    response = client.post(
        reverse("selection:records", args=[decided.pk]),
        {"rationale": "Lowest TTFT at the target load.", "review_by": "2027-06-30"},
    )
    record = DecisionRecord.objects.get(selection=decided)
    assert response.status_code == 302 and response["Location"].endswith(f"/records/{record.pk}/")
    action = reverse("selection:record-action", args=[decided.pk, record.pk])
    assert client.post(action, {"action": "start_review"}).status_code == 302
    for role in ROLES:
        client.force_login(owners[role])
        assert client.post(action, {"action": "approve", "role": role, "comment": "ok"}).status_code == 302
    client.force_login(owners["business"])
    assert client.post(action, {"action": "comment", "text": "Checked the capacity plan."}).status_code == 302

    sign = reverse("selection:record-sign", args=[decided.pk, record.pk])
    client.force_login(owners["platform"])  # out of order: business signs first
    assert "Sign as" not in client.get(reverse("selection:record", args=[decided.pk, record.pk])).content.decode()
    wrong = client.post(
        sign,
        {
            "role": "business",
            "passphrase": "x",
            "pkcs12": SimpleUploadedFile("p.p12", dev_certs.pkcs12["business"].read_bytes()),
        },
    )
    assert wrong.status_code == 403
    client.force_login(owners["business"])
    bad = client.post(
        sign,
        {
            "role": "business",
            "passphrase": "wrong-secret-987",
            "pkcs12": SimpleUploadedFile("b.p12", dev_certs.pkcs12["business"].read_bytes()),
        },
    )
    assert bad.status_code == 400 and "wrong-secret-987" not in bad.content.decode()
    for role in ROLES:
        client.force_login(owners[role])
        body = client.get(reverse("selection:record", args=[decided.pk, record.pk])).content.decode()
        assert f'name="role" value="{role}"' in body and 'type="password"' in body
        response = client.post(
            sign,
            {
                "role": role,
                "passphrase": PASSPHRASE,
                "pkcs12": SimpleUploadedFile(f"{role}.p12", dev_certs.pkcs12[role].read_bytes()),
            },
        )
        assert response.status_code == 302, response.content.decode()[:2000]
    record.refresh_from_db()
    assert record.status == "signed"
    assert not AuditEntry.objects.filter(new__icontains=PASSPHRASE).exists()

    body = client.get(reverse("selection:record", args=[decided.pk, record.pk])).content.decode()
    assert "Check the capacity plan" not in body and "Checked the capacity plan." in body
    assert "Create new version (supersede)" not in body  # owners are reviewers here, not architects
    download = client.get(reverse("selection:record-pdf", args=[decided.pk, record.pk]))
    pdf = b"".join(download.streaming_content)
    assert download["Content-Type"] == "application/pdf" and pdf.startswith(b"%PDF")

    procurement = make_user("paula", team, Membership.Role.PROCUREMENT)
    client.force_login(procurement)
    response = client.post(reverse("selection:record-verify"), {"file": SimpleUploadedFile("r.pdf", pdf)})
    body = response.content.decode()
    assert response.status_code == 200
    assert "All 3 signatures are intact, valid, trusted and by the named owners." in body
    assert "This is exactly the record kvselect issued" in body and "Chat, v1" in body
    for name in ("张伟", "Priya Raman", "Jonas Berg"):  # the records folder's certificates (tests.support.lifecycle)
        assert name in body
    # trust is stated: the root named per signature, the development CA flagged, never "ready for procurement"
    assert body.count(escape(signing.DEV_CA_COMMON_NAME)) >= 3
    assert "development certificate — not for procurement" in body and "Not ready for procurement" in body
    assert "simulated-banner" not in body and "· SIMULATED" not in body  # measured evidence
    assert body.count("signed by the named owner") == 3

    client.force_login(architect)
    body = client.get(reverse("selection:record", args=[decided.pk, record.pk])).content.decode()
    assert "Create new version (supersede)" in body
    response = client.post(
        reverse("selection:records", args=[decided.pk]), {"supersedes": record.pk, "rationale": "v2"}
    )
    successor = DecisionRecord.objects.get(selection=decided, version=2)
    assert response.status_code == 302 and successor.supersedes_id == record.pk
    listing = client.get(reverse("selection:records", args=[decided.pk])).content.decode()
    assert "supersedes v1" in listing and "superseded by v2" in listing


def test_comparison_draws_the_five_tests_charts(client, decided, architect):
    candidate = decided.candidates.first()
    stress = candidate.runs.get(test="concurrency_stress")
    stress.timeseries = {"kv_usage_ratio": [[0, 0.1], [1, 0.4], [2, 0.6]]}
    stress.save()
    ladder = BenchmarkRun.objects.create(candidate=candidate, test="long_context", origin="harness", status="succeeded")
    for index, tokens in enumerate((16384, 32768)):
        RunPoint.objects.create(
            run=ladder,
            index=index,
            label=f"{tokens // 1024}K alone",
            ttft_ms={"p50": 100.0 * (index + 1)},
            extra={"input_tokens_requested": tokens},
        )
    soak = BenchmarkRun.objects.create(
        candidate=candidate, test="stability", origin="harness", status="succeeded", params={"duration_s": 3600}
    )
    RunPoint.objects.create(run=soak, index=0, label="first_window", ttft_ms={"p99": 200.0})
    RunPoint.objects.create(run=soak, index=1, label="last_window", ttft_ms={"p99": 260.0})
    rescored(decided)
    body = page(client, architect, "selection:comparison", decided.pk).content.decode()
    assert "KV-cache usage over time" in body and "TTFT against context length" in body
    assert "first and last window" in body


def test_verify_page_shows_simulated_and_the_development_ca(client, decided, architect, dev_certs, settings):
    """A record on SIMULATED evidence signed under the development CA: both in red, never procurement-ready."""
    pdf = signing.prepare_signature_fields(
        HTML(string="<h1>Record</h1>").write_pdf(), {"business": (0, 40, 60, 200, 140)}
    )
    pdf = signing.sign_pdf(
        pdf, dev_certs.pkcs12["business"].read_bytes(), PASSPHRASE, "business", "b", "business", "ok"
    )
    DecisionRecord.objects.create(
        selection=decided,
        version=1,
        status=DecisionRecord.Status.SIGNED,
        created_by=architect,
        snapshot={"simulated": True},
        snapshot_sha256="c" * 64,
        signed_sha256=hashlib.sha256(pdf).hexdigest(),
    )
    client.force_login(architect)
    body = client.post(reverse("selection:record-verify"), {"file": SimpleUploadedFile("r.pdf", pdf)}).content.decode()
    assert (
        'class="alert alert--error simulated-banner"' in body and "rests on evidence produced by the simulator" in body
    )
    assert 'class="alert alert--error dev-ca"' in body and escape(signing.DEV_CA_COMMON_NAME) in body
    assert "Not ready for procurement · SIMULATED · development certificate" in body
    assert "data-busy" in body and "data-busy-note hidden" in body  # the progress note, shown after a second
