"""The engine-stated KV capacity from a start-up log the architect pastes (an engine kvselect does
not launch): used beside the prediction, labelled, audited; a log that states none, or another
engine's, is refused naming the field and nothing is written."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from selection.candidates.services import add_candidate
from selection.capacity.measured import measured_capacity
from selection.capacity.stating import state_capacity_from_log
from selection.models import AuditEntry

pytestmark = pytest.mark.django_db

VLLM_LOG = (
    "INFO 11-29 10:02:11 [gpu_worker.py:298] Available KV cache memory: 54.21 GiB\n"
    "INFO 11-29 10:02:11 [kv_cache_utils.py:1087] GPU KV cache size: 443,984 tokens\n"
    "INFO 11-29 10:02:11 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 54.20x\n"
)


@pytest.fixture
def vllm(selection_with_constraints, architect, engines):
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "gpu_model": "H100"},
    )


def test_a_pasted_log_gives_the_engine_stated_capacity_beside_the_prediction(vllm, architect):
    state_capacity_from_log(candidate=vllm, user=architect, log_text=VLLM_LOG)
    stated = measured_capacity(vllm)
    assert stated["token_capacity"] == 443_984 and stated["stated_by"] == "engine log"
    assert stated["source"].startswith(f"engine log pasted by {architect.username} on ")
    assert stated["predicted_token_capacity"] > 0 and stated["evidence"] == "MEASURED"
    entry = AuditEntry.objects.get(action="candidate.capacity_stated")
    assert entry.new["token_capacity"] == 443_984 and entry.new["engine"] == "vllm"


@pytest.mark.parametrize(
    "log,words",
    [
        ("INFO starting server on :8000\n", "no KV capacity in this log"),
        ("[2026-11-29] KV Cache is allocated. #tokens: 120000, K size: 7.3 GB, V size: 7.3 GB\n", "SGLang"),
    ],
)
def test_a_log_without_a_capacity_or_of_another_engine_is_refused_and_writes_nothing(vllm, architect, log, words):
    with pytest.raises(ValidationError) as caught:
        state_capacity_from_log(candidate=vllm, user=architect, log_text=log)
    assert "log" in caught.value.message_dict and words.lower() in caught.value.message_dict["log"][0].lower()
    vllm.refresh_from_db()
    assert vllm.measured_capacity == {} and not AuditEntry.objects.filter(action="candidate.capacity_stated").exists()


def test_the_capacity_page_takes_the_log_and_labels_the_figure_engine_stated(client, vllm, architect):
    client.force_login(architect)
    page = reverse("selection:capacity", args=[vllm.selection_id, vllm.pk])
    assert "data-capacity-log" in client.get(page).content.decode()
    response = client.post(reverse("selection:capacity-log", args=[vllm.selection_id, vllm.pk]), {"log": VLLM_LOG})
    assert response.status_code == 302 and response["Location"] == page
    body = client.get(page).content.decode()
    assert 'data-stated-by="engine log"' in body and "443984" in body.replace(",", "").replace("\u202f", "")


def test_the_log_of_an_engine_kvselect_cannot_read_is_refused(selection_with_constraints, architect, engines):
    tgi = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["tgi"], "engine_version": "3.3.6", "gpu_model": "H100"},
    )
    with pytest.raises(ValidationError) as caught:
        state_capacity_from_log(candidate=tgi, user=architect, log_text=VLLM_LOG)  # a vLLM log on a TGI candidate
    assert caught.value.message_dict["log"] == [
        "kvselect reads the start-up logs of vLLM, SGLang and llama.cpp, not of Text Generation Inference (TGI)"
    ]
    tgi.refresh_from_db()
    assert tgi.measured_capacity == {}


def test_the_log_form_is_offered_only_for_engines_whose_log_kvselect_reads(client, vllm, architect, engines):
    tgi = add_candidate(
        selection=vllm.selection, user=architect, data={"engine": engines["tgi"], "engine_version": "3.3.6"}
    )
    client.force_login(architect)
    assert (
        "data-capacity-log"
        in client.get(reverse("selection:capacity", args=[vllm.selection_id, vllm.pk])).content.decode()
    )
    assert (
        "data-capacity-log"
        not in client.get(reverse("selection:capacity", args=[tgi.selection_id, tgi.pk])).content.decode()
    )


def test_reading_a_capacity_no_run_stated_is_one_query_whatever_the_runs(vllm, django_assert_num_queries):
    """The comparison page reads it per candidate: a deferred candidate_id once cost a query per run."""
    from tests.support.builders import stress_run

    for _ in range(5):
        stress_run(vllm, (100.0, 200.0))
    with django_assert_num_queries(1):
        assert measured_capacity(vllm) == {}
