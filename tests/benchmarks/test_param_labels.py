"""Validation parameters are labelled in words with their units, also ones added later."""

from __future__ import annotations

from benchmarks import suite
from benchmarks.harness import workloads
from benchmarks.validation.forms import param_label


def test_every_planned_parameter_has_a_worded_label():
    constraints = {"ttft_p95_ms": 800.0, "tpot_p95_ms": 50.0, "e2e_p95_ms": 20000.0}
    for test in suite.RUNNABLE_TEST_IDS:  # the tests the validation page offers (a trace replay runs from the CLI)
        for key in workloads.plan(test, constraints):
            spec = workloads.SPECS[test].param(key)
            assert spec is not None and spec.label, f"{test}.{key} has no label"


def test_an_unlisted_parameter_is_named_from_its_key():
    assert param_label("cooldown_s") == "Cooldown (s)"
    assert param_label("itl_p99_ms") == "ITL p99 (ms)"
    assert param_label("kv_budget_tokens") == "KV budget (tokens)"
    assert str(param_label("duration_s")) == "Duration (s)"
