"""Decisions that go stale: inputs changed after signing, and records due for re-evaluation.

The signed records here are made directly (the triggers allow inserting one): staleness and the
periodic check only read a signed record's time, snapshot and review-by date; the full signing
path is in test_lifecycle and test_views.
"""

from datetime import date, timedelta

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun
from config.celery import app
from selection.candidates.services import add_candidate
from selection.models import DecisionRecord, Selection
from selection.records.reevaluation import flag_records_due
from selection.records.staleness import staleness
from selection.setup.next_step import next_step
from selection.setup.services import save_constraints, set_gates
from selection.tasks import flag_reevaluations
from tests.support.builders import SAMPLE_CONSTRAINTS


@pytest.fixture
def owners_with_email(selection_owners):
    for role, user in selection_owners.items():
        user.email = f"{role}@example.org"
        user.save()
    return selection_owners


def signed_record(
    selection, user, version=1, review_by=None, engine_version="0.11.0", gpu="H100", simulated=False, **extra
):
    snapshot = {
        "simulated": simulated,
        "record": {"id": f"DR-{selection.pk}-v{version}"},
        "review": {"review_by": (review_by or date.today() + timedelta(days=180)).isoformat()},
        "basis": {
            "engine": "vllm",
            "engine_version": engine_version,
            "hardware": {"gpu_model": gpu, "gpu_memory_gib": 80.0},
        },
    }
    return DecisionRecord.objects.create(
        selection=selection,
        version=version,
        status=DecisionRecord.Status.SIGNED,
        created_by=user,
        snapshot=snapshot,
        snapshot_sha256=f"{version}" * 64,
        signed_sha256=f"{version + 1}" * 64,
        signed_at=timezone.now(),
        **extra,
    )


def test_changing_a_constraint_after_signing_marks_the_selection_stale(client, selection_with_constraints, architect):
    selection = selection_with_constraints
    record = signed_record(selection, architect)
    selection.status = "decided"
    selection.save()
    client.force_login(architect)
    assert staleness(selection) is None
    assert "data-inputs-changed" not in client.get(reverse("selection:detail", args=[selection.pk])).content.decode()

    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, peak_concurrency=400))
    stale = staleness(selection)
    assert stale.record == record and stale.kinds == ["constraints"] and stale.since > record.signed_at
    assert "peak concurrent requests: 200 → 400" in [c.summary for c in stale.changes]
    for name in ("selection:detail", "selection:constraints", "selection:comparison", "selection:records"):
        body = client.get(reverse(name, args=[selection.pk])).content.decode()
        assert "data-inputs-changed" in body and "Decided — inputs changed since" in body, name
        assert "peak concurrent requests: 200 → 400" in body, name
    dashboard = client.get(reverse("selection:dashboard")).content.decode()
    assert "Decided — inputs changed since" in dashboard and "ready for procurement" not in dashboard
    api = APIClient()
    api.force_authenticate(architect)
    changed = api.get(f"/api/v1/selections/{selection.pk}/").json()["inputs_changed"]
    assert changed["record"] == 1 and changed["changed"] == ["constraints"]
    assert any(c["summary"] == "peak concurrent requests: 200 → 400" for c in changed["changes"])


def test_gates_candidates_and_new_evidence_count_too_and_a_new_signature_clears_it(
    selection_with_constraints, architect, engines
):
    selection = selection_with_constraints
    signed_record(selection, architect)
    set_gates(selection=selection, user=architect, gates={"memory": 0.5})
    candidate = add_candidate(
        selection=selection, user=architect, data={"engine": engines["sglang"], "engine_version": "0.5.5"}
    )
    BenchmarkRun.objects.create(candidate=candidate, test="concurrency_stress", origin="upload", status="succeeded")
    assert staleness(selection).kinds == ["candidates", "evidence", "gates"]
    signed_record(selection, architect, version=2)  # the decision re-signed on the new inputs
    assert staleness(selection) is None


def test_the_beat_job_flags_an_overdue_record_and_tells_its_owners(
    client, selection_with_constraints, architect, owners_with_email, engines
):
    selection = selection_with_constraints
    overdue = signed_record(selection, architect, review_by=date.today() - timedelta(days=1))
    assert flag_reevaluations() == [overdue.pk]
    overdue.refresh_from_db()
    assert [r["code"] for r in overdue.reevaluation_reasons] == ["review_by_passed"]
    assert overdue.reevaluation_due_since is not None and overdue.owners_notified_at is not None
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert sorted(message.to) == ["business@example.org", "platform@example.org", "security@example.org"]
    assert "due for re-evaluation" in message.subject and "review-by date" in message.body
    assert f"/selections/{selection.pk}/records/{overdue.pk}/" in message.body
    assert selection.audit.filter(action="record.reevaluation_due").exists()
    assert flag_reevaluations() == [] and len(mail.outbox) == 1  # idempotent: told once per reason

    client.force_login(architect)
    dashboard = client.get(reverse("selection:dashboard")).content.decode()
    assert "Decisions due for re-evaluation" in dashboard and "Start re-evaluation" in dashboard
    response = client.post(reverse("selection:record-reevaluate", args=[selection.pk, overdue.pk]))
    successor = DecisionRecord.objects.get(selection=selection, version=2)
    assert response.status_code == 302 and response["Location"].endswith(f"/records/{successor.pk}/")
    assert successor.supersedes == overdue and overdue.superseded_by == successor  # linked both ways
    assert successor.status == "draft" and selection.audit.filter(action="record.reevaluation_started").exists()
    assert "Start re-evaluation" not in client.get(reverse("selection:dashboard")).content.decode()
    api = APIClient()
    api.force_authenticate(architect)
    assert api.get(f"/api/v1/records/{overdue.pk}/").json()["superseded_by"] == successor.pk


def test_a_newer_engine_major_or_other_hardware_makes_a_record_due(
    selection_with_constraints, architect, owners_with_email, engines
):
    selection = selection_with_constraints
    old_engine = signed_record(selection, architect, engine_version="0.6.3")  # the catalog has vLLM 0.11.0
    [flagged] = flag_records_due()
    reason = flagged.reevaluation_reasons[0]
    assert flagged == old_engine and reason["code"] == "engine_major_version" and reason["newer"] == ["0.11.0"]
    other = signed_record(selection, architect, version=2, gpu="A100")  # decided on A100, constraints say H100
    assert [r["code"] for r in flag_records_due()[0].reevaluation_reasons] == ["hardware_changed"]
    other.refresh_from_db()
    assert "from A100 80 GiB to H100 80 GiB" in other.reevaluation_reasons[0]["text"]
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, gpu_model="A100"))
    flag_records_due()
    other.refresh_from_db()
    assert other.reevaluation_due_since is None and other.reevaluation_reasons == []  # the hardware is back


def test_the_check_runs_on_the_beat_schedule():
    entry = app.conf.beat_schedule["flag-reevaluations"]
    assert entry["task"] == flag_reevaluations.name == "selection.tasks.flag_reevaluations"
    assert entry["schedule"] <= 24 * 3600


@pytest.mark.parametrize(
    "simulated,development,wording",
    [
        (False, False, "The signed decision record is ready for procurement."),
        (True, False, "not for procurement: it rests on SIMULATED evidence."),
        (False, True, "not for procurement: it is signed with development certificates (development CA)."),
        (True, True, "SIMULATED evidence and it is signed with development certificates"),
    ],
)
def test_ready_for_procurement_only_on_measured_evidence_under_a_non_development_ca(
    selection_with_constraints, architect, selection_owners, engines, simulated, development, wording
):
    selection = selection_with_constraints
    selection.scenario_accepted = True
    selection.save()
    set_gates(selection=selection, user=architect, gates={"memory": 0.5})
    add_candidate(selection=selection, user=architect, data={"engine": engines["vllm"], "engine_version": "0.11.0"})
    record = signed_record(selection, architect, simulated=simulated)
    for role, user in selection_owners.items():
        record.approvals.create(role=role, user=user, signed_at=timezone.now(), development_certificate=development)
    step = next_step(Selection.objects.get(pk=selection.pk))
    assert wording in step.hint
    assert (step.label == "Decided") == (not simulated and not development)
