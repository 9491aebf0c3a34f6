"""The shared chart module: valid, deterministic SVG with its labels, and the SIMULATED marker."""

import xml.etree.ElementTree as ET

import matplotlib
import pytest

from benchmarks import charts

SVG = "{http://www.w3.org/2000/svg}"

SAMPLES = {
    "dimension_bars": lambda sim: charts.dimension_bars(
        {"vLLM": {"memory": 0.8, "context": None}, "SGLang": {"memory": 0.6, "context": 0.4}},
        gates={"memory": 0.5},
        labels={"memory": "内存 memory"},
        simulated=sim,
    ),
    "latency_vs_concurrency": lambda sim: charts.latency_vs_concurrency(
        {
            "vLLM": {"concurrency": [1, 8, 64], "ttft_ms": [50, 90, 900], "tpot_ms": [10, 12, 45]},
            "SGLang": {"concurrency": [1, 8, 64], "ttft_ms": [40, None, 700], "tpot_ms": [9, 11, 40]},
        },
        ttft_budget_ms=1000,
        tpot_budget_ms=50,
        simulated=sim,
    ),
    "kv_usage_over_time": lambda sim: charts.kv_usage_over_time(
        {"vLLM": [(0, 0.1), (10, 0.5), (20, 0.9)]}, limit=0.8, simulated=sim
    ),
    "ttft_vs_context": lambda sim: charts.ttft_vs_context(
        {"vLLM": [(16384, 300), (32768, 700), (131072, None)]}, simulated=sim
    ),
    "prefix_on_off": lambda sim: charts.prefix_on_off(
        {"vLLM": {"off": 40, "on": 12, "theoretical_on": 10}}, simulated=sim
    ),
    "soak_drift": lambda sim: charts.soak_drift({"vLLM": [(0, 100), (3600, 110), (7200, 130)]}, simulated=sim),
    "capacity_memory_vs_context": lambda sim: charts.capacity_memory_vs_context(
        [4096, 16384, 131072], {"weights + KV @ 16": [20, 30, 100]}, 80, headroom=0.2, simulated=sim
    ),
    "length_distribution": lambda sim: charts.length_distribution(
        {
            "input tokens": {"edges": [1, 10, 100, 1000], "counts": [5, 50, 20]},
            "output tokens": {"edges": [], "counts": []},
        },
        simulated=sim,
    ),
    "arrival_rate": lambda sim: charts.arrival_rate([(0, 4.0), (60, 9.0), (120, 2.0)], mean_rps=5.0, simulated=sim),
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
    "prefix_on_off": ["prefix caching off", "prefix caching on", "theoretical with reuse", "KV memory (GiB)"],
    "soak_drift": ["elapsed (h)", "TTFT p99 (ms)", "vLLM"],
    "capacity_memory_vs_context": ["GPU memory 80 GiB", "20% headroom line 64.0 GiB", "memory (GiB)", "4K", "128K"],
    "length_distribution": ["input tokens", "output tokens", "tokens", "requests", "n/a"],
    "arrival_rate": ["time since the first request (s)", "requests per second", "mean 5 req/s"],
}


def texts(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG}svg"
    return ["".join(node.itertext()) for node in root.iter(f"{SVG}text")]


def test_every_chart_has_a_sample():
    assert set(SAMPLES) == set(charts.CHARTS) == set(EXPECTED_TEXT)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_chart_is_valid_svg_with_its_labels(name):
    svg = SAMPLES[name](False)
    found = texts(svg)
    joined = "\n".join(found)
    for label in EXPECTED_TEXT[name]:
        assert label in joined, (name, label)
    assert charts.SIMULATED_LABEL not in svg


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
    with_missing = charts.dimension_bars({"a": {"memory": 0.5, "context": None}})
    with_zero = charts.dimension_bars({"a": {"memory": 0.5, "context": 0.0}})
    assert "n/a" in texts(with_missing) and "n/a" not in texts(with_zero)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: charts.dimension_bars({"a": {"memory": 1.5}}), "scores['a']['memory']: must be in [0, 1], got 1.5"),
        (lambda: charts.dimension_bars({}), "scores: expected a non-empty mapping"),
        (
            lambda: charts.latency_vs_concurrency({"a": {"concurrency": [1, 2], "ttft_ms": [1], "tpot_ms": [1, 2]}}),
            "series['a'].ttft_ms: length 1 does not match concurrency length 2",
        ),
        (lambda: charts.kv_usage_over_time({"a": [(0, 0.1, 3)]}), "series['a'][0]: expected an (x, y) pair"),
        (lambda: charts.ttft_vs_context({"a": [(0, 10)]}), "series['a']: context lengths must be positive"),
        (
            lambda: charts.capacity_memory_vs_context([1024], {"m": [1]}, 80, headroom=1.2),
            "headroom: must be in [0, 1)",
        ),
        (
            lambda: charts.capacity_memory_vs_context([1024, 2048], {"m": [1]}, 80),
            "memory_gib['m']: length 1 does not match",
        ),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(charts.ChartInputError) as info:
        call()
    assert message in str(info.value)


def test_chart_texts_follow_the_translator_and_default_to_english():
    series = {"vLLM": {"concurrency": [1, 2], "ttft_ms": [10, 20], "tpot_ms": [5, 6]}}
    assert ">concurrency<" in charts.latency_vs_concurrency(series)
    with charts.translated(lambda text: {"concurrency": "并发"}.get(text, text)):
        svg = charts.latency_vs_concurrency(series)
    assert "并发" in svg and ">concurrency<" not in svg
    assert ">concurrency<" in charts.latency_vs_concurrency(series)  # the translator is scoped
