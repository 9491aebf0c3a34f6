"""Which documented features a candidate's launch flags actually turn on.

The catalog documents what an engine *can* do; a deployment only has what its launch command
enables. SGLang's hierarchical cache (HiCache) and its metrics are off unless started with
`--enable-hierarchical-cache` and `--enable-metrics`; vLLM (V1) caches prefixes unless started
with `--no-enable-prefix-caching` and offloads KV only with a `--kv-transfer-config` connector
(LMCache, OffloadingConnector) or `--kv-offloading-size`. A feature that is off in the
candidate's flags counts as absent, with the reason, in screening, scoring and the record's
monitoring table: documented is not deployed.

The rules are one table (`RULES`): per engine and feature, the default when no flag says
otherwise, the flags that turn it on and those that turn it off. An engine or feature without a
rule keeps the catalog's documented default. Pure Python: no Django imports.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Mapping

PREFIX_CACHING, OFFLOAD, METRICS = "prefix_caching", "offload", "metrics"
FEATURES = (PREFIX_CACHING, OFFLOAD, METRICS)

# reasons (stable codes; the shell words them)
DEFAULT_ON, DEFAULT_OFF, FLAG_ON, FLAG_OFF, UNKNOWN = "default_on", "default_off", "flag_on", "flag_off", "unknown"


@dataclass(frozen=True)
class Rule:
    default: bool | None  # None: the catalog's documented default
    on: tuple[str, ...] = ()  # any of these flags turns the feature on
    off: tuple[str, ...] = ()  # any of these turns it off (wins over `on`)


# engine slug -> feature -> rule (sources: each engine's server arguments page, see the catalog)
RULES: dict[str, dict[str, Rule]] = {
    "vllm": {
        PREFIX_CACHING: Rule(True, on=("--enable-prefix-caching",), off=("--no-enable-prefix-caching",)),
        OFFLOAD: Rule(False, on=("--kv-transfer-config", "--kv-offloading-size", "--kv-offloading-backend")),
        # V1 registers no stat loggers (Prometheus included) with --disable-log-stats
        METRICS: Rule(True, off=("--disable-log-stats",)),
    },
    "sglang": {
        PREFIX_CACHING: Rule(True, off=("--disable-radix-cache",)),
        OFFLOAD: Rule(False, on=("--enable-hierarchical-cache",)),
        METRICS: Rule(False, on=("--enable-metrics",)),
    },
    "lmdeploy": {
        PREFIX_CACHING: Rule(False, on=("--enable-prefix-caching",)),
        METRICS: Rule(None, on=("--enable-metrics",), off=("--disable-metrics",)),
    },
    "llama-cpp": {
        # the slot prompt cache is on per request unless the client sends cache_prompt: false
        PREFIX_CACHING: Rule(True, off=("--no-cache-prompt",)),
        OFFLOAD: Rule(False, on=("--slot-save-path",)),
        METRICS: Rule(False, on=("--metrics",)),
    },
}

# The flag that starts each engine's prefix-caching-off variant (the prefix-reuse test's "off" run).
PREFIX_OFF_FLAGS = {"vllm": "--no-enable-prefix-caching", "sglang": "--disable-radix-cache"}


@dataclass(frozen=True)
class FeatureState:
    """Whether one feature is on in the launch flags, and why (a reason code and the deciding flag)."""

    feature: str
    enabled: bool | None  # None: neither the flags nor the catalog say
    reason: str  # DEFAULT_ON, DEFAULT_OFF, FLAG_ON, FLAG_OFF or UNKNOWN
    flag: str | None = None  # the flag that decided (FLAG_ON, FLAG_OFF), or the one that would turn it on

    def as_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "enabled": self.enabled, "reason": self.reason, "flag": self.flag}


def flag_names(flags: str) -> list[str]:
    """The option names in a launch command or flag list ("--a=1 --b 2 -c" -> ["--a", "--b", "-c"]);
    an unbalanced quote falls back to splitting on spaces."""
    try:
        words = shlex.split(flags or "")
    except ValueError:
        words = (flags or "").split()
    names = []
    for word in words:
        if word.startswith("-") and len(word) > 1 and not _is_number(word):
            name, _sep, value = word.partition("=")
            if value.lower() in ("false", "0", "no", "off"):
                name = _negated(name)
            names.append(name)
    return names


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _negated(name: str) -> str:
    """`--enable-x=false` means `--no-enable-x` (argparse BooleanOptionalAction)."""
    return "--no-" + name[2:] if name.startswith("--") and not name.startswith("--no-") else name


def feature_states(
    engine: str, flags: str, documented_defaults: Mapping[str, bool | None] | None = None
) -> dict[str, FeatureState]:
    """Each feature's state for `engine` (catalog slug) started with `flags` (its launch flags and
    recipe). `documented_defaults` (feature -> the catalog's default) fills the rules' gaps."""
    names = set(flag_names(flags))
    rules = RULES.get(engine, {})
    states = {}
    for feature in FEATURES:
        rule = rules.get(feature)
        default = rule.default if rule is not None and rule.default is not None else None
        if default is None:
            default = (documented_defaults or {}).get(feature)
        if rule is not None:
            off = next((f for f in rule.off if f in names), None)
            on = next((f for f in rule.on if f in names), None)
            if off is not None:
                states[feature] = FeatureState(feature, False, FLAG_OFF, off)
                continue
            if on is not None:
                states[feature] = FeatureState(feature, True, FLAG_ON, on)
                continue
        hint = rule.on[0] if rule is not None and rule.on else None
        if default is None:
            states[feature] = FeatureState(feature, None, UNKNOWN, hint)
        else:
            states[feature] = FeatureState(feature, default, DEFAULT_ON if default else DEFAULT_OFF, hint)
    return states


def disabled_features(
    engine: str, flags: str, documented_defaults: Mapping[str, bool | None] | None = None
) -> dict[str, FeatureState]:
    """The features the launch flags leave off (by default or by a flag): absent for this candidate."""
    return {f: s for f, s in feature_states(engine, flags, documented_defaults).items() if s.enabled is False}


def documented_defaults(caps: Mapping[str, Any]) -> dict[str, bool | None]:
    """The catalog's defaults (`catalog.normalise_capabilities`) in this module's feature names."""
    return {
        PREFIX_CACHING: caps.get("prefix_cache_default_enabled"),
        METRICS: caps.get("metrics_enabled_by_default"),
    }


def apply_to_capabilities(caps: Mapping[str, Any], engine: str, flags: str) -> dict[str, Any]:
    """The catalog capabilities as deployed with `flags`: a feature the flags leave off is absent
    (prefix cache kind "none", no offload tier, no metrics), and `off_in_launch_flags` says why."""
    result = dict(caps)
    off = disabled_features(engine, flags, documented_defaults(caps))
    if PREFIX_CACHING in off and caps.get("prefix_cache_kind") not in (None, "none"):
        result["prefix_cache_kind"] = "none"
        result["prefix_cache_default_enabled"] = False
    else:
        off.pop(PREFIX_CACHING, None)
    if OFFLOAD in off and caps.get("offload_tiers"):
        result["offload_tiers"] = []
        result["offload_connectors"] = []
    else:
        off.pop(OFFLOAD, None)
    if METRICS in off and caps.get("metrics_endpoint"):
        result["metrics_endpoint"] = None
        result["metrics"] = []
        result["monitoring_metrics"] = {}
    else:
        off.pop(METRICS, None)
    result["off_in_launch_flags"] = {feature: state.as_dict() for feature, state in off.items()}
    return result


def prefix_off_flags(engine: str, flags: str) -> str | None:
    """The launch flags of the candidate's prefix-caching-off variant (its flags with the engine's off
    flag, any flag turning caching on removed), or None for an engine without such a flag."""
    off = PREFIX_OFF_FLAGS.get(engine)
    if off is None:
        return None
    turning_on = set(RULES.get(engine, {}).get(PREFIX_CACHING, Rule(None)).on)
    try:
        words = shlex.split(flags or "")
    except ValueError:
        words = (flags or "").split()
    kept = [w for w in words if w.partition("=")[0] not in turning_on and w != off]
    return shlex.join([*kept, off])


# The host memory an offload tier takes, as each engine's flags size it (per replica):
# vLLM --kv-offloading-size: GiB of CPU buffer, summed over the TP ranks (vllm/config/cache.py);
# SGLang --hicache-size: GB per rank (overrides the ratio), else --hicache-ratio (default 2.0) x the
# device KV pool (sglang/srt/server_args.py). Other connectors (LMCache, --kv-transfer-config) size
# their tier in files kvselect does not read: enabled, size not stated.
OFFLOAD_SIZE_FLAGS = {"vllm": {"--kv-offloading-size": "gib_total"}, "sglang": {"--hicache-size": "gb_per_rank"}}
HICACHE_RATIO_FLAG, HICACHE_RATIO_DEFAULT = "--hicache-ratio", 2.0
GB_IN_GIB = 1e9 / 2**30


def flag_values(flags: str) -> dict[str, str]:
    """Each option's value in a launch command (`--flag value` or `--flag=value`; the last one wins;
    a switch without a value maps to "")."""
    try:
        words = shlex.split(flags or "")
    except ValueError:
        words = (flags or "").split()
    values: dict[str, str] = {}
    for index, word in enumerate(words):
        if not word.startswith("-") or len(word) < 2 or _is_number(word):
            continue
        name, sep, inline = word.partition("=")
        following = words[index + 1] if index + 1 < len(words) else ""
        takes_next = not sep and following and (not following.startswith("-") or _is_number(following))
        values[name] = inline if sep else (following if takes_next else "")
    return values


def offload_tier(engine: str, flags: str, tp: int = 1, device_pool_bytes: float | None = None) -> dict[str, Any]:
    """Whether the flags enable an offload tier and the host memory it takes per replica (GiB; None
    when the flags do not state it), with how the size was read (`basis`: the flag, or the ratio of
    the device pool). `device_pool_bytes`: one GPU's KV pool (the capacity plan), for SGLang's ratio."""
    state = feature_states(engine, flags).get(OFFLOAD)
    if state is None or not state.enabled:
        return {"enabled": False, "gib": None, "basis": ""}
    values = flag_values(flags)
    for flag, unit in OFFLOAD_SIZE_FLAGS.get(engine, {}).items():
        number = _positive(values.get(flag))
        if number is None:
            continue
        if unit == "gib_total":
            return {"enabled": True, "gib": number, "basis": f"{flag} {values[flag]}"}
        return {"enabled": True, "gib": number * GB_IN_GIB * max(tp, 1), "basis": f"{flag} {values[flag]}"}
    if engine == "sglang" and state.flag == "--enable-hierarchical-cache" and device_pool_bytes:
        ratio = _positive(values.get(HICACHE_RATIO_FLAG)) or HICACHE_RATIO_DEFAULT
        gib = ratio * device_pool_bytes * max(tp, 1) / 2**30
        return {"enabled": True, "gib": gib, "basis": f"{HICACHE_RATIO_FLAG} {ratio:g}"}
    return {"enabled": True, "gib": None, "basis": ""}


def _positive(raw: str | None) -> float | None:
    try:
        number = float(raw) if raw not in (None, "") else None
    except ValueError:
        return None
    return number if number is not None and number > 0 and number == number else None
