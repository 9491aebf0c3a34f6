"""The capacity page's chart lines and tables from a real plan of the capacity model."""

from selection.capacity.display import GIB, concurrency_rows, fixed_memory_bytes, memory_lines, split_estimates
from selection.domain.capacity.plan import plan_for_model


def _plan():
    return plan_for_model("Llama-3.1-8B", gpu="H100-80GB", contexts=(2048, 8192)).to_dict()


def test_memory_lines_add_n_sequences_to_the_fixed_memory():
    plan = _plan()
    contexts, lines = memory_lines(plan, [1, 64], label=lambda n: f"n={n}")
    assert contexts == [row["context"] for row in plan["memory_by_context"]] and set(lines) == {"n=1", "n=64"}
    fixed_gib = fixed_memory_bytes(plan) / GIB
    assert fixed_gib > plan["weight_gib_per_rank"]  # activation peak, non-torch memory, CUDA graphs on top
    i = contexts.index(8192)
    per_seq = plan["bytes_per_sequence"]["8192"] / GIB
    assert abs(lines["n=64"][i] - (fixed_gib + 64 * per_seq)) < 0.01
    assert all(a < b for a, b in zip(lines["n=1"], lines["n=64"], strict=False))


def test_estimates_are_marked_and_overrides_are_not():
    plan = plan_for_model("Llama-3.1-8B", gpu="H100-80GB", non_torch_bytes=0).to_dict()
    rows = {r["name"]: r for r in split_estimates(plan)}
    assert rows["gpu_memory_utilization"]["estimated"] and not rows["non_torch_bytes"]["estimated"]
    assert not rows["gpu_memory_utilization"]["source"].startswith("estimate")


def test_concurrency_rows_apply_the_headroom_rule():
    rows = concurrency_rows(_plan())
    assert [r["context"] for r in rows] == [2048, 8192]
    for r in rows:
        assert r["at_70"] <= r["at_80"] <= r["max_sequences"]


def test_lines_leave_a_gap_above_the_clip_instead_of_flattening_the_chart():
    plan = _plan()
    contexts, lines = memory_lines(plan, [1, 256], label=str, clip_gib=160.0)
    assert lines["1"][-1] is not None  # one sequence at the longest context stays on the chart
    assert lines["256"][-1] is None and all(v is None or v <= 160.0 for v in lines["256"])


def test_every_estimate_the_capacity_model_makes_has_a_label():
    import re
    from pathlib import Path

    from selection.capacity.display import ESTIMATE_LABELS

    package = Path(__file__).resolve().parents[3] / "selection/domain/capacity"
    source = "".join(module.read_text() for module in sorted(package.glob("*.py")))
    named = set(re.findall(r'labelled_estimate\(\s*"([a-z_]+)"', source))
    assert named and named <= set(ESTIMATE_LABELS), named - set(ESTIMATE_LABELS)
    rows = split_estimates({"estimates": [{"name": "cuda_graph_bytes", "value": 1, "source": "estimate: x"}]})
    assert rows[0]["label"] == "CUDA graphs (bytes)" and rows[0]["source"] == "x"
