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

from benchmarks.harness import safety, safety_aiohttp
from benchmarks.harness.prometheus import (
    CANONICAL_SERIES,
    ENGINE_ALIASES,
    ENGINE_MAPS,
    EVIDENCE_HEADER,
    HISTOGRAMS,
    PREFIXES,
    SHARED_SIGNALS,
    SIMULATED_LABEL,
    SIMULATOR_INFO,
    detect_engine,
    histogram_delta,
    histogram_quantile,
    kv_capacity,
    map_samples,
    map_trtllm_json,
    normalize_engine,
    parse_prometheus,
    read_histograms,
    simulator_mark,
)

# the reading (`prometheus`) is re-exported: the scraper's users need one import
__all__ = [
    "CANONICAL_SERIES",
    "ENGINE_ALIASES",
    "ENGINE_MAPS",
    "EVIDENCE_HEADER",
    "HISTOGRAMS",
    "MetricsRecording",
    "MetricsSampler",
    "PREFIXES",
    "SHARED_SIGNALS",
    "SIMULATED_LABEL",
    "SIMULATOR_INFO",
    "detect_engine",
    "histogram_delta",
    "histogram_quantile",
    "kv_capacity",
    "map_samples",
    "map_trtllm_json",
    "normalize_engine",
    "parse_prometheus",
    "probe_simulator",
    "read_histograms",
    "simulator_mark",
]


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
            connector=safety_aiohttp.tcp_connector(allowed_hosts),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers=headers,
        ) as session:
            async with session.get(url) as response:
                return response.headers.get(EVIDENCE_HEADER, "").upper() == SIMULATED_LABEL
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return False


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
            connector=safety_aiohttp.tcp_connector(self.allowed_hosts),
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
