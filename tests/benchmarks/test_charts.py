"""The shared chart module: valid, deterministic SVG with its labels, and the SIMULATED marker; one
colour per candidate across charts, no line through a single load, units that fit the data, labels
that neither clip nor overlap, and a prefix chart that explains itself."""

import re

import matplotlib
import pytest

from benchmarks.charts import candidates as candidate_charts
from benchmarks.charts import catalog as chart_catalog
from benchmarks.charts import phases as phase_charts
from benchmarks.charts import style as chart_style
from benchmarks.charts import traces as trace_charts
from tests.support.svg import colours_used, legend_colours, texts

SAMPLES = {
    "dimension_bars": lambda sim: candidate_charts.dimension_bars(
        {"vLLM": {"memory": 0.8, "context": None}, "SGLang": {"memory": 0.6, "context": 0.4}},
        gates={"memory": 0.5},
        labels={"memory": "内存 memory"},
        simulated=sim,
    ),
    "latency_vs_concurrency": lambda sim: candidate_charts.latency_vs_concurrency(
        {
            "vLLM": {"concurrency": [1, 8, 64], "ttft_ms": [50, 90, 900], "tpot_ms": [10, 12, 45]},
            "SGLang": {"concurrency": [1, 8, 64], "ttft_ms": [40, None, 700], "tpot_ms": [9, 11, 40]},
        },
        ttft_budget_ms=1000,
        tpot_budget_ms=50,
        simulated=sim,
    ),
    "kv_usage_over_time": lambda sim: candidate_charts.kv_usage_over_time(
        {"vLLM": [(0, 0.1), (10, 0.5), (20, 0.9)]}, limit=0.8, simulated=sim
    ),
    "ttft_vs_context": lambda sim: candidate_charts.ttft_vs_context(
        {"vLLM": [(16384, 300), (32768, 700), (131072, None)]}, simulated=sim
    ),
    "prefix_on_off": lambda sim: candidate_charts.prefix_on_off(
        {"vLLM": {"off": 40, "on": 12, "theoretical_on": 10}}, simulated=sim
    ),
    "soak_drift": lambda sim: candidate_charts.soak_drift(
        {"vLLM": [(0, 100), (3600, 110), (7200, 130)]}, simulated=sim
    ),
    "capacity_memory_vs_context": lambda sim: candidate_charts.capacity_memory_vs_context(
        [4096, 16384, 131072], {"weights + KV @ 16": [20, 30, 100]}, 80, headroom=0.2, simulated=sim
    ),
    "length_distribution": lambda sim: trace_charts.length_distribution(
        {
            "input tokens": {"edges": [1, 10, 100, 1000], "counts": [5, 50, 20]},
            "output tokens": {"edges": [], "counts": []},
        },
        simulated=sim,
    ),
    "arrival_rate": lambda sim: trace_charts.arrival_rate(
        [(0, 4.0), (60, 9.0), (120, 2.0)], mean_rps=5.0, simulated=sim
    ),
    "overload_steps": lambda sim: candidate_charts.overload_steps(
        {
            "vLLM": {
                "labels": ["↑ c=32", "↑ c=64", "↑ c=96", "↓ c=32"],
                "ttft_p95_ms": [340, 1200, 1850, 360],
                "failed": [0, 0, 3, 0],
                "rejected": [0, 0, 0, 0],
            },
            "SGLang": {
                "labels": ["↑ c=32", "↑ c=64", "↓ c=32"],
                "ttft_p95_ms": [390, None, 400],
                "failed": [0, 900, 0],
                "rejected": [0, 880, 0],
            },
        },
        ttft_budget_ms=1500,
        simulated=sim,
    ),
    "switch_timeline": lambda sim: phase_charts.switch_timeline(
        {
            "vLLM": {
                "points": [(0.5, 40), (1.0, 45), (2.2, 900), (2.6, 60), (4.1, 300), (4.5, 50)],
                "failed": [2.0, 2.1],
                "switch_at": 2.0,
                "rollback_at": 4.0,
            }
        },
        budget_ms=500,
        simulated=sim,
    ),
    "tenant_isolation": lambda sim: phase_charts.tenant_isolation(
        {
            "vLLM": {"alone": 40, "flood": 420, "alone_interval": [35, 48], "flood_interval": [380, 470]},
            "SGLang": {"alone": 38, "flood": None},
        },
        budget_ms=300,
        simulated=sim,
    ),
    "swap_phases": lambda sim: phase_charts.swap_phases(
        {
            "vLLM": {"warm": 54, "resume": 211, "recompute": 207, "resume_interval": [200, 220]},
            "SGLang": {"warm": 50, "resume": 60, "recompute": None},
        },
        simulated=sim,
    ),
}

EXPECTED_TEXT = {
    "dimension_bars": [
        "Score per dimension",
        "vLLM",
        "SGLang",
        "内存 memory",
        "context",
        "gate 0.50",
        "n/a",
        "score (0-1)",
    ],
    "latency_vs_concurrency": ["TTFT p95 (ms)", "TPOT p95 (ms)", "concurrency", "vLLM", "SGLang", "TTFT budget"],
    "kv_usage_over_time": ["KV-cache usage (%)", "time (s)", "limit 80%", "vLLM"],
    "ttft_vs_context": ["context length (tokens)", "16K", "32K", "128K", "TTFT p95 (ms)"],
    "prefix_on_off": ["off: measured with prefix caching off", "on: measured with prefix caching on", "theory:", "KV"],
    "soak_drift": ["elapsed (min)", "TTFT p99 (ms)", "vLLM"],
    "capacity_memory_vs_context": ["GPU memory 80 GiB", "20% headroom line 64.0 GiB", "memory (GiB)", "4K", "128K"],
    "length_distribution": ["input tokens", "output tokens", "tokens", "requests", "n/a"],
    "arrival_rate": ["time since the first request (s)", "requests per second", "mean 5 req/s"],
    "overload_steps": [
        "TTFT p95 (ms)",
        "failed requests",
        "↑ c=96",
        "↓ c=32",
        "rejected (HTTP 429/503)",
        "TTFT budget",
    ],
    "switch_timeline": ["TTFT (ms)", "time (s)", "switch", "rollback", "failed request", "TTFT budget 500 ms", "vLLM"],
    "tenant_isolation": ["tenant A TTFT p95 (ms)", "alone", "under the flood", "budget 300 ms", "n/a", "SGLang"],
    "swap_phases": [
        "TTFT p50 (ms)",
        "warm (resident)",
        "resumed after the pause",
        "recomputed (cache cleared)",
        "n/a",
        "SGLang",
    ],
}


def test_every_chart_has_a_sample():
    assert set(SAMPLES) == set(chart_catalog.CHARTS) == set(EXPECTED_TEXT)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_chart_is_valid_svg_with_its_labels(name):
    svg = SAMPLES[name](False)
    found = texts(svg)
    joined = " ".join(found)  # a wrapped label is one text per line
    for label in EXPECTED_TEXT[name]:
        assert label in joined, (name, label)
    assert chart_style.SIMULATED_LABEL not in svg


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_simulated_charts_carry_a_visible_label(name):
    found = texts(SAMPLES[name](True))
    assert "SIMULATED" in found  # the watermark
    assert any(t.endswith("(SIMULATED)") for t in found)  # the title
    assert any(t.startswith("SIMULATED data") for t in found)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_output_is_deterministic_and_undated(name):
    first, second = SAMPLES[name](True), SAMPLES[name](True)
    assert first == second
    assert "<dc:date>" not in first


def test_text_stays_text_with_a_cjk_capable_font_list():
    svg = SAMPLES["dimension_bars"](False)
    assert "内存 memory" in svg  # not converted to glyph paths
    assert "font-family: 'Noto Sans CJK SC'" in svg and "'DejaVu Sans'" in svg


def test_global_matplotlib_state_is_left_alone():
    before = (
        matplotlib.rcParams["svg.hashsalt"],
        matplotlib.rcParams["svg.fonttype"],
        list(matplotlib.rcParams["font.sans-serif"]),
    )
    SAMPLES["soak_drift"](True)
    after = (
        matplotlib.rcParams["svg.hashsalt"],
        matplotlib.rcParams["svg.fonttype"],
        list(matplotlib.rcParams["font.sans-serif"]),
    )
    assert before == after


def test_missing_score_is_shown_as_na_not_as_a_zero_bar():
    with_missing = candidate_charts.dimension_bars({"a": {"memory": 0.5, "context": None}})
    with_zero = candidate_charts.dimension_bars({"a": {"memory": 0.5, "context": 0.0}})
    assert "n/a" in texts(with_missing) and "n/a" not in texts(with_zero)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: candidate_charts.dimension_bars({"a": {"memory": 1.5}}),
            "scores['a']['memory']: must be in [0, 1], got 1.5",
        ),
        (lambda: candidate_charts.dimension_bars({}), "scores: expected a non-empty mapping"),
        (
            lambda: candidate_charts.latency_vs_concurrency(
                {"a": {"concurrency": [1, 2], "ttft_ms": [1], "tpot_ms": [1, 2]}}
            ),
            "series['a'].ttft_ms: length 1 does not match concurrency length 2",
        ),
        (lambda: candidate_charts.kv_usage_over_time({"a": [(0, 0.1, 3)]}), "series['a'][0]: expected an (x, y) pair"),
        (lambda: candidate_charts.ttft_vs_context({"a": [(0, 10)]}), "series['a']: context lengths must be positive"),
        (
            lambda: candidate_charts.capacity_memory_vs_context([1024], {"m": [1]}, 80, headroom=1.2),
            "headroom: must be in [0, 1)",
        ),
        (
            lambda: candidate_charts.capacity_memory_vs_context([1024, 2048], {"m": [1]}, 80),
            "memory_gib['m']: length 1 does not match",
        ),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(chart_style.ChartInputError) as info:
        call()
    assert message in str(info.value)


def test_chart_texts_follow_the_translator_and_default_to_english():
    series = {"vLLM": {"concurrency": [1, 2], "ttft_ms": [10, 20], "tpot_ms": [5, 6]}}
    assert ">concurrency<" in candidate_charts.latency_vs_concurrency(series)
    with chart_style.translated(lambda text: {"concurrency": "并发"}.get(text, text)):
        svg = candidate_charts.latency_vs_concurrency(series)
    assert "并发" in svg and ">concurrency<" not in svg
    assert ">concurrency<" in candidate_charts.latency_vs_concurrency(series)  # the translator is scoped


# --------------------------------------------------------------------------- issue 19: honest charts

CANDIDATES = ["vLLM prefix on", "SGLang radix", "llama.cpp slots"]
COLOURS = chart_style.candidate_colours(CANDIDATES)


def test_candidates_take_distinct_colours_in_their_order_and_no_reference_colour():
    assert list(COLOURS) == CANDIDATES
    assert len(set(COLOURS.values())) == 3
    assert list(COLOURS.values()) == chart_style.PALETTE[:3]
    assert chart_style.REFERENCE not in chart_style.PALETTE and chart_style.REFERENCE_SOFT not in chart_style.PALETTE


def test_a_candidate_keeps_its_colour_in_every_chart_whichever_candidates_the_chart_holds():
    """The same mapping passed to every chart: llama.cpp is green in the bars where all three are
    drawn and in the charts that hold it alone (before, the first series of a chart was always blue)."""
    third, second = CANDIDATES[2], CANDIDATES[1]
    drawn = {
        "bars": candidate_charts.dimension_bars(
            {c: {"memory": 0.5, "cost": 0.4} for c in reversed(CANDIDATES)}, colours=COLOURS
        ),  # the comparison's columns are by rank: any order
        "latency": candidate_charts.latency_vs_concurrency(
            {third: {"concurrency": [1, 8], "ttft_ms": [50, 90], "tpot_ms": [10, 12]}}, colours=COLOURS
        ),
        "kv": candidate_charts.kv_usage_over_time({second: [(0, 0.1), (5, 0.5)]}, colours=COLOURS),
        "ladder": candidate_charts.ttft_vs_context({third: [(1024, 30), (8192, 90)]}, colours=COLOURS),
        "soak": candidate_charts.soak_drift(
            {second: [(0, 100), (15, 130)], third: [(0, 90), (15, 95)]}, colours=COLOURS
        ),
    }
    for name, svg in drawn.items():
        legend = legend_colours(svg)
        shown = [c for c in CANDIDATES if c in legend]
        assert shown, name
        for candidate in shown:
            assert legend[candidate] == COLOURS[candidate].lower(), (name, candidate, legend)
    prefix = candidate_charts.prefix_on_off({third: {"off": 40, "on": 12}}, colours=COLOURS)
    assert COLOURS[third].lower() in colours_used(prefix)
    assert COLOURS[CANDIDATES[0]].lower() not in colours_used(prefix)
    memory = candidate_charts.capacity_memory_vs_context(
        [1024, 4096], {"a": [1, 2], "b": [2, 3]}, 80, colour=COLOURS[second]
    )
    assert set(legend_colours(memory).values()) - {
        chart_style.REFERENCE.lower(),
        chart_style.REFERENCE_SOFT.lower(),
    } == {COLOURS[second].lower()}


def test_a_series_the_mapping_does_not_name_never_takes_a_candidates_colour():
    colours = chart_style.series_colours(["SGLang radix", "an upload's own label"], COLOURS)
    assert colours["SGLang radix"] == COLOURS["SGLang radix"]
    assert colours["an upload's own label"] not in COLOURS.values()


def test_one_load_per_candidate_draws_bars_not_a_line_through_one_point():
    svg = candidate_charts.latency_vs_concurrency(
        {
            "vLLM": {"concurrency": [32], "ttft_ms": [120], "tpot_ms": [20]},
            "SGLang": {"concurrency": [32], "ttft_ms": [90], "tpot_ms": [None]},
        },
        ttft_budget_ms=800,
    )
    found = texts(svg)
    assert "at concurrency 32" in found and "concurrency" not in found  # no axis "against concurrency"
    assert "n/a" in found  # the missing TPOT is said, not drawn as 0
    assert set(legend_colours(svg)) == {"vLLM", "SGLang", "TTFT budget"}
    lines = candidate_charts.latency_vs_concurrency(
        {"vLLM": {"concurrency": [1, 32], "ttft_ms": [50, 120], "tpot_ms": [9, 20]}}
    )
    assert "concurrency" in texts(lines) and "at concurrency 32" not in texts(lines)


@pytest.mark.parametrize(
    "end_s, label",
    [(15, "elapsed (s)"), (180, "elapsed (s)"), (1800, "elapsed (min)"), (4 * 3600, "elapsed (h)")],
)
def test_the_soak_axis_reads_in_the_unit_that_fits_its_length(end_s, label):
    found = texts(candidate_charts.soak_drift({"vLLM": [(0, 100), (end_s, 110)]}))
    assert label in found
    ticks = [float(t.replace("−", "-")) for t in found if re.fullmatch(r"−?\d+(\.\d+)?", t)]
    assert max(ticks) >= 1  # a 15 s soak reads 0-15, not 0.000-0.004


def test_time_axes_of_kv_usage_and_arrivals_fit_the_span_too():
    assert "time (s)" in texts(candidate_charts.kv_usage_over_time({"a": [(0, 0.1), (15, 0.2)]}))
    assert "time (h)" in texts(candidate_charts.kv_usage_over_time({"a": [(0, 0.1), (6 * 3600, 0.2)]}))
    assert "time since the first request (min)" in texts(trace_charts.arrival_rate([(0, 1.0), (1200, 2.0)]))


@pytest.mark.parametrize(
    "tokens, label",
    [(512, "512"), (1000, "1000"), (1024, "1K"), (1536, "1.5K"), (131072, "128K"), (1048576, "1M")],
)
def test_token_counts_read_as_numbers_an_architect_types(tokens, label):
    assert chart_style.token_label(tokens) == label


def test_context_ticks_never_repeat_a_label_or_crowd_each_other():
    svg = candidate_charts.ttft_vs_context(
        {"a": [(1000, 30), (1024, 31), (1100, 32), (1536, 35), (2048, 40), (131072, 900)]}
    )
    ticks = [t for t in texts(svg) if re.fullmatch(r"\d+(\.\d+)?[KM]?", t)]
    token_ticks = [t for t in ticks if t.endswith(("K", "M")) or int(float(t)) >= 1000]
    assert len(token_ticks) == len(set(token_ticks)), token_ticks  # no "1K1K"
    assert "128K" in token_ticks  # the longest rung is always labelled
    kept = chart_style.thinned_log_ticks([1000, 1024, 1100, 1536, 2048, 131072])
    assert all(b / a >= 2**0.4 for a, b in zip(kept, kept[1:], strict=False)), kept


def test_long_labels_wrap_instead_of_clipping():
    assert chart_style.wrap("Memory allocation and reuse", 16) == "Memory\nallocation and\nreuse"
    assert all(
        chart_style.display_width(line) <= 16
        for line in chart_style.wrap("内存分配与复用维度的得分情况说明", 16).split("\n")
    )
    long = "Support-bot-" + "x" * 60
    assert all(len(line) <= 16 for line in chart_style.wrap(long, 16).split("\n"))
    svg = candidate_charts.dimension_bars(
        {"vLLM": {"memory": 0.5, "scheduling": 0.4}},
        labels={"memory": "Memory allocation and reuse", "scheduling": "Concurrency scheduling and isolation"},
    )
    found = texts(svg)
    assert "Memory" in found and "reuse" in found  # the whole label, on lines
    width, height = (float(v) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
    for x, y in re.findall(r'<text[^>]* x="(-?[\d.]+)" y="(-?[\d.]+)"', svg):
        assert 0 <= float(x) <= width and 0 <= float(y) <= height  # nothing drawn outside the picture


def test_the_prefix_chart_says_what_each_mark_is_and_when_caching_made_it_worse():
    better = texts(candidate_charts.prefix_on_off({"vLLM": {"off": 40000, "on": 12000, "theoretical_on": 10000}}))
    joined = " ".join(better)
    assert "off: measured with prefix caching off" in joined
    assert "theory: the shared prefix held once" in joined
    assert "−70%" in better and "worse" not in joined
    worse = " ".join(
        texts(candidate_charts.prefix_on_off({"SGLang": {"off": 20000, "on": 23000, "off_modelled": True}}))
    )
    assert "+15%: worse with caching" in worse
    assert "off (modelled): every request holds its own copy" in worse
    assert chart_style.WORSE.lower() in colours_used(
        candidate_charts.prefix_on_off({"SGLang": {"off": 20000, "on": 23000}})
    )


def test_a_cached_chart_is_never_served_in_another_language():
    """benchmarks.presentation caches drawn charts: the language they were drawn in is part of the key."""
    from benchmarks.presentation import chart_svg

    series = {"a": {"concurrency": [1, 2], "ttft_ms": [1, 2], "tpot_ms": [1, 2]}}
    assert ">concurrency<" in chart_svg("latency_vs_concurrency", series=series)
    with chart_style.translated(lambda text: {"concurrency": "并发"}.get(text, text), language=lambda: "zh-hans"):
        assert "并发" in chart_svg("latency_vs_concurrency", series=series)
    assert ">concurrency<" in chart_svg("latency_vs_concurrency", series=series)


def test_the_prefix_chart_draws_the_every_request_its_own_theory_and_says_when_off_was_not_run():
    measured = " ".join(
        texts(
            candidate_charts.prefix_on_off(
                {"vLLM": {"off": 18000, "on": 6000, "theory_own": 18432, "theoretical_on": 6912}}
            )
        )
    )
    assert "theory: every request allocates its own prompt" in measured and "−67%" in measured
    theory_only = " ".join(
        texts(candidate_charts.prefix_on_off({"SGLang": {"off": None, "on": 6000, "theory_own": 18000}}))
    )
    assert "off not run" in theory_only and "−67% vs theory" in theory_only
    assert "no caching-off run: the change is against it" in theory_only
