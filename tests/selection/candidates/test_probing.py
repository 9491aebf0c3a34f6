"""The model is checked where evidence enters (issue 33 item 5, 36 item 5): a candidate's endpoint is
probed when it is added and before each run; another model than the selection's is refused with both
names or kept with an audited justification that the record prints; uploads are checked against the
selection's model; a version the catalog does not list is flagged with the facts assumed."""

import pytest
from django.core.exceptions import ValidationError

from benchmarks.harness.identity import identity_from_upload
from benchmarks.result import NormalizedResult
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import ServerThread
from benchmarks.uploads.quality import warnings_for_candidate
from selection.candidates import probing
from selection.candidates.services import add_candidate, update_candidate
from selection.capacity.plans import plan_for_candidate
from selection.domain.messages import Message
from selection.models import AuditEntry
from selection.setup.services import save_constraints

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def engine_8b():
    """A simulated vLLM 0.11.0 serving Llama-3.1-8B on one H100."""
    with ServerThread(SimConfig(num_blocks=600, max_model_len=40960, engine_version="0.11.0")) as server:
        yield server.url


def data(engines, url, **changes):
    values = {
        "engine": engines["vllm"],
        "engine_version": "0.11.0",
        "endpoint_url": url,
        "metrics_url": f"{url}/metrics",
        "model_name": "kvsim-llama-3.1-8b",
        "gpu_model": "H100",
    }
    values.update(changes)
    return values


def test_an_endpoint_serving_the_selections_model_is_probed_and_kept(
    selection_with_constraints, architect, engines, engine_8b
):
    candidate = add_candidate(selection=selection_with_constraints, user=architect, data=data(engines, engine_8b))
    identity = candidate.endpoint_probe["identity"]
    assert identity["served_models"] == ["kvsim-llama-3.1-8b"] and identity["engine_version"] == "0.11.0"
    assert identity["max_model_len"] == 40960 and identity["kv_pool_tokens"] == 600 * 16
    assert identity["gpu"]["model"] == "H100" and identity["simulated"]
    assert candidate.endpoint_probe["findings"] == []


def test_another_model_is_refused_with_both_names(selection_with_constraints, architect, engines, engine_8b):
    save_constraints(selection=selection_with_constraints, user=architect, data={"target_model": "Llama-3.1-70B"})
    with pytest.raises(ValidationError) as refused:
        add_candidate(selection=selection_with_constraints, user=architect, data=data(engines, engine_8b))
    message = refused.value.message_dict["model_name"][0]
    assert "kvsim-llama-3.1-8b" in message and "Llama-3.1-70B" in message
    assert not selection_with_constraints.candidates.exists()


def test_another_model_is_kept_only_with_an_audited_justification_the_record_prints(
    selection_with_constraints, architect, engines, engine_8b
):
    save_constraints(selection=selection_with_constraints, user=architect, data={"target_model": "Llama-3.1-70B"})
    why = "the 70B endpoint is not provisioned yet; this run checks the scheduler only"
    candidate = add_candidate(
        selection=selection_with_constraints, user=architect, data=data(engines, engine_8b), model_justification=why
    )
    assert candidate.model_justification["justification"] == why
    assert candidate.model_justification["target"] == "Llama-3.1-70B" and "new" not in candidate.model_justification
    entry = AuditEntry.objects.get(selection=selection_with_constraints, action="candidate.model_kept")
    assert entry.justification == why
    provenance = probing.evidence_provenance(candidate, [])
    assert any(why in flag and "Llama-3.1-70B" in flag for flag in provenance["flags"])
    # before each run: kept, so the run may start; without the justification it is refused
    assert probing.probe_before_run(candidate, launched=False)["refusal"] == ""
    candidate.model_justification = None
    refusal = probing.probe_before_run(candidate, launched=False)["refusal"]
    assert "Llama-3.1-70B" in refusal and "kvsim-llama-3.1-8b" in refusal


def test_a_reported_version_that_differs_is_flagged_on_the_candidate(
    selection_with_constraints, architect, engines, engine_8b
):
    candidate = add_candidate(selection=selection_with_constraints, user=architect, data=data(engines, engine_8b))
    update_candidate(candidate=candidate, user=architect, data={"engine_version": "0.10.2"})
    candidate.refresh_from_db()
    (finding,) = candidate.endpoint_probe["findings"]
    assert probing.finding_text(finding) == (
        "the engine reports version 0.11.0 (GET /version), the candidate states 0.10.2"
    )


def test_a_version_not_in_the_catalog_is_planned_with_the_assumed_facts_and_says_so(
    selection_with_constraints, architect, engines
):
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "99.99.99-evil"},
    )
    catalog = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "label": "catalog version"},
    )
    assert (
        probing.version_note(candidate) == "version 99.99.99-evil is not in the engine catalog: facts of 0.11.0 assumed"
    )
    assert probing.version_note(catalog) == ""
    planned, documented = plan_for_candidate(candidate), plan_for_candidate(catalog)
    assert planned["token_capacity"] == documented["token_capacity"]  # the same facts, never another default
    notes = [str(Message.from_dict(n)) for n in planned["notes"]]
    assert "version 99.99.99-evil is not in the engine catalog: facts of 0.11.0 assumed" in notes


def test_an_upload_is_checked_against_the_selections_model(selection_with_constraints, architect, engines, engine_8b):
    candidate = add_candidate(selection=selection_with_constraints, user=architect, data=data(engines, engine_8b))

    def warned(model: str) -> list[str]:
        result = NormalizedResult(tool="vllm-bench", format="vllm", evidence="MEASURED", metadata={"model": model})
        return [w["code"] for w in warnings_for_candidate(result, candidate)]

    assert warned("meta-llama/Llama-3.1-8B-Instruct") == []
    assert warned("kvsim-llama-3.1-8b") == []  # the candidate's served name: its probe shows it is the 8B
    assert warned("meta-llama/Llama-3.1-70B-Instruct") == ["model_mismatch"]
    assert identity_from_upload({"gpu": "A100-80GB"})["gpu"]["model"] == "A100-80GB"
