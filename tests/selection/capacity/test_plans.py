"""Plans for candidates: the engine's own rules, its version's default memory fraction from the
catalog (with the source), and the candidate's launch flags."""

import pytest

from selection.candidates.services import add_candidate
from selection.capacity.plans import plan_for_candidate
from selection.domain.messages import render
from selection.i18n import message_text


@pytest.fixture
def add(selection_with_constraints, architect, engines):
    made = []

    def make(slug, **data):
        engine = engines[slug]
        made.append(slug)
        data.setdefault("label", f"{engine.name} #{len(made)}")  # labels are unique within a selection
        data.setdefault("engine_version", engine.versions[0])
        data.setdefault("model_name", "meta-llama/Llama-3.1-8B")
        return add_candidate(selection=selection_with_constraints, user=architect, data={"engine": engine, **data})

    return make


def estimate(plan, name):
    return next(e for e in plan["estimates"] if e["name"] == name)


def test_vllm_uses_its_catalog_versions_default_utilization_with_the_source(add):
    plan = plan_for_candidate(add("vllm"))  # catalog: vLLM 0.11.0
    util = estimate(plan, "gpu_memory_utilization")
    assert util["value"] == 0.9  # before: 0.92 for every version
    assert "https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/config/cache.py" in util["source"]


def test_lmdeploy_is_planned_with_its_own_rules_not_vllms(add):
    plan = plan_for_candidate(add("lmdeploy"))
    assert plan["engine"] == "lmdeploy" and plan["block_size"] == 64  # before: vLLM's 16 and its budget
    entry = estimate(plan, "cache_max_entry_count")
    assert entry["value"] == 0.8 and "InternLM/lmdeploy/blob/v0.16.0/lmdeploy/messages.py" in entry["source"]
    assert not any("not modelled" in render(note) for note in plan["notes"])


def test_llamacpp_is_planned_from_its_flags(add):
    default = plan_for_candidate(add("llama-cpp"))
    assert default["token_capacity"] == 131072 and default["slots"] == 4  # -c 0: trained context; auto slots
    flagged = plan_for_candidate(add("llama-cpp", launch_flags="--ctx-size 16384 --parallel 2 --no-kv-unified"))
    assert flagged["token_capacity"] == 16384 and flagged["sequence_limit"] == 8192 and flagged["slots"] == 2


def test_launch_flags_override_the_version_default_and_a_what_if_overrides_the_flags(add):
    candidate = add("vllm", launch_flags="--gpu-memory-utilization 0.5")
    plan = plan_for_candidate(candidate)
    assert not any(e["name"] == "gpu_memory_utilization" for e in plan["estimates"])  # given, not estimated
    assert plan["memory_breakdown"]["budget"] == pytest.approx(0.5 * plan["gpu_memory_bytes"], rel=1e-6)
    what_if = plan_for_candidate(candidate, gpu_memory_utilization=0.8)
    assert what_if["memory_breakdown"]["budget"] == pytest.approx(0.8 * plan["gpu_memory_bytes"], rel=1e-6)


def test_plan_notes_are_messages_shown_in_the_page_language_and_older_plain_notes_still_show(add):
    plan = plan_for_candidate(add("vllm", launch_flags="--gpu-memory-utilization 0.5"))
    flags = next(note for note in plan["notes"] if note["msgid"].startswith("from the launch flags"))
    assert render(flags) == "from the launch flags: gpu_memory_utilization=0.5"
    assert message_text(flags, "zh-hans") == "来自启动参数：gpu_memory_utilization=0.5"
    assert message_text("a note stored before notes were messages", "zh-hans") == (
        "a note stored before notes were messages"
    )
