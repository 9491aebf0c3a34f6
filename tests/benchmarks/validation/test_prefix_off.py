"""The prefix-reuse test's caching-off variant end to end: the candidate's second endpoint (form,
allow-list, validation page), the worker running the same load on it, and llama.cpp's cache_prompt."""

import pytest
from django.urls import reverse

from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import ServerThread
from benchmarks.validation.dispatch import ValidationError, start_validation
from benchmarks.validation.loadtest import prefix_off_target_for, target_for
from benchmarks.validation.target import check_candidate_target
from benchmarks.validation.worker import claim, execute
from benchmarks.verdicts import NOT_EXERCISED, PASS
from selection.candidates.services import add_candidate, update_candidate

PARAMS = {
    "requests": 32,
    "concurrency": 8,
    "prefix_tokens": 512,
    "suffix_tokens": 64,
    "output_tokens": 32,
    "sample_interval_s": 0.05,
    "kv_capacity_tokens": 32000,
}


def sim(**changes) -> ServerThread:
    return ServerThread(SimConfig(**{"num_blocks": 2000, "max_model_len": 8192, "time_scale": 3.0, **changes}))


def add(selection, architect, engines, slug="vllm", **data):
    return add_candidate(
        selection=selection,
        user=architect,
        data={"engine": engines[slug], "engine_version": engines[slug].versions[0], "model_name": "kvsim", **data},
    )


def verdicts(run):
    return {v["name"]: v for v in run.verdicts}


def test_the_worker_runs_the_same_load_on_the_candidates_caching_off_endpoint(
    selection_with_constraints, architect, engines
):
    with sim() as on, sim(prefix_caching=False) as off:
        candidate = add(
            selection_with_constraints,
            architect,
            engines,
            endpoint_url=on.url,
            prefix_off_endpoint_url=off.url,
        )
        run = start_validation(candidate=candidate, test="prefix_reuse", user=architect, params=PARAMS)
        run = execute(claim(run.pk, "w1"))
    assert run.status == "succeeded", run.error
    assert run.evidence == "SIMULATED"
    assert [p.label for p in run.points.order_by("index")] == ["prefix_on", "prefix_off"]
    assert verdicts(run)["kv_below_prefix_off"]["status"] == PASS, verdicts(run)["kv_below_prefix_off"]["detail"]
    assert run.metadata["observed"]["memory_saving_basis"] == "measured_off"
    assert run.metadata["off_target"]["endpoint_url"] == off.url


def test_without_an_off_endpoint_the_on_vs_off_verdict_is_not_exercised(selection_with_constraints, architect, engines):
    with sim() as on:
        candidate = add(selection_with_constraints, architect, engines, endpoint_url=on.url)
        run = execute(
            claim(start_validation(candidate=candidate, test="prefix_reuse", user=architect, params=PARAMS).pk, "w1")
        )
    assert run.status == "succeeded", run.error
    assert verdicts(run)["kv_below_prefix_off"]["status"] == NOT_EXERCISED
    assert [p.label for p in run.points.all()] == ["prefix_on"]


def test_llama_cpp_runs_off_on_the_same_endpoint_with_cache_prompt_false(
    selection_with_constraints, architect, engines
):
    candidate = add(selection_with_constraints, architect, engines, "llama-cpp", endpoint_url="http://127.0.0.1:9")
    off = prefix_off_target_for(candidate, target_for(candidate))
    assert off.endpoint_url == "http://127.0.0.1:9" and off.cache_prompt is False
    vllm = add(selection_with_constraints, architect, engines, endpoint_url="http://127.0.0.1:9", label="v")
    assert prefix_off_target_for(vllm, target_for(vllm)) is None


def test_the_off_endpoint_must_pass_the_outbound_allow_list(selection_with_constraints, architect, engines):
    with pytest.raises(Exception) as refused:
        add(
            selection_with_constraints,
            architect,
            engines,
            endpoint_url="http://127.0.0.1:9",
            prefix_off_endpoint_url="http://169.254.169.254/v1",
        )
    assert "prefix_off_endpoint_url" in str(refused.value)
    candidate = add(selection_with_constraints, architect, engines, endpoint_url="http://127.0.0.1:9")
    type(candidate).objects.filter(pk=candidate.pk).update(prefix_off_metrics_url="http://169.254.169.254/metrics")
    candidate.refresh_from_db()
    with pytest.raises(ValidationError, match="prefix_off_metrics_url"):
        check_candidate_target(candidate)


def test_the_validation_page_says_what_the_prefix_test_compares_with_and_the_off_flag(
    client, selection_with_constraints, architect, engines
):
    candidate = add(
        selection_with_constraints,
        architect,
        engines,
        "sglang",
        endpoint_url="http://127.0.0.1:9",
        launch_flags="--tp 2",
    )
    client.force_login(architect)
    url = reverse("selection:validation", args=[selection_with_constraints.pk, candidate.pk])
    body = client.get(url).content.decode()
    assert 'data-prefix-off="none"' in body and "<code>--tp 2 --disable-radix-cache</code>" in body
    update_candidate(candidate=candidate, user=architect, data={"prefix_off_endpoint_url": "http://127.0.0.1:10"})
    body = client.get(url).content.decode()
    assert 'data-prefix-off="endpoint"' in body and "http://127.0.0.1:10" in body
