"""Engine telemetry: scrape an engine's metrics every second and map them into canonical series.

Why: KV usage, prefix hits, queueing and preemption are what kvselect judges engines on, and every
engine names them differently (and renames them between versions; llama.cpp even removed its KV
metric). Each engine has a map from canonical names to candidate metric names, newest first; every
metric is optional and what was never seen is recorded in `absent`. Unknown engines keep the raw
samples. Prometheus text is parsed with prometheus_client's parser; TensorRT-LLM's `/metrics`
JSON (a list of IterationStats) is read from `kvCacheStats`.

Canonical series: kv_usage_ratio (0..1), prefix_hit_ratio (per interval, from token counters when
the engine has them, else its own gauge), running, waiting, preemptions (cumulative),
kv_used_tokens, cpu_kv_usage_ratio, swap_out / swap_in (cumulative tokens or bytes offloaded and
loaded back), evicted (cumulative tokens dropped from the GPU cache, SGLang's radix tree),
prompt_tokens_processed (cumulative prompt tokens the engine computed, llama.cpp's
`llamacpp:prompt_tokens_total`: the tests compare it with the prompt tokens they sent, so the
tokens it took from its cache are known even where no cached-token counter exists).

The KV capacity the engine allocated, when its metrics state it (vLLM's `vllm:cache_config_info`
num_gpu_blocks x block_size, SGLang's `sglang:max_total_num_tokens`, TensorRT-LLM's max blocks x
tokens per block), is kept as `kv_capacity` {tokens, source}: the measured capacity the capacity
page compares with its prediction.

kvselect's simulator marks its metrics with `kvsim_info{evidence="SIMULATED"} 1` (it also exports
vLLM's names, so it would pass for vLLM): a recording that saw the mark is `simulated`, and every
result built from it is SIMULATED whatever the target was declared to be (`simulator_mark`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness import safety

# canonical -> candidate metric names (counter names without `_total`), first found wins.
ENGINE_MAPS: dict[str, dict[str, list[str]]] = {
    "vllm": {
        "kv_usage_ratio": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        "cpu_kv_usage_ratio": ["vllm:kv_offload_cpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"],
        "prefix_hits": ["vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"],
        "prefix_queries": ["vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"],
        "prefix_hit_ratio_gauge": ["vllm:gpu_prefix_cache_hit_rate"],
        "running": ["vllm:num_requests_running"],
        "waiting": ["vllm:num_requests_waiting"],
        "swapped": ["vllm:num_requests_swapped"],
        "preemptions": ["vllm:num_preemptions"],
        "swap_out": ["vllm:kv_offload_store_bytes"],
        "swap_in": ["vllm:kv_offload_load_bytes"],
    },
    "sglang": {
        "kv_usage_ratio": ["sglang:token_usage", "sglang:full_token_usage"],
        "kv_used_tokens": ["sglang:kv_used_tokens", "sglang:num_used_tokens"],
        "prefix_hits": ["sglang:cached_tokens"],
        "prefix_queries": ["sglang:prompt_tokens"],
        "prefix_hit_ratio_gauge": ["sglang:cache_hit_rate"],
        "running": ["sglang:num_running_reqs"],
        "waiting": ["sglang:num_queue_reqs"],
        "preemptions": ["sglang:num_retracted_reqs", "sglang:total_retracted_reqs"],
        # the hierarchical cache's backups to host memory are the offload; evicted tokens are dropped
        "swap_out": ["sglang:hicache_backup_tokens"],
        "swap_in": ["sglang:load_back_tokens"],
        "evicted": ["sglang:evicted_tokens"],
        "cpu_kv_usage_ratio": [],
    },
    "lmdeploy": {
        "kv_usage_ratio": ["lmdeploy:gpu_cache_usage_perc"],
        "prefix_hits": ["lmdeploy:cached_tokens"],
        "prefix_queries": ["lmdeploy:prompt_tokens"],
        "prefix_hit_ratio_gauge": ["lmdeploy:prefix_cache_hit_rate"],
        "running": ["lmdeploy:num_requests_running"],
        "waiting": ["lmdeploy:num_requests_waiting"],
    },
    "tgi": {
        "running": ["tgi_batch_current_size"],
        "waiting": ["tgi_queue_size"],
        "kv_used_tokens": ["tgi_batch_current_max_tokens"],
    },
    "trtllm": {
        "kv_usage_ratio": ["trtllm_kv_cache_utilization"],
        "cpu_kv_usage_ratio": ["trtllm_kv_cache_host_utilization"],
        "prefix_hits": ["trtllm_kv_cache_reused_blocks"],
        "prefix_misses": ["trtllm_kv_cache_missed_blocks"],
        "prefix_hit_ratio_gauge": ["trtllm_kv_cache_hit_rate"],
        "running": ["trtllm_num_requests_running"],
        "waiting": ["trtllm_num_requests_waiting"],
        "preemptions": ["trtllm_num_paused_requests"],
        "swap_out": ["trtllm_kv_cache_offload_bytes"],
        "swap_in": ["trtllm_kv_cache_onboard_bytes"],
    },
    "llamacpp": {
        "kv_usage_ratio": ["llamacpp:kv_cache_usage_ratio"],
        "kv_used_tokens": ["llamacpp:kv_cache_tokens"],
        "prefix_hits": ["llamacpp:prompt_tokens_cached"],
        "prefix_misses": ["llamacpp:prompt_tokens"],  # excludes cached tokens
        # the prompt tokens it processed (0.3.9 has no cached counter: hits = tokens sent - processed)
        "prompt_tokens_processed": ["llamacpp:prompt_tokens"],
        "running": ["llamacpp:requests_processing"],
        "waiting": ["llamacpp:requests_deferred"],
    },
}
# signals found under the same name whatever the engine: the simulator's fragmentation gauge (no
# real engine exports fragmentation: vLLM, SGLang and llama.cpp have no such metric)
SHARED_SIGNALS: dict[str, list[str]] = {"fragmentation_ratio": ["kvsim:fragmentation_ratio"]}
ENGINE_ALIASES = {
    "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm",
    "trt-llm": "trtllm",
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "text-generation-inference": "tgi",
}
PREFIXES = {
    "vllm:": "vllm",
    "sglang:": "sglang",
    "lmdeploy:": "lmdeploy",
    "tgi_": "tgi",
    "trtllm_": "trtllm",
    "llamacpp:": "llamacpp",
}
CANONICAL_SERIES = (
    "kv_usage_ratio",
    "prefix_hit_ratio",
    "running",
    "waiting",
    "preemptions",
    "kv_used_tokens",
    "cpu_kv_usage_ratio",
    "swap_out",
    "swap_in",
    "prompt_tokens_processed",
)
# canonical histogram -> per engine, the histogram's base name (seconds), first found wins: the time
# each request waited in the engine's queue before it was scheduled (vLLM's request_queue_time, SGLang's
# queue_time, LMDeploy's and TensorRT-LLM's request_queue_time, TGI's request_queue_duration; the
# simulator exports vLLM's). llama.cpp exports none (only the number of deferred requests).
HISTOGRAMS: dict[str, dict[str, list[str]]] = {
    "queue_wait": {
        "vllm": ["vllm:request_queue_time_seconds"],
        "sglang": ["sglang:queue_time_seconds", "sglang:queue_time_s"],
        "lmdeploy": ["lmdeploy:request_queue_time_seconds"],
        "trtllm": ["trtllm_request_queue_time_seconds"],
        "tgi": ["tgi_request_queue_duration"],
    },
}
_RATIO_KEYS = {"kv_usage_ratio", "cpu_kv_usage_ratio", "prefix_hit_ratio_gauge", "fragmentation_ratio"}


def normalize_engine(engine: str | None) -> str:
    name = (engine or "auto").strip().lower()
    return ENGINE_ALIASES.get(name, name)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name, with `_total` stripped from counter samples (names differ by version)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):
                continue
            if name.endswith("_total"):
                name = name[: -len("_total")]
            samples.setdefault(name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def detect_engine(names: Any) -> str | None:
    counts: dict[str, int] = {}
    for name in names:
        for prefix, engine in PREFIXES.items():
            if name.startswith(prefix):
                counts[engine] = counts.get(engine, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


SIMULATOR_INFO = "kvsim_info"
SIMULATED_LABEL = "SIMULATED"


def simulator_mark(samples: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
    """True when the metrics carry the simulator's own mark (`kvsim_info{evidence="SIMULATED"}`)."""
    return any(labels.get("evidence") == SIMULATED_LABEL for labels, _value in samples.get(SIMULATOR_INFO, []))


EVIDENCE_HEADER = "X-Kvsim-Evidence"


async def probe_simulator(
    endpoint_url: str,
    headers: dict[str, str] | None = None,
    timeout_s: float = 3.0,
    allowed_hosts: safety.Allowed = None,
) -> bool:
    """True when the endpoint answers as kvselect's simulator: its `/v1/models` carries the header
    `X-Kvsim-Evidence: SIMULATED` (every simulator response does). A metrics URL pointing elsewhere,
    or none, must not let a simulated run pass for a measured one. Unreachable: False. Asked through
    the outbound guard when given the allow-list (`harness.safety`)."""
    url = endpoint_url.rstrip("/") + "/v1/models"
    try:
        async with aiohttp.ClientSession(
            connector=safety.tcp_connector(allowed_hosts),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers=headers,
        ) as session:
            async with session.get(url) as response:
                return response.headers.get(EVIDENCE_HEADER, "").upper() == SIMULATED_LABEL
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return False


def map_samples(samples: dict[str, list[tuple[dict[str, str], float]]], engine: str) -> dict[str, float]:
    """Canonical values (ratios averaged over label sets, e.g. data-parallel engines; counts summed)."""
    values: dict[str, float] = {}
    for canonical, candidates in (ENGINE_MAPS.get(engine, {}) | SHARED_SIGNALS).items():
        for name in candidates:
            found = samples.get(name)
            if found:
                numbers = [v for labels, v in found if "le" not in labels and "quantile" not in labels]
                if not numbers:
                    continue
                values[canonical] = sum(numbers) / len(numbers) if canonical in _RATIO_KEYS else sum(numbers)
                break
    if "prefix_misses" in values and "prefix_hits" in values and "prefix_queries" not in values:
        values["prefix_queries"] = values["prefix_hits"] + values.pop("prefix_misses")
    values.pop("prefix_misses", None)
    return values


def read_histograms(samples: dict[str, list[tuple[dict[str, str], float]]], engine: str) -> dict[str, dict[str, Any]]:
    """Each canonical histogram the engine exports (`HISTOGRAMS`), summed over its label sets:
    {canonical: {metric, buckets: [[le, cumulative count], ...] (ascending, +Inf last), sum, count}}."""
    found: dict[str, dict[str, Any]] = {}
    for canonical, per_engine in HISTOGRAMS.items():
        for name in per_engine.get(engine, []):
            buckets: dict[float, float] = {}
            for labels, value in samples.get(f"{name}_bucket", []):
                try:
                    le = float(labels.get("le", "nan"))
                except ValueError:
                    continue
                if le == le:  # not NaN
                    buckets[le] = buckets.get(le, 0.0) + value
            if not buckets:
                continue
            found[canonical] = {
                "metric": name,
                "buckets": sorted([le, count] for le, count in buckets.items()),
                "sum": sum(v for _labels, v in samples.get(f"{name}_sum", [])),
                "count": sum(v for _labels, v in samples.get(f"{name}_count", [])),
            }
            break
    return found


def histogram_delta(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any] | None:
    """The observations a cumulative histogram gained between two scrapes (a reset, as after an engine
    restart, gives None): buckets [[le, count]], sum, count."""
    before = dict((le, count) for le, count in first.get("buckets") or [])
    buckets = []
    for le, count in last.get("buckets") or []:
        gained = count - before.get(le, 0.0)
        if gained < 0:
            return None
        buckets.append([le, gained])
    count = float(last.get("count") or 0.0) - float(first.get("count") or 0.0)
    if count < 0:
        return None
    return {"buckets": buckets, "sum": float(last.get("sum") or 0.0) - float(first.get("sum") or 0.0), "count": count}


def histogram_quantile(q: float, buckets: list[list[float]]) -> tuple[float, float, float] | None:
    """Prometheus's histogram_quantile over cumulative buckets [[le, count], ...] (+Inf last): the
    estimate (linear inside its bucket) and the bucket's bounds, which hold the true quantile (the
    bucket's lower bound is 0 for the first; an estimate in the +Inf bucket is its lower bound, with
    an infinite upper bound). None without observations."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower_le, lower_le, float("inf")
            if count == lower_count:
                return le, lower_le, le
            estimate = lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
            return estimate, lower_le, le
        lower_le, lower_count = le, count
    return None


def kv_capacity(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any] | None:
    """The KV tokens the engine allocated, from the metrics that state it, with where it came from."""
    for labels, _value in samples.get("vllm:cache_config_info", []):
        blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
        if blocks and size and blocks.isdigit() and size.isdigit():
            return {
                "tokens": int(blocks) * int(size),
                "source": f"vllm:cache_config_info num_gpu_blocks {blocks} x block_size {size}",
            }
    found = [v for _, v in samples.get("sglang:max_total_num_tokens", []) if v > 0]
    if found:
        return {"tokens": int(max(found)), "source": "sglang:max_total_num_tokens"}
    blocks = [v for _, v in samples.get("trtllm_kv_cache_max_blocks", [])]
    per_block = [v for _, v in samples.get("trtllm_kv_cache_tokens_per_block", [])]
    if blocks and per_block and blocks[0] > 0 and per_block[0] > 0:
        return {
            "tokens": int(blocks[0] * per_block[0]),
            "source": "trtllm_kv_cache_max_blocks x trtllm_kv_cache_tokens_per_block",
        }
    return None


def map_trtllm_json(stats: Any) -> dict[str, float]:
    """TensorRT-LLM `/metrics` JSON (list of IterationStats, newest last) into canonical values."""
    if isinstance(stats, list):
        stats = stats[-1] if stats else {}
    if not isinstance(stats, dict):
        return {}
    values: dict[str, float] = {}
    kv = stats.get("kvCacheStats") or {}
    used, total = kv.get("usedNumBlocks"), kv.get("maxNumBlocks")
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
        values["kv_usage_ratio"] = used / total
    if isinstance(kv.get("tokensPerBlock"), (int, float)) and isinstance(used, (int, float)):
        values["kv_used_tokens"] = used * kv["tokensPerBlock"]
    if isinstance(kv.get("reusedBlocks"), (int, float)) and isinstance(kv.get("missedBlocks"), (int, float)):
        values["prefix_hits"] = float(kv["reusedBlocks"])
        values["prefix_queries"] = float(kv["reusedBlocks"] + kv["missedBlocks"])
    if isinstance(kv.get("cacheHitRate"), (int, float)):
        values["prefix_hit_ratio_gauge"] = float(kv["cacheHitRate"])
    for key, canonical in (("numActiveRequests", "running"), ("numQueuedRequests", "waiting")):
        if isinstance(stats.get(key), (int, float)):
            values[canonical] = float(stats[key])
    paused = (stats.get("inflightBatchingStats") or {}).get("numPausedRequests")
    if isinstance(paused, (int, float)):
        values["preemptions"] = float(paused)
    return values


@dataclass
class MetricsRecording:
    """What a sampler recorded: canonical series, raw samples for unknown engines, what was absent."""

    engine: str | None = None
    url: str = ""
    series: dict[str, list[list[float]]] = field(default_factory=dict)
    raw: dict[str, list[list[float]]] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    kv_capacity: dict[str, Any] | None = None  # {tokens, source} when the engine's metrics state it
    # canonical histogram (`HISTOGRAMS`) -> [[t, {metric, buckets, sum, count}], ...] per scrape
    histograms: dict[str, list[list[Any]]] = field(default_factory=dict)
    simulated: bool = False  # a scrape carried the simulator's mark (kvsim_info): the evidence is SIMULATED
    scrapes: int = 0
    failed_scrapes: int = 0

    def last(self, name: str) -> float | None:
        values = self.series.get(name)
        return values[-1][1] if values else None

    def first(self, name: str) -> float | None:
        values = self.series.get(name)
        return values[0][1] if values else None

    def run_prefix_hit_ratio(self) -> float | None:
        """Hits / queries over the whole recording, from the cumulative token counters."""
        hits, queries = self.series.get("prefix_hits"), self.series.get("prefix_queries")
        if not hits or not queries:
            return None
        delta_q = queries[-1][1] - queries[0][1]
        return (hits[-1][1] - hits[0][1]) / delta_q if delta_q > 0 else None

    def histogram_between(self, name: str, start: float, end: float) -> dict[str, Any] | None:
        """What histogram `name` observed between the last scrape at or before `start` (the first
        scrape when none) and the last at or before `end`: {metric, buckets, sum, count, seconds};
        None when the engine does not export it or fewer than two scrapes frame the window."""
        scrapes = self.histograms.get(name) or []
        before = [s for s in scrapes if s[0] <= start] or scrapes[:1]
        upto = [s for s in scrapes if s[0] <= end]
        if not before or not upto or upto[-1][0] <= before[-1][0]:
            return None
        first, last = before[-1], upto[-1]
        delta = histogram_delta(first[1], last[1])
        if delta is None:
            return None
        return {"metric": last[1]["metric"], **delta, "seconds": last[0] - first[0]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "url": self.url,
            "absent": self.absent,
            "errors": self.errors[:20],
            "scrapes": self.scrapes,
            "failed_scrapes": self.failed_scrapes,
            "run_prefix_hit_ratio": self.run_prefix_hit_ratio(),
            "kv_capacity": self.kv_capacity,
            "simulated": self.simulated,
            "histograms": sorted(self.histograms),
        }


class MetricsSampler:
    """Samples an engine's metrics endpoint every `interval_s` in the background of a load run.

    Times are seconds since `time_zero` (a perf_counter value; the load's run start), so the series
    line up with the per-request table.
    """

    def __init__(
        self,
        url: str | None,
        engine: str | None = "auto",
        interval_s: float = 1.0,
        time_zero: float | None = None,
        timeout_s: float = 2.0,
        keep_raw: bool | None = None,
        headers: dict[str, str] | None = None,
        allowed_hosts: safety.Allowed = None,
    ) -> None:
        self.url = url
        self.allowed_hosts = allowed_hosts  # set: every scrape goes through the outbound guard
        self.engine = normalize_engine(engine)
        self.interval_s = interval_s
        self.time_zero = time.perf_counter() if time_zero is None else time_zero
        self.timeout_s = timeout_s
        self.keep_raw = keep_raw
        self.headers = headers or {}
        self.recording = MetricsRecording(engine=None if self.engine == "auto" else self.engine, url=url or "")
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None
        self._previous: dict[str, float] = {}
        self._histograms: dict[str, dict[str, Any]] = {}  # read by _interpret, recorded by _record

    async def __aenter__(self) -> "MetricsSampler":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        if not self.url:
            self.recording.absent = ["metrics endpoint (none configured)"]
            return
        self._session = aiohttp.ClientSession(
            connector=safety.tcp_connector(self.allowed_hosts),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            headers=self.headers,
        )
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> MetricsRecording:
        """Stop sampling after one final sample. A refusal by the outbound guard (the metrics URL now
        resolves to a forbidden address) is raised here: the run fails, nothing was sent there."""
        try:
            if self._task is not None:
                task, self._task = self._task, None
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                await self.sample_once()  # one final sample: the state right after the load
        finally:
            if self._session is not None:
                await self._session.close()
                self._session = None
        self._finalize()
        return self.recording

    async def _loop(self) -> None:
        next_due = time.perf_counter()
        while True:
            await self.sample_once()
            next_due += self.interval_s
            await asyncio.sleep(max(next_due - time.perf_counter(), 0.0))

    async def sample_once(self) -> dict[str, float] | None:
        if self._session is None or not self.url:
            return None
        now = time.perf_counter() - self.time_zero
        try:
            async with self._session.get(self.url) as response:
                body = await response.text()
                status = response.status
                content_type = response.headers.get("Content-Type", "")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return None
        if status >= 400:
            self._error(f"HTTP {status} from {self.url}")
            return None
        self.recording.scrapes += 1
        try:
            values, raw = self._interpret(body, content_type)
        except (ValueError, TypeError) as exc:
            self._error(f"unparseable metrics: {exc}")
            return None
        self._record(now, values, raw)
        return values

    def _error(self, message: str) -> None:
        self.recording.failed_scrapes += 1
        if len(self.recording.errors) < 50:
            self.recording.errors.append(message)

    def _interpret(self, body: str, content_type: str) -> tuple[dict[str, float], dict[str, float]]:
        stripped = body.lstrip()
        if "json" in content_type or stripped.startswith(("[", "{")):
            if self.engine in ("auto", "trtllm"):
                self.recording.engine = "trtllm"
            try:
                stats = json.loads(body)
            except RecursionError as exc:  # hostile nesting: refused like any unparseable scrape
                raise ValueError("metrics JSON is nested too deeply") from exc
            kv = (stats[-1] if isinstance(stats, list) and stats else stats) or {}
            kv = kv.get("kvCacheStats") if isinstance(kv, dict) else None
            if (
                isinstance(kv, dict)
                and isinstance(kv.get("maxNumBlocks"), int)
                and isinstance(kv.get("tokensPerBlock"), int)
            ):
                self.recording.kv_capacity = {
                    "tokens": kv["maxNumBlocks"] * kv["tokensPerBlock"],
                    "source": "TensorRT-LLM /metrics kvCacheStats maxNumBlocks x tokensPerBlock",
                }
            return map_trtllm_json(stats), {}
        samples = parse_prometheus(body)
        self.recording.kv_capacity = kv_capacity(samples) or self.recording.kv_capacity
        self.recording.simulated = self.recording.simulated or simulator_mark(samples)
        engine = self.engine
        if engine == "auto":
            engine = detect_engine(samples) or "unknown"
        self.recording.engine = engine
        self._histograms = read_histograms(samples, engine)
        values = map_samples(samples, engine)
        raw: dict[str, float] = {}
        keep_raw = self.keep_raw if self.keep_raw is not None else engine not in ENGINE_MAPS
        if keep_raw:
            for name, entries in samples.items():
                for labels, value in entries:
                    key = name + (
                        "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""
                    )
                    raw[key] = value
        return values, raw

    def _record(self, now: float, values: dict[str, float], raw: dict[str, float]) -> None:
        for name, histogram in self._histograms.items():
            self.recording.histograms.setdefault(name, []).append([now, histogram])
        self._histograms = {}
        series = self.recording.series
        for name, value in values.items():
            series.setdefault(name, []).append([now, value])
        hits, queries = values.get("prefix_hits"), values.get("prefix_queries")
        if hits is not None and queries is not None:
            prev_h, prev_q = self._previous.get("prefix_hits"), self._previous.get("prefix_queries")
            if prev_h is not None and prev_q is not None and queries > prev_q:
                series.setdefault("prefix_hit_ratio", []).append([now, (hits - prev_h) / (queries - prev_q)])
            self._previous.update(prefix_hits=hits, prefix_queries=queries)
        elif "prefix_hit_ratio_gauge" in values:
            series.setdefault("prefix_hit_ratio", []).append([now, values["prefix_hit_ratio_gauge"]])
        for name, value in raw.items():
            self.recording.raw.setdefault(name, []).append([now, value])

    def _finalize(self) -> None:
        if self.url:
            self.recording.absent = [name for name in CANONICAL_SERIES if name not in self.recording.series]
