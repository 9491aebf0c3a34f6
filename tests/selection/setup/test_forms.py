"""The web forms: parsing, field-named errors, model-config choice, and service error mapping."""

from __future__ import annotations

import pytest
from django import forms
from django.core.exceptions import ValidationError

from selection.candidates.forms import CandidateForm
from selection.domain.criteria import criteria_for
from selection.models import Constraints
from selection.setup.forms import CONSTRAINT_FIELDS, ConstraintsForm, GatesForm, WeightsForm
from selection.web import attach_service_errors
from tests.support.builders import VALID_CONSTRAINTS, make_engine


def test_one_pager_covers_every_constraints_field():
    editable = {
        f.name
        for f in Constraints._meta.concrete_fields
        if f.editable and f.name not in {"id", "selection", "updated_at", "model_config"}
    }
    assert set(CONSTRAINT_FIELDS) == editable
    assert len(CONSTRAINT_FIELDS) == len(set(CONSTRAINT_FIELDS))


def test_target_model_is_free_text_without_shipped_configs():
    form = ConstraintsForm(VALID_CONSTRAINTS, model_configs=[])
    assert isinstance(form.fields["target_model"].widget, forms.TextInput)
    assert form.is_valid(), form.errors


def test_target_model_is_a_select_of_shipped_configs():
    form = ConstraintsForm({**VALID_CONSTRAINTS, "target_model": "gpt-unknown"}, model_configs=["Llama-3.1-8B"])
    assert isinstance(form.fields["target_model"], forms.ChoiceField)
    assert not form.is_valid() and "target_model" in form.errors
    assert ConstraintsForm(VALID_CONSTRAINTS, model_configs=["Llama-3.1-8B"]).is_valid()


def test_target_model_select_keeps_a_saved_value_not_shipped():
    form = ConstraintsForm(initial={"target_model": "custom-model"}, model_configs=["Llama-3.1-8B"])
    assert ("custom-model", "custom-model") in form.fields["target_model"].choices


@pytest.mark.django_db
def test_constraints_cross_field_errors_name_the_field():
    form = ConstraintsForm(
        {
            **VALID_CONSTRAINTS,
            "avg_output_tokens": "2000",
            "p95_input_tokens": "9000",
            "kv_precisions_allowed": ["fp4"],
        },
        model_configs=[],
    )
    assert not form.is_valid()
    assert "must not exceed max output tokens (1024)" in form.errors["avg_output_tokens"][0]
    assert "p95_input_tokens" in form.errors and "kv_precisions_allowed" in form.errors


def test_constraints_units_and_groups():
    form = ConstraintsForm(model_configs=[])
    assert form.fields["ttft_p95_ms"].unit == "ms" and form.fields["gpu_memory_gib"].unit == "GiB"
    assert [key for key, _title, _fields in form.groups()] == [
        "traffic",
        "context",
        "multi_turn",
        "latency",
        "hardware",
        "team_model",
    ]


def test_weights_form_requires_justification_and_non_negative_values():
    criteria = criteria_for(["A"])
    form = WeightsForm(
        {c.id: "1" for c in criteria} | {"memory_allocation": "-2", "justification": ""},
        criteria=criteria,
        current_percent={},
    )
    assert not form.is_valid()
    assert set(form.errors) == {"memory_allocation", "justification"}


def test_weights_form_shows_current_weights_as_percent():
    criteria = criteria_for(["A"])
    form = WeightsForm(criteria=criteria, current_percent={"cache_reuse": 25.0})
    assert form["cache_reuse"].initial == 25.0
    assert list(form.fields)[-1] == "justification"


def test_gates_form_requires_a_threshold_for_a_chosen_gate():
    form = GatesForm({"use_memory": "on", "threshold_memory": "", "threshold_cost": "2"}, current={})
    assert not form.is_valid()
    assert "threshold_memory" in form.errors and "threshold_cost" in form.errors


def test_gates_form_returns_only_chosen_dimensions():
    form = GatesForm({"use_memory": "on", "threshold_memory": "0.7", "threshold_cost": "0.4"}, current={})
    assert form.is_valid(), form.errors
    assert form.gates() == {"memory": 0.7}


def test_attach_service_errors_maps_prefixed_keys_to_fields():
    form = GatesForm({"use_memory": "on", "threshold_memory": "0.5"}, current={})
    form.is_valid()
    attach_service_errors(
        form, ValidationError({"gates.threshold_memory": ["too low"], "gates": ["bad set"]}), prefixes=("gates",)
    )
    assert form.errors["threshold_memory"] == ["too low"]
    assert form.non_field_errors() == ["bad set"]  # about the whole set: no "gates:" code in front
    other = GatesForm({"use_memory": "on", "threshold_memory": "0.5"}, current={})
    other.is_valid()
    attach_service_errors(other, ValidationError({"kv_precisions_allowed": ["empty"]}))
    assert other.non_field_errors() == ["Kv precisions allowed: empty"]  # a field the form lacks, in words


@pytest.mark.django_db
def test_candidate_form_api_key_is_write_only():
    engine = make_engine()
    data = {
        "engine": engine.pk,
        "engine_version": "0.8.5",
        "gpu_count": "1",
        "tensor_parallel": "1",
        "kv_precision": "bf16",
        "api_key": "sk-1",
    }
    form = CandidateForm(data)
    assert form.is_valid(), form.errors
    assert form.service_api_key() == "sk-1" and "api_key" not in form.service_data()
    assert "clear_api_key" not in form.fields  # nothing stored yet, nothing to clear
    assert 'value="sk-1"' not in str(form["api_key"])  # a re-rendered form does not echo the key
    assert form.engine_versions() == {str(engine.pk): ["0.6.3", "0.8.5"]}


@pytest.mark.django_db
def test_candidate_form_rejects_unknown_precision_and_zero_gpus():
    engine = make_engine()
    form = CandidateForm(
        {
            "engine": engine.pk,
            "engine_version": "0.8.5",
            "gpu_count": "0",
            "tensor_parallel": "1",
            "kv_precision": "fp4",
        }
    )
    assert not form.is_valid() and {"gpu_count", "kv_precision"} <= set(form.errors)


def test_invalid_input_is_described_by_its_error():
    form = ConstraintsForm({**VALID_CONSTRAINTS, "gpu_memory_gib": "0"}, model_configs=[])
    assert not form.is_valid()
    html = str(form["gpu_memory_gib"])
    assert 'aria-invalid="true"' in html and 'aria-describedby="id_gpu_memory_gib_errors"' in html


def test_service_errors_are_described_too():
    form = GatesForm({"use_memory": "on", "threshold_memory": "0.5"}, current={})
    form.is_valid()
    attach_service_errors(form, ValidationError({"gates.threshold_memory": ["too low"]}), prefixes=("gates",))
    assert 'aria-describedby="id_threshold_memory_errors"' in str(form["threshold_memory"])
