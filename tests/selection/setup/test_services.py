import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from benchmarks.uploads.tokens import create_upload_token, revoke_upload_token
from selection.models import AuditEntry, Constraints, CriterionWeight, Gate
from selection.setup.services import save_constraints, set_gates, update_weights
from tests.support.builders import SAMPLE_CONSTRAINTS


def test_saving_constraints_infers_scenario_and_writes_preset_weights(selection, architect):
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS))
    selection.refresh_from_db()
    assert selection.scenario == "A"
    assert selection.scenario_reasons
    weights = {w.criterion: w for w in selection.weights.all()}
    assert sum(w.weight for w in weights.values()) == pytest.approx(1.0, abs=1e-5)
    assert {w.source for w in weights.values()} == {"preset"}


def test_invalid_constraints_name_the_field_and_save_nothing(selection, architect):
    bad = dict(SAMPLE_CONSTRAINTS, avg_input_tokens=10_000, max_input_tokens=4096)
    with pytest.raises(ValidationError) as excinfo:
        save_constraints(selection=selection, user=architect, data=bad)
    assert "avg_input_tokens" in excinfo.value.message_dict
    assert not Constraints.objects.filter(selection=selection).exists()
    assert not CriterionWeight.objects.filter(selection=selection).exists()


def test_multi_turn_requires_average_turns(selection, architect):
    with pytest.raises(ValidationError) as excinfo:
        save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, multi_turn=True))
    assert "average_turns" in excinfo.value.message_dict


def test_weight_edit_requires_justification_and_is_audited(selection_with_constraints, architect):
    selection = selection_with_constraints
    with pytest.raises(ValidationError) as excinfo:
        update_weights(selection=selection, user=architect, weights={"cache_reuse": 5}, justification=" ")
    assert "justification" in excinfo.value.message_dict
    current = {w.criterion: w.weight for w in selection.weights.all()}
    raw = {c: w * 10 for c, w in current.items()}
    raw["cache_persistence"] = raw["cache_persistence"] * 3
    update_weights(selection=selection, user=architect, weights=raw, justification="sessions matter")
    rows = {w.criterion: w for w in selection.weights.all()}
    assert sum(w.weight for w in rows.values()) == pytest.approx(1.0, abs=1e-5)
    assert rows["cache_persistence"].source == "edited"
    entry = AuditEntry.objects.filter(selection=selection, action="weight.changed", field="cache_persistence").get()
    assert entry.actor == architect
    assert entry.justification == "sessions matter"
    assert entry.old == pytest.approx(current["cache_persistence"], abs=1e-6)
    assert entry.new > entry.old


def test_weight_edit_rejects_unknown_criterion_naming_it(selection_with_constraints, architect):
    with pytest.raises(ValidationError) as excinfo:
        update_weights(
            selection=selection_with_constraints, user=architect, weights={"session_recovery": 1.0}, justification="x"
        )
    assert "weights.session_recovery" in excinfo.value.message_dict


def test_edited_weights_survive_a_constraint_change(selection_with_constraints, architect):
    selection = selection_with_constraints
    raw = {w.criterion: w.weight for w in selection.weights.all()}
    raw["observability"] = 0.5
    update_weights(selection=selection, user=architect, weights=raw, justification="ops team is small")
    edited = selection.weights.get(criterion="observability").weight
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, peak_concurrency=300))
    assert selection.weights.get(criterion="observability").weight == pytest.approx(edited)


def test_constraint_changes_are_audited_old_to_new(selection_with_constraints, architect):
    save_constraints(
        selection=selection_with_constraints, user=architect, data=dict(SAMPLE_CONSTRAINTS, peak_concurrency=300)
    )
    entry = AuditEntry.objects.get(action="constraints.changed", field="peak_concurrency", old=200)
    assert entry.new == 300


def test_gates_warn_above_three_and_are_audited(selection_with_constraints, architect):
    warnings = set_gates(selection=selection_with_constraints, user=architect, gates={"memory": 0.6, "scheduling": 0.5})
    assert warnings == []
    warnings = set_gates(
        selection=selection_with_constraints,
        user=architect,
        gates={"memory": 0.6, "scheduling": 0.5, "cost": 0.3, "observability": 0.2},
    )
    assert "no candidate scores full marks everywhere" in str(warnings[0]).lower()
    assert Gate.objects.filter(selection=selection_with_constraints).count() == 4
    assert AuditEntry.objects.filter(action="gates.changed").count() == 2


def test_gate_threshold_out_of_range_names_the_dimension(selection_with_constraints, architect):
    with pytest.raises(ValidationError) as excinfo:
        set_gates(selection=selection_with_constraints, user=architect, gates={"memory": 1.5})
    assert "gates.memory" in excinfo.value.message_dict


def test_reviewer_cannot_edit(selection_with_constraints, reviewer):
    with pytest.raises(PermissionDenied):
        set_gates(selection=selection_with_constraints, user=reviewer, gates={"memory": 0.5})


def test_upload_token_is_stored_hashed_and_revocable(selection, architect):
    token, raw = create_upload_token(selection=selection, user=architect, name="ci")
    assert raw.startswith("kvs_") and raw not in token.key_hash and len(token.key_hash) == 64
    revoke_upload_token(token=token, user=architect)
    token.refresh_from_db()
    assert not token.active


def test_the_longest_request_must_fit_the_target_models_context(selection, architect):
    """Issue 37 (walk m6): a 1,000,000-token input for a 128K-context model was saved without a word."""
    bad = dict(SAMPLE_CONSTRAINTS, target_model="Llama-3.1-70B", max_input_tokens=1_000_000)
    with pytest.raises(ValidationError) as excinfo:
        save_constraints(selection=selection, user=architect, data=bad)
    assert "Llama-3.1-70B serves at most 131,072 tokens of context" in excinfo.value.message_dict["max_input_tokens"][0]
    fits = dict(SAMPLE_CONSTRAINTS, target_model="Llama-3.1-70B", max_input_tokens=130_000, max_output_tokens=1024)
    assert save_constraints(selection=selection, user=architect, data=fits).max_input_tokens == 130_000


def test_a_blank_field_is_not_audited_as_a_change(selection, architect):
    """Issue 37 (walk p-b): the first save wrote "constraints.changed notes — → —" for an empty field."""
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, notes=""))
    assert not AuditEntry.objects.filter(action="constraints.changed", field="notes").exists()
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, notes="peak at 9am"))
    assert AuditEntry.objects.filter(action="constraints.changed", field="notes").count() == 1


def test_a_negative_turn_count_gets_one_error_not_also_required(client, selection, architect):
    from django.urls import reverse

    client.force_login(architect)
    data = {k: v for k, v in SAMPLE_CONSTRAINTS.items() if v is not None and not isinstance(v, list)}
    data.update({"multi_turn": "on", "average_turns": "-5"})
    response = client.post(reverse("selection:constraints", args=[selection.pk]), data)
    errors = response.context["form"].errors["average_turns"]
    assert len(errors) == 1 and "required when multi-turn is on" not in errors[0]
