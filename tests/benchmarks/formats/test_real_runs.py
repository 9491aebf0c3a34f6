"""Files the real tools wrote against a mock with a known truth (TTFT 50 ms, 10 ms per token, 64
output tokens; fixtures README, "Issue 16"): what each parser derives, and what it refuses to.

The truth figures quoted are the mock's own log of every request it served.
"""

import gzip
import json

import pytest

from benchmarks.formats import FormatError, UnrecognisedFormat, detect_and_parse, detect_head

from .conftest import load

SLO = {"ttft_ms": 1000.0, "tpot_ms": 100.0}  # the SLO the runs were made with


def real(name):
    data = load(name)
    return gzip.decompress(data) if name.endswith(".gz") else data


def parse(name, **kwargs):
    return detect_and_parse(real(name), name.removesuffix(".gz"), **kwargs)


LEGACY = "vllm_legacy_0.8.5_benchmark_serving_c64_n500_chunks4.json.gz"
GUIDELLM_C64 = "guidellm_0.8.1_c64_max12s.benchmarks.json.gz"
GUIDELLM_C256 = "guidellm_0.8.1_c256_max6s.benchmarks.json.gz"
GUIDELLM_WARMUP = "guidellm_0.8.1_c64_max12s_warmup2_cooldown2.benchmarks.json.gz"
AIPERF_CANCEL = "aiperf_0.13.0_c64_n600_cancel10pct"


# --- item 1: legacy vLLM benchmark_serving.py ---------------------------------------------------


def test_legacy_vllm_chunks_of_four_tokens_still_give_exact_per_token_figures():
    # 15 gaps per request for 64 tokens (4 tokens per chunk): short lists, yet whole ones
    result = parse(LEGACY)
    point = result.points[0]
    assert point.e2e_ms.mean == pytest.approx(662.137, rel=1e-5)  # = the file's mean_e2el_ms
    assert point.tpot_ms.mean == pytest.approx(9.5366, rel=1e-4)
    assert point.itl_ms.mean == pytest.approx(9.5366, rel=1e-4)  # per token; truth 9.522
    assert point.extra["itl_chunk_ms"]["mean"] == pytest.approx(40.05, rel=1e-3)  # per chunk, kept apart
    assert result.requests["e2e_ms"].notna().all()


def legacy_with_cut_lists(keep_e2el=True):
    """The real file with every request's inter-token list cut to its first 2 gaps (as the issue's
    file must have been: a real run's lists always add up to its own mean TPOT)."""
    doc = json.loads(real(LEGACY))
    doc["itls"] = [gaps[:2] for gaps in doc["itls"]]
    if not keep_e2el:  # the script's default --percentile-metrics ttft,tpot,itl and --metric-percentiles 99
        doc = {k: v for k, v in doc.items() if "e2el" not in k and not k.startswith(("p50_", "p90_", "p95_"))}
    return detect_and_parse(json.dumps(doc).encode(), "benchmark_serving.json", slo=SLO)


def test_legacy_vllm_cut_lists_keep_the_tools_figures_and_derive_nothing():
    result = legacy_with_cut_lists()
    point = result.points[0]
    file = json.loads(real(LEGACY))
    assert point.e2e_ms.mean == file["mean_e2el_ms"] and point.e2e_ms.p90 == file["p90_e2el_ms"]
    assert point.tpot_ms.mean == file["mean_tpot_ms"] and point.tpot_ms.max is None  # no derived max
    assert point.itl_ms.mean == pytest.approx(9.5366, rel=1e-3)  # from the tool's mean e2e and TTFT
    frame = result.requests
    assert frame["e2e_ms"].isna().all() and frame["tpot_ms"].isna().all() and frame["ttft_ms"].notna().all()
    assert point.slo_attainment is None and point.goodput is None  # TPOT per request unknown: not a miss
    assert any("mean TPOT is 1.27 ms, the tool's is 9.537 ms" in note for note in result.notes)


def test_legacy_vllm_cut_lists_with_default_metrics_leave_e2e_and_itl_missing():
    # before: e2e 94 ms from ttft + the 2 gaps left, ITL 0.29 ms, TPOT p90/p95/max 40x too small
    point = legacy_with_cut_lists(keep_e2el=False).points[0]
    assert point.e2e_ms.is_empty() and point.itl_ms.is_empty()
    assert point.tpot_ms.mean == pytest.approx(9.5366, rel=1e-4) and point.tpot_ms.p99 is not None
    assert point.tpot_ms.p90 is None and point.tpot_ms.p95 is None and point.tpot_ms.max is None


def test_legacy_vllm_without_save_detailed_takes_everything_from_the_summary():
    result = parse("vllm_legacy_0.8.5_benchmark_serving_c64_n500_chunks4_summary_only.json")
    point = result.points[0]
    assert result.requests is None
    assert point.e2e_ms.mean == pytest.approx(663.2645, rel=1e-5)
    assert point.itl_ms.mean == pytest.approx(9.5382, rel=1e-4)  # truth 9.521


# --- item 2: guidellm 0.8 records vs totals -------------------------------------------------------


def test_guidellm_counts_records_as_its_totals_do_and_gives_tpot():
    # 978 successful and 62 incomplete records; guidellm's totals: 978 and 57
    result = parse(GUIDELLM_C64)
    point = result.points[0]
    assert point.requests_completed == 978 and point.extra["cancelled_in_flight"] == 57
    assert len(result.requests) == 978 + 57
    assert point.tpot_ms.mean == pytest.approx(10.0136, rel=1e-4)
    assert point.tpot_ms.mean == pytest.approx(10.034, rel=0.0025)  # the server's truth, within 0.25 %
    assert point.tpot_ms.p95 is not None
    assert not any("sampled" in note for note in result.notes)


def test_guidellm_warm_up_and_cool_down_records_are_left_out():
    # 964 successful records, 729 in guidellm's totals (the rest warm-up or cool-down)
    result = parse(GUIDELLM_WARMUP)
    point = result.points[0]
    assert point.requests_completed == 729 and int(result.requests["ok"].sum()) == 729
    assert point.tpot_ms.mean == pytest.approx(10.0233, rel=1e-4)  # truth 10.0285
    assert any("298 request records lie outside" in note for note in result.notes)


# --- item 3: requests cut at the end are not SLO misses ----------------------------------------------


def test_guidellm_requests_cut_at_the_end_are_not_slo_misses():
    point = parse(GUIDELLM_C64, slo=SLO).points[0]
    assert point.slo_attainment == 1.0  # before: 0.940 (cut requests counted as misses)
    # every success good: the goodput is the throughput (978 / 12.0 = 81.5 was above guidellm's own 81.33)
    assert point.goodput == pytest.approx(point.request_throughput) == pytest.approx(81.3333, rel=1e-5)
    assert point.extra["tool_goodput"] == pytest.approx(81.3333, rel=1e-5)  # guidellm's request_goodput
    assert point.extra["tool_slo_attainment"] == 1.0  # guidellm's own


@pytest.mark.parametrize(
    "name",
    [
        GUIDELLM_C64,
        GUIDELLM_C256,
        "guidellm_0.8.1_c64_max12s_warmup2_cooldown2.benchmarks.json.gz",
        "guidellm_0.7.4_c64_max10s.benchmarks.trimmed.json",
    ],
)
@pytest.mark.parametrize("slo", [SLO, {"ttft_ms": 500.0}, {"ttft_ms": 1.0}])
def test_guidellm_goodput_never_exceeds_the_request_throughput(name, slo):
    for point in parse(name, slo=slo).points:
        if point.goodput is not None:
            assert point.goodput <= point.request_throughput + 1e-9
            assert point.requests_failed == 0  # so the attainment is the good share of the successes
            assert point.goodput == pytest.approx(point.request_throughput * point.slo_attainment, rel=1e-9)


def test_guidellm_achieved_concurrency_is_guidellms_own_in_flight_mean():
    """Requests in flight of every status over guidellm's window, cancelled ones up to their cut: the
    figure guidellm reports as request_concurrency.total.mean in its real 0.8.1 files."""
    for name, own in ((GUIDELLM_C64, 58.27154682), (GUIDELLM_C256, 106.21514495)):
        assert parse(name).points[0].achieved_concurrency == pytest.approx(own, rel=1e-5)


def test_aiperf_client_cancellations_are_counted_apart_from_errors():
    records = detect_and_parse(
        real(AIPERF_CANCEL + ".profile_export.jsonl.gz"), "profile_export.jsonl", slo=SLO
    ).points[0]
    assert records.requests_completed == 537 and records.requests_failed == 0
    assert records.extra["cancelled_in_flight"] == 63 and records.error_rate == 0.0
    assert records.slo_attainment == 1.0  # aiperf's own good_request_fraction: 0.895
    summary = parse(AIPERF_CANCEL + ".profile_export_aiperf.json").points[0]
    assert summary.requests_failed == 0 and summary.extra["cancelled_in_flight"] == 63
    assert summary.error_rate == 0.0 and summary.slo_attainment == 1.0
    # the CSV does not say which errors were cancellations: counted as failed, and said so
    csv_result = parse(AIPERF_CANCEL + ".profile_export_aiperf.csv")
    assert csv_result.points[0].requests_failed == 63 and csv_result.points[0].error_rate == pytest.approx(0.105)
    assert any("cancelled" in note for note in csv_result.notes)


# --- item 6: achieved concurrency and client saturation ------------------------------------------


def test_vllm_achieved_concurrency_from_start_times_and_latencies():
    point = parse("vllm_0.33.0_bench_serve_c64_n1000.json.gz").points[0]
    assert point.achieved_concurrency == pytest.approx(62.47, rel=1e-3)  # the server saw 62.1
    assert point.client_bound is False and point.extra["client_bound_reasons"] == []
    assert point.extra["max_concurrent_requests"] == 192  # a 1-second bucket count, not a concurrency


def test_saturated_guidellm_and_aiperf_runs_are_client_bound():
    guidellm = parse(GUIDELLM_C256).points[0]
    assert guidellm.achieved_concurrency == pytest.approx(106.2, rel=1e-3)  # guidellm's own mean: 106.215
    assert guidellm.client_bound is True
    assert guidellm.extra["client_bound_reasons"] == ["held 106.2 requests in flight on average, 256 requested"]
    assert any(w.get("code") == "root_late" for w in guidellm.extra["warnings"])  # guidellm warned too
    aiperf = parse("aiperf_0.13.0_c256_dur8_grace0.profile_export_aiperf.json").points[0]
    assert aiperf.concurrency == 256 and aiperf.achieved_concurrency == pytest.approx(156.24, rel=1e-3)
    assert aiperf.client_bound is True


def test_held_concurrency_below_the_harness_share_is_client_bound_at_64_too():
    # guidellm held 58.3 of 64 (91 %), below the harness's 95 %: the server saw 57.0 in flight
    point = parse(GUIDELLM_C64).points[0]
    assert point.achieved_concurrency == pytest.approx(58.27, rel=1e-3)
    assert point.client_bound is True


def test_aiperf_records_give_the_concurrency_held_but_not_the_one_requested():
    result = detect_and_parse(real(AIPERF_CANCEL + ".profile_export.jsonl.gz"), "profile_export.jsonl")
    point = result.points[0]
    assert point.achieved_concurrency == pytest.approx(58.19, rel=1e-3)  # aiperf's effective_concurrency: 58.13
    assert point.concurrency is None and point.client_bound is None
    assert any("requested concurrency" in note for note in result.notes)


# --- item 7: a forced wrong parser is refused --------------------------------------------------------


@pytest.mark.parametrize("forced", ["aiperf", "genai-perf"])
def test_forcing_a_parser_onto_another_tools_file_is_refused(forced):
    with pytest.raises(FormatError, match="no request and no figure"):
        detect_and_parse(real(GUIDELLM_C64), "benchmarks.json", format=forced)


# --- item 9: figures the files hold -----------------------------------------------------------------


def test_guidellm_07_csv_has_the_concurrency_its_json_has():
    csv_point = parse("guidellm_0.7.4_c64_max10s.benchmarks.csv").points[0]
    json_point = parse("guidellm_0.7.4_c64_max10s.benchmarks.trimmed.json").points[0]
    assert csv_point.concurrency == json_point.concurrency == 64  # before: None from the CSV
    assert csv_point.label == "concurrent@64"
    assert csv_point.achieved_concurrency == pytest.approx(json_point.achieved_concurrency, rel=1e-9)


def test_aiperf_csv_error_rate_itl_and_concurrency():
    point = parse("aiperf_0.13.0_c64_n1000.profile_export_aiperf.csv").points[0]
    assert point.error_rate == 0.0 and point.requests_failed == 0  # before: None
    assert point.itl_ms.mean == pytest.approx(640514.58 / (64000 - 1000))  # Decode Duration sum / token gaps
    assert point.itl_ms.mean == pytest.approx(
        parse("aiperf_0.13.0_c64_n1000.profile_export_aiperf.json").points[0].itl_ms.mean, rel=1e-5
    )
    assert point.achieved_concurrency == pytest.approx(59.27)


def test_aiperf_jsonl_input_token_throughput():
    point = detect_and_parse(real(AIPERF_CANCEL + ".profile_export.jsonl.gz"), "profile_export.jsonl").points[0]
    summary = parse(AIPERF_CANCEL + ".profile_export_aiperf.json").points[0]
    assert point.input_token_throughput == pytest.approx(summary.input_token_throughput, rel=0.002)


# --- item 5: sniffing the head of an upload ---------------------------------------------------------


def test_the_head_of_a_large_file_of_zeros_is_refused_naming_every_format():
    with pytest.raises(UnrecognisedFormat) as refused:
        detect_head(bytes(65536), "results.json")
    assert "guidellm" in refused.value.refusals and "aiperf-jsonl" in refused.value.refusals


@pytest.mark.parametrize(
    "name,fmt",
    [
        (GUIDELLM_C64, "guidellm"),
        ("vllm_0.33.0_bench_serve_c64_n1000.json.gz", "vllm"),
        (AIPERF_CANCEL + ".profile_export.jsonl.gz", "aiperf-jsonl"),
        ("guidellm_0.7.4_c64_max10s.benchmarks.csv", "guidellm-csv"),
    ],
)
def test_the_head_of_a_real_file_is_accepted(name, fmt):
    assert detect_head(real(name)[:65536], name.removesuffix(".gz")).name == fmt


def test_uploads_are_judged_by_the_harness_rule():
    from benchmarks.harness import load_judging
    from benchmarks.result import CONCURRENCY_KEPT_FRACTION

    assert CONCURRENCY_KEPT_FRACTION == load_judging.CONCURRENCY_KEPT_FRACTION
