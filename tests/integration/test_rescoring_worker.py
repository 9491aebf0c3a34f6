"""An upload leads to a new score snapshot through the real worker (issue 30 item 3): the parse task
stores the run, its end queues `recompute_scores`, and the worker writes the snapshot; no page is read."""

import gzip
from pathlib import Path

import pytest
from django.db.models import Q

from benchmarks.models import BenchmarkRun
from benchmarks.uploads.ingest import ingest_upload
from selection.candidates.services import add_candidate
from selection.models import Score, Selection
from selection.scoring.services import scoring_inputs
from tests.support.servers import wait_for
from tests.support.uploads import token_client, upload

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FIXTURES = Path(__file__).parents[1] / "benchmarks" / "formats" / "fixtures"


def test_an_upload_leads_to_a_new_snapshot_written_by_the_worker(
    celery_worker_process, selection_with_constraints, architect, engines
):
    selection = selection_with_constraints
    candidate = add_candidate(
        selection=selection,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "model_name": "mock-model"},
    )
    # adding the candidate is a change of evidence: the worker scores both views (catalog facts only)
    first = wait_for(lambda: Score.objects.filter(selection=selection, include_simulated=False).first(), timeout=60)
    wait_for(lambda: Selection.objects.get(pk=selection.pk).scores_requested_at is None, timeout=60)

    # the selection's model and the candidate's engine, 1,000 requests: evidence without warnings (an
    # upload of another model than the selection's is held back), parsed by the worker
    data = gzip.decompress((FIXTURES / "vllm_0.33.0_bench_serve_c64_n1000.json.gz").read_bytes())
    data = data.replace(b'"engine": "mock"', b'"engine": "vllm"').replace(b'"mock-model"', b'"Llama-3.1-8B"')
    run, created = ingest_upload(
        candidate=candidate, data=data, filename="v.json", test="concurrency_stress", synchronous=False
    )
    assert created and run.status == BenchmarkRun.Status.PARSING

    def new_snapshot():
        latest = Score.objects.filter(selection=selection, include_simulated=False).first()
        return latest if latest is not None and latest.pk != first.pk else None

    latest = wait_for(new_snapshot, timeout=90)
    run.refresh_from_db()
    assert run.status == BenchmarkRun.Status.SUCCEEDED and not run.needs_confirmation
    assert latest.inputs_hash != first.inputs_hash
    assert str(run.pk) in str(latest.inputs["evidence"])  # the snapshot cites the uploaded run
    wait_for(lambda: Selection.objects.get(pk=selection.pk).scores_requested_at is None, timeout=60)
    assert latest.inputs_hash == scoring_inputs(selection).inputs_hash  # current: the page shows no notice
    assert Selection.objects.get(pk=selection.pk).scoring_error == ""
    assert celery_worker_process.poll() is None


def test_twenty_uploads_in_a_burst_make_one_or_two_rescorings(
    celery_worker_process, selection_with_constraints, architect, engines
):
    """Issue 38 item 1: before, each upload queued its own full rescoring (904 after a 60-s burst of
    50 uploaders, draining at ~9 a minute). Now the first upload queues the task; the others mark
    the selection, and the task scores again until nothing new is requested."""
    selection = selection_with_constraints
    candidate = add_candidate(
        selection=selection,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "model_name": "mock-model"},
    )

    def settled() -> bool:
        pending = Q(scores_requested_at__isnull=False) | Q(rescoring_queued_at__isnull=False)
        return not Selection.objects.filter(pending, pk=selection.pk).exists()

    wait_for(settled, timeout=60)  # the candidate's own rescoring ran
    log = celery_worker_process.log_path
    offset = log.stat().st_size
    client = token_client(selection, architect)
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    for number in range(20):
        response = upload(client, candidate.pk, data, filename="v.json", key=f"burst-{number}")
        assert response.status_code == 201, response.content
    wait_for(settled, timeout=120)
    received = [
        line
        for line in log.read_text(errors="replace")[offset:].splitlines()
        if "selection.tasks.recompute_scores[" in line and "received" in line
    ]
    assert 1 <= len(received) <= 2, received
    latest = Score.objects.filter(selection=selection, include_simulated=False).first()
    assert latest.inputs_changed_at == Selection.objects.get(pk=selection.pk).inputs_changed_at  # current
