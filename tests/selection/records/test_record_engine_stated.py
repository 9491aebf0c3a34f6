"""The record's capacity table uses the KV capacity the engine stated (its metrics during a run)
and labels it so, instead of "not measured"."""

from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun
from selection.records.services import create_draft, start_review

pytestmark = pytest.mark.django_db


def test_the_record_prints_the_engine_stated_capacity_with_its_source(demo_like, architect):
    run = BenchmarkRun.objects.filter(candidate__selection=demo_like, test="concurrency_stress").first()
    run.metadata = {
        **run.metadata,
        "engine_metrics": {
            "kv_capacity": {"tokens": 470_000, "source": "vllm:cache_config_info num_gpu_blocks 29375 x block_size 16"}
        },
    }
    run.save(update_fields=["metadata"])
    record = start_review(record=create_draft(selection=demo_like, user=architect), user=architect)
    blocks = {block["candidate"]: block for block in record.snapshot["capacity"]}
    row = next(r for r in blocks[run.candidate.display_name]["rows"] if r["quantity"] == "Token capacity")
    assert row["measured"] == 470_000
    assert row["measured_source"] == f"engine-stated: engine metrics of run {run.pk}"
    assert row["measured_metric"] == "vllm:cache_config_info num_gpu_blocks 29375 x block_size 16"  # set as code
    assert row["measured_simulated"] is False
    others = [b for name, b in blocks.items() if name != run.candidate.display_name]
    assert all(r.get("measured") is None for b in others for r in b["rows"])  # nothing stated: "not measured"
