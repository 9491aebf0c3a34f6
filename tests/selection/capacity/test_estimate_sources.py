"""Where each estimated capacity input comes from, in both languages: the API and the CLI keep the
English text, the capacity page renders the stored message in its language, with no code left in
the Chinese text (the input's key is shown beside its label as code instead)."""

import re

import pytest

from selection.capacity.display import ESTIMATE_LABELS, split_estimates
from selection.domain import catalog
from selection.domain.capacity.plan import plan_for_model
from selection.i18n import message_text

SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def zh(value):
    return message_text(value, "zh-hans")


@pytest.mark.parametrize(
    "engine, kwargs",
    [
        ("vllm", {}),
        ("vllm", {"memory_default": catalog.memory_default("vllm", "0.11.0")}),
        ("sglang", {}),
        ("llamacpp", {}),
        ("lmdeploy", {}),
        ("trtllm", {}),
    ],
)
def test_every_estimate_source_renders_in_chinese_without_code(engine, kwargs):
    plan = plan_for_model("Llama-3.1-8B", gpu="H100-80GB", engine=engine, **kwargs).to_dict()
    english = {r["name"]: r for r in split_estimates(plan)}
    chinese = {r["name"]: r for r in split_estimates(plan, render_message=zh)}
    assert english and set(english) == set(chinese)
    for name, row in english.items():
        item = next(i for i in plan["estimates"] if i["name"] == name)
        assert item["source"].endswith(row["source"])  # the English text the API shows, unchanged
        text = chinese[name]["source"]
        assert re.search("[\u4e00-\u9fff]", text) and not SNAKE.search(re.sub(r"https?://\S+", "", text)), text
        assert not SNAKE.search(ESTIMATE_LABELS[name]), name  # the label in words; the key is shown as code


def test_the_english_sources_read_as_before():
    plan = plan_for_model("Llama-3.1-8B", gpu="H100-80GB").to_dict()
    sources = {i["name"]: i["source"] for i in plan["estimates"]}
    assert sources["activation_peak_bytes"].startswith("estimate: profile-run heuristic: ")
    assert sources["non_torch_bytes"] == (
        "estimate: typical vLLM memory outside torch (CUDA context allocations, NCCL buffers under TP): ~0.25 GiB "
        "on one GPU, ~1.5 GiB with TP/PP"
    )
    assert sources["cuda_graph_bytes"] == (
        "estimate: vLLM CUDA-graph capture estimate (~0.5 GiB; 0 with --enforce-eager)"
    )
    default = catalog.memory_default("vllm", "0.11.0")
    assert str(default[1]).startswith("--gpu-memory-utilization default of this engine version (https://")
    assert zh(default[1]).startswith("vLLM 显存占用比例在本引擎版本中的默认值（https://")
