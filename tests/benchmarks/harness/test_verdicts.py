"""Verdict statuses: sample size, bootstrap interval, inconclusive, client-bound."""

import pytest

from benchmarks import verdicts as v


def test_enough_samples_clearly_under_the_threshold_pass_with_their_interval():
    result = v.judge_percentile("ttft", [10.0 + i % 7 for i in range(200)], 95, 100.0, "TTFT")
    assert result["status"] == v.PASS and result["passed"] is True and result["n"] == 200
    low, high = result["interval"]
    assert low <= result["value"] <= high < 100


def test_clearly_over_fails_and_straddling_is_inconclusive():
    assert v.judge_percentile("t", [200.0 + i for i in range(50)], 95, 100.0, "TTFT")["status"] == v.FAIL
    spread = [float(x) for x in range(1, 201)]  # p95 ~190, its interval spans a few ms
    value = v.judge_percentile("t", spread, 95, 100.0, "TTFT")["value"]
    straddling = v.judge_percentile("t", spread, 95, value, "TTFT")
    assert straddling["status"] == v.INCONCLUSIVE and straddling["passed"] is None
    assert "straddles" in straddling["detail"]


def test_fewer_than_twenty_is_insufficient_even_when_far_under():
    result = v.judge_percentile("t", [1.0] * 19, 95, 100.0, "TTFT")
    assert result["status"] == v.INSUFFICIENT_DATA and result["passed"] is None and result["n"] == 19


def test_a_client_bound_failure_is_inconclusive_not_an_engine_failure():
    result = v.judge_percentile("t", [500.0] * 40, 95, 100.0, "TTFT", client_bound_reasons=["held 30.3/32"])
    assert result["status"] == v.INCONCLUSIVE and "client-bound" in result["detail"]


def test_the_interval_is_reproducible_and_ratio_intervals_work():
    data = [float(i % 13) for i in range(100)]
    assert v.percentile_interval(data, 50) == v.percentile_interval(data, 50)
    low, high = v.ratio_interval([20.0 + i % 3 for i in range(50)], [10.0 + i % 3 for i in range(50)])
    assert 1.5 < low <= high < 2.5


def test_status_of_reads_old_verdicts_and_rejects_unknown_statuses():
    assert v.status_of({"passed": True}) == v.PASS and v.status_of({"passed": None}) == v.NOT_JUDGED
    with pytest.raises(ValueError, match="status"):
        v.verdict("x", "maybe", "")


def test_a_client_bound_failure_far_beyond_the_clients_lateness_stays_a_failure():
    far = v.judge_percentile(
        "t", [500.0] * 40, 95, 100.0, "TTFT", client_bound_reasons=["loop lag"], client_slack_ms=16
    )
    assert far["status"] == v.FAIL and "even allowing the client's 16.0 ms" in far["detail"]
    near = v.judge_percentile(
        "t", [110.0] * 40, 95, 100.0, "TTFT", client_bound_reasons=["loop lag"], client_slack_ms=16
    )
    assert near["status"] == v.INCONCLUSIVE


def test_a_pass_under_a_lagging_client_stands_only_when_the_load_was_held():
    held = v.judge_percentile("t", [50.0] * 40, 95, 100.0, "TTFT", client_bound_reasons=["loop lag"], load_held=True)
    assert held["status"] == v.PASS and "only adds latency" in held["detail"]
    short = v.judge_percentile("t", [50.0] * 40, 95, 100.0, "TTFT", client_bound_reasons=["held 30.3/32"])
    assert short["status"] == v.INCONCLUSIVE
