"""Shaping run data for the pages: load axis, percentile rows, chart series, progress, parameters."""

import ast
import pathlib

import pytest

from benchmarks import presentation as p


def test_percentile_rows_say_why_a_point_is_client_bound():
    reasons = [
        "client process needed 97% of a core (ran 60%, waited for one 37%): the client, not the engine, set the pace"
    ]
    rows = p.percentile_rows(
        [
            {"concurrency": 256, "client_bound": True, "extra": {"client_bound_reasons": reasons}},
            {"concurrency": 64, "client_bound": False},
        ]
    )
    assert rows[0]["client_bound_reasons"] == reasons and rows[1]["client_bound_reasons"] == []


def test_point_load_prefers_requested_concurrency_then_achieved_then_rate():
    assert p.point_x({"concurrency": 8, "achieved_concurrency": 7.5}, 0) == (8.0, "concurrency")
    assert p.point_x({"achieved_concurrency": 7.5}, 0) == (7.5, "concurrency")
    assert p.point_x({"request_rate": 2.0}, 0) == (2.0, "rate")
    assert p.point_x({"request_rate": None}, 3) == (4.0, "index")


def test_percentile_rows_keep_missing_as_none_not_zero():
    rows = p.percentile_rows([{"concurrency": 4, "ttft_ms": {"p50": 10.0, "p99": float("nan")}, "tpot_ms": None}])
    assert rows[0]["ttft_ms"]["p50"] == 10.0 and rows[0]["ttft_ms"]["p99"] is None
    assert rows[0]["tpot_ms"] == {k: None for k in ("mean", "p50", "p90", "p95", "p99", "max")}


def test_latency_series_sorted_by_load_and_empty_without_latencies():
    points = [{"concurrency": 32, "ttft_ms": {"p95": 300}, "tpot_ms": {}}, {"concurrency": 8, "ttft_ms": {"p95": 100}}]
    series = p.latency_series("vLLM", points)
    assert series == {"vLLM": {"concurrency": [8.0, 32.0], "ttft_ms": [100.0, 300.0], "tpot_ms": [None, None]}}
    assert p.latency_series("vLLM", [{"concurrency": 8}]) == {}


def test_chart_percentile_falls_back_when_the_tool_has_no_p95():
    assert p.chart_percentile([{"ttft_ms": {"p50": 1, "p99": 2}}]) == "p99"
    assert p.chart_percentile([{"ttft_ms": {"p95": 1}}, {"tpot_ms": {"p50": 2}}]) == "p95"
    assert p.chart_percentile([{"ttft_ms": {}}]) is None
    assert p.latency_series("x", [{"concurrency": 2, "ttft_ms": {"p99": 32.8}}])["x"]["ttft_ms"] == [32.8]


def test_kv_series_picks_kv_usage_only():
    series = p.kv_series(
        {
            "kv_usage_ratio": [[0, 0.1], [1, 0.2]],
            "prefix_off.kv_usage_ratio": [[0, 0.3]],
            "running": [[0, 4]],
            "kv_usage_ratio_extra": [[0, 1]],
        }
    )
    assert set(series) == {"kv_usage_ratio", "prefix_off.kv_usage_ratio"}


def test_definitions_show_kvselect_and_the_tools_original():
    rows = {r["metric"]: r for r in p.definition_rows({"tpot_ms": "incl. first token", "tool_only": "x"})}
    assert (
        rows["tpot_ms"]["original"] == "incl. first token" and "excludes the first token" in rows["tpot_ms"]["kvselect"]
    )
    assert rows["ttft_ms"]["original"] == "" and rows["tool_only"]["kvselect"] == ""


@pytest.mark.parametrize(
    "progress, status, terminal, percent",
    [
        ({"percent": 42.54}, "running", False, 42.5),
        ({"percent": 180}, "running", False, 100.0),
        ({"percent": None}, "queued", False, 0.0),
        ({"percent": 60}, "succeeded", True, 100.0),
        ({"percent": 60}, "cancelled", True, 60.0),
        (None, "queued", False, 0.0),
    ],
)
def test_progress_percent_is_clamped_and_complete_on_success(progress, status, terminal, percent):
    view = p.progress_view(progress, status, terminal)
    assert view["percent"] == percent and view["terminal"] is terminal and view["phase"]


@pytest.mark.parametrize(
    "default, kind",
    [
        (True, "bool"),
        (8, "int"),
        (0.5, "float"),
        ([16384, 32768], "int_list"),
        ([0.5, 1], "float_list"),
        (None, "json"),
        ({"a": 1}, "json"),
        ("x", "text"),
    ],
)
def test_param_kind_follows_the_planned_value(default, kind):
    assert p.param_kind(default) == kind


def test_params_round_trip_through_the_form_text():
    for value, kind in (([16384, 32768], "int_list"), ([0.5, 1.5], "float_list"), ({"a": [1]}, "json")):
        assert p.parse_param(p.format_param(value, kind), kind) == value
    assert p.parse_param("", "json") is None


@pytest.mark.parametrize(
    "raw, kind, code",
    [
        ("", "int_list", "empty_list"),
        ("16K, 32K", "int_list", "not_numbers"),
        ("0, 5", "int_list", "not_positive"),
        ("{bad", "json", "bad_json"),
    ],
)
def test_bad_parameter_text_has_an_error_code(raw, kind, code):
    with pytest.raises(p.ParamError) as error:
        p.parse_param(raw, kind)
    assert error.value.code == code


def test_the_translatable_definitions_are_kvselects_definitions():
    from benchmarks.result import DEFINITIONS

    assert p.DEFINITION_TITLES == DEFINITIONS


def test_criteria_are_named_in_words_with_their_status():
    rows = p.criterion_rows(
        [
            {"name": "tpot_p95_within_budget[prefix_on]", "passed": False, "detail": "p95 70 ms vs budget 50 ms"},
            {"name": "kv_back_to_baseline_after_aborts", "passed": None},
            {"name": "a_new_criterion", "passed": True},
        ]
    )
    assert [(r["title"], r["qualifier"], r["status"]) for r in rows] == [
        ("TPOT p95 within the budget", "prefix caching on", "fail"),
        ("KV usage back to its baseline after aborted requests", "", "not_judged"),
        ("a new criterion", "", "pass"),  # words, never an identifier
    ]


@pytest.mark.parametrize(
    "verdicts, overall",
    [
        ([{"passed": True}, {"passed": True}], "pass"),
        ([{"passed": True}, {"passed": False}], "fail"),
        ([{"passed": True}, {"passed": None}], "inconclusive"),
        ([{"passed": None}], "insufficient_data"),
        ([], "insufficient_data"),
        (None, "insufficient_data"),
        ([{"status": "pass", "passed": True}, {"status": "not_exercised", "passed": None}], "inconclusive"),
        ([{"status": "not_exercised", "passed": None}], "insufficient_data"),
        ([{"status": "pass", "passed": True}, {"status": "inconclusive", "passed": None}], "inconclusive"),
        ([{"status": "insufficient_data", "passed": None}, {"status": "fail", "passed": False}], "fail"),
    ],
)
def test_a_runs_overall_verdict(verdicts, overall):
    assert p.run_verdict(verdicts) == overall


def test_the_observed_line_is_labelled_simulated_and_empty_for_uploads():
    metadata = {"observed": {"line": "evicted 12 of 16 idle sessions (n=16)"}}
    assert p.observed_line(metadata, simulated=True) == "SIMULATED — evicted 12 of 16 idle sessions (n=16)"
    assert p.observed_line(metadata, simulated=False) == "evicted 12 of 16 idle sessions (n=16)"
    assert p.observed_line({}, simulated=False) == "" and p.observed_line(None, simulated=True) == ""


def test_criterion_rows_carry_status_sample_size_and_interval():
    (row,) = p.criterion_rows(
        [{"name": "ttft_p95_within_budget", "status": "inconclusive", "passed": None, "n": 40, "interval": [9, 12]}]
    )
    assert row["status"] == "inconclusive" and row["n"] == 40 and row["interval"] == [9, 12]


# ------------------------------------------------------------------ issue 27: what a test judged, in words


def test_every_verdict_the_harness_writes_has_words():
    """Every verdict name the workloads pass to `verdict` or `make_verdict` is in the label table."""
    root = pathlib.Path(p.__file__).parent / "harness"
    names = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "verdict",
                "make_verdict",
            ):
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    assert names and sorted(names - set(p.CRITERION_TITLES)) == []


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("continuation_identical", "Resumed sessions continue exactly as without the pause"),
        ("ttft_p95_within_budget[tenant_a_flood]", "TTFT p95 within the budget (tenant A under the flood)"),
        ("zero_errors[short]", "No failed requests (short requests)"),
        ("short_traffic_isolated[65536 alone]", "Short requests unaffected by the long one (65536 alone)"),
        ("something_new", "something new"),
    ],
)
def test_a_verdict_name_reads_in_words(name, words):
    assert p.verdict_label(name) == words


def test_statuses_read_in_words_and_translate():
    assert p.status_label("insufficient_data") == "insufficient data"
    assert p.status_label("not_exercised", translate=str.upper) == "NOT EXERCISED"


def test_a_judged_row_shows_the_figure_its_limit_n_and_interval():
    (row,) = p.judged_rows(
        [
            {
                "name": "resume_cheaper_than_recompute",
                "status": "fail",
                "value": 1.0213,
                "threshold": 0.8,
                "n": 20,
                "interval": [0.981, 1.064],
                "detail": "ratio 1.02",
            }
        ]
    )
    assert row == {
        "criterion": "Resuming an evicted session is cheaper than recomputing it",
        "status": "fail",
        "outcome": "fail",
        "value": "1.02",
        "threshold": "0.8",
        "n": 20,
        "interval": "0.981–1.06",
        "detail": "ratio 1.02",
    }


def test_the_swap_table_is_warm_resumed_and_recomputed_never_the_pressure():
    points = [
        {"label": "warm", "ttft_ms": {"p50": 50.0}, "requests_completed": 20},
        {"label": "resume", "ttft_ms": {"p50": 196.0}, "requests_completed": 20},
        {"label": "recompute", "ttft_ms": {"p50": 192.0}, "requests_completed": 20},
        {"label": "pressure", "ttft_ms": {"p95": 3895.0}, "concurrency": 32, "requests_completed": 900},
    ]
    rows = p.result_figures("swap_recovery", points, {})
    assert [(r["name"], r["value"], r["n"]) for r in rows] == [
        ("TTFT p50, warm (history still resident)", "50.0", 20),
        ("TTFT p50, resumed after the pause", "196", 20),
        ("TTFT p50, recomputed (cache cleared)", "192", 20),
    ]
    assert not any("3,895" in r["value"] for r in rows)


def test_the_prefix_table_is_caching_on_against_off():
    observed = {
        "kv_peak_on_tokens": 6912,
        "kv_peak_off_tokens": 18432,
        "kv_samples_on": 10,
        "kv_samples_off": 9,
        "ttft_p50_on_ms": 40.0,
        "ttft_p50_off_ms": 120.0,
        "requests_on": 64,
        "requests_off": 64,
        "ttft_p50_on_over_off": 0.33,
        "ttft_p50_on_over_off_interval": [0.3, 0.37],
        "memory_saving": 0.625,
    }
    rows = {r["name"]: r for r in p.result_figures("prefix_reuse", [], {"observed": observed})}
    assert rows["peak KV tokens, prefix caching on"] == {
        "name": "peak KV tokens, prefix caching on",
        "value": "6,912",
        "unit": "tokens",
        "n": 10,
        "interval": "",
    }
    assert rows["peak KV tokens, prefix caching off"]["value"] == "18,432"
    assert rows["TTFT p50 on / off"]["interval"] == "0.3–0.37"
    assert rows["memory saving with prefix caching"]["value"] == "62.5"
    # an off run that was not made is missing, never a figure
    rows = {r["name"]: r for r in p.result_figures("prefix_reuse", [], {"observed": {"kv_peak_on_tokens": 10}})}
    assert rows["peak KV tokens, prefix caching off"]["value"] == "—"


def test_the_long_context_table_has_one_row_per_rung_never_one_request():
    points = [
        {
            "label": "16384 alone",
            "extra": {"input_tokens_requested": 16384},
            "ttft_ms": {"p50": 900.0},
            "requests_completed": 3,
        },
        {"label": "16384 with_background", "extra": {"input_tokens_requested": 16384}, "ttft_ms": {"p50": 950.0}},
        {
            "label": "32768 alone",
            "extra": {"input_tokens_requested": 32768},
            "ttft_ms": {"p50": None},
            "requests_completed": 0,
            "requests_failed": 3,
        },
    ]
    rows = p.result_figures("long_context", points, {})
    assert [(r["name"], r["value"], r["n"]) for r in rows] == [
        ("TTFT p50, 16K-token input alone", "900", 3),
        ("TTFT p50, 32K-token input alone", "—", 0),
        ("32K-token input alone: failed requests", "3", None),
    ]


def test_other_tests_show_their_heaviest_load_level_with_its_requests():
    points = [
        {"label": "c=32", "concurrency": 32, "ttft_ms": {"p95": 410.0}, "error_rate": 0.0, "requests_completed": 320},
        {"label": "short", "extra": {"traffic_group": "short"}, "ttft_ms": {"p95": 90.0}},
    ]
    rows = p.result_figures("concurrency_stress", points, {})
    assert [(r["name"], r["value"], r["n"]) for r in rows] == [("TTFT p95", "410.0", 320), ("error rate", "0", 320)]


def test_traffic_groups_are_series_of_their_own_never_joined_to_a_load_point():
    """The walk's M3: the run page read "21.17 · 2 req/s", "2 · short", "2 · long" and drew the groups at
    x = 2 joined by a line to the overall point at x = 21."""
    points = [
        {"achieved_concurrency": 21.17, "request_rate": 2.0, "ttft_ms": {"p95": 400.0}, "tpot_ms": {"p95": 30.0}},
        {"label": "short", "concurrency": 2, "ttft_ms": {"p95": 150.0}, "extra": {"traffic_group": "short"}},
        {"label": "long", "concurrency": 2, "ttft_ms": {"p95": 900.0}, "extra": {"traffic_group": "long"}},
    ]
    series = p.latency_series("vLLM", points, translate=str.upper)
    assert list(series) == ["vLLM", "vLLM · SHORT REQUESTS", "vLLM · LONG REQUESTS"]
    assert series["vLLM"]["concurrency"] == [21.17] and series["vLLM"]["ttft_ms"] == [400.0]
    assert series["vLLM · SHORT REQUESTS"] == {"concurrency": [2.0], "ttft_ms": [150.0], "tpot_ms": [None]}


def test_provenance_lists_labels_and_keeps_structures_as_json_never_as_flattened_prose():
    rows = p.provenance_rows(
        {
            "engine": "vllm",
            "kv_after": {"kv_usage_ratio": 0.0, "swap_in": 0},
            "odd_key_here": 3,
            "pace_independent": ["prefix_saving_ratio"],
        },
        translate=str.upper,
    )
    by_key = {row["key"]: row for row in rows}
    assert by_key["engine"] == {"key": "engine", "label": "ENGINE", "value": "vllm", "figures": [], "json": ""}
    # a list of measured figures: each by its name, its key beside it (the page sets it as code)
    assert by_key["pace_independent"]["figures"] == [{"key": "prefix_saving_ratio", "name": "PREFIX-REUSE SAVING"}]
    assert by_key["pace_independent"]["value"] is None
    assert by_key["kv_after"]["label"] == "KV CACHE AFTER THE LOAD" and by_key["kv_after"]["value"] is None
    assert '"kv_usage_ratio": 0.0' in by_key["kv_after"]["json"]  # for a code block, not "kv_usage_ratio: 0"
    assert by_key["odd_key_here"]["label"] == "Odd key here"  # words, never the identifier


def test_load_point_labels_read_as_words():
    assert p.point_label("first_window") == "first window"
    assert p.point_label("16K with_background", translate=str.upper) == "16K WITH BACKGROUND TRAFFIC"
    assert p.point_label("c=32") == "c=32" and p.point_label("4 req/s") == "4 req/s"
    assert p.point_label("some_new_phase") == "some new phase"
    rows = p.percentile_rows([{"concurrency": 16, "label": "prefix_on"}])
    assert rows[0]["label"] == "prefix caching on"


def test_a_verdict_detail_written_as_a_message_is_rendered_in_the_pages_language():
    from benchmarks import verdicts

    judged = verdicts.judge_percentile("ttft_p95_within_budget", [10.0] * 5, 95, 100.0, "TTFT")
    assert judged["detail"].startswith("TTFT p95 from 5 requests: at least 20 are needed")  # the API's English
    rows = p.criterion_rows([judged], render_message=lambda value: "rendered" if isinstance(value, dict) else value)
    assert rows[0]["detail"] == "rendered"
    assert p.criterion_rows([{"name": "zero_errors", "passed": True, "detail": "old text"}])[0]["detail"] == "old text"
