from benchmarks.harness.client_timing import client_slack_ms, load_held, rate_held
from benchmarks.result import LoadPoint


def point(**fields) -> LoadPoint:
    extra = fields.pop("extra", {})
    return LoadPoint(label="p", extra=extra, **fields)


def test_a_closed_loop_holds_its_load_from_95_percent_of_its_concurrency():
    assert load_held(point(concurrency=64, achieved_concurrency=60.8))
    assert not load_held(point(concurrency=64, achieved_concurrency=60.7))
    assert not load_held(point(concurrency=64))  # nothing achieved is not a held load


def test_an_open_loop_holds_its_rate_with_under_one_percent_of_late_sends():
    assert load_held(point(extra={"late_sends_fraction": 0.009}))
    assert not load_held(point(extra={"late_sends_fraction": 0.01}))
    assert rate_held(point(concurrency=64, achieved_concurrency=1, extra={}))  # unmeasured lateness: held
    assert not rate_held(point(concurrency=64, achieved_concurrency=64, extra={"late_sends_fraction": 0.2}))


def test_the_client_slack_is_its_largest_measured_lateness_and_missing_when_none_was_measured():
    assert (
        client_slack_ms(point(extra={"send_lateness_ms_p99": 3, "loop_lag_ms_p99": 12.5, "late_read_max_ms": 7}))
        == 12.5
    )
    assert client_slack_ms(point(extra={"loop_lag_ms_p99": None, "late_read_max_ms": 2})) == 2.0
    assert client_slack_ms(point(extra={})) is None
