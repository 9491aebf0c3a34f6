"""Prometheus exposition for the simulator, with vLLM V1's current metric names.

Scheduler and cache state are read from the engine at scrape time (a custom collector);
latencies are histograms observed as requests progress, in simulated seconds. Series vLLM has
no name for use the `kvsim:` prefix, and `kvsim_info{evidence="SIMULATED"} 1` marks every
scrape as simulated evidence.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from benchmarks.simulator.engine import Engine
from benchmarks.simulator.sequence import Sequence

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class _EngineCollector:
    def __init__(self, engine: Engine, labels: dict[str, str], clock: Any = None) -> None:
        self.engine = engine
        self.labels = labels
        self.clock = clock  # simulated now(), so idle offload is up to date at scrape time

    def collect(self):
        engine, config = self.engine, self.engine.config
        names, values = list(self.labels), list(self.labels.values())
        stats = engine.stats

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(values, value)
            return family

        if self.clock is not None:
            engine.offload_idle(self.clock())
        if engine.slots_mode:
            yield from self._llamacpp(gauge, counter)
            yield from self._marks()
            return
        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", len(engine.running))
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(engine.waiting))
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv_cache_usage())
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats["prefix_queries"],
        )
        yield counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", stats["prefix_hits"]
        )
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", stats["preemptions"])
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", stats["prompt_tokens"])
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", stats["generation_tokens"])
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.", labels=names + ["finished_reason"]
        )
        success.add_metric(values + ["length"], stats["requests_success"])
        success.add_metric(values + ["abort"], stats["requests_aborted"])
        yield success
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[
                "block_size",
                "num_gpu_blocks",
                "num_cpu_blocks",
                "enable_prefix_caching",
                "gpu_memory_utilization",
                "cache_dtype",
            ],
        )
        info.add_metric(
            [
                str(engine.bs),
                str(engine.total_blocks),
                str(engine.cpu_capacity),
                str(engine.prefix_caching),
                str(config.gpu_memory_utilization),
                "auto",
            ],
            1,
        )
        yield info
        if engine.cpu_capacity:
            # vLLM's CPU offloading connector series (the harness maps them to swap_out / swap_in /
            # cpu_kv_usage_ratio); only where this engine has a CPU tier
            block_bytes = config.block_bytes
            yield counter(
                "vllm:kv_offload_store_bytes",
                "KV bytes stored GPU -> CPU (offload and swap-out).",
                (stats["offload_store_blocks"] + stats["swap_out_blocks"]) * block_bytes,
            )
            yield counter(
                "vllm:kv_offload_load_bytes", "KV bytes loaded CPU -> GPU.", stats["swap_in_blocks"] * block_bytes
            )
            yield gauge(
                "vllm:kv_offload_cpu_cache_usage_perc",
                "CPU-tier KV usage. 1 means 100 percent usage.",
                (len(engine.cpu) + engine.cpu_swap_used) / engine.cpu_capacity,
            )
        # what vLLM has no name for
        yield gauge(
            "kvsim:cpu_blocks",
            "KV blocks held in the CPU tier (offloaded cache + swapped sequences).",
            len(engine.cpu) + engine.cpu_swap_used,
        )
        yield gauge(
            "kvsim:cpu_cache_usage_perc",
            "CPU-tier usage, 1 = full.",
            (len(engine.cpu) + engine.cpu_swap_used) / engine.cpu_capacity if engine.cpu_capacity else 0.0,
        )
        yield gauge(
            "kvsim:fragmentation_ratio",
            "Share of in-use KV slots holding no token (internal fragmentation).",
            engine.fragmentation(),
        )
        yield gauge("kvsim:gpu_blocks_total", "KV blocks in the GPU pool.", engine.total_blocks)
        yield gauge("kvsim:gpu_blocks_cached", "GPU blocks cached and unreferenced (evictable).", len(engine.evictable))
        yield counter(
            "kvsim:swap_in_blocks",
            "Blocks moved CPU -> GPU (offload hits and swapped-in sequences).",
            stats["swap_in_blocks"],
        )
        yield counter("kvsim:swap_out_blocks", "Blocks moved GPU -> CPU by swap preemption.", stats["swap_out_blocks"])
        yield counter(
            "kvsim:offload_store_blocks",
            "Cached blocks moved GPU -> CPU (idle or evicted).",
            stats["offload_store_blocks"],
        )
        yield counter("kvsim:evicted_blocks", "Cached blocks evicted from the GPU pool.", stats["evictions"])
        yield counter(
            "kvsim:requests_rejected", "Requests rejected by the admission limit (429).", stats["requests_rejected"]
        )
        yield counter("kvsim:requests_oom", "Requests failed by the injected OOM fault.", stats["requests_oom"])
        yield from self._marks()

    def _marks(self):
        """The simulator's own marks: every scrape is SIMULATED, and what it stands in for."""
        config = self.engine.config
        kvsim = GaugeMetricFamily(
            "kvsim_info",
            "This engine is the kvsim simulator: all figures are SIMULATED.",
            labels=["evidence", "profile", "gpu", "model", "time_scale"],
        )
        kvsim.add_metric(["SIMULATED", config.profile, config.gpu, config.model, str(config.time_scale)], 1)
        yield kvsim
        # what the engine runs as and on, as a build-info series (the engine host's view: its version,
        # model and GPUs); the driver is "simulated": no GPU is behind it
        build = GaugeMetricFamily(
            "kvsim_build_info",
            "The engine version, model and GPUs this simulator stands in for (SIMULATED).",
            labels=["version", "model", "served_model_name", "gpu", "gpu_memory_gib", "gpu_count", "driver", "device"],
        )
        build.add_metric(
            [
                config.engine_version,
                config.model,
                config.served_model_name,
                config.gpu,
                f"{config.gpu_profile.memory_bytes / 2**30:g}",
                str(config.gpu_count),
                "simulated",
                config.device,
            ],
            1,
        )
        yield build

    def _llamacpp(self, gauge, counter):
        """The `slots` strategy speaks llama.cpp (llama-server --metrics, the 0.3.9 names): processed
        prompt tokens (cached ones excluded), KV cells in use (idle slots' resident prompts included),
        slots processing and requests deferred for want of a slot."""
        engine = self.engine
        stats = engine.stats
        used = engine.used_blocks * engine.bs
        yield counter("llamacpp:prompt_tokens", "Number of prompt tokens processed.", stats["prompt_tokens"])
        yield counter("llamacpp:tokens_predicted", "Number of generation tokens processed.", stats["generation_tokens"])
        yield gauge(
            "llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", engine.kv_cache_usage()
        )
        yield gauge("llamacpp:kv_cache_tokens", "KV-cache tokens.", used)
        yield gauge("llamacpp:requests_processing", "Number of requests processing.", len(engine.running))
        yield gauge("llamacpp:requests_deferred", "Number of requests deferred.", len(engine.waiting))


class SimMetrics:
    """The registry of one simulator server; also the live driver's observer."""

    def __init__(self, engine: Engine, model_name: str, clock: Any = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        labels = {"model_name": model_name, "engine": "0"}
        self.registry.register(_EngineCollector(engine, labels, clock))
        names, values = list(labels), list(labels.values())
        # llama.cpp (the `slots` strategy) exports no latency histograms: observed, never exposed
        shown = CollectorRegistry(auto_describe=False) if engine.slots_mode else self.registry

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, names, buckets=buckets, registry=shown).labels(*values)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_BUCKETS
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", REQUEST_BUCKETS
        )

    # observer protocol (LiveEngine)
    def first_token(self, seq: Sequence) -> None:
        if seq.first_token_t is not None:
            self.ttft.observe(max(seq.first_token_t - seq.arrival, 0.0))
        if seq.first_scheduled is not None:
            self.queue.observe(max(seq.first_scheduled - seq.arrival, 0.0))

    def token_step(self, count: int, duration: float) -> None:
        observe = self.itl.observe
        for _ in range(count):
            observe(duration)

    def finished(self, seq: Sequence) -> None:
        if seq.finish_t is None:
            return
        self.e2e.observe(max(seq.finish_t - seq.arrival, 0.0))
        if seq.first_token_t is not None and seq.out_done > 1:
            self.tpot.observe((seq.finish_t - seq.first_token_t) / (seq.out_done - 1))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
