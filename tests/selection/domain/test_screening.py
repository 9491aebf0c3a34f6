"""The documentation screen's rules: the priority dimensions' needs against the catalog's facts."""

import pytest

from selection.domain import catalog, screening


def caps(**changes):
    values = catalog.capabilities("vllm", "0.11.0")
    values.update(changes)
    return values


def test_a_candidate_documenting_every_priority_need_is_kept():
    found = screening.screen_candidate(caps(), ("memory", "persistence"))
    assert found["status"] == screening.KEPT and not found["reasons"]
    assert [row["dimension"] for row in found["rows"]] == ["memory", "memory", "persistence"]


def test_a_need_documented_as_absent_screens_out_with_the_reason_and_its_source():
    sources = caps()["sources"] | {"offload_tiers": "https://example.org/engine/blob/v1/engine/offload.py"}
    found = screening.screen_candidate(caps(offload_tiers=[], sources=sources), ("persistence",))
    assert found["status"] == screening.SCREENED_OUT
    assert str(found["reasons"][0]) == (
        "Cross-turn persistence and offload needs a KV offload tier (CPU, disk or remote) for idle sessions: the "
        "engine's source says it has none (https://example.org/engine/blob/v1/engine/offload.py)"
    )
    assert found["rows"][0]["facts"][0]["source_kind"] == screening.SOURCE


def test_a_need_the_sources_do_not_describe_screens_out_as_undocumented():
    found = screening.screen_candidate(caps(metrics=None), ("observability",))
    assert found["status"] == screening.SCREENED_OUT and found["rows"][0]["status"] == screening.UNDOCUMENTED
    assert str(found["reasons"][0]) == (
        "Observability needs KV-cache metrics (usage, hits, preemptions): the engine's documentation and source "
        "do not describe it"
    )


def test_any_documented_capability_meets_a_need_and_other_dimensions_are_not_screened():
    # scheduling: a concurrency limit alone is enough; observability is no priority here
    found = screening.screen_candidate(
        caps(priority_scheduling=None, fair_scheduling=False, metrics=None), ("scheduling", "cost")
    )
    assert found["status"] == screening.KEPT and len(found["rows"]) == 1


def test_the_shipped_catalog_rules_out_what_it_does_not_describe():
    # LMDeploy 0.16 and TGI document no offload tier: a persistence priority rules them out
    for slug in ("lmdeploy", "tgi"):
        assert (
            screening.screen_candidate(catalog.capabilities(slug, None), ("persistence",))["status"] == "screened_out"
        )
    for slug in ("vllm", "sglang", "llama-cpp"):
        assert (
            screening.screen_candidate(catalog.capabilities(slug, None), ("memory", "persistence"))["status"] == "kept"
        )


@pytest.mark.parametrize(
    "url,kind",
    [
        ("https://github.com/vllm-project/vllm/blob/v0.11.0/pyproject.toml", "source"),
        ("https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/config/cache.py", "source"),
        ("https://github.com/vllm-project/vllm/tree/v0.11.0/vllm/distributed/kv_transfer/kv_connector/v1", "source"),
        ("https://github.com/ggml-org/llama.cpp/blob/00dc805/tools/server/README.md", "documentation"),
        ("https://docs.vllm.ai/en/v0.11.0/design/metrics.html", "documentation"),
        ("https://github.com/sgl-project/sglang/tree/v0.5.5/docs/advanced_features", "documentation"),
        (None, None),
    ],
)
def test_a_source_file_is_cited_as_source_and_a_page_as_documentation(url, kind):
    assert screening.source_kind(url) == kind


def test_priority_dimensions_are_the_gates_else_the_scenarios():
    assert screening.priority_dimensions(["persistence", "memory"], "A") == ("memory", "persistence")
    assert screening.priority_dimensions([], "B") == ("context", "memory")
    assert screening.priority_dimensions([], None) == ()
