"""The engine's documented cache model in the verdicts: behaviour it makes by design is "not applicable"
with its source, never a fail, and a run's outcome is judged on what applies (issue 34, item 1)."""

import pytest

from benchmarks.harness.cache_model import CacheModel, from_dict
from benchmarks.harness.workloads.common import kv_verdicts
from benchmarks.presentation import run_verdict
from benchmarks.verdicts import FAIL, NOT_APPLICABLE, PASS, applicable, not_applicable, status_of, verdict
from selection.domain import catalog
from selection.domain.procurement import test_gaps as procurement_test_gaps

LLAMA = CacheModel("slot_resident", source="https://example.org/llama.cpp/README.md", engine="llama.cpp")
VLLM = CacheModel("paged_blocks", offload=False, source="https://example.org/vllm/prefix_caching.md", engine="vLLM")


def test_the_kinds_say_what_each_engine_keeps_and_shares():
    assert LLAMA.keeps_finished_kv and not LLAMA.shares_prefix
    assert not VLLM.keeps_finished_kv and VLLM.shares_prefix
    assert CacheModel("radix_tree").shares_prefix and not CacheModel("radix_tree").keeps_finished_kv
    assert from_dict(LLAMA.describe()) == LLAMA and from_dict(None) is None
    with pytest.raises(ValueError, match="cache_model.kind"):
        CacheModel("ring_buffer")


def test_the_catalog_states_every_engines_cache_model_with_its_source():
    shipped = catalog.default_catalog()
    kinds = {eng.slug: catalog.capabilities(eng.slug)["cache_model_kind"] for eng in shipped.engines}
    assert kinds == {
        "vllm": "paged_blocks",
        "sglang": "radix_tree",
        "tensorrt-llm": "paged_blocks",
        "lmdeploy": "paged_blocks",
        "tgi": "paged_blocks",
        "llama-cpp": "slot_resident",
    }
    for eng in shipped.engines:
        source = catalog.capabilities(eng.slug)["sources"]["cache_model_kind"]
        assert source and source.startswith("https://"), eng.slug


AFTER = {"after": {"kv_usage_ratio": 0.375, "running": 0, "waiting": 0}, "waited_s": 5.0}


def test_resident_slots_after_aborts_are_not_applicable_with_the_source_never_a_fail():
    found = {v["name"]: v for v in kv_verdicts({"kv_usage_ratio": 0.296}, AFTER, LLAMA)}
    kv = found["kv_back_to_baseline_after_aborts"]
    assert kv["status"] == NOT_APPLICABLE and kv["passed"] is None
    assert kv["detail"].startswith("not applicable: llama.cpp keeps each slot's last prompt")
    assert LLAMA.source in kv["detail"] and kv["reference"] == LLAMA.source
    assert "KV usage 0.375 vs baseline 0.296" in kv["detail"]  # what was observed, judged by nothing
    assert found["requests_released_after_aborts"]["status"] == PASS  # the requests are still judged


def test_kv_left_above_the_baseline_fails_on_an_engine_that_frees_it():
    found = {v["name"]: v for v in kv_verdicts({"kv_usage_ratio": 0.296}, AFTER, VLLM)}
    assert found["kv_back_to_baseline_after_aborts"]["status"] == FAIL
    back = {"after": {"kv_usage_ratio": 0.30, "running": 0, "waiting": 0}, "waited_s": 1.0}
    assert {v["name"]: v for v in kv_verdicts({"kv_usage_ratio": 0.296}, back, VLLM)}[
        "kv_back_to_baseline_after_aborts"
    ]["status"] == PASS
    # no cache model known: judged as observed
    assert {v["name"]: v for v in kv_verdicts({"kv_usage_ratio": 0.296}, AFTER)}["kv_back_to_baseline_after_aborts"][
        "status"
    ] == FAIL


def test_a_run_is_judged_on_what_applies_and_a_not_applicable_test_is_no_gap():
    na = not_applicable("idle_kv_released", "by design", "https://example.org/doc")
    ok = verdict("zero_errors", PASS, "no failed requests of 40", 0, 0, 40)
    bad = verdict("continuation_identical", FAIL, "2 of 20 failed", 2, 0, 20)
    assert status_of(na) == NOT_APPLICABLE and applicable([na, ok]) == [ok]
    assert run_verdict([na, ok]) == PASS
    assert run_verdict([na, bad]) == FAIL
    assert run_verdict([na]) == NOT_APPLICABLE
    gaps = procurement_test_gaps(["swap_recovery", "prefix_reuse", "stability"], {"swap_recovery": "not_applicable"})
    assert [g["test"] for g in gaps] == ["prefix_reuse", "stability"]
