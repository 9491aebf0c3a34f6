"""One spec per validation test: every runnable row of the suite has its workload's `SPEC`, every
parameter has a label and a unit, and a new test (its row and its spec, tests/support/probe_suite.py)
reaches the form, the API's enums, the estimate, the plan, `make demo`, the `validate` command, the
run page, the scoring, the record's figures and its claims without any other edit."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks import presentation, suite
from benchmarks.api.serializers import StartValidationSerializer, UploadSerializer
from benchmarks.harness import workloads
from benchmarks.harness.workloads.spec import UNITS, ParamSpec
from benchmarks.management.commands import validate
from benchmarks.models import BenchmarkRun, RunPoint
from benchmarks.run_charts import Budgets
from benchmarks.suite.base import CandidateFacts, RunFacts
from benchmarks.validation import dispatch
from benchmarks.validation.forms import ValidationParamsForm, param_label
from benchmarks.validation.plan import candidate_facts, priority_order, validation_plan
from benchmarks.verdicts import status_of
from selection.domain import claims
from selection.models import Team
from selection.records.context import validated_thresholds, validation_entry
from selection.scoring.evidence import measured_metrics
from tests.support import probe_suite
from tests.support.builders import make_candidate, make_selection, make_user, with_constraints

BUDGET = {"ttft_p95_ms": 800.0, "tpot_p95_ms": 50.0, "e2e_p95_ms": 20000.0}


def test_every_runnable_row_of_the_suite_has_exactly_one_spec():
    tests = [module.SPEC.test for module in workloads.MODULES]
    assert len(tests) == len(set(tests)), "two workload modules claim one test"
    assert set(suite.RUNNABLE_TEST_IDS) <= set(tests)
    assert set(tests) <= set(suite.TEST_IDS), "a spec without its row in benchmarks.suite"
    assert workloads.PLANNERS == {test: spec.plan for test, spec in workloads.SPECS.items()}
    assert workloads.RUNNERS == {test: spec.run for test, spec in workloads.SPECS.items()}


@pytest.mark.parametrize("test", list(workloads.SPECS))
def test_a_spec_plans_estimates_and_parses_as_its_row_of_the_suite_says(test):
    """A test's parameters, plan and estimate are its row's (benchmarks/suite/<test>.py); its workload
    module adds only the run."""
    row, spec = suite.BY_ID[test], workloads.SPECS[test]
    assert (spec.params, spec.plan, spec.estimate) == (row.params, row.plan, row.estimate)
    planned = row.plan(None)
    assert vars(spec.parse(planned)) == vars(row.parse(planned)) and row.problems(planned) == {}


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


@pytest.fixture
def probe_test(monkeypatch):
    """Registers the throwaway test of tests/support/probe_suite.py (its `TEST` and its `SPEC`) as a
    new module in each package's `MODULES` would be, and every name the registries derive from them."""
    tests = (*suite.TESTS, probe_suite.TEST)
    runnable = tuple(test.id for test in tests if test.runnable)
    by_id = {test.id: test for test in tests}
    monkeypatch.setattr(suite, "MODULES", (*suite.MODULES, probe_suite))
    monkeypatch.setattr(suite, "TESTS", tests)
    monkeypatch.setattr(suite, "BY_ID", by_id)
    monkeypatch.setattr(suite, "TEST_IDS", tuple(test.id for test in tests))
    monkeypatch.setattr(suite, "RUNNABLE_TEST_IDS", runnable)
    monkeypatch.setattr(suite, "CLAIMS", tuple(claim for test in tests for claim in test.claims))
    # the modules that bound the registry's names when they were imported (a real module is there by then)
    monkeypatch.setattr(dispatch, "RUNNABLE_TEST_IDS", runnable)
    monkeypatch.setattr(validate, "BY_ID", by_id)
    monkeypatch.setattr(workloads, "MODULES", (*workloads.MODULES, probe_suite))
    monkeypatch.setitem(workloads.SPECS, "probe", probe_suite.SPEC)
    monkeypatch.setitem(workloads.PLANNERS, "probe", probe_suite.SPEC.plan)
    monkeypatch.setitem(workloads.RUNNERS, "probe", probe_suite.SPEC.run)
    return probe_suite.SPEC


def test_a_new_test_reaches_the_form_the_estimate_the_labels_and_the_api(probe_test):
    plan = workloads.plan("probe")
    assert plan == {"probe_depth": 4, "probe_s": 20.0, "probe_shapes": [128, 256], "probe_kv_tokens": None}

    form = ValidationParamsForm(plan=plan, test="probe")
    assert [str(form.fields[key].label) for key in plan] == [
        "Probe depth (requests)",
        "Probe time (s)",
        "Probe shapes (tokens)",
        "Probe KV capacity (tokens)",
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


def test_a_new_test_reaches_the_scoring_the_record_figures_its_claims_and_the_cli_without_the_web(probe_test):
    """What its module says, each reader reads: no other file names the probe."""
    run = RunFacts(
        "41",
        "probe",
        {},
        {"probe": {"ttft_p95_ms": 212.5, "n": 30}},
        ({"name": "probe_answered", "status": "pass", "passed": True, "n": 30},),
        {},
    )
    assert suite.BY_ID["probe"].indicators(run) == {"isolation_ttft_p95_ms": 212.5}
    figures = presentation.result_figures("probe", [], run.metadata, lambda text: f"[{text}]")
    assert figures == [{"name": "[probe TTFT p95 at 4 deep]", "value": "212", "unit": "ms", "n": 30, "interval": ""}]
    assert presentation.result_figures("isolation", [], {}) == []  # a test without figures: its heaviest level

    assert probe_suite.PROBED in suite.CLAIMS
    assert presentation.verdict_label("probe_answered") == "The probe answered"
    outcome = claims.judge_verdicts(probe_suite.PROBED, run.id, list(run.verdicts), status_of)
    assert outcome.claimed and str(claims.sentence(outcome, "Probe, run 41")) == "the probe answered (Probe, run 41)"

    params = workloads.plan("probe")
    validate.apply_overrides({"concurrency": 3, "param": []}, "probe", params)  # validate --test probe --concurrency 3
    assert params["probe_depth"] == 3
    with pytest.raises(CommandError, match="--rate: probe has no open-loop mode .its flags: --concurrency"):
        validate.apply_overrides({"rate": 2.0, "param": []}, "probe", workloads.plan("probe"))

    assert suite.demo_params("probe") == {"probe_s": 2.0, "probe_depth": 2}
    assert probe_test.problems(workloads.plan("probe") | suite.demo_params("probe")) == {}


@pytest.fixture
def probed_candidate(db):
    team = Team.objects.create(name="Platform")
    architect = make_user("architect", team)
    selection = with_constraints(make_selection(architect, team), architect)
    return architect, make_candidate(selection, architect)


def test_a_new_test_reaches_the_plan_the_demo_the_run_page_the_scoring_and_the_record(
    probe_test, probed_candidate, client, monkeypatch
):
    architect, candidate = probed_candidate
    selection = candidate.selection
    client.force_login(architect)

    # the plan: from the constraints (peak concurrency 64) and the candidate's facts (its KV capacity)
    facts = candidate_facts(candidate)
    planned = validation_plan(candidate)["probe"]
    assert planned["probe_depth"] == selection.constraints.peak_concurrency
    assert planned["probe_kv_tokens"] == facts.kv_capacity_tokens
    assert ("probe", True) in priority_order(candidate) or ("probe", False) in priority_order(candidate)
    page = client.get(reverse("selection:validation", args=[selection.pk, candidate.pk])).content.decode()
    assert "Run Probe" in page and 'name="probe-probe_depth"' in page and ">Probe time (s) <" in page

    # make demo: its settings over the plan, queued as the demo queues each test
    monkeypatch.setattr("benchmarks.validation.dispatch.enqueue_validation", lambda run: True)
    queued = dispatch.start_validation(
        candidate=candidate, test="probe", user=architect, params=suite.demo_params("probe"), label="demo"
    )
    assert queued.params["probe_s"] == 2.0 and queued.params["probe_depth"] == 2 and queued.status == "queued"

    # the run page, the scoring and the record read the finished run through the probe's module
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="probe",
        origin=BenchmarkRun.Origin.HARNESS,
        status=BenchmarkRun.Status.SUCCEEDED,
        params=queued.params,
        metadata={"probe": {"ttft_p95_ms": 212.5, "n": 30, "ran_s": 2}},
        verdicts=[{"name": "probe_answered", "status": "pass", "passed": True, "n": 30, "detail": "30 of 30"}],
    )
    RunPoint.objects.create(
        run=run, index=0, label="probe", concurrency=2, requests_completed=30, ttft_ms={"p95": 212.5}, tpot_ms={}
    )
    body = client.get(reverse("selection:run", args=[selection.pk, run.pk])).content.decode()
    assert "Probe" in body and 'data-test="probe"' in body and "Probe depth (requests)" in body
    assert "The probe answered" in body and "probe_answered" not in body.replace('"probe_answered"', "")
    assert '<td>probe TTFT p95 at 4 deep</td><td class="num">212 ms</td><td class="num">30</td>' in body

    measured = measured_metrics(candidate, selection.constraints.as_domain())
    metric = measured["isolation_ttft_p95_ms"]  # its indicators
    assert metric.value == 212.5 and metric.run_ids == (str(run.pk),)
    assert measured["achieved_concurrency"].value == 2.0  # its readings of its load points

    entry = validation_entry(run, Budgets(800.0, 50.0), {})
    assert entry["test"] == "Probe" and entry["run"] == f"run-{run.pk}"
    assert [(row["name"], row["value"], row["n"]) for row in entry["metrics"]] == [
        ("probe TTFT p95 at 4 deep", "212", 30)
    ]
    assert entry["soak_length"] == "The probe ran 2 s only."  # its row's note under its result
    # the monitoring thresholds its claim validates (the probe answered), none once the claim fails
    assert validated_thresholds(candidate, [run], {"peak_concurrency": 64}) == {"validated_concurrency": 64}
    run.verdicts = [{"name": "probe_answered", "status": "fail", "passed": False, "n": 30}]
    assert validated_thresholds(candidate, [run], {"peak_concurrency": 64}) == {}


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
