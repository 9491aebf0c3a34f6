"""The suite registry: one module per test, in the articles' order, and `make demo`'s settings of
every runnable test stated where the test is defined (a new runnable test without them fails here,
not as a KeyError in `make demo`)."""

from __future__ import annotations

import pytest

from benchmarks import suite
from benchmarks.harness import workloads
from benchmarks.suite.base import ValidationTest


def test_the_registry_lists_each_module_once_in_the_articles_order():
    assert [test.id for test in suite.TESTS] == [module.TEST.id for module in suite.MODULES]
    assert len(set(suite.TEST_IDS)) == len(suite.TEST_IDS)
    numbers = [test.number for test in suite.TESTS if test.number is not None]
    assert numbers == list(range(1, len(numbers) + 1))  # numbered in the articles' order, none skipped
    assert suite.RUNNABLE_TEST_IDS == tuple(test.id for test in suite.TESTS if test.runnable)
    assert "trace_replay" not in suite.RUNNABLE_TEST_IDS and "custom" not in suite.RUNNABLE_TEST_IDS


@pytest.mark.parametrize("test", suite.RUNNABLE_TEST_IDS)
def test_every_runnable_test_states_its_demo_settings_and_each_is_one_of_its_parameters(test):
    settings = suite.demo_params(test)
    assert settings, f"{test}: no demo settings on its suite module's TEST"
    assert set(settings) <= set(workloads.SPECS[test].defaults()), f"{test}: a demo setting no parameter names"


def test_demo_settings_are_a_copy_and_a_test_without_them_has_none():
    settings = suite.demo_params("prefix_reuse")
    settings["requests"] = 1
    assert suite.demo_params("prefix_reuse")["requests"] == 64
    row = ValidationTest("probe", None, "Probe", "Probes.", "the probe's figures", ("kv_usage",))
    assert row.demo is None


@pytest.mark.parametrize("test", suite.RUNNABLE_TEST_IDS)
def test_every_shared_validate_flag_a_test_takes_sets_one_of_its_parameters(test):
    names = set(workloads.SPECS[test].defaults())
    for flag, name in suite.BY_ID[test].cli.items():
        if flag != "trace":  # the trace's file goes to the run's length source, never to the form
            assert name in names, f"{test}: --{flag} sets {name}, which is not one of its parameters"
