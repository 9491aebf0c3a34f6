"""The engine catalog: shipped data validates, every fact is sourced, errors name the path."""

import copy
import json

import pytest

from selection.domain import catalog as cat
from selection.domain.catalog import (
    FEATURE_KEYS,
    UNKNOWN,
    CatalogError,
    CatalogLookupError,
    load_catalog,
    major_version,
    newer_major_versions,
    parse_catalog,
    screen,
)

REQUIRED_ENGINES = {"vllm", "sglang", "tensorrt-llm", "lmdeploy", "tgi", "llama-cpp"}


@pytest.fixture(scope="module")
def shipped():
    return load_catalog()


@pytest.fixture()
def raw():
    return json.loads(cat.DEFAULT_CATALOG_PATH.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the shipped catalog


def test_shipped_catalog_validates_and_is_versioned(shipped):
    assert shipped.catalog_version == "2026.12.3"
    assert shipped.origin.endswith("engine_catalog.json")


def test_all_six_engines_present_with_at_least_one_version(shipped):
    assert REQUIRED_ENGINES <= set(shipped.slugs)
    for eng in shipped.engines:
        assert eng.versions, eng.slug
        for ver in eng.versions:
            assert set(ver.features) == set(FEATURE_KEYS), (eng.slug, ver.version)


def test_every_fact_has_a_url_source_or_is_marked_unknown(shipped):
    facts = list(shipped.iter_facts())
    assert len(facts) == sum(2 + len(FEATURE_KEYS) * len(e.versions) for e in shipped.engines)
    for path, fact in facts:
        if fact.value == UNKNOWN:
            assert fact.source is None, path
        else:
            assert fact.source and fact.source.startswith("https://"), path


def test_unknown_facts_stay_unknown_in_capabilities(shipped):
    # TGI documents no KV offload tier and no request priority: None, not a guess.
    caps = shipped.capabilities("tgi")
    assert caps["offload_tiers"] is None
    assert caps["priority_scheduling"] is None
    assert caps["sources"]["priority_scheduling"] is None


def test_capabilities_are_normalised(shipped):
    for slug in shipped.slugs:
        caps = shipped.capabilities(slug)
        assert caps["allocation_strategy"] in {"paged", "radix", "static", "contiguous", "unknown"}
        assert caps["ops_complexity"] in {"low", "medium", "high"}
        assert caps["priority_scheduling"] in {True, False, None}
        for key in ("kv_quant_dtypes", "offload_tiers", "metrics"):
            assert caps[key] is None or isinstance(caps[key], list)
    vllm = shipped.capabilities("vllm", "0.11.0")
    assert vllm["allocation_strategy"] == "paged"
    assert vllm["block_size_default"] == 16
    assert vllm["prefix_cache_kind"] == "hash_block"
    assert "vllm:kv_cache_usage_perc" in vllm["metrics"]
    assert vllm["kv_quant_families"] == ["fp8"]
    assert shipped.capabilities("sglang")["prefix_cache_kind"] == "radix_tree"


def test_module_helpers_use_the_shipped_catalog():
    assert cat.engine("vllm").name == "vLLM"
    assert cat.features("llama-cpp")["openai_compatible_api"].value is True
    assert cat.capabilities("lmdeploy")["engine"] == "lmdeploy"


def test_lookup_errors_name_what_exists(shipped):
    with pytest.raises(CatalogLookupError, match="no engine 'nope'.*vllm"):
        shipped.engine("nope")
    with pytest.raises(CatalogLookupError, match="no version '9.9'.*0.11.0"):
        shipped.features("vllm", "9.9")


# ---------------------------------------------------------------- broken catalogs


def test_missing_source_names_the_path(raw):
    del raw["engines"][2]["versions"][0]["features"]["prefix_caching"]["source"]
    with pytest.raises(CatalogError) as exc:
        parse_catalog(raw)
    assert 'engines[2].versions[0].features.prefix_caching: missing "source"' in str(exc.value)


def test_null_source_with_a_known_value_is_rejected(raw):
    raw["engines"][0]["versions"][0]["features"]["priority_scheduling"]["source"] = None
    with pytest.raises(CatalogError, match=r"engines\[0\]\.versions\[0\]\.features\.priority_scheduling\.source: null"):
        parse_catalog(raw)


def test_unknown_value_must_not_carry_a_source(raw):
    raw["engines"][4]["versions"][0]["features"]["preemption_mode"] = {"value": "unknown", "source": "https://x.org"}
    with pytest.raises(CatalogError, match=r"features\.preemption_mode\.source: must be null"):
        parse_catalog(raw)


def test_bad_values_and_missing_features_are_all_reported(raw):
    feats = raw["engines"][1]["versions"][0]["features"]
    feats["allocation_strategy"]["value"] = "magic"
    feats["ops_complexity"]["value"] = {"level": "extreme", "why": "x"}
    del feats["kv_metrics"]
    feats["colour"] = {"value": "blue", "source": "https://x.org"}
    with pytest.raises(CatalogError) as exc:
        parse_catalog(raw)
    errors = exc.value.errors
    assert any(
        e.startswith("engines[1].versions[0].features.allocation_strategy.value: must be one of") for e in errors
    )
    assert any("features.ops_complexity.value: level must be one of low, medium, high" in e for e in errors)
    assert 'engines[1].versions[0].features: missing "kv_metrics"' in errors
    assert any(e.startswith("engines[1].versions[0].features.colour: unknown feature") for e in errors)
    assert len(errors) == 4


def test_a_cache_model_of_unknown_kind_is_refused_naming_the_field(raw):
    raw["engines"][5]["versions"][0]["features"]["cache_model"]["value"] = {"kind": "ring_buffer"}
    del raw["engines"][0]["versions"][0]["features"]["cache_model"]
    with pytest.raises(CatalogError) as exc:
        parse_catalog(raw)
    assert exc.value.errors == [
        'engines[0].versions[0].features: missing "cache_model"',
        "engines[5].versions[0].features.cache_model.value: kind must be one of slot_resident, radix_tree, "
        "paged_blocks, got 'ring_buffer'",
    ]


def test_source_must_be_a_url_and_slugs_unique(raw):
    raw["engines"][0]["licence"]["source"] = "see LICENSE"
    raw["engines"][3]["slug"] = raw["engines"][0]["slug"]
    with pytest.raises(CatalogError) as exc:
        parse_catalog(raw)
    assert "engines[0].licence.source: must be an http(s) URL, got 'see LICENSE'" in exc.value.errors
    assert "engines[3].slug: duplicate slug 'vllm'" in exc.value.errors


def test_top_level_shape(raw):
    with pytest.raises(CatalogError, match='catalog_version: must look like "2026.11.1"'):
        parse_catalog({**raw, "catalog_version": "v1"})
    with pytest.raises(CatalogError, match="engines: must be a non-empty list"):
        parse_catalog({**raw, "engines": []})


def test_unreadable_and_invalid_json_files(tmp_path):
    with pytest.raises(CatalogError, match="cannot read catalog"):
        load_catalog(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"catalog_version": "2026.11.1",', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"invalid JSON at line 1"):
        load_catalog(bad)


def test_a_minimal_valid_catalog_loads_from_a_file(raw, tmp_path):
    small = copy.deepcopy(raw)
    small["engines"] = small["engines"][:1]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(small), encoding="utf-8")
    loaded = load_catalog(path)
    assert loaded.slugs == ("vllm",)
    assert loaded.origin == str(path)


# ---------------------------------------------------------------- screening


def _caps(**overrides):
    base = {
        "engine": "x",
        "version": "1",
        "allocation_strategy": "paged",
        "prefix_cache_kind": "radix_tree",
        "kv_quant_dtypes": ["fp8_e4m3", "q8_0"],
        "offload_tiers": None,
        "priority_scheduling": None,
        "metrics": ["x:kv_usage"],
        "ops_complexity": "medium",
        "chunked_prefill": True,
        "sources": {
            "allocation_strategy": "https://a",
            "kv_quant_dtypes": "https://q",
            "ops_complexity": "https://o",
            "offload_tiers": None,
            "priority_scheduling": None,
            "metrics": "https://m",
        },
    }
    base.update(overrides)
    return base


def test_screen_reports_unknown_as_undocumented_not_fail():
    rows = screen(_caps(), {"priority_scheduling": True, "offload_tiers": ["cpu"]})
    assert [r["status"] for r in rows] == ["undocumented", "undocumented"]
    assert all(r["passed"] is None and r["source"] is None and r["documented"] is None for r in rows)


def test_screen_pass_and_fail_carry_the_source():
    rows = screen(
        _caps(), {"allocation_strategy": "paged", "kv_quant_dtypes": ["fp8", "int8"], "ops_complexity": "low"}
    )
    by = {r["capability"]: r for r in rows}
    assert by["allocation_strategy"]["passed"] is True and by["allocation_strategy"]["source"] == "https://a"
    assert by["kv_quant_dtypes"]["passed"] is True  # fp8_e4m3 -> fp8, q8_0 -> int8
    assert by["ops_complexity"]["passed"] is False and by["ops_complexity"]["status"] == "fail"
    assert [r["capability"] for r in rows] == ["allocation_strategy", "kv_quant_dtypes", "ops_complexity"]


def test_screen_list_and_choice_requirements():
    caps = _caps()
    assert screen(caps, {"kv_quant_dtypes": "int4"})[0]["passed"] is False
    assert screen(caps, {"metrics": True})[0]["passed"] is True
    assert screen(_caps(metrics=[]), {"metrics": True})[0]["passed"] is False
    assert screen(caps, {"prefix_cache_kind": ("hash_block", "radix_tree")})[0]["passed"] is True
    assert screen(caps, {"ops_complexity": "high"})[0]["passed"] is True
    assert screen(_caps(allocation_strategy="unknown"), {"allocation_strategy": "paged"})[0]["status"] == "undocumented"


def test_screen_rejects_unknown_capability_names():
    with pytest.raises(CatalogLookupError, match="required.colour: unknown capability"):
        screen(_caps(), {"colour": "blue"})
    with pytest.raises(CatalogLookupError, match="required.ops_complexity: must be one of"):
        screen(_caps(), {"ops_complexity": "easy"})


def test_screen_on_the_shipped_catalog(shipped):
    rows = screen(shipped.capabilities("llama-cpp"), {"priority_scheduling": True, "openai_compatible_api": True})
    assert [r["status"] for r in rows] == ["undocumented", "pass"]
    assert rows[1]["source"].startswith("https://github.com/ggml-org/llama.cpp/")


def test_major_versions_follow_semantic_versioning():
    assert major_version("1.4.0rc4") == (1,) and major_version("v2.0") == (2,)
    assert major_version("0.11.0") == (0, 11)  # below 1.0 a minor release may break anything
    assert major_version("master@00dc805") is None
    assert newer_major_versions("0.6.3", ["0.6.9", "0.11.0", "master@x"]) == ["0.11.0"]
    assert newer_major_versions("1.4.0", ["1.9.0", "2.0.0rc1"]) == ["2.0.0rc1"]
    assert newer_major_versions("master@00dc805", ["1.0"]) == []


def test_a_note_read_from_a_package_or_a_file_is_taken_apart_into_its_field_and_where():
    from selection.domain.catalog import read_note

    wheel = read_note("License-Expression: Apache-2.0 in the 0.11.0 wheel metadata")
    assert wheel.field == "License-Expression: Apache-2.0"  # quoted from the source: shown as code
    assert str(wheel.where) == "in the 0.11.0 wheel metadata" and wheel.where.params == {"version": "0.11.0"}
    in_file = read_note(
        "SPDX-License-Identifier: Apache-2.0 in tensorrt_llm/version.py; some C++ batch-manager headers carry "
        "the NVIDIA TensorRT Source Code License"
    )
    assert in_file.field == "SPDX-License-Identifier: Apache-2.0" and str(in_file.where) == "in tensorrt_llm/version.py"
    assert str(in_file.remark).startswith("some C++ batch-manager headers")
    assert read_note("catalog assessment") is None and read_note(None) is None  # shown as written
    assert read_note("License: MIT in the 1.0 wheel metadata; an unknown remark") is None
