"""Evidence pages: capacity with what-if, validation plan and runs with live progress, cancel,
run results, CI upload tokens and file uploads. Runs are created as rows (no real load)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import translation

from benchmarks import suite
from benchmarks.models import BenchmarkRun, RunPoint
from benchmarks.presentation import DEFINITION_TITLES
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from benchmarks.uploads import ingest
from benchmarks.uploads.tokens import create_upload_token
from benchmarks.validation.plan import plan_for
from selection.candidates.services import add_candidate
from selection.domain.messages import render
from selection.models import AuditEntry, Membership, Team, UploadToken
from selection.setup.services import accept_scenario, set_gates
from tests.support.builders import make_candidate, make_engine, make_selection, make_user, with_constraints

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parents[1] / "selection" / "fixtures"


@pytest.fixture
def team():
    return Team.objects.create(name="Platform")


@pytest.fixture
def architect(team):
    return make_user("alice", team)


@pytest.fixture
def reviewer(team):
    return make_user("rita", team, Membership.Role.REVIEWER)


@pytest.fixture
def outsider():
    return make_user("mallory", Team.objects.create(name="Other"))


@pytest.fixture
def selection(architect, team):
    return with_constraints(make_selection(architect, team), architect)


@pytest.fixture
def candidate(selection, architect):
    return make_candidate(selection, architect)


def make_run(candidate, **fields):
    defaults = {
        "test": "concurrency_stress",
        "origin": BenchmarkRun.Origin.HARNESS,
        "status": BenchmarkRun.Status.RUNNING,
        "progress": {"phase": "load", "percent": 42.5, "requests_done": 1234, "ttft_p50_ms": 87.25},
    }
    return BenchmarkRun.objects.create(candidate=candidate, **{**defaults, **fields})


def url(name, *args):
    return reverse(name, args=[arg.pk if hasattr(arg, "pk") else arg for arg in args])


def page_urls(selection, candidate, run):
    return [
        url("selection:evidence", selection),
        url("selection:capacity", selection, candidate),
        url("selection:validation", selection, candidate),
        url("selection:run", selection, run),
        url("selection:run-progress", selection, run),
        url("selection:uploads", selection),
    ]


# --- access -----------------------------------------------------------------------------------


def test_pages_render_for_the_team_and_404_for_another_team(
    client, architect, reviewer, outsider, selection, candidate
):
    run = make_run(candidate)
    for user in (architect, reviewer):
        client.force_login(user)
        for page in page_urls(selection, candidate, run):
            response = client.get(page)
            assert response.status_code == 200, (user, page)
    client.force_login(outsider)
    for page in page_urls(selection, candidate, run):
        assert client.get(page).status_code == 404, page


def test_a_run_of_another_selection_is_404_even_with_a_visible_selection(client, architect, team, selection, candidate):
    elsewhere = Team.objects.create(name="Elsewhere")
    Membership.objects.create(team=elsewhere, user=architect, role=Membership.Role.ARCHITECT)
    other = make_selection(architect, elsewhere, name="Other")
    foreign = add_candidate(
        selection=other, user=architect, data={"engine": candidate.engine, "engine_version": "0.8.5"}
    )
    run = make_run(foreign)
    client.force_login(architect)
    assert client.get(url("selection:run", selection, run)).status_code == 404


def test_reviewers_get_403_on_every_write(client, reviewer, selection, candidate):
    run = make_run(candidate)
    token, _raw = create_upload_token(selection=selection, user=selection.created_by, name="ci")
    client.force_login(reviewer)
    posts = [
        (url("selection:validation-start", selection, candidate, "concurrency_stress"), {}),
        (url("selection:run-cancel", selection, run), {}),
        (url("selection:token-create", selection), {"name": "mine"}),
        (url("selection:token-revoke", selection, token), {}),
        (url("selection:result-upload", selection), {}),
    ]
    for target, data in posts:
        assert client.post(target, data).status_code == 403, target
    run.refresh_from_db()
    token.refresh_from_db()
    assert run.status == "running" and not run.cancel_requested and token.active
    assert UploadToken.objects.count() == 1 and BenchmarkRun.objects.count() == 1


def test_reviewer_sees_no_write_buttons(client, reviewer, selection, candidate):
    make_run(candidate)
    client.force_login(reviewer)
    body = client.get(url("selection:validation", selection, candidate)).content.decode()
    assert "Cancel run" not in body and "You can view this selection but not change it" in body


# --- capacity -----------------------------------------------------------------------------------


def test_capacity_page_shows_plan_verdict_estimates_and_chart(client, architect, selection, candidate):
    client.force_login(architect)
    body = client.get(url("selection:capacity", selection, candidate)).content.decode()
    assert "Verdict" in body and "Token capacity" in body and 'data-figure="num_blocks"' in body
    assert "estimate" in body and "gpu_memory_utilization" in body
    assert "<svg" in body and "headroom line" in body  # the chart with its headroom line
    assert "The engine has not stated its KV capacity yet" in body


def test_capacity_what_if_is_a_partial_and_saves_nothing(client, architect, selection, candidate):
    client.force_login(architect)
    base = client.get(url("selection:capacity", selection, candidate)).context["plan"]
    response = client.get(
        url("selection:capacity", selection, candidate),
        {"kv_dtype": "fp8", "tp": "2", "gpu": "H200-141GB"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body and "What-if plan: not saved" in body
    plan = response.context["plan"]
    assert plan["kv_dtype"] == "fp8" and plan["tp"] == 2 and plan["gpu_name"] == "H200-141GB"
    assert plan["token_capacity"] > base["token_capacity"]
    candidate.refresh_from_db()
    assert candidate.kv_precision == "bf16" and candidate.tensor_parallel == 1


def test_capacity_what_if_invalid_tp_shows_the_models_message(client, architect, selection, candidate):
    client.force_login(architect)
    response = client.get(url("selection:capacity", selection, candidate), {"tp": "3"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "The capacity model refused these inputs" in body and "<code>tp</code>" in body
    assert "3" in response.context["error"]["message"] and response.context["plan"] is None


def test_capacity_what_if_out_of_range_input_names_the_field(client, architect, selection, candidate):
    client.force_login(architect)
    body = client.get(url("selection:capacity", selection, candidate), {"tp": "0"}).content.decode()
    assert "Tensor parallel (TP)" in body and "greater than or equal to 1" in body


def test_capacity_predicted_vs_measured_flags_more_than_ten_percent(client, architect, selection, candidate):
    client.force_login(architect)
    predicted = client.get(url("selection:capacity", selection, candidate)).context["plan"]["token_capacity"]
    candidate.measured_capacity = {"token_capacity": int(predicted / 1.25)}
    candidate.save()
    body = client.get(url("selection:capacity", selection, candidate)).content.decode()
    assert "data-flagged" in body and "25.0%" in body
    candidate.measured_capacity = {"token_capacity": int(predicted * 0.97)}
    candidate.save()
    body = client.get(url("selection:capacity", selection, candidate)).content.decode()
    assert "data-flagged" not in body and "within tolerance" in body


def test_capacity_shows_what_a_runs_engine_metrics_measured(client, architect, selection, candidate):
    # before: "nothing measured yet" although a run had sampled vllm:cache_config_info
    client.force_login(architect)
    predicted = client.get(url("selection:capacity", selection, candidate)).context["plan"]["token_capacity"]
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="harness",
        status="succeeded",
        metadata={
            "engine_metrics": {"kv_capacity": {"tokens": int(predicted * 0.98), "source": "vllm:cache_config_info"}}
        },
    )
    body = client.get(url("selection:capacity", selection, candidate)).content.decode()
    assert "has not stated its KV capacity" not in body and "within tolerance" in body
    assert f"engine metrics of run {run.pk}" in body and str(int(predicted * 0.98)) in body
    assert 'data-stated-by="engine metrics"' in body and "Predicted vs engine-stated" in body
    # in Chinese the provenance reads in Chinese, the metric it was read from as code
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    body = client.get(url("selection:capacity", selection, candidate)).content.decode()
    assert f"运行 {run.pk} 的引擎指标 <code>vllm:cache_config_info</code>" in body


def test_capacity_of_llamacpp_follows_its_launch_flags(client, architect, selection):
    llama = add_candidate(
        selection=selection,
        user=architect,
        data={
            "engine": make_engine("llama-cpp", versions=("master",)),
            "engine_version": "master",
            "model_name": "meta-llama/Llama-3.1-8B",
            "launch_flags": "-c 32768 -np 8",
        },
    )
    client.force_login(architect)
    plan = client.get(url("selection:capacity", selection, llama)).context["plan"]
    assert plan["engine"] == "llamacpp" and plan["token_capacity"] == 32768  # not all the free memory
    assert plan["slots"] == 8 and plan["sequence_limit"] == 4096
    assert any("from the launch flags: ctx_size=32768, n_parallel=8" in render(note) for note in plan["notes"])


def test_capacity_without_a_model_explains_what_to_do(client, architect, selection, candidate):
    selection.constraints.target_model = "no-such-model"
    selection.constraints.save()
    candidate.model_name = ""
    candidate.save()
    client.force_login(architect)
    response = client.get(url("selection:capacity", selection, candidate))
    assert response.status_code == 200 and "The capacity model refused these inputs" in response.content.decode()


# --- validation -----------------------------------------------------------------------------------


def test_validation_page_shows_the_five_tests_with_editable_parameters(client, architect, selection, candidate):
    client.force_login(architect)
    body = client.get(url("selection:validation", selection, candidate)).content.decode()
    for test in ("concurrency_stress", "long_context", "swap_recovery", "prefix_reuse", "stability"):
        assert f"Run {suite.title_of(test)}" in body and f"Run {test}" not in body  # words, never the id
    assert 'name="concurrency_stress-concurrency" value="64"' in body  # peak concurrency from the constraints
    assert 'name="long_context-rungs"' in body and "No runs yet" in body


def test_validation_plan_says_how_long_and_how_heavy_before_run(client, architect, selection, candidate):
    client.force_login(architect)
    page = client.get(url("selection:validation", selection, candidate))
    body = page.content.decode()
    cards = {card["test"]: card for card in page.context["cards"]}
    soak = cards["stability"]["estimate"]
    # the soak's length comes from the scenario (issue 36 item 7, `benchmarks.suite.stability.SOAK_BY_SCENARIO`):
    # 2 h here, plus the 60 s warm-up; the page states what the run will take
    planned = plan_for(candidate, "stability")
    assert planned["duration_s"] == 2 * 3600 and planned["warmup_s"] == 60
    planned = planned["duration_s"] + planned["warmup_s"]
    assert soak["seconds"] == planned and soak["long"] and soak["duration"] == "about 2 h 1 min"
    assert 'data-estimate="stability"' in body and 'data-estimate-warning="long"' in body
    assert "about 2 h 1 min, up to 32 concurrent requests" in body
    assert not cards["concurrency_stress"]["estimate"]["long"]  # 10 + 300 + 30 s
    # parameter labels are words with units, not identifiers
    assert ">Duration (s) <" in body and ">TTFT p95 budget (ms) <" in body
    assert ">duration s" not in body and ">ttft p95 ms" not in body


def test_run_button_queues_a_run_with_edited_parameters(client, architect, selection, candidate, monkeypatch):
    monkeypatch.setattr("benchmarks.validation.dispatch.enqueue_validation", lambda run: True)
    client.force_login(architect)
    page = client.get(url("selection:validation", selection, candidate))
    form = next(card["form"] for card in page.context["cards"] if card["test"] == "concurrency_stress")
    data = {
        f"concurrency_stress-{k}": ("on" if v is True else "" if v is False or v is None else v)  # as a browser sends
        for k, v in ((name, form[name].value()) for name in form.fields)
    }
    data.update(
        {
            "concurrency_stress-concurrency": "8",
            "concurrency_stress-duration_s": "30",
            "concurrency_stress-label": "smoke",
        }
    )
    response = client.post(url("selection:validation-start", selection, candidate, "concurrency_stress"), data)
    assert response.status_code == 302
    run = BenchmarkRun.objects.get()
    assert run.params["concurrency"] == 8 and run.params["duration_s"] == 30.0 and run.label == "smoke"
    assert run.status == "queued" and AuditEntry.objects.filter(action="validation.started").exists()
    body = client.get(response["Location"]).content.decode()
    assert f"#{run.pk}" in body and "queued" in body


def test_bad_parameter_names_the_field_and_queues_nothing(client, architect, selection, candidate):
    client.force_login(architect)
    response = client.post(
        url("selection:validation-start", selection, candidate, "long_context"), {"long_context-rungs": "16K, lots"}
    )
    assert response.status_code == 400 and not BenchmarkRun.objects.exists()
    assert "expected numbers separated by commas" in response.content.decode()


def test_refused_endpoint_shows_the_field_and_reason(client, architect, selection, candidate):
    candidate.endpoint_url = "http://169.254.169.254/latest"
    candidate.save()
    client.force_login(architect)
    page = client.get(url("selection:validation", selection, candidate))
    form = next(card["form"] for card in page.context["cards"] if card["test"] == "stability")
    data = {f"stability-{name}": form[name].value() for name in form.fields if form[name].value() is not None}
    response = client.post(url("selection:validation-start", selection, candidate, "stability"), data)
    body = response.content.decode()
    assert response.status_code == 400 and "data-refusal" in body
    assert "<code>endpoint_url</code>" in body and "KVSELECT_ALLOWED_TARGETS" in body
    assert not BenchmarkRun.objects.exists()


# --- progress and cancel --------------------------------------------------------------------------


def test_progress_partial_shows_percent_and_keeps_polling_while_running(client, architect, selection, candidate):
    run = make_run(candidate)
    client.force_login(architect)
    body = client.get(url("selection:run-progress", selection, run), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in body and "42.5%" in body and 'aria-valuenow="42.5"' in body
    assert "1234" in body and "87.3 ms" in body and "load" in body
    assert 'hx-trigger="every 2s"' in body and "Cancel run" in body


def test_progress_partial_stops_polling_when_terminal(client, architect, selection, candidate):
    run = make_run(candidate, status=BenchmarkRun.Status.SUCCEEDED)
    client.force_login(architect)
    body = client.get(url("selection:run-progress", selection, run)).content.decode()
    assert "hx-trigger" not in body and "View results" in body and "Cancel run" not in body


def test_cancel_marks_a_queued_run_cancelled(client, architect, selection, candidate):
    run = make_run(candidate, status=BenchmarkRun.Status.QUEUED, progress={"phase": "queued", "percent": 0})
    client.force_login(architect)
    response = client.post(url("selection:run-cancel", selection, run), HTTP_HX_REQUEST="true")
    run.refresh_from_db()
    assert run.status == "cancelled" and run.cancel_requested
    body = response.content.decode()
    assert response.status_code == 200 and "hx-trigger" not in body and "Cancelled" in body


def test_cancel_of_a_running_run_requests_it_and_redirects(client, architect, selection, candidate):
    run = make_run(candidate)
    client.force_login(architect)
    response = client.post(url("selection:run-cancel", selection, run), follow=True)
    run.refresh_from_db()
    assert run.cancel_requested and run.status == "running"
    assert "Cancel requested" in response.content.decode() and "Cancelling" in response.content.decode()


# --- run page -------------------------------------------------------------------------------------


def _result_run(candidate, evidence="MEASURED"):
    run = make_run(
        candidate,
        status=BenchmarkRun.Status.SUCCEEDED,
        evidence=evidence,
        tool="vllm-bench-serve",
        tool_version="0.11.0",
        format="vllm-bench-serve",
        uploaded_by="token:ci",
        raw_sha256="ab" * 32,
        verdicts=[
            {"name": "ttft_p95_within_budget", "passed": True, "detail": "612 <= 800 ms"},
            {"name": "no_errors", "passed": False, "detail": "3 failed"},
        ],
        timeseries={"kv_usage_ratio": [[0, 0.1], [1, 0.5], [2, 0.7]]},
        notes=["tool TPOT includes first token"],
        definitions={"tpot_ms": "vLLM: mean over output tokens incl. the first"},
        partial=True,
        metadata={"engine": "vllm", "model": "Llama-3.1-8B"},
    )
    for index, concurrency in enumerate((8, 32)):
        RunPoint.objects.create(
            run=run,
            index=index,
            concurrency=concurrency,
            requests_completed=100,
            requests_failed=0,
            ttft_ms={"p50": 100.0 + index, "p90": 150.0, "p95": 200.0 + index, "p99": 300.0},
            tpot_ms={"p50": 20.0, "p95": 30.0, "p99": None},
            itl_ms={},
            e2e_ms={"p50": 2000.0},
            request_throughput=5.5,
            error_rate=0.0,
        )
    return run


def test_run_page_shows_provenance_verdicts_points_charts_and_definitions(client, architect, selection, candidate):
    run = _result_run(candidate)
    client.force_login(architect)
    body = client.get(url("selection:run", selection, run)).content.decode()
    assert "vllm-bench-serve" in body and "0.11.0" in body and "token:ci" in body and "ab" * 32 in body
    assert "MEASURED" in body and "data-simulated" not in body
    assert "ttft_p95_within_budget" in body and "3 failed" in body and "1/2" in body
    assert "200.0" in body and "201.0" in body  # TTFT p95 per load point
    assert body.count("<svg") == 2  # latency chart and KV usage chart
    assert "vLLM: mean over output tokens incl. the first" in body and "tool TPOT includes first token" in body
    assert "data-partial" in body
    assert "no per-request records" in body  # no Parquet artifact


def test_the_evidence_list_shows_each_finished_runs_verdict_beside_succeeded(client, architect, selection, candidate):
    failing = _result_run(candidate)  # one criterion passed, one failed
    passing = make_run(
        candidate, status=BenchmarkRun.Status.SUCCEEDED, verdicts=[{"name": "zero_errors", "passed": True}]
    )
    unjudged = make_run(
        candidate, status=BenchmarkRun.Status.SUCCEEDED, verdicts=[{"name": "prefix_reused", "passed": None}]
    )
    partly = make_run(
        candidate,
        status=BenchmarkRun.Status.SUCCEEDED,
        verdicts=[{"name": "zero_errors", "passed": True}, {"name": "prefix_reused", "passed": None}],
    )
    upload = make_run(candidate, status=BenchmarkRun.Status.SUCCEEDED, verdicts=[])
    client.force_login(architect)
    body = client.get(url("selection:evidence", selection)).content.decode()
    for run, verdict in (
        (failing, "fail"),
        (passing, "pass"),
        (unjudged, "insufficient_data"),
        (partly, "inconclusive"),
        (upload, "insufficient_data"),
    ):
        block = body.split(f'id="run-progress-{run.pk}"', 1)[1].split("runprogress__figures", 1)[0]
        assert f'data-verdict="{verdict}"' in block, (run.pk, verdict)
    assert ">insufficient data<" in body and ">inconclusive<" in body
    assert 'data-verdict="fail"' in client.get(url("selection:run", selection, failing)).content.decode()


def test_the_run_page_names_criteria_parameters_and_provenance_in_words(client, architect, selection, candidate):
    run = _result_run(candidate)
    run.verdicts = [
        {"name": "ttft_p95_within_budget[resume]", "passed": True, "detail": "p95 612.0 ms vs budget 800 ms"},
        {"name": "prefix_reused", "passed": None, "detail": "no prefix-hit metric"},
    ]
    run.params = {"duration_s": 30.0, "ttft_p95_ms": 800.0}
    run.save()
    client.force_login(architect)
    body = client.get(url("selection:run", selection, run)).content.decode()
    assert "TTFT p95 within the budget" in body and "(after the pause)" in body
    assert ">not judged<" in body  # an unjudged criterion is not shown as failed
    assert "Duration (s)" in body and "TTFT p95 budget (ms)" in body
    assert '<dt data-key="engine">Engine</dt>' in body and '<dt data-key="model">Model</dt>' in body
    assert 'title="ttft_p95_within_budget' not in body  # ids stay out of what people read, tooltips included
    with translation.override("zh-hans"):
        expected = [translation.gettext(t) for t in ("TTFT p95 within the budget", "not judged", "Engine")]
        expected.append(translation.gettext(DEFINITION_TITLES["ttft_ms"]))
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    body = client.get(url("selection:run", selection, run)).content.decode()
    for text in expected:
        assert text in body and re.search(r"[\u4e00-\u9fff]", text), text


def test_simulated_run_has_a_banner_and_marked_charts(client, architect, selection, candidate):
    run = _result_run(candidate, evidence="SIMULATED")
    client.force_login(architect)
    body = client.get(url("selection:run", selection, run)).content.decode()
    assert "data-simulated" in body and "banner--simulated" in body
    assert body.count("simulated-watermark") == 2


def test_empty_run_says_what_happens_next(client, architect, selection, candidate):
    run = make_run(candidate)
    client.force_login(architect)
    body = client.get(url("selection:run", selection, run)).content.decode()
    assert "No results yet" in body and "No KV-usage samples" in body and 'hx-trigger="every 2s"' in body


# --- CI tokens ------------------------------------------------------------------------------------


def test_token_is_shown_once_and_stored_hashed(client, architect, selection, candidate):
    client.force_login(architect)
    response = client.post(url("selection:token-create", selection), {"name": "github-actions"})
    body = response.content.decode()
    raw = re.search(r'id="raw-token" type="text" readonly value="(kvs_[^"]+)"', body).group(1)
    token = UploadToken.objects.get()
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest() and raw not in token.key_hash
    assert token.key_hint == raw[:8] and response["Cache-Control"] == "no-store"
    assert f"/api/v1/candidates/{candidate.pk}/results/" in body and "Idempotency-Key" in body
    assert "Authorization: Token $KVSELECT_TOKEN" in body
    again = client.get(url("selection:uploads", selection)).content.decode()
    assert raw not in again and token.key_hint in again and "github-actions" in again and "never" in again


def test_token_without_a_name_is_refused(client, architect, selection):
    client.force_login(architect)
    response = client.post(url("selection:token-create", selection), {"name": ""})
    assert response.status_code == 400 and not UploadToken.objects.exists()
    assert "Token name" in response.content.decode()


def test_revoke_stops_the_token(client, architect, selection, candidate):
    token, raw = create_upload_token(selection=selection, user=architect, name="ci")
    client.force_login(architect)
    response = client.post(url("selection:token-revoke", selection, token), follow=True)
    token.refresh_from_db()
    assert token.revoked_at is not None and "revoked" in response.content.decode()
    api = client.post(
        reverse("candidate-results", args=[candidate.pk]), {"test": "custom"}, HTTP_AUTHORIZATION=f"Token {raw}"
    )
    assert api.status_code in (401, 403)


def test_another_selections_token_cannot_be_revoked_here(client, architect, team, selection):
    other = make_selection(architect, team, name="Other")
    token, _raw = create_upload_token(selection=other, user=architect, name="ci")
    client.force_login(architect)
    assert client.post(url("selection:token-revoke", selection, token)).status_code == 404


# --- uploads --------------------------------------------------------------------------------------


def _fake_result() -> NormalizedResult:
    return NormalizedResult(
        tool="vllm-bench-serve",
        format="vllm-bench-serve",
        tool_version="0.11.0",
        metadata={"model": "mock-model"},
        points=[
            LoadPoint(
                concurrency=2,
                requests_completed=6,
                requests_failed=0,
                ttft_ms=Stats(p50=27.0, p95=28.1),
                tpot_ms=Stats(p50=2.4),
            )
        ],
    )


def upload_data(candidate, name="vllm_bench_serve.json", **extra):
    content = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    return {
        "candidate": candidate.pk,
        "test": "concurrency_stress",
        "format": "",
        "label": "nightly",
        "file": SimpleUploadedFile(name, content, content_type="application/json"),
        "idempotency_key": "web-test-1",
        **extra,
    }


def test_upload_form_happy_path_creates_the_run(client, architect, selection, candidate, monkeypatch):
    monkeypatch.setattr(ingest, "parse_bytes", lambda data, filename, fmt, slo: _fake_result())
    client.force_login(architect)
    response = client.post(url("selection:result-upload", selection), upload_data(candidate))
    run = BenchmarkRun.objects.get()
    assert response.status_code == 302 and response["Location"] == url("selection:run", selection, run)
    assert run.status == "succeeded" and run.uploaded_by == "alice" and run.label == "nightly"
    assert run.raw_sha256 == hashlib.sha256((FIXTURES / "vllm_bench_serve.json").read_bytes()).hexdigest()
    body = client.get(response["Location"]).content.decode()
    assert "Result uploaded and parsed" in body and "28.1" in body
    # the same form submitted twice (same idempotency key) returns the first run
    again = client.post(url("selection:result-upload", selection), upload_data(candidate), follow=True)
    assert BenchmarkRun.objects.count() == 1 and "already received" in again.content.decode()


def test_upload_with_the_real_vllm_parser(client, architect, selection, candidate):
    """The shipped vLLM `bench serve` fixture through the real parsers (benchmarks.formats)."""
    client.force_login(architect)
    response = client.post(url("selection:result-upload", selection), upload_data(candidate))
    assert response.status_code == 302, response.content.decode()[:2000]
    run = BenchmarkRun.objects.get()
    assert run.status == "succeeded" and run.points.count() >= 1 and run.tool
    body = client.get(response["Location"]).content.decode()
    assert "<svg" in body and "Download CSV" in body  # the file has no p95: the chart falls back to p99
    csv = client.get(f"{reverse('run-requests', args=[run.pk])}?as=csv")
    assert csv.status_code == 200 and b"ttft_ms" in csv.content


def test_unrecognised_file_lists_each_format_tried(client, architect, selection, candidate, monkeypatch):
    class Unrecognised(ValueError):
        refusals = {"guidellm": "no 'benchmarks' key", "vllm-bench-serve": "no 'ttfts' key"}

    def refuse(data, filename, fmt, slo):
        raise Unrecognised("not a recognised benchmark result format")

    monkeypatch.setattr(ingest, "parse_bytes", refuse)
    client.force_login(architect)
    response = client.post(url("selection:result-upload", selection), upload_data(candidate))
    body = response.content.decode()
    assert response.status_code == 400 and "data-refusals" in body
    assert "no &#x27;ttfts&#x27; key" in body and "guidellm" in body and "No parser recognised this file" in body
    assert not BenchmarkRun.objects.exists()


def test_the_parsers_refusals_read_in_the_pages_language(client, architect, selection, candidate, settings):
    """Walk m11: "not UTF-8 text (invalid byte at offset 1)" on a Chinese upload page. Each format's reason
    is a message; its figures (the offset) stay as they are."""
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    garbage = upload_data(candidate, file=SimpleUploadedFile("garbage.json", b"{\xff\xfe garbage"))
    body = client.post(url("selection:result-upload", selection), garbage).content.decode()
    assert "data-refusals" in body and "不是 UTF-8 文本（偏移量 1 处的字节无效）" in body
    assert "not UTF-8 text" not in body
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"
    garbage["file"].seek(0)
    body = client.post(url("selection:result-upload", selection), garbage).content.decode()
    assert "not UTF-8 text (invalid byte at offset 1)" in body, body[body.find("data-refusals") :][:1500]
    assert not BenchmarkRun.objects.exists()


def test_a_refusal_keeps_its_english_text_for_the_api():
    from benchmarks.formats import detect

    with pytest.raises(ValueError) as refused:
        detect(b"{\xff\xfe garbage", "garbage.json")
    reasons = refused.value.refusals
    assert reasons["guidellm"] == reasons["native"] == "not UTF-8 text (invalid byte at offset 1)", reasons


def test_upload_errors_name_the_field(client, architect, selection, candidate):
    client.force_login(architect)
    response = client.post(
        url("selection:result-upload", selection), upload_data(candidate, file=SimpleUploadedFile("empty.json", b""))
    )
    assert response.status_code == 400 and "file" in response.context["upload_form"].errors
    assert not BenchmarkRun.objects.exists()


# --- navigation -----------------------------------------------------------------------------------


def test_candidates_and_overview_link_to_capacity_and_validation(client, architect, selection, candidate):
    client.force_login(architect)
    for page in (
        url("selection:candidates", selection),
        url("selection:detail", selection),
        url("selection:evidence", selection),
    ):
        body = client.get(page).content.decode()
        assert url("selection:capacity", selection, candidate) in body
        assert url("selection:validation", selection, candidate) in body
    accept_scenario(selection=selection, user=architect)
    set_gates(selection=selection, user=architect, gates={"memory": 0.6})
    body = client.get(reverse("selection:dashboard")).content.decode()
    assert url("selection:evidence", selection) in body and "Validate the candidates" in body


def test_evidence_empty_states_say_what_to_do(client, architect, selection):
    client.force_login(architect)
    body = client.get(url("selection:evidence", selection)).content.decode()
    assert "No candidates yet" in body and "No runs yet" in body
    body = client.get(url("selection:uploads", selection)).content.decode()
    assert "No tokens yet" in body and "Add a candidate first" in body


def test_upload_form_preselects_the_candidate_a_link_came_from(client, architect, selection, candidate):
    second = add_candidate(
        selection=selection, user=architect, data={"engine": candidate.engine, "engine_version": "0.8.5", "label": "B"}
    )
    client.force_login(architect)
    response = client.get(url("selection:uploads", selection), {"candidate": second.pk, "test": "prefix_reuse"})
    form = response.context["upload_form"]
    assert form.initial["candidate"] == second.pk and form.initial["test"] == "prefix_reuse"
    assert (
        client.get(url("selection:uploads", selection), {"candidate": "999"})
        .context["upload_form"]
        .initial.get("candidate")
        is None
    )


def test_a_refused_endpoint_reads_in_the_pages_language(client, architect, selection, candidate):
    candidate.endpoint_url = "http://169.254.169.254/latest"
    candidate.save()
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    page = client.get(url("selection:validation", selection, candidate))
    form = next(card["form"] for card in page.context["cards"] if card["test"] == "stability")
    data = {f"stability-{name}": form[name].value() for name in form.fields if form[name].value() is not None}
    response = client.post(url("selection:validation-start", selection, candidate, "stability"), data)
    body = response.content.decode()
    assert response.status_code == 400 and "169.254.169.254 是云元数据地址，始终拒绝" in body
    assert "is always refused" not in body and not BenchmarkRun.objects.exists()
