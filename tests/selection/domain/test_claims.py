"""The record's behaviour claims: which test and verdicts each needs, and how far a run supports it."""

import pytest

from benchmarks import presentation, suite
from benchmarks.suite.concurrency_stress import CONCURRENCY
from benchmarks.suite.long_context import INPUT_LENGTH
from benchmarks.suite.prefix_reuse import PREFIX_REUSE
from benchmarks.suite.swap_recovery import CONTINUATION, SWAP_IN
from selection.domain import claims
from selection.domain.claims import CLAIMED, MISSING, NOT_RUN, NOT_VALIDATED, judge


def test_a_claim_holds_only_when_every_verdict_it_needs_passed():
    outcome = judge(SWAP_IN, "7", {"eviction_exercised": "pass", "resume_cheaper_than_recompute": "pass"})
    assert outcome.status == CLAIMED and outcome.claimed and outcome.run == "7"
    assert outcome.verdicts == (("eviction_exercised", "pass"), ("resume_cheaper_than_recompute", "pass"))


@pytest.mark.parametrize("status", ["fail", "inconclusive", "insufficient_data", "not_exercised", "not_judged"])
def test_any_other_outcome_leaves_the_claim_not_validated(status):
    outcome = judge(SWAP_IN, "7", {"eviction_exercised": "pass", "resume_cheaper_than_recompute": status})
    assert outcome.status == NOT_VALIDATED and not outcome.claimed


def test_a_verdict_the_run_lacks_is_named_missing():
    outcome = judge(INPUT_LENGTH, "3", {"zero_errors": "pass"})
    assert outcome.status == NOT_VALIDATED and outcome.verdicts == (("largest_rung_succeeds", MISSING),)


def test_no_run_is_not_run():
    outcome = judge(CONCURRENCY, None, None)
    assert outcome.status == NOT_RUN and not outcome.claimed and outcome.verdicts == ()


def test_every_verdict_of_a_name_must_pass_whatever_load_point_it_judged():
    statuses = {
        "concurrency_held": "pass",
        "zero_errors": "pass",
        "ttft_p95_within_budget": "pass",
        "ttft_p95_within_budget[long]": "fail",
    }
    outcome = judge(CONCURRENCY, "1", statuses)
    assert outcome.status == NOT_VALIDATED
    assert ("ttft_p95_within_budget[long]", "fail") in outcome.verdicts


def test_the_continuation_claim_needs_the_swap_in_first():
    """Sessions dropped and recomputed continue identically, but nothing was swapped in (the demo)."""
    statuses = {"eviction_exercised": "pass", "resume_cheaper_than_recompute": "fail", "continuation_identical": "pass"}
    assert judge(CONTINUATION, "5", statuses).status == NOT_VALIDATED
    assert judge(CONTINUATION, "5", statuses | {"resume_cheaper_than_recompute": "pass"}).claimed


def test_judge_verdicts_reads_verdicts_written_before_statuses():
    verdicts = [{"name": "prefix_reused", "passed": True}]
    outcome = claims.judge_verdicts(PREFIX_REUSE, "9", verdicts, lambda v: "pass" if v.get("passed") else "not_judged")
    assert outcome.claimed


def test_the_sentence_is_the_claim_or_its_not_validated_form_with_its_evidence():
    claimed = judge(CONCURRENCY, "1", dict.fromkeys(CONCURRENCY.verdicts, "pass"))
    assert str(claims.sentence(claimed, "Concurrency stress, run 1: ...", n="32")) == (
        "up to 32 concurrent requests (held within the latency budget: Concurrency stress, run 1: ...)"
    )
    missing = judge(CONCURRENCY, None, None)
    assert str(claims.sentence(missing, "no Concurrency stress run", n="32")) == (
        "up to 32 concurrent requests: not validated (no Concurrency stress run)"
    )


def test_every_claim_names_a_test_of_the_suite_and_verdicts_the_harness_writes():
    ids = [claim.id for claim in suite.CLAIMS]
    named = {"concurrency", "input_length", "swap_in", "continuation", "never_swap", "swap_delay", "prefix_reuse"}
    assert named <= set(ids)  # the record's sentences name these
    assert len({claim.id for claim in suite.CLAIMS}) == len(suite.CLAIMS)
    for test in suite.TESTS:
        assert all(claim.test == test.id for claim in test.claims), f"{test.id} states another test's claim"
    for claim in suite.CLAIMS:
        assert all(presentation.criterion_title(name) for name in claim.verdicts)
        assert "%(evidence)s" in claim.claimed and "%(evidence)s" in claim.not_validated
