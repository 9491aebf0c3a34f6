"""Scores are written by a task when evidence changes, never on a page read (issue 30 item 3): every
evidence change queues `recompute_scores`; the comparison, its status poll and the record PDF download
only read; the page says when the scores are being recomputed, out of date or not computed yet."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from benchmarks.models import BenchmarkRun
from benchmarks.uploads.ingest import ingest_upload
from benchmarks.uploads.parse import parse_stored_upload
from benchmarks.uploads.quality import confirm_as_evidence
from config import celery as celery_config
from config.celery import QUEUES, app
from selection import tasks
from selection.candidates.services import (
    CATALOG_PATH,
    archive_candidate,
    delete_candidate,
    load_engine_catalog,
    restore_candidate,
    update_candidate,
)
from selection.capacity.stating import record_measured_capacity, state_capacity_from_log
from selection.models import CriterionWeight, Engine, Score, Selection
from selection.records.rendering import render_pdf
from selection.records.services import approve, create_draft, start_review
from selection.scoring import services as scoring_services
from selection.scoring.services import refresh_scores, scores_state, scoring_inputs
from selection.setup.services import save_constraints, set_gates, update_weights
from tests.support.builders import DEV_PASSPHRASE as PASSPHRASE
from tests.support.builders import ROLES, enrol_owners, rescored, stress_run
from tests.support.uploads import token_client, upload

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parents[2] / "benchmarks" / "formats" / "fixtures"
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


@pytest.fixture(autouse=True)
def _no_quiet_period(monkeypatch):
    """The task lets go at once after a pass (its wait for a burst to end is tested on its own)."""
    monkeypatch.setattr(tasks, "RESCORING_QUIET_S", 0.0)


@pytest.fixture
def sent(monkeypatch):
    """The selections whose rescoring was handed to the broker."""
    calls: list[int] = []
    monkeypatch.setattr(tasks.recompute_scores, "apply_async", lambda args, **kwargs: calls.append(args[0]))
    return calls


def requested_at(selection: Selection):
    return Selection.objects.values_list("scores_requested_at", flat=True).get(pk=selection.pk)


def inputs_changed_at(selection: Selection):
    return Selection.objects.values_list("inputs_changed_at", flat=True).get(pk=selection.pk)


def claimed_at(selection: Selection):
    return Selection.objects.values_list("rescoring_queued_at", flat=True).get(pk=selection.pk)


def writes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]


def comparison_url(selection: Selection) -> str:
    return reverse("selection:comparison", args=[selection.pk])


def status_url(selection: Selection) -> str:
    return reverse("selection:comparison-status", args=[selection.pk])


# --- every evidence change queues the task, after commit ---------------------------------------


def _upload(selection: Selection, architect) -> None:
    candidate = selection.candidates.get(engine__slug="sglang")
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    ingest_upload(candidate=candidate, data=data, filename="v.json", test="concurrency_stress", synchronous=True)


def _weights(selection: Selection, architect) -> None:
    weights = {w.criterion: w.weight for w in selection.weights.all()}
    first = next(iter(weights))
    weights[first] += 0.1
    update_weights(selection=selection, user=architect, weights=weights, justification="platform asks for it")


def _gates(selection: Selection, architect) -> None:
    set_gates(selection=selection, user=architect, gates={"memory": 0.2})


def _constraints(selection: Selection, architect) -> None:
    save_constraints(selection=selection, user=architect, data={"ttft_p95_ms": 400.0})


def _archive(selection: Selection, architect) -> None:
    archive_candidate(candidate=selection.candidates.get(engine__slug="sglang"), user=architect)


def _restore(selection: Selection, architect) -> None:
    candidate = selection.candidates.get(engine__slug="sglang")
    Selection.objects.filter(pk=selection.pk).update(scores_requested_at=None)
    candidate.archived_at = timezone.now()
    candidate.save(update_fields=["archived_at"])
    restore_candidate(candidate=candidate, user=architect)


def _candidate_flags(selection: Selection, architect) -> None:
    candidate = selection.candidates.get(engine__slug="vllm")
    update_candidate(candidate=candidate, user=architect, data={"launch_flags": "--enable-prefix-caching"})


def _confirm(selection: Selection, architect) -> None:
    candidate = selection.candidates.get(engine__slug="sglang")
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()  # another model, 6 requests: held back
    run, _ = ingest_upload(candidate=candidate, data=data, filename="v.json", test="concurrency_stress")
    assert run.needs_confirmation
    Selection.objects.filter(pk=selection.pk).update(scores_requested_at=None)
    confirm_as_evidence(run=run, user=architect)


def _delete_candidate(selection: Selection, architect) -> None:
    delete_candidate(candidate=selection.candidates.get(engine__slug="sglang"), user=architect)


def _catalog(selection: Selection, architect) -> None:
    engine = Engine.objects.get(slug="vllm")
    catalog = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    for entry in catalog["engines"]:
        if entry["slug"] == engine.slug:
            entry["name"] = "vLLM (catalog update)"
    path = Path(tempfile.mkdtemp()) / "catalog.json"
    path.write_text(json.dumps(catalog), encoding="utf-8")
    load_engine_catalog(path)


VLLM_LOG = "INFO 11-29 10:02:11 [kv_cache_utils.py:1087] GPU KV cache size: 443,984 tokens\n"


def _pasted_capacity_log(selection: Selection, architect) -> None:
    state_capacity_from_log(candidate=selection.candidates.get(engine__slug="vllm"), user=architect, log_text=VLLM_LOG)


def _launched_engines_log(selection: Selection, architect) -> None:
    candidate = selection.candidates.get(engine__slug="vllm")
    assert record_measured_capacity(candidate, VLLM_LOG, candidate.runs.first()) is not None


CHANGES = [
    _upload,
    _weights,
    _gates,
    _constraints,
    _archive,
    _restore,
    _candidate_flags,
    _confirm,
    _delete_candidate,
    _catalog,
    _pasted_capacity_log,
    _launched_engines_log,
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_every_input_change_stamps_the_selection_marks_the_scores_and_queues_the_task_after_commit(
    decided, architect, sent, django_capture_on_commit_callbacks, change
):
    assert requested_at(decided) is None
    before = inputs_changed_at(decided)
    with django_capture_on_commit_callbacks() as callbacks:
        change(decided, architect)
    assert requested_at(decided) is not None and sent == []  # nothing is sent before the commit
    assert inputs_changed_at(decided) != before  # the stamp moved, in the change's transaction
    for callback in callbacks:
        callback()
    assert set(sent) == {decided.pk}
    # the snapshot no longer covers the inputs: the page says so without rebuilding them
    assert not scores_state(decided).current


def test_the_task_is_named_routed_to_the_default_queue_and_resent_by_beat():
    assert tasks.recompute_scores.name == "selection.tasks.recompute_scores"
    assert app.conf.task_routes["selection.tasks.recompute_scores"] == {"queue": "default"}
    entry = app.conf.beat_schedule["resend-rescoring"]
    assert entry["task"] == tasks.resend_rescoring.name == "selection.tasks.resend_rescoring"


# --- the task: idempotent, clears only what it covered, keeps its error ---------------------------


def test_the_task_rescores_only_when_the_inputs_hash_changed(decided, monkeypatch):
    before = Score.objects.filter(selection=decided).count()

    def refuse(*args, **kwargs):
        raise AssertionError("scored although the inputs did not change")

    with monkeypatch.context() as patch:
        patch.setattr(scoring_services, "score_candidates", refuse)
        assert tasks.recompute_scores(decided.pk) == ""
    assert Score.objects.filter(selection=decided).count() == before
    stress_run(decided.candidates.get(engine__slug="sglang"), (10.0, 20.0))
    assert tasks.recompute_scores(decided.pk) == ""
    assert Score.objects.filter(selection=decided).count() == before + 2  # both views, once each
    assert tasks.recompute_scores(decided.pk) == ""
    assert Score.objects.filter(selection=decided).count() == before + 2


def test_a_rescoring_request_made_while_the_task_runs_stays_open(decided, monkeypatch):
    Selection.objects.filter(pk=decided.pk).update(scores_requested_at=timezone.now() - timedelta(seconds=5))
    score_now = scoring_services.current_scores

    def evidence_arrives_meanwhile(selection, include_simulated):
        Selection.objects.filter(pk=decided.pk).update(scores_requested_at=timezone.now())
        return score_now(selection, include_simulated)

    monkeypatch.setattr(scoring_services, "current_scores", evidence_arrives_meanwhile)
    assert refresh_scores(decided.pk) == ""
    assert requested_at(decided) is not None  # its own task (or the resend) covers it


def test_a_scoring_error_is_kept_shown_and_cleared_once_scoring_works(client, decided, architect):
    CriterionWeight.objects.filter(selection=decided).update(weight=0)
    tasks.schedule_rescoring(decided.pk)
    error = refresh_scores(decided.pk)
    assert error == "weights: must not all be zero"
    stored = Selection.objects.get(pk=decided.pk)
    assert stored.scoring_error == error and stored.scores_requested_at is None  # no endless "being recomputed"
    client.force_login(architect)
    body = client.get(comparison_url(decided)).content.decode()
    assert 'data-scores-state="error"' in body and error in body and "hx-trigger" not in body
    CriterionWeight.objects.filter(selection=decided).update(weight=1)
    assert refresh_scores(decided.pk) == ""
    assert Selection.objects.get(pk=decided.pk).scoring_error == ""


def test_a_refused_rescoring_stays_marked_and_the_beat_job_sends_it_again(
    decided, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    def broker_down(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tasks.recompute_scores, "apply_async", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.schedule_rescoring(decided.pk)
        tasks.schedule_rescoring(decided.pk)
    outage = [r for r in caplog.records if "job queue (broker) unavailable" in r.getMessage()]
    assert len(outage) == 1  # one line for the outage, not one per request
    assert requested_at(decided) is not None and claimed_at(decided) is None  # marked, and no task holds it
    sent: list[int] = []
    monkeypatch.setattr(tasks.recompute_scores, "apply_async", lambda args, **kwargs: sent.append(args[0]))
    assert tasks.resend_rescoring() == [] and sent == []  # within BROKER_PAUSE_S of the refusal: not tried
    monkeypatch.setattr(celery_config, "BROKER_PAUSE_S", 0.0)
    assert tasks.resend_rescoring() == [decided.pk] and sent == [decided.pk]
    assert claimed_at(decided) is not None
    assert "job queue (broker) back after" in caplog.text
    assert tasks.resend_rescoring() == [] and sent == [decided.pk]  # its task is pending: not sent twice


def test_a_task_lost_with_its_broker_is_sent_again_once_its_claim_lapses(decided, sent):
    tasks.schedule_rescoring(decided.pk)
    assert tasks.send_rescoring(decided.pk) is True and sent == [decided.pk]
    # the broker restarts without its data: the message is gone, the claim stays
    assert tasks.resend_rescoring() == [] and sent == [decided.pk]
    later = timezone.now() + tasks.RESCORING_RESEND_AFTER + timedelta(seconds=1)
    assert tasks.resend_rescoring(later) == [decided.pk] and sent == [decided.pk, decided.pk]


# --- coalescing: one pending task per selection, whatever the number of changes -------------------


def test_twenty_uploads_in_a_burst_queue_one_rescoring(decided, architect, sent, django_capture_on_commit_callbacks):
    candidate = decided.candidates.get(engine__slug="vllm")
    client = token_client(decided, architect)
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    stamps = set()
    for number in range(20):
        with django_capture_on_commit_callbacks(execute=True):
            response = upload(client, candidate.pk, data, filename="v.json", key=f"ci-burst-{number}")
        assert response.status_code == 201, response.content
        stamps.add(inputs_changed_at(decided))
    assert BenchmarkRun.objects.filter(candidate=candidate, idempotency_key__startswith="ci-burst-").count() == 20
    assert sent == [decided.pk]  # the first upload queued the task; the other 19 only marked the selection
    assert len(stamps) == 20 and requested_at(decided) is not None
    assert tasks.recompute_scores(decided.pk) == ""  # the one task covers all twenty
    assert requested_at(decided) is None and claimed_at(decided) is None
    assert scores_state(decided).current


def test_a_change_while_the_task_scores_is_picked_up_by_the_same_task(decided, sent, monkeypatch):
    tasks.schedule_rescoring(decided.pk)
    assert tasks.send_rescoring(decided.pk) and sent == [decided.pk]
    passes: list[str] = []
    real = tasks.refresh_scores

    def evidence_arrives_during_the_first_pass(selection_id):
        error = real(selection_id)  # the pass read the request, then scored
        if not passes:  # new evidence lands before the pass ends
            stress_run(decided.candidates.get(engine__slug="sglang"), (10.0, 20.0))
            with transaction.atomic():
                tasks.schedule_rescoring(selection_id)  # its on_commit finds the task pending: no send
        passes.append("pass")
        return error

    monkeypatch.setattr(tasks, "refresh_scores", evidence_arrives_during_the_first_pass)
    assert tasks.recompute_scores(decided.pk) == ""
    assert len(passes) == 2 and sent == [decided.pk]  # scored again by the same task, none sent
    assert requested_at(decided) is None and claimed_at(decided) is None
    assert scores_state(decided).current


@pytest.mark.django_db(transaction=True)  # the burst's next upload commits from another thread
def test_a_task_waits_for_a_burst_to_end_and_scores_what_arrives_meanwhile(sent, decided, monkeypatch):
    # `sent` before `decided`: without a test transaction the set-up's own rescoring is sent on commit, and
    # a real worker (CI runs one for the whole session) would score this selection beside the task below
    monkeypatch.setattr(tasks, "RESCORING_QUIET_S", 1.0)
    Selection.objects.filter(pk=decided.pk).update(rescoring_queued_at=None)  # the set-up's own task is done
    sent.clear()
    tasks.schedule_rescoring(decided.pk)  # no test transaction: sent at once
    scheduled = time.monotonic()
    assert sent == [decided.pk]
    passes: list[float] = []
    real = tasks.refresh_scores

    def upload_half_a_second_after_the_first_pass(selection_id):
        passes.append(time.monotonic())
        error = real(selection_id)
        if len(passes) == 1:
            # the quiet window counts from the last change (the schedule above): on a slow box the first
            # pass alone may outlast 1 s, so the window is stretched past the pass for the late upload
            monkeypatch.setattr(tasks, "RESCORING_QUIET_S", time.monotonic() - scheduled + 1.0)

            def later():
                time.sleep(0.5)
                tasks.schedule_rescoring(selection_id)  # the next upload of the burst
                connection.close()

            threading.Thread(target=later).start()
        return error

    monkeypatch.setattr(tasks, "refresh_scores", upload_half_a_second_after_the_first_pass)
    started = time.monotonic()
    assert tasks.recompute_scores(decided.pk) == ""
    assert len(passes) == 2 and sent == [decided.pk]  # the same task scored the late upload
    assert time.monotonic() - started >= 1.0  # and let go only once the inputs were quiet for 1 s
    assert claimed_at(decided) is None and requested_at(decided) is None


def test_a_task_scoring_past_its_budget_hands_over_to_a_fresh_task(decided, sent, monkeypatch):
    tasks.schedule_rescoring(decided.pk)
    assert tasks.send_rescoring(decided.pk)
    monkeypatch.setattr(tasks, "RESCORING_TASK_BUDGET_S", 0.0)
    real = tasks.refresh_scores

    def always_a_new_change(selection_id):
        error = real(selection_id)
        tasks.schedule_rescoring(selection_id)
        return error

    monkeypatch.setattr(tasks, "refresh_scores", always_a_new_change)
    assert tasks.recompute_scores(decided.pk) == ""
    assert sent == [decided.pk, decided.pk]  # one pass, then the next task at the back of the queue
    assert claimed_at(decided) is not None and requested_at(decided) is not None


def test_a_task_that_crashes_gives_its_claim_up_for_the_resend_job(decided, sent, monkeypatch):
    tasks.schedule_rescoring(decided.pk)
    assert tasks.send_rescoring(decided.pk)

    def crash(selection_id):
        raise RuntimeError("a bug")

    with monkeypatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(tasks, "refresh_scores", crash)
        tasks.recompute_scores(decided.pk)
    assert claimed_at(decided) is None and requested_at(decided) is not None
    assert tasks.resend_rescoring() == [decided.pk] and sent == [decided.pk, decided.pk]


def test_parsing_runs_on_its_own_queue():
    assert app.conf.task_routes["benchmarks.tasks.parse_upload"] == {"queue": "parse"}
    assert {q.name for q in app.conf.task_queues} == {"default", "parse", "gpu", "render"} == set(QUEUES)


# --- the pages read the latest snapshot and say where it stands -----------------------------------


def test_the_page_says_being_recomputed_and_polls_until_the_task_ran(client, decided, architect):
    first = decided.scores.filter(include_simulated=False).first()
    stress_run(decided.candidates.get(engine__slug="sglang"), (10.0, 20.0))
    tasks.schedule_rescoring(decided.pk)  # what every evidence hook does
    client.force_login(architect)
    body = client.get(comparison_url(decided)).content.decode()
    assert 'data-scores-state="recomputing"' in body and "Being recomputed" in body
    assert f'hx-get="{status_url(decided)}"' in body and 'hx-trigger="every 2s"' in body
    assert "Totals and rank" in body  # the previous snapshot stays readable meanwhile
    polled = client.get(status_url(decided))
    assert polled.status_code == 200 and "HX-Refresh" not in polled
    assert "Being recomputed" in polled.content.decode()
    refresh_scores(decided.pk)  # the task ran
    assert client.get(status_url(decided))["HX-Refresh"] == "true"
    body = client.get(comparison_url(decided)).content.decode()
    assert 'data-scores-state="current"' in body and "Being recomputed" not in body
    assert decided.scores.filter(include_simulated=False).first().inputs_hash != first.inputs_hash


def test_the_page_says_so_in_chinese(client, decided, architect):
    tasks.schedule_rescoring(decided.pk)
    Score.objects.filter(selection=decided).delete()
    client.force_login(architect)
    client.cookies["django_language"] = "zh-hans"
    body = client.get(comparison_url(decided)).content.decode()
    assert 'data-scores-state="recomputing"' in body and "正在" in body and "being computed" not in body


def test_without_a_snapshot_the_page_says_so_and_a_post_computes_it(client, decided, architect, reviewer):
    Score.objects.filter(selection=decided).delete()
    client.force_login(reviewer)
    body = client.get(comparison_url(decided)).content.decode()
    assert 'data-scores-state="none"' in body and "No scores yet" in body and "Compute the scores" not in body
    client.force_login(architect)
    body = client.get(comparison_url(decided)).content.decode()
    assert "Compute the scores" in body and "csrfmiddlewaretoken" in body
    assert reverse("selection:comparison-recompute", args=[decided.pk]) in body
    assert client.get(reverse("selection:comparison-recompute", args=[decided.pk])).status_code == 405
    assert client.post(reverse("selection:comparison-recompute", args=[decided.pk])).status_code == 302
    assert {s.include_simulated for s in Score.objects.filter(selection=decided)} == {True, False}
    assert 'data-scores-state="current"' in client.get(comparison_url(decided)).content.decode()


@pytest.mark.parametrize("state", ["current", "recomputing", "stale", "none", "error"])
def test_a_get_on_the_comparison_and_its_status_writes_nothing(client, decided, architect, state):
    if state in ("recomputing", "stale"):
        stress_run(decided.candidates.get(engine__slug="sglang"), (10.0, 20.0))
    if state in ("stale", "error"):  # an input changed; no rescoring is pending (it failed, or was lost)
        Selection.objects.filter(pk=decided.pk).update(inputs_changed_at=timezone.now())
    if state == "recomputing":
        tasks.schedule_rescoring(decided.pk)
    if state == "none":
        Score.objects.filter(selection=decided).delete()
    if state == "error":
        CriterionWeight.objects.filter(selection=decided).update(weight=0)
        Selection.objects.filter(pk=decided.pk).update(scoring_error="weights: must not all be zero")
    client.force_login(architect)
    rows = Score.objects.count()
    for url in (comparison_url(decided), comparison_url(decided) + "?simulated=1", status_url(decided)):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        assert writes(queries) == [], url
    assert f'data-scores-state="{state}"' in client.get(comparison_url(decided)).content.decode()
    assert Score.objects.count() == rows


def test_the_record_pdf_download_writes_nothing_and_says_when_the_pdf_is_being_rendered(
    client, decided, architect, owners, dev_certs, settings, monkeypatch
):
    enrol_owners(owners, dev_certs, PASSPHRASE, settings)
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    for role in ROLES:
        approve(record=record, user=owners[role], role=role)
    queued: list[int] = []
    monkeypatch.setattr("selection.records.views.queue_render", queued.append)
    url = reverse("selection:record-pdf", args=[decided.pk, record.pk])
    client.force_login(architect)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert writes(queries) == []
    assert response.status_code == 503 and response["Retry-After"] == "5" and queued == [record.pk]
    assert "The PDF is being rendered" in response.content.decode()
    record.refresh_from_db()
    assert not record.pdf
    render_pdf(record)  # the `render` queue's task
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert writes(queries) == []
    assert response.status_code == 200 and b"".join(response.streaming_content).startswith(b"%PDF")


def test_review_freezes_a_snapshot_of_todays_inputs_even_when_the_task_did_not_run_yet(
    decided, architect, owners, dev_certs, settings
):
    enrol_owners(owners, dev_certs, PASSPHRASE, settings)
    stress_run(decided.candidates.get(engine__slug="sglang"), (10.0, 20.0))  # the latest snapshot is stale now
    stale = decided.scores.filter(include_simulated=False).first()
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    frozen = record.snapshot["score"]
    assert frozen["inputs_hash"] == scoring_inputs(decided).inputs_hash != stale.inputs_hash


def test_an_upload_parsed_later_queues_the_rescoring_when_its_parse_ends(
    decided, sent, django_capture_on_commit_callbacks, monkeypatch
):
    monkeypatch.setattr("benchmarks.uploads.ingest.enqueue_parse", lambda run: True)
    candidate = decided.candidates.get(engine__slug="sglang")
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    run, _ = ingest_upload(
        candidate=candidate, data=data, filename="v.json", test="concurrency_stress", synchronous=False
    )
    assert run.status == BenchmarkRun.Status.PARSING and requested_at(decided) is None  # nothing to score yet
    with django_capture_on_commit_callbacks(execute=True):
        assert parse_stored_upload(run.pk).status == BenchmarkRun.Status.SUCCEEDED
    assert requested_at(decided) is not None and sent == [decided.pk]
    assert rescored(decided).scores_requested_at is None


def test_the_dashboard_says_when_a_selections_scores_are_being_recomputed(client, decided, architect):
    client.force_login(architect)
    assert "data-scores-recomputing" not in client.get("/").content.decode()
    tasks.schedule_rescoring(decided.pk)
    assert "data-scores-recomputing" in client.get("/").content.decode()
    refresh_scores(decided.pk)
    assert "data-scores-recomputing" not in client.get("/").content.decode()


def test_a_rescoring_of_a_selection_deleted_meanwhile_does_nothing():
    assert tasks.recompute_scores(10**9) == ""
