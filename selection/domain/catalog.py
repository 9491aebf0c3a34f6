"""The engine catalog: documented KV-cache features of inference engines, each fact with its source.

Step 3 of the decision process screens candidates from their documentation, so every fact in the
catalog carries the URL it was read from; a fact nobody could verify is stored as
``{"value": "unknown", "source": null}`` and screening reports it as *undocumented* (neither a pass
nor a fail). The catalog itself is versioned data (``selection/fixtures/engine_catalog.json``);
this module only loads, validates and normalises it. Pure Python: no Django imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selection.domain.messages import Message, pgettext
from selection.domain.messages import marked as _

DEFAULT_CATALOG_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "engine_catalog.json"

UNKNOWN = "unknown"

ALLOCATION_STRATEGIES = ("paged", "radix", "static", "contiguous")
# what happens to KV after a request ends (benchmarks.harness.cache_model): slots keep it resident,
# a radix tree or paged blocks keep it as evictable, shared cache
CACHE_MODEL_KINDS = ("slot_resident", "radix_tree", "paged_blocks")
PREFIX_CACHE_KINDS = ("hash_block", "radix_tree", "block_trie", "slot_prompt_cache", "none")
OFFLOAD_TIERS = ("cpu", "disk", "remote")
OPS_LEVELS = ("low", "medium", "high")
MEMORY_BUDGET_BASES = ("total", "free", "context")  # a share of total memory, of free memory, or -c cells

# Every version of every engine documents (or marks unknown) exactly these features.
FEATURE_KEYS = (
    "allocation_strategy",
    "cache_model",  # the documented cache model the validation verdicts judge by (benchmarks.harness.cache_model)
    "block_size_default",
    "prefix_caching",
    "kv_quant_dtypes",
    "offload",
    "preemption_mode",
    "chunked_prefill",
    "priority_scheduling",
    "admission_limit",  # a documented bound on the requests run (or queued) at once
    "fair_scheduling",  # a documented fair share between tenants or users
    "max_context",
    "metrics_endpoint",
    "kv_metrics",
    "monitoring_metrics",
    "openai_compatible_api",
    "ops_complexity",
    "memory_budget",
)

# What an engine's metrics mean for monitoring (`monitoring_metrics`): role -> the metric types it
# may have. Ratios are gauges in 0..1; latencies histograms in seconds; lengths histograms in tokens.
MONITORING_ROLES: dict[str, tuple[str, ...]] = {
    "kv_usage": ("gauge",),
    "cache_hit_rate": ("gauge",),
    "cache_hits": ("counter",),
    "cache_queries": ("counter",),
    "preemptions": ("counter", "gauge"),
    "running": ("gauge",),
    "queue_length": ("gauge",),
    "queue_wait": ("histogram",),
    "ttft": ("histogram",),
    "tpot": ("histogram",),
    "request_length": ("histogram",),
    "errors": ("counter", "gauge"),  # requests the engine failed (labels pick the failures, e.g. status="5xx")
    "requests": ("counter", "gauge"),  # every request the engine answered (the error rate's denominator)
    "generation_tokens": ("counter", "histogram"),  # tokens generated (throughput; a histogram by its _sum)
    "swap_out": ("counter",),  # KV moved to the offload tier (bytes or tokens): swap frequency
    "swap_in": ("counter",),  # KV loaded back from the offload tier
    "offload_usage": ("gauge",),  # the offload tier's usage, 0..1
    "fragmentation": ("gauge",),  # share of the KV pool allocated but holding no token, 0..1
}

# KV dtype spellings differ per engine; screening compares families ("fp8", "int8", ...).
_DTYPE_FAMILIES = {
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_e4m3fn": "fp8",
    "fp8_inc": "fp8",
    "int8": "int8",
    "q8_0": "int8",
    "int4": "int4",
    "q4_0": "int4",
    "q4_1": "int4",
    "iq4_nl": "int4",
    "q5_0": "int5",
    "q5_1": "int5",
    "nvfp4": "fp4",
    "fp4_e2m1": "fp4",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "turbo_quant": "turbo_quant",
}

_CATALOG_VERSION_RE = re.compile(r"^\d{4}\.\d+\.\d+$")
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_FACT_KEYS = {"value", "source", "note"}


class CatalogError(ValueError):
    """The catalog file is unreadable or breaks the schema; ``errors`` lists every problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        if len(self.errors) == 1:
            message = self.errors[0]
        else:
            message = f"{len(self.errors)} problems in the engine catalog:\n" + "\n".join(self.errors)
        super().__init__(message)


class CatalogLookupError(CatalogError):
    """An engine slug, version or capability name that the catalog does not have."""

    def __init__(self, message: str):
        super().__init__([message])


@dataclass(frozen=True)
class Fact:
    """One documented fact: its value and the URL of the page or source file that states it."""

    value: Any
    source: str | None
    note: str | None = None

    @property
    def known(self) -> bool:
        return not (isinstance(self.value, str) and self.value == UNKNOWN)

    def as_dict(self) -> dict[str, Any]:
        data = {"value": self.value, "source": self.source}
        if self.note:
            data["note"] = self.note
        return data


@dataclass(frozen=True)
class EngineVersion:
    version: str
    label: str
    features: Mapping[str, Fact]


@dataclass(frozen=True)
class Engine:
    slug: str
    name: str
    homepage: Fact
    licence: Fact
    versions: tuple[EngineVersion, ...]

    def version(self, version: str | None = None) -> EngineVersion:
        """The named version, or the first (newest) one listed when ``version`` is None."""
        if version is None:
            return self.versions[0]
        for candidate in self.versions:
            if candidate.version == version:
                return candidate
        known = ", ".join(v.version for v in self.versions)
        raise CatalogLookupError(f"engine {self.slug!r}: no version {version!r} (catalog has: {known})")


@dataclass(frozen=True)
class Catalog:
    catalog_version: str
    engines: tuple[Engine, ...]
    origin: str = "<data>"

    @property
    def slugs(self) -> tuple[str, ...]:
        return tuple(e.slug for e in self.engines)

    def engine(self, slug: str) -> Engine:
        for candidate in self.engines:
            if candidate.slug == slug:
                return candidate
        raise CatalogLookupError(f"no engine {slug!r} in the catalog (known: {', '.join(self.slugs)})")

    def features(self, slug: str, version: str | None = None) -> Mapping[str, Fact]:
        return self.engine(slug).version(version).features

    def capabilities(self, slug: str, version: str | None = None) -> dict[str, Any]:
        return normalise_capabilities(self.engine(slug), self.engine(slug).version(version))

    def iter_facts(self) -> Iterator[tuple[str, Fact]]:
        """Every fact with its path in the file, e.g. ``engines[0].versions[0].features.offload``."""
        for i, eng in enumerate(self.engines):
            yield f"engines[{i}].homepage", eng.homepage
            yield f"engines[{i}].licence", eng.licence
            for j, ver in enumerate(eng.versions):
                for key, fact in ver.features.items():
                    yield f"engines[{i}].versions[{j}].features.{key}", fact


# ----------------------------------------------------------------------------- loading


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and validate the catalog file (the shipped fixture when ``path`` is None)."""
    file_path = Path(path) if path is not None else DEFAULT_CATALOG_PATH
    try:
        text = file_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError([f"{file_path}: cannot read catalog ({exc.strerror or exc})"]) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError([f"{file_path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"]) from exc
    return parse_catalog(data, origin=str(file_path))


def parse_catalog(data: Any, origin: str = "<data>") -> Catalog:
    """Validate an already-decoded catalog document and build the typed catalog."""
    errors: list[str] = []
    _validate_catalog(data, errors)
    if errors:
        raise CatalogError(errors)
    engines = tuple(_build_engine(e) for e in data["engines"])
    return Catalog(catalog_version=data["catalog_version"], engines=engines, origin=origin)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The shipped catalog, loaded once per process."""
    return load_catalog()


def engine(slug: str) -> Engine:
    return default_catalog().engine(slug)


def features(slug: str, version: str | None = None) -> Mapping[str, Fact]:
    return default_catalog().features(slug, version)


def capabilities(slug: str, version: str | None = None) -> dict[str, Any]:
    return default_catalog().capabilities(slug, version)


MEMORY_DEFAULT_SOURCE = _("%(flag)s default of this engine version (%(source)s)")
# the memory-budget flags in words for a Chinese reader (in English a flag reads as itself)
MEMORY_FLAGS = {
    "--gpu-memory-utilization": pgettext("engine flag in words", "--gpu-memory-utilization"),
    "--mem-fraction-static": pgettext("engine flag in words", "--mem-fraction-static"),
    "--cache-max-entry-count": pgettext("engine flag in words", "--cache-max-entry-count"),
}


def memory_default(slug: str, version: str | None = None) -> tuple[float, Message] | None:
    """The engine version's default memory fraction and where it is stated (the flag and the URL, as a
    message the capacity page shows in its language), when the catalog has one."""
    try:
        fact = features(slug, version).get("memory_budget")
    except CatalogLookupError:
        return None
    if fact is None or not fact.known or not isinstance(fact.value, dict):
        return None
    value = fact.value
    if value.get("of") not in ("total", "free") or value.get("default") is None:
        return None
    return float(value["default"]), Message(
        MEMORY_DEFAULT_SOURCE, {"flag": MEMORY_FLAGS.get(value["flag"], value["flag"]), "source": fact.source}
    )


# Where a fact's note says the catalog read it: "<field> in the <version> wheel metadata", "<field> in
# <file>", then a remark after "; ". The field ("License-Expression: Apache-2.0") is quoted from the
# source and set as code; where it was read and the remark are sentences, shown in the reader's language.
READ_IN_WHEEL = _("in the %(version)s wheel metadata")
READ_IN_FILE = _("in %(file)s")
# the catalog's remarks after a licence field (their English is their msgid)
LICENCE_REMARKS = (_("some C++ batch-manager headers carry the NVIDIA TensorRT Source Code License"),)
_READ_IN = re.compile(r"^(?P<field>[A-Za-z-]+: [^;]+?) in (?P<where>[^;]+?)(?:; (?P<remark>.+))?$")
_WHEEL = re.compile(r"^the (?P<version>\S+) wheel metadata$")
_FILE = re.compile(r"^[\w./-]+\.\w+$")


@dataclass(frozen=True)
class ReadNote:
    """A fact's note taken apart: the quoted field (code), where it was read and a remark (messages)."""

    field: str
    where: Message
    remark: Message | None = None


def read_note(note: str | None) -> ReadNote | None:
    """The note of a fact read from a package or a file ("License-Expression: Apache-2.0 in the 0.11.0
    wheel metadata") taken apart, so that a reader sees the field as code and the rest in their language;
    None for any other note (shown as written)."""
    match = _READ_IN.match((note or "").strip())
    if match is None:
        return None
    where = match["where"].strip()
    wheel = _WHEEL.match(where)
    if wheel is not None:
        message = Message(READ_IN_WHEEL, {"version": wheel["version"]})
    elif _FILE.match(where):
        message = Message(READ_IN_FILE, {"file": where})
    else:
        return None
    remark = match["remark"]
    if remark is not None and remark.strip() not in LICENCE_REMARKS:
        return None
    return ReadNote(field=match["field"].strip(), where=message, remark=Message(remark.strip()) if remark else None)


def _build_fact(raw: Mapping[str, Any]) -> Fact:
    return Fact(value=raw["value"], source=raw["source"], note=raw.get("note"))


def _build_engine(raw: Mapping[str, Any]) -> Engine:
    versions = tuple(
        EngineVersion(
            version=v["version"],
            label=v.get("label", v["version"]),
            features={k: _build_fact(f) for k, f in v["features"].items()},
        )
        for v in raw["versions"]
    )
    return Engine(
        slug=raw["slug"],
        name=raw["name"],
        homepage=_build_fact(raw["homepage"]),
        licence=_build_fact(raw["licence"]),
        versions=versions,
    )


# ----------------------------------------------------------------------------- validation


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith("https://") or value.startswith("http://")) and " " not in value


def _validate_catalog(data: Any, errors: list[str]) -> None:
    if not isinstance(data, dict):
        errors.append(f"catalog: must be a JSON object, got {type(data).__name__}")
        return
    version = data.get("catalog_version")
    if version is None:
        errors.append('catalog: missing "catalog_version"')
    elif not isinstance(version, str) or not _CATALOG_VERSION_RE.match(version):
        errors.append(f'catalog_version: must look like "2026.11.1", got {version!r}')
    engines = data.get("engines")
    if engines is None:
        errors.append('catalog: missing "engines"')
        return
    if not isinstance(engines, list) or not engines:
        errors.append("engines: must be a non-empty list")
        return
    seen: set[str] = set()
    for i, raw in enumerate(engines):
        _validate_engine(raw, f"engines[{i}]", seen, errors)


def _validate_engine(raw: Any, path: str, seen: set[str], errors: list[str]) -> None:
    if not isinstance(raw, dict):
        errors.append(f"{path}: must be an object")
        return
    slug = raw.get("slug")
    if not isinstance(slug, str) or not _SLUG_RE.match(slug):
        errors.append(f"{path}.slug: must be a lower-case slug, got {slug!r}")
    elif slug in seen:
        errors.append(f"{path}.slug: duplicate slug {slug!r}")
    else:
        seen.add(slug)
    if not isinstance(raw.get("name"), str) or not raw.get("name"):
        errors.append(f"{path}.name: must be a non-empty string")
    for key in ("homepage", "licence"):
        if key not in raw:
            errors.append(f'{path}: missing "{key}"')
        else:
            _validate_fact(raw[key], f"{path}.{key}", _check_string if key == "licence" else _check_url, errors)
    versions = raw.get("versions")
    if not isinstance(versions, list) or not versions:
        errors.append(f"{path}.versions: must be a non-empty list")
        return
    seen_versions: set[str] = set()
    for j, ver in enumerate(versions):
        _validate_version(ver, f"{path}.versions[{j}]", seen_versions, errors)


def _validate_version(raw: Any, path: str, seen: set[str], errors: list[str]) -> None:
    if not isinstance(raw, dict):
        errors.append(f"{path}: must be an object")
        return
    version = raw.get("version")
    if not isinstance(version, str) or not version:
        errors.append(f"{path}.version: must be a non-empty string, got {version!r}")
    elif version in seen:
        errors.append(f"{path}.version: duplicate version {version!r}")
    else:
        seen.add(version)
    if "label" in raw and not isinstance(raw["label"], str):
        errors.append(f"{path}.label: must be a string")
    feats = raw.get("features")
    if not isinstance(feats, dict):
        errors.append(f"{path}.features: must be an object")
        return
    for key in FEATURE_KEYS:
        if key not in feats:
            errors.append(f'{path}.features: missing "{key}"')
    for key, fact in feats.items():
        if key not in _VALUE_CHECKS:
            errors.append(f"{path}.features.{key}: unknown feature (expected one of: {', '.join(FEATURE_KEYS)})")
            continue
        _validate_fact(fact, f"{path}.features.{key}", _VALUE_CHECKS[key], errors)


def _validate_fact(raw: Any, path: str, check_value, errors: list[str]) -> None:
    if not isinstance(raw, dict):
        errors.append(f'{path}: must be an object {{"value": ..., "source": ...}}, got {type(raw).__name__}')
        return
    for key in ("value", "source"):
        if key not in raw:
            errors.append(f'{path}: missing "{key}"')
    extra = sorted(set(raw) - _FACT_KEYS)
    if extra:
        errors.append(f"{path}: unexpected keys {extra} (allowed: value, source, note)")
    if "note" in raw and not isinstance(raw["note"], str):
        errors.append(f"{path}.note: must be a string")
    if "value" not in raw or "source" not in raw:
        return
    value, source = raw["value"], raw["source"]
    if value == UNKNOWN:
        if source is not None:
            errors.append(f'{path}.source: must be null when value is "unknown", got {source!r}')
        return
    if source is None:
        errors.append(f'{path}.source: null, but the value is not "unknown" (cite the page or mark it unknown)')
    elif not _is_url(source):
        errors.append(f"{path}.source: must be an http(s) URL, got {source!r}")
    problem = check_value(value)
    if problem:
        errors.append(f"{path}.value: {problem}")


# Value checks return None when fine, else a short description of the problem.


def _check_string(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"must be a non-empty string, got {value!r}"


def _check_url(value: Any) -> str | None:
    return None if _is_url(value) else f"must be an http(s) URL, got {value!r}"


def _check_bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


def _check_optional_bool(value: Any, name: str) -> str | None:
    return None if value is None or isinstance(value, bool) else f"{name} must be true, false or null, got {value!r}"


def _check_positive_int(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return None if ok else f"must be a positive integer, got {value!r}"


def _check_str_list(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        return f"must be a list of strings, got {value!r}"
    return None


def _check_enum(allowed: tuple[str, ...]):
    def check(value: Any) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}, got {value!r}"

    return check


def _check_object(value: Any, required: tuple[str, ...]) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object, got {value!r}"
    missing = [k for k in required if k not in value]
    return f"missing {', '.join(repr(k) for k in missing)}" if missing else None


def _check_cache_model(value: Any) -> str | None:
    problem = _check_object(value, ("kind",))
    if problem:
        return problem
    if value["kind"] not in CACHE_MODEL_KINDS:
        return f"kind must be one of {', '.join(CACHE_MODEL_KINDS)}, got {value['kind']!r}"
    return None


def _check_prefix_caching(value: Any) -> str | None:
    problem = _check_object(value, ("kind", "default_enabled"))
    if problem:
        return problem
    if value["kind"] not in PREFIX_CACHE_KINDS:
        return f"kind must be one of {', '.join(PREFIX_CACHE_KINDS)}, got {value['kind']!r}"
    return _check_optional_bool(value["default_enabled"], "default_enabled")


def _check_offload(value: Any) -> str | None:
    problem = _check_object(value, ("tiers", "connectors"))
    if problem:
        return problem
    tiers = value["tiers"]
    if not isinstance(tiers, list) or any(t not in OFFLOAD_TIERS for t in tiers):
        return f"tiers must be a list drawn from {', '.join(OFFLOAD_TIERS)}, got {tiers!r}"
    if _check_str_list(value["connectors"]):
        return f"connectors must be a list of strings, got {value['connectors']!r}"
    return None


def _check_chunked_prefill(value: Any) -> str | None:
    problem = _check_object(value, ("supported", "default_enabled"))
    if problem:
        return problem
    if not isinstance(value["supported"], bool):
        return f"supported must be true or false, got {value['supported']!r}"
    return _check_optional_bool(value["default_enabled"], "default_enabled")


def _check_max_context(value: Any) -> str | None:
    problem = _check_object(value, ("model_bound",))
    return problem or _check_optional_bool(value["model_bound"], "model_bound")


def _check_metrics_endpoint(value: Any) -> str | None:
    problem = _check_object(value, ("path", "format", "enabled_by_default"))
    if problem:
        return problem
    if not isinstance(value["path"], str) or not value["path"].startswith("/"):
        return f"path must start with '/', got {value['path']!r}"
    return _check_optional_bool(value["enabled_by_default"], "enabled_by_default")


def _check_memory_budget(value: Any) -> str | None:
    problem = _check_object(value, ("flag", "default", "of"))
    if problem:
        return problem
    if not isinstance(value["flag"], str) or not value["flag"].startswith("-"):
        return f"flag must be a command-line flag, got {value['flag']!r}"
    if value["of"] not in MEMORY_BUDGET_BASES:
        return f"of must be one of {', '.join(MEMORY_BUDGET_BASES)}, got {value['of']!r}"
    default = value["default"]
    if default is not None and (isinstance(default, bool) or not isinstance(default, (int, float))):
        return f"default must be a number or null (derived), got {default!r}"
    if value["of"] != "context" and default is not None and not 0 < default <= 1:
        return f"default must be a fraction in (0, 1], got {default!r}"
    return None


def _check_ops_complexity(value: Any) -> str | None:
    problem = _check_object(value, ("level", "why"))
    if problem:
        return problem
    if value["level"] not in OPS_LEVELS:
        return f"level must be one of {', '.join(OPS_LEVELS)}, got {value['level']!r}"
    if not isinstance(value["why"], str) or not value["why"].strip():
        return "why must be a non-empty string"
    return None


def _check_monitoring_metrics(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object of role -> {{metric, type}}, got {value!r}"
    for role, entry in value.items():
        if role not in MONITORING_ROLES:
            return f"{role}: unknown role (one of {', '.join(MONITORING_ROLES)})"
        if not isinstance(entry, dict) or not {"metric", "type"} <= set(entry) <= {"metric", "type", "labels"}:
            return f"{role}: must be {{metric, type}} (and optional labels), got {entry!r}"
        labels = entry.get("labels", {})
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) and isinstance(v, str)
            for k, v in labels.items()
        ):
            return f"{role}.labels: must map label names to values, got {labels!r}"
        if not isinstance(entry["metric"], str) or not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", entry["metric"]):
            return f"{role}.metric: must be a Prometheus metric name, got {entry['metric']!r}"
        if entry["type"] not in MONITORING_ROLES[role]:
            return f"{role}.type: must be {' or '.join(MONITORING_ROLES[role])}, got {entry['type']!r}"
    if ("cache_hits" in value) != ("cache_queries" in value):
        return "cache_hits and cache_queries: give both counters or neither"
    return None


_VALUE_CHECKS = {
    "allocation_strategy": _check_enum(ALLOCATION_STRATEGIES),
    "cache_model": _check_cache_model,
    "block_size_default": _check_positive_int,
    "prefix_caching": _check_prefix_caching,
    "kv_quant_dtypes": _check_str_list,
    "offload": _check_offload,
    "preemption_mode": _check_string,
    "chunked_prefill": _check_chunked_prefill,
    "priority_scheduling": _check_bool,
    "admission_limit": _check_bool,
    "fair_scheduling": _check_bool,
    "max_context": _check_max_context,
    "metrics_endpoint": _check_metrics_endpoint,
    "kv_metrics": _check_str_list,
    "monitoring_metrics": _check_monitoring_metrics,
    "openai_compatible_api": _check_bool,
    "ops_complexity": _check_ops_complexity,
    "memory_budget": _check_memory_budget,
}


# ----------------------------------------------------------------------------- capabilities


def dtype_family(dtype: str) -> str:
    """The precision family of an engine-specific KV dtype name ("q8_0" -> "int8")."""
    return _DTYPE_FAMILIES.get(dtype.lower(), dtype.lower())


def normalise_capabilities(eng: Engine, ver: EngineVersion) -> dict[str, Any]:
    """The scoring-relevant facts of one engine version in one flat shape.

    Unknown facts become None (or "unknown" for ``allocation_strategy``), never a guess.
    ``sources`` maps each capability to the URL it came from (None when unknown).
    """
    f = ver.features

    def known(key: str) -> Any:
        fact = f.get(key)
        return fact.value if fact is not None and fact.known else None

    prefix = known("prefix_caching")
    offload = known("offload")
    cache_model = known("cache_model")
    chunked = known("chunked_prefill")
    endpoint = known("metrics_endpoint")
    max_ctx = known("max_context")
    ops = known("ops_complexity")
    dtypes = known("kv_quant_dtypes")

    caps: dict[str, Any] = {
        "engine": eng.slug,
        "version": ver.version,
        "allocation_strategy": known("allocation_strategy") or UNKNOWN,
        "cache_model_kind": cache_model["kind"] if cache_model else None,
        "block_size_default": known("block_size_default"),
        "prefix_cache_kind": prefix["kind"] if prefix else None,
        "prefix_cache_default_enabled": prefix["default_enabled"] if prefix else None,
        "kv_quant_dtypes": list(dtypes) if dtypes is not None else None,
        "kv_quant_families": sorted({dtype_family(d) for d in dtypes}) if dtypes is not None else None,
        "offload_tiers": list(offload["tiers"]) if offload else None,
        "offload_connectors": list(offload["connectors"]) if offload else None,
        "preemption_mode": known("preemption_mode"),
        "chunked_prefill": chunked["supported"] if chunked else None,
        "priority_scheduling": known("priority_scheduling"),
        "admission_limit": known("admission_limit"),
        "fair_scheduling": known("fair_scheduling"),
        "max_context_model_bound": max_ctx["model_bound"] if max_ctx else None,
        "metrics_endpoint": endpoint["path"] if endpoint else None,
        "metrics_enabled_by_default": endpoint.get("enabled_by_default") if endpoint else None,
        "metrics": list(known("kv_metrics")) if known("kv_metrics") is not None else None,
        "monitoring_metrics": dict(known("monitoring_metrics")) if known("monitoring_metrics") is not None else None,
        "openai_compatible_api": known("openai_compatible_api"),
        "ops_complexity": ops["level"] if ops else None,
    }
    caps["sources"] = {name: _source_of(f, name) for name in SCREENABLE}
    return caps


# Which catalog feature backs each screenable capability (for the source link).
_CAPABILITY_FEATURE = {
    "allocation_strategy": "allocation_strategy",
    "cache_model_kind": "cache_model",
    "block_size_default": "block_size_default",
    "prefix_cache_kind": "prefix_caching",
    "prefix_cache_default_enabled": "prefix_caching",
    "kv_quant_dtypes": "kv_quant_dtypes",
    "kv_quant_families": "kv_quant_dtypes",
    "offload_tiers": "offload",
    "offload_connectors": "offload",
    "preemption_mode": "preemption_mode",
    "chunked_prefill": "chunked_prefill",
    "priority_scheduling": "priority_scheduling",
    "admission_limit": "admission_limit",
    "fair_scheduling": "fair_scheduling",
    "max_context_model_bound": "max_context",
    "metrics_endpoint": "metrics_endpoint",
    "metrics_enabled_by_default": "metrics_endpoint",
    "metrics": "kv_metrics",
    "monitoring_metrics": "monitoring_metrics",
    "openai_compatible_api": "openai_compatible_api",
    "ops_complexity": "ops_complexity",
}
SCREENABLE = tuple(_CAPABILITY_FEATURE)


def _source_of(feats: Mapping[str, Fact], capability: str) -> str | None:
    fact = feats.get(_CAPABILITY_FEATURE[capability])
    return fact.source if fact is not None and fact.known else None


# ----------------------------------------------------------------------------- screening

PASS, FAIL, UNDOCUMENTED = "pass", "fail", "undocumented"


def screen(caps: Mapping[str, Any], required: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Screen one engine version's documented capabilities against requirements (decision step 3).

    ``required`` maps a capability name to what is needed:
    - a bool: the documented value must equal it (``{"priority_scheduling": True}``);
    - for list capabilities (kv_quant_dtypes, offload_tiers, metrics, ...): a string or list whose
      items must all be documented; ``True`` means "at least one"; KV dtypes match by family, so
      ``"fp8"`` is met by ``fp8_e4m3``;
    - ``ops_complexity``: the highest acceptable level ("medium" accepts low and medium);
    - other strings: equality; a list/tuple/set of strings: any of them.
    An undocumented capability is neither passed nor failed: ``passed`` is None and ``status``
    is "undocumented". One row per requirement, in the order given.
    """
    rows = []
    sources = caps.get("sources", {})
    for name, need in required.items():
        if name not in _CAPABILITY_FEATURE:
            raise CatalogLookupError(f"required.{name}: unknown capability (screenable: {', '.join(SCREENABLE)})")
        documented = caps.get(name)
        if documented is None or documented == UNKNOWN:
            passed, status = None, UNDOCUMENTED
        else:
            passed = _meets(name, documented, need)
            status = PASS if passed else FAIL
        rows.append(
            {
                "capability": name,
                "required": need,
                "documented": documented,
                "passed": passed,
                "status": status,
                "source": sources.get(name),
            }
        )
    return rows


def _meets(name: str, documented: Any, need: Any) -> bool:
    if name == "ops_complexity":
        if need not in OPS_LEVELS:
            raise CatalogLookupError(f"required.ops_complexity: must be one of {', '.join(OPS_LEVELS)}, got {need!r}")
        return OPS_LEVELS.index(documented) <= OPS_LEVELS.index(need)
    if isinstance(documented, list):
        if need is True:
            return len(documented) > 0
        if need is False:
            return len(documented) == 0
        wanted = [need] if isinstance(need, str) else list(need)
        if name in ("kv_quant_dtypes", "kv_quant_families"):
            have = {d.lower() for d in documented} | {dtype_family(d) for d in documented}
            return all(w.lower() in have or dtype_family(w) in have for w in wanted)
        return all(w in documented for w in wanted)
    if isinstance(need, bool) or isinstance(documented, bool):
        return documented is need
    if isinstance(need, (list, tuple, set, frozenset)):
        return documented in need
    return documented == need


_VERSION_NUMBER = re.compile(r"v?(\d+)(?:\.(\d+))?")


def major_version(version: str) -> tuple[int, ...] | None:
    """The part of a version whose change may break compatibility (KV-cache format, flags): the
    first number, or the first two below 1.0 (semantic versioning: a 0.y release may break
    anything, and engines like vLLM do). None for a version that is not numbered ("master@00dc805")."""
    match = _VERSION_NUMBER.match(str(version).strip())
    if match is None:
        return None
    major = int(match.group(1))
    return (0, int(match.group(2) or 0)) if major == 0 else (major,)


def newer_major_versions(current: str, available: Iterable[str]) -> list[str]:
    """The versions in ``available`` of a newer major version than ``current`` (none when either is unnumbered)."""
    mine = major_version(current)
    if mine is None:
        return []
    return [v for v in available if (other := major_version(v)) is not None and other > mine]
