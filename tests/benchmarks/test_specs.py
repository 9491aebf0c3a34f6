"""One spec per validation test: every runnable row of the suite has its workload's `SPEC`, every
parameter has a label and a unit, and a new test (its row and its spec) reaches the form, the
estimate, the run page's labels and the API's enums without any other edit."""

from __future__ import annotations

from typing import Any, Mapping

import pytest

from benchmarks import suite
from benchmarks.api.serializers import StartValidationSerializer, UploadSerializer
from benchmarks.harness import estimates, workloads
from benchmarks.harness.workloads.spec import BUDGET_PARAMS, UNITS, ParamSpec, TestSpec
from benchmarks.suite.base import CandidateFacts, ValidationTest
from benchmarks.validation.forms import ValidationParamsForm, param_label

BUDGET = {"ttft_p95_ms": 800.0, "tpot_p95_ms": 50.0, "e2e_p95_ms": 20000.0}


def test_every_runnable_row_of_the_suite_has_exactly_one_spec():
    tests = [module.SPEC.test for module in workloads.MODULES]
    assert len(tests) == len(set(tests)), "two workload modules claim one test"
    assert set(suite.RUNNABLE_TEST_IDS) <= set(tests)
    assert set(tests) <= set(suite.TEST_IDS), "a spec without its row in benchmarks.suite"
    assert workloads.PLANNERS == {test: spec.plan for test, spec in workloads.SPECS.items()}
    assert workloads.RUNNERS == {test: spec.run for test, spec in workloads.SPECS.items()}


@pytest.mark.parametrize("test", list(workloads.SPECS))
def test_every_parameter_has_a_label_and_a_unit_and_the_plan_plans_the_spec(test):
    spec = workloads.SPECS[test]
    names = [param.name for param in spec.params]
    assert len(names) == len(set(names)), f"{test}: a parameter listed twice"
    for param in spec.params:
        assert param.label.strip(), f"{test}.{param.name} has no label"
        assert param.unit in UNITS, f"{test}.{param.name}: unit {param.unit!r} is not one of {UNITS}"
    planned = spec.plan(None)
    assert {key: spec.defaults()[key] for key in planned} == planned  # the spec's defaults are the plan's
    assert set(spec.plan(BUDGET)) <= set(names)


def test_a_key_means_the_same_in_every_test():
    seen: dict[str, ParamSpec] = {}
    for spec in workloads.SPECS.values():
        for param in spec.params:
            first = seen.setdefault(param.name, param)
            assert (param.label, param.unit) == (first.label, first.unit), param.name


# a throwaway test: its row and its spec, registered as a new module's would be
PROBE_PARAMS = (
    ParamSpec("probe_depth", 4, "Probe depth (requests)", "requests", minimum=1),
    ParamSpec("probe_s", 20.0, "Probe time (s)", "s"),
    ParamSpec("probe_shapes", [128, 256], "Probe shapes (tokens)", "tokens", help="two or more lengths"),
    *BUDGET_PARAMS,
)


def plan_probe(constraints: dict[str, Any] | None = None, facts=None) -> dict[str, Any]:
    return {param.name: param.default for param in PROBE_PARAMS if param.default is not None}


async def run_probe(target, params, cancel=None, progress=None):  # never run here
    raise AssertionError("not run")


def estimate_probe(params: Mapping[str, Any]) -> estimates.Load:
    seconds = estimates.number(params, "probe_s")
    return estimates.Load(seconds, estimates.number(params, "probe_depth"), 7, 7 * 384)


@pytest.fixture
def probe_test(monkeypatch):
    row = ValidationTest("probe", 9, "Probe", "Probes the endpoint.", "the probe's figures", ("kv_usage",))
    tests = (*suite.TESTS, row)
    monkeypatch.setattr(suite, "TESTS", tests)
    monkeypatch.setattr(suite, "BY_ID", {test.id: test for test in tests})
    monkeypatch.setattr(suite, "TEST_IDS", tuple(test.id for test in tests))
    monkeypatch.setattr(suite, "RUNNABLE_TEST_IDS", tuple(test.id for test in tests if test.runnable))
    spec = TestSpec("probe", PROBE_PARAMS, plan_probe, run_probe, estimate_probe)
    monkeypatch.setitem(workloads.SPECS, "probe", spec)
    return spec


def test_a_new_test_reaches_the_form_the_estimate_the_labels_and_the_api(probe_test):
    plan = workloads.plan("probe")
    assert plan == {"probe_depth": 4, "probe_s": 20.0, "probe_shapes": [128, 256]}

    form = ValidationParamsForm(plan=plan, test="probe")
    assert [str(form.fields[key].label) for key in plan] == [
        "Probe depth (requests)",
        "Probe time (s)",
        "Probe shapes (tokens)",
    ]
    assert form.fields["probe_depth"].min_value == 1 and form.fields["probe_shapes"].help_text == "two or more lengths"
    bound = ValidationParamsForm(
        {"probe-probe_depth": "0", "probe-probe_s": "5", "probe-probe_shapes": "64"}, plan=plan, test="probe"
    )
    assert not bound.is_valid() and list(bound.errors) == ["probe_depth"]

    assert workloads.estimate("probe", plan) == {
        "seconds": 20,
        "concurrency": 4,
        "requests": 7,
        "tokens": 7 * 384,
        "warnings": [],
    }
    assert param_label("probe_s") == "Probe time (s)"  # the run page's parameter table

    assert "probe" in dict(UploadSerializer().fields["test"].choices)
    assert StartValidationSerializer(data={"test": "probe"}).is_valid()
    assert ("probe", True) in suite.by_priority(())


def test_without_its_row_and_spec_the_test_is_refused():
    assert not StartValidationSerializer(data={"test": "probe"}).is_valid()
    with pytest.raises(workloads.PlanError):
        workloads.plan("probe")


def test_a_plan_reads_the_candidates_facts_and_plans_without_them():
    facts = CandidateFacts(max_model_len=8192, kv_capacity_tokens=50_000, priority_scheduling=True)
    assert workloads.plan("isolation", None, facts)["use_priority"] is True
    assert workloads.plan("isolation", None)["use_priority"] is False
    ladder = workloads.plan("long_context", {"max_input_tokens": 32768}, facts)
    assert ladder["max_model_len"] == 8192 and ladder["kv_capacity_tokens"] == 50_000
    assert 8192 - workloads.LONG_OUTPUT_TOKENS in ladder["rungs"] and ladder["rungs"][-1] == 32768
    for test in ("prefix_reuse", "swap_recovery"):
        assert workloads.plan(test, None, facts)["kv_capacity_tokens"] == 50_000
        assert workloads.plan(test, None)["kv_capacity_tokens"] is None


@pytest.mark.parametrize("test", list(workloads.SPECS))
def test_every_plan_passes_its_own_specs_checks_with_and_without_constraints_and_facts(test):
    constraints = {
        "peak_concurrency": 32,
        "avg_input_tokens": 1000,
        "avg_output_tokens": 200,
        "max_input_tokens": 32768,
        "request_rate": 8.0,
        "tenants": 2,
        **BUDGET,
    }
    facts = CandidateFacts(max_model_len=40960, kv_capacity_tokens=100_000, priority_scheduling=True)
    spec = workloads.SPECS[test]
    for planned in (spec.plan(None), spec.plan(constraints), spec.plan(constraints, facts)):
        assert spec.problems(planned) == {}, planned  # what the plan proposes, the dispatch accepts
