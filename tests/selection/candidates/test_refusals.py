"""Bad candidates are refused when saved, naming the field, in the form and the API alike."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from selection.candidates.services import add_candidate, offered_kv_precisions, update_candidate
from selection.models import Candidate

GOOD = {"engine_version": "0.11.0", "label": "vLLM fp8", "gpu_count": 4, "tensor_parallel": 4, "kv_precision": "fp8"}


@pytest.fixture
def api(architect):
    client = APIClient()
    client.force_authenticate(architect)
    return client


def _add(selection, user, engines, **data):
    fields = {"engine": engines["vllm"], **GOOD, **data}
    return add_candidate(selection=selection, user=user, data=fields)


def _refused(selection, user, engines, **data) -> dict:
    before = Candidate.objects.count()
    with pytest.raises(ValidationError) as caught:
        _add(selection, user, engines, **data)
    assert Candidate.objects.count() == before
    return caught.value.message_dict


def test_a_sane_candidate_is_saved(selection_with_constraints, architect, engines):
    assert _add(selection_with_constraints, architect, engines).pk


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"kv_precision": "int4"}, "kv_precision", "has no"),  # vLLM has no int4 KV cache
        ({"engine_version": "0.1-unknown", "kv_precision": "int8"}, "kv_precision", "has no"),
        ({"tensor_parallel": 8, "gpu_count": 4}, "tensor_parallel", "needs at least 8 GPUs"),
        ({"gpu_count": 8, "tensor_parallel": 8}, "gpu_count", "GPU budget of 4"),
        ({"gpu_count": 10**12}, "gpu_count", "between 1 and 100,000"),
        ({"tensor_parallel": 10**12}, "tensor_parallel", "between 1 and 1,024"),
        ({"endpoint_url": "http://169.254.169.254/latest"}, "endpoint_url", "metadata"),
        ({"endpoint_url": "http://metadata.google.internal/"}, "endpoint_url", "metadata"),
        ({"endpoint_url": "http://engine.example.com:8000/v1"}, "endpoint_url", "KVSELECT_ALLOWED_TARGETS"),
        ({"endpoint_url": "http://user:pw@127.0.0.1:8000/v1"}, "endpoint_url", "credentials"),
        ({"metrics_url": "http://[::ffff:169.254.169.254]/metrics"}, "metrics_url", "169.254"),
    ],
)
def test_bad_candidates_are_refused_naming_the_field(
    selection_with_constraints, architect, engines, data, field, words
):
    errors = _refused(selection_with_constraints, architect, engines, **data)
    assert field in errors and words in " ".join(errors[field]), errors


def test_a_precision_the_constraints_do_not_allow_is_refused(selection_with_constraints, architect, engines):
    # the sample constraints allow bf16 and fp8; LMDeploy offers int8 but the team does not accept it
    errors = _refused(
        selection_with_constraints,
        architect,
        engines,
        engine=engines["lmdeploy"],
        engine_version="0.16.0",
        kv_precision="int8",
    )
    assert errors["kv_precision"] == ["the constraints allow only bf16/fp16, fp8"]


def test_the_catalog_decides_which_precisions_an_engine_offers(engines):
    assert offered_kv_precisions(engines["vllm"], "0.11.0") == {"bf16", "fp8"}
    assert offered_kv_precisions(engines["lmdeploy"], "0.16.0") == {"bf16", "fp8", "int8", "int4"}
    assert offered_kv_precisions(engines["llama-cpp"], "unknown-build") == {"bf16", "int8", "int4"}


def test_duplicate_labels_are_refused_also_without_a_label(selection_with_constraints, architect, engines):
    _add(selection_with_constraints, architect, engines)
    errors = _refused(selection_with_constraints, architect, engines, label="VLLM FP8 ")
    assert "already called" in errors["label"][0]
    _add(selection_with_constraints, architect, engines, label="")
    errors = _refused(selection_with_constraints, architect, engines, label="")
    assert "give this one a label" in errors["label"][0]


def test_an_edit_keeps_its_own_label_and_is_checked_too(selection_with_constraints, architect, engines):
    candidate = _add(selection_with_constraints, architect, engines)
    update_candidate(
        candidate=candidate, user=architect, data={"label": "vLLM fp8", "gpu_count": 2, "tensor_parallel": 2}
    )
    with pytest.raises(ValidationError) as caught:
        update_candidate(candidate=candidate, user=architect, data={"tensor_parallel": 4})
    assert "tensor_parallel" in caught.value.message_dict
    candidate.refresh_from_db()
    assert candidate.tensor_parallel == 2


def test_the_api_refuses_with_the_field_named(api, selection_with_constraints, engines):
    url = f"/api/v1/selections/{selection_with_constraints.pk}/candidates/"
    body = {
        "engine": "vllm",
        "engine_version": "0.11.0",
        "label": "x",
        "gpu_count": 2,
        "tensor_parallel": 4,
        "kv_precision": "int4",
        "endpoint_url": "http://169.254.169.254/",
    }
    response = api.post(url, body, format="json")
    assert response.status_code == 400, response.content
    assert {"tensor_parallel", "kv_precision", "endpoint_url"} <= set(response.json())
    assert not Candidate.objects.exists()
    response = api.post(
        url, dict(body, gpu_count=10**12, tensor_parallel=1, kv_precision="fp8", endpoint_url=""), format="json"
    )
    assert response.status_code == 400 and "gpu_count" in response.json(), response.content
    good = api.post(
        url, dict(body, tensor_parallel=2, kv_precision="fp8", endpoint_url="http://127.0.0.1:8000/v1"), format="json"
    )
    assert good.status_code == 201, good.content
    patch = api.patch(f"/api/v1/candidates/{good.json()['id']}/", {"kv_precision": "int4"}, format="json")
    assert patch.status_code == 400 and "kv_precision" in patch.json()


def test_the_form_refuses_with_the_field_named(client, architect, selection_with_constraints, engines):
    client.force_login(architect)
    response = client.post(
        f"/selections/{selection_with_constraints.pk}/candidates/",
        {
            "engine": engines["vllm"].pk,
            "engine_version": "0.11.0",
            "label": "big",
            "gpu_count": "8",
            "tensor_parallel": "16",
            "kv_precision": "int4",
            "endpoint_url": "http://10.0.0.1:8000/v1",
        },
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "Nothing was saved" in body
    for words in ("GPU budget of 4", "has no", "KVSELECT_ALLOWED_TARGETS"):
        assert words in body, words
    assert not Candidate.objects.exists()


def test_a_tp_the_target_model_cannot_be_split_over_is_refused_with_the_sizes_that_can(
    selection_with_constraints, architect, engines
):
    """Issue 37 (walk m7): TP 3 on 3 GPUs was accepted, and only the capacity plan said it cannot work."""
    from selection.setup.services import save_constraints

    constraints = selection_with_constraints.constraints.as_domain()
    save_constraints(
        selection=selection_with_constraints,
        user=architect,
        data={**constraints, "target_model": "Llama-3.1-70B", "gpu_count_budget": 8},
    )
    errors = _refused(selection_with_constraints, architect, engines, gpu_count=3, tensor_parallel=3)
    message = errors["tensor_parallel"][0]
    assert "Llama-3.1-70B cannot be split over TP 3" in message and "possible here: 1, 2" in message
    assert _add(selection_with_constraints, architect, engines, gpu_count=4, tensor_parallel=4).pk


def test_the_form_shows_its_own_and_the_services_errors_at_once(client, selection_with_constraints, architect, engines):
    """Issue 37 (walk n10): a form's errors came in rounds, its own first and the service's after a fix."""
    from django.urls import reverse

    client.force_login(architect)
    budget = selection_with_constraints.constraints.gpu_count_budget
    response = client.post(
        reverse("selection:candidates", args=[selection_with_constraints.pk]),
        {
            "engine": engines["vllm"].pk,
            "engine_version": "0.11.0",
            "label": "x" * 500,  # too long for the form
            "gpu_count": budget + 1,  # over the selection's budget: the service's rule
            "tensor_parallel": 1,
            "kv_precision": "bf16",
        },
    )
    errors = response.context["form"].errors
    assert "label" in errors and "exceed the selection's GPU budget" in errors["gpu_count"][0]
