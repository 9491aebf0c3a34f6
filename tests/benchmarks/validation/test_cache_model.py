"""The candidate's documented cache model reaches the harness: the engine catalog's kind and source,
with an offload tier only when the launch flags enable one (issue 34, item 1)."""

from benchmarks.validation.loadtest import target_for
from benchmarks.validation.target import cache_model_for
from selection.candidates.services import add_candidate


def add(selection, architect, engines, slug, **data):
    return add_candidate(
        selection=selection,
        user=architect,
        data={
            "engine": engines[slug],
            "engine_version": engines[slug].versions[0],
            "model_name": "kvsim",
            "endpoint_url": "http://127.0.0.1:9",
            **data,
        },
    )


def test_each_candidate_carries_its_engines_cache_model_as_deployed(selection_with_constraints, architect, engines):
    llama = cache_model_for(add(selection_with_constraints, architect, engines, "llama-cpp"))
    assert llama.kind == "slot_resident" and llama.keeps_finished_kv and not llama.offload
    assert llama.source.startswith("https://github.com/ggml-org/llama.cpp/")
    assert llama.engine == "llama.cpp (llama-server)"
    plain = cache_model_for(add(selection_with_constraints, architect, engines, "vllm"))
    assert plain.kind == "paged_blocks" and not plain.offload
    offloading = add(
        selection_with_constraints, architect, engines, "vllm", label="offload", launch_flags="--kv-offloading-size 8"
    )
    assert cache_model_for(offloading).offload
    assert target_for(offloading).cache_model == cache_model_for(offloading)
    sglang = cache_model_for(add(selection_with_constraints, architect, engines, "sglang"))
    assert sglang.kind == "radix_tree" and not sglang.offload
