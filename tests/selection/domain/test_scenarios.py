import pytest

from selection.domain.scenarios import PRIMARY_SHARE, THRESHOLDS, infer_scenario

BASE = {
    "peak_concurrency": 8,
    "avg_input_tokens": 1000,
    "max_input_tokens": 4000,
    "p95_input_tokens": 2000,
    "multi_turn": False,
    "ttft_p95_ms": 1000.0,
    "e2e_p95_ms": None,
}


def infer(**overrides):
    return infer_scenario({**BASE, **overrides})


def test_high_concurrency_short_text_is_a():
    scenario, reasons, mix = infer(peak_concurrency=500)
    assert scenario == "A" and mix == {"A": 1.0}
    assert "peak concurrency 500 >= 32" in str(reasons[0])


def test_default_is_a_with_a_reason_saying_so():
    scenario, reasons, _ = infer()
    assert scenario == "A"
    assert "default" in str(reasons[0])


@pytest.mark.parametrize("max_input,expected", [(32_767, "A"), (32_768, "B"), (131_072, "B")])
def test_long_document_boundary(max_input, expected):
    scenario, reasons, _ = infer(max_input_tokens=max_input)
    assert scenario == expected
    if expected == "B":
        assert "long documents" in str(reasons[0])


def test_long_context_reason_is_human_readable():
    _, reasons, _ = infer(max_input_tokens=131_072)
    assert str(reasons[0]) == "max input 128K tokens >= 32K -> long documents"


def test_p95_input_alone_can_make_b():
    scenario, _, _ = infer(p95_input_tokens=THRESHOLDS["long_p95_input_tokens"], max_input_tokens=20_000)
    assert scenario == "B"


def test_multi_turn_is_c():
    scenario, reasons, _ = infer(multi_turn=True, average_turns=6)
    assert scenario == "C"
    assert "6 turns" in str(reasons[0])


def test_multi_turn_with_long_context_is_a_c_b_mix():
    scenario, reasons, mix = infer(multi_turn=True, average_turns=10, max_input_tokens=131_072)
    assert scenario == "C"
    assert mix == pytest.approx({"C": PRIMARY_SHARE, "B": 1 - PRIMARY_SHARE})
    assert any(str(r).startswith("also B") for r in reasons)


@pytest.mark.parametrize("ttft,expected", [(59_999, "A"), (60_000, "D"), (None, "D")])
def test_offline_batch_boundary(ttft, expected):
    scenario, _, _ = infer(ttft_p95_ms=ttft, peak_concurrency=64)
    assert scenario == expected


def test_batch_excludes_interactive_a_but_mixes_with_long_documents():
    scenario, _, mix = infer(ttft_p95_ms=None, peak_concurrency=512, max_input_tokens=65_536)
    assert scenario == "B"
    assert set(mix) == {"B", "D"}


def test_mix_shares_sum_to_one():
    _, _, mix = infer(multi_turn=True, average_turns=3, max_input_tokens=65_536, peak_concurrency=100)
    assert sum(mix.values()) == pytest.approx(1.0)


def test_short_low_concurrency_traffic_says_kv_management_is_not_decisive_with_the_reason():
    scenario, reasons, _ = infer(avg_output_tokens=200)  # 8 x (1000 + 200) = 9,600 tokens in flight
    assert scenario == "A"
    sentence = str(reasons[-1])
    assert "KV-cache management is not decisive" in sentence
    assert "peak concurrency 8 < 32" in sentence and "at most 9,600 tokens of KV cache in flight" in sentence


@pytest.mark.parametrize(
    "overrides",
    [
        {"peak_concurrency": 32},  # high concurrency: scenario A proper
        {"peak_concurrency": 16, "avg_input_tokens": 4000, "avg_output_tokens": 1000},  # 80K tokens in flight
        {"avg_input_tokens": None},  # nothing known of the lengths: nothing said
        {"max_input_tokens": 65_536},  # long documents
        {"multi_turn": True},  # sessions persist: KV management matters
    ],
)
def test_kv_management_is_decisive_unless_traffic_is_short_and_concurrency_low(overrides):
    _, reasons, _ = infer(**overrides)
    assert not any("not decisive" in str(r) for r in reasons)
