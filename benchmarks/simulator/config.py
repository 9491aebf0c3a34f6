"""Configuration of the KV-cache simulator: GPU profiles, allocation strategies, engine knobs.

Everything the engine needs is a plain number here, so the block pool can be sized either from
direct parameters (num_blocks, block_size, kv_bytes_per_token, weight_bytes) or from a capacity
plan (`SimConfig.from_capacity_plan`), without importing the capacity model.

GPU figures are vendor datasheet values (dense BF16 tensor throughput, HBM bandwidth, host link):
- H100 SXM5 80 GB: 3.35 TB/s HBM3, 989 TFLOPS BF16 dense, PCIe Gen5 x16 (64 GB/s per direction).
- H200 SXM 141 GB: 4.8 TB/s HBM3e, 989 TFLOPS BF16 dense, PCIe Gen5 x16.
- A100 SXM4 80 GB: 2.039 TB/s HBM2e, 312 TFLOPS BF16 dense, PCIe Gen4 x16 (32 GB/s).
- L40S 48 GB: 864 GB/s GDDR6, 362 TFLOPS BF16 dense, PCIe Gen4 x16.
Memory is taken as the marketed size in GiB-ish terms the way engines see it (80 GiB for an
"80 GB" card), which is what `gpu_memory_utilization` is applied to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from benchmarks.simulator.engine_streams import SHAPES

GIB = 1024**3


class SimConfigError(ValueError):
    """A simulator setting is invalid; the message names the field and the problem."""


@dataclass(frozen=True)
class GpuProfile:
    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_per_s: float
    bf16_flops: float
    host_link_bytes_per_s: float  # one direction, GPU<->CPU (swap / offload transfers)


GPU_PROFILES: dict[str, GpuProfile] = {
    "H100": GpuProfile("H100", 80 * GIB, 3.35e12, 989e12, 64e9),
    "H200": GpuProfile("H200", 141 * GIB, 4.8e12, 989e12, 64e9),
    "A100-80G": GpuProfile("A100-80G", 80 * GIB, 2.039e12, 312e12, 32e9),
    "L40S": GpuProfile("L40S", 48 * GIB, 0.864e12, 362e12, 32e9),
}

# Allocation strategies (profiles are named by strategy, never by product).
STRATEGIES: dict[str, dict[str, Any]] = {
    # paged blocks + prefix cache over full blocks identified by a hash chain
    "paged-prefix": {"prefix_caching": True, "static": False, "offload": False, "token_level": False},
    "paged-noprefix": {"prefix_caching": False, "static": False, "offload": False, "token_level": False},
    # token-level prefix tree: matches and allocates at 1-token granularity
    "radix": {"prefix_caching": True, "static": False, "offload": False, "token_level": True},
    # every slot pre-allocates max_model_len tokens at admission: internal fragmentation
    "static": {"prefix_caching": False, "static": True, "offload": False, "token_level": False},
    # paged + prefix cache + a CPU tier that idle cached blocks move to
    "paged-offload": {"prefix_caching": True, "static": False, "offload": True, "token_level": False},
    # token-level prefix tree + a host tier that idle cached tokens move to (SGLang's hierarchical
    # cache, --enable-hierarchical-cache: the radix tree's evicted nodes are backed up to host memory
    # and loaded back on a hit)
    "radix-offload": {"prefix_caching": True, "static": False, "offload": True, "token_level": True},
    # llama.cpp's slots: max_num_seqs slots over one pool of cells; each slot keeps its last prompt (and
    # output) resident for the next prompt with a common prefix; nothing is shared between slots; an idle
    # slot is overwritten (its prompt recomputed later) when another request needs it. Speaks llama.cpp:
    # its metric names, `timings.prompt_n`, no cached tokens in the usage, GET /props, no cache reset
    "slots": {"prefix_caching": False, "static": False, "offload": False, "token_level": True, "slots": True},
}

SCHEDULING_POLICIES = ("fcfs", "priority")

# Llama-3.1-8B in BF16: 2 (K,V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes.
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # 131072
DEFAULT_WEIGHT_BYTES = 16_060_522_496  # 8.03e9 parameters x 2 bytes


@dataclass(frozen=True)
class SimConfig:
    """All engine knobs. Times are simulated seconds; `time_scale` only affects live serving."""

    profile: str = "paged-prefix"
    gpu: str = "H100"
    model: str = DEFAULT_MODEL
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN
    weight_bytes: int = DEFAULT_WEIGHT_BYTES
    block_size: int = 16
    num_blocks: int | None = None  # None: derived from GPU memory
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 131072  # Llama-3.1 context; `static` pre-allocates this much per slot
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    # False: no prefix cache even where the strategy has one (the engine started with vLLM
    # --no-enable-prefix-caching or SGLang --disable-radix-cache): the prefix test's "off" endpoint
    prefix_caching: bool = True
    # scheduling / admission
    preemption_mode: str = "recompute"  # or "swap"
    # "queue": wait without limit; "429": reject when max_num_seqs run and max_waiting wait
    reject_policy: str = "queue"
    max_waiting: int | None = None  # admission limit on the waiting queue under "429" (None: 0)
    # no admission control: every request is taken at once and its whole KV (prompt + max_tokens)
    # reserved; when the pool cannot hold what is in flight, "fail" answers the request with a CUDA
    # OOM error (HTTP 500) and "crash" takes the engine down (HTTP 503, then connections refused).
    # None: the scheduler queues (or rejects under "429") instead. The overload test's failing case.
    oom_without_admission: str | None = None
    # "fcfs": arrival order (a request's `priority` field is refused, as vLLM does without
    # --scheduling-policy priority); "priority": a lower `priority` is admitted and given prefill
    # budget first, and the last preempted (vLLM's --scheduling-policy priority)
    scheduling_policy: str = "fcfs"
    # POST /admin/restart (the model_switch test's hook): wall seconds the engine is down, and
    # whether the switch is graceful (in-flight requests finish, new ones wait for the new engine)
    # or abrupt (in-flight requests are cut, new ones get 503 until it is back)
    restart_downtime_s: float = 1.0
    restart_graceful: bool = True
    # timing model
    step_overhead_s: float = 0.002
    prefill_mfu: float = 0.5
    prefill_tokens_per_s: float | None = None  # None: from GPU flops x MFU / (2 x params)
    # attention FLOPs per prompt token per earlier context token: 4 x layers x hidden
    # (QK^T and AV); Llama-3.1-8B: 4 x 32 x 4096. Makes long prompts' prefill superlinear.
    attention_flops_per_token_ctx: float = 4 * 32 * 4096
    # CPU tier (paged-offload, swap preemption)
    cpu_blocks: int | None = None  # None: 4x the GPU pool
    offload_after_s: float = 5.0  # cached blocks idle this long move to the CPU tier
    # live serving
    time_scale: float = 1.0  # live: simulated seconds per wall second
    seed: int = 0
    served_model_name: str = "kvsim-llama-3.1-8b"
    # what GET /version and the build-info metric report: the engine version this simulator stands in
    # for (the demo starts each one with its candidate's catalog version)
    engine_version: str = "kvsim"
    gpu_count: int = 1  # GPUs the simulated engine stands for (the TP its pool was sized with)
    # fault knobs (tests)
    fault_corrupt_swapped_in: bool = False
    fault_drop_after_tokens: int | None = None
    fault_oom_every: int | None = None  # every Nth request fails with an OOM error
    fault_crash_after_requests: int | None = None
    # every finished request leaves this many KV blocks behind (a leak / growing fragmentation):
    # KV usage climbs at steady load and decode slows as the stranded blocks are read around
    fault_kv_leak_blocks_per_request: int = 0
    stream_shape: str = "vllm"  # whose SSE stream the server writes: vllm, sglang or tgi (engine_streams)

    def __post_init__(self) -> None:
        if self.stream_shape not in SHAPES:
            raise SimConfigError(f"stream_shape: must be one of {', '.join(SHAPES)}, got {self.stream_shape!r}")
        if self.profile not in STRATEGIES:
            raise SimConfigError(f"profile: must be one of {sorted(STRATEGIES)}, got {self.profile!r}")
        if self.gpu not in GPU_PROFILES:
            raise SimConfigError(f"gpu: must be one of {sorted(GPU_PROFILES)}, got {self.gpu!r}")
        for name in ("kv_bytes_per_token", "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise SimConfigError(f"{name}: must be a positive integer, got {value!r}")
        leak = self.fault_kv_leak_blocks_per_request
        if not isinstance(leak, int) or isinstance(leak, bool) or leak < 0:
            raise SimConfigError(f"fault_kv_leak_blocks_per_request: must be a non-negative integer, got {leak!r}")
        if not isinstance(self.weight_bytes, int) or self.weight_bytes < 0:
            raise SimConfigError(f"weight_bytes: must be a non-negative integer, got {self.weight_bytes!r}")
        if self.num_blocks is not None and (not isinstance(self.num_blocks, int) or self.num_blocks <= 0):
            raise SimConfigError(f"num_blocks: must be a positive integer, got {self.num_blocks!r}")
        if self.preemption_mode not in ("recompute", "swap"):
            raise SimConfigError(f"preemption_mode: must be 'recompute' or 'swap', got {self.preemption_mode!r}")
        if self.oom_without_admission not in (None, "fail", "crash"):
            raise SimConfigError(
                f"oom_without_admission: must be None, 'fail' or 'crash', got {self.oom_without_admission!r}"
            )
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise SimConfigError(
                f"scheduling_policy: must be one of {', '.join(SCHEDULING_POLICIES)}, got {self.scheduling_policy!r}"
            )
        if not isinstance(self.restart_downtime_s, (int, float)) or not self.restart_downtime_s >= 0:
            raise SimConfigError(f"restart_downtime_s: must be a number >= 0, got {self.restart_downtime_s!r}")
        if self.reject_policy not in ("queue", "429"):
            raise SimConfigError(f"reject_policy: must be 'queue' or '429', got {self.reject_policy!r}")
        if not self.time_scale > 0:
            raise SimConfigError(f"time_scale: must be positive, got {self.time_scale!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise SimConfigError(f"gpu_memory_utilization: must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if self.total_blocks <= 0:
            raise SimConfigError(
                f"num_blocks: GPU {self.gpu} x {self.gpu_memory_utilization} leaves no room for KV after "
                f"{self.weight_bytes} weight bytes"
            )

    # --- derived quantities -------------------------------------------------------------
    @property
    def strategy(self) -> dict[str, Any]:
        return STRATEGIES[self.profile]

    @property
    def prefix_caching_on(self) -> bool:
        """Whether blocks are shared between requests: the strategy has a prefix cache and it is not off."""
        return bool(self.strategy["prefix_caching"]) and self.prefix_caching

    @property
    def gpu_profile(self) -> GpuProfile:
        return GPU_PROFILES[self.gpu]

    @property
    def effective_block_size(self) -> int:
        """Allocation granularity: 1 token for the token-level (radix) strategy."""
        return 1 if self.strategy["token_level"] else self.block_size

    @property
    def block_bytes(self) -> int:
        return self.effective_block_size * self.kv_bytes_per_token

    @property
    def kv_pool_bytes(self) -> int:
        if self.num_blocks is not None:
            return self.num_blocks * self.block_size * self.kv_bytes_per_token
        return int(self.gpu_profile.memory_bytes * self.gpu_memory_utilization) - self.weight_bytes

    @property
    def total_blocks(self) -> int:
        """Blocks in the GPU pool (same memory for every strategy, so profiles compare fairly)."""
        return max(0, self.kv_pool_bytes // (self.effective_block_size * self.kv_bytes_per_token))

    @property
    def total_cpu_blocks(self) -> int:
        return self.cpu_blocks if self.cpu_blocks is not None else 4 * self.total_blocks

    @property
    def prefill_rate(self) -> float:
        """Prompt tokens per simulated second (compute bound: 2 FLOPs per parameter per token)."""
        if self.prefill_tokens_per_s is not None:
            return float(self.prefill_tokens_per_s)
        params = max(self.weight_bytes / 2.0, 1.0)
        return self.gpu_profile.bf16_flops * self.prefill_mfu / (2.0 * params)

    def prefill_s(self, chunk: int, context_before: int = 0) -> float:
        """Compute time of prefilling `chunk` tokens after `context_before` cached ones:
        the dense part (2 FLOPs per parameter per token) plus causal attention."""
        attention = self.attention_flops_per_token_ctx * (chunk * context_before + chunk * chunk / 2.0)
        return chunk / self.prefill_rate + attention / (self.gpu_profile.bf16_flops * self.prefill_mfu)

    def decode_step_s(self, kv_tokens_read: int) -> float:
        """One decode iteration: roofline of weights + KV read over HBM bandwidth, plus overhead."""
        bandwidth = self.gpu_profile.hbm_bandwidth_bytes_per_s
        return self.step_overhead_s + (self.weight_bytes + kv_tokens_read * self.kv_bytes_per_token) / bandwidth

    def transfer_s(self, blocks: int) -> float:
        """GPU<->CPU transfer time of `blocks` blocks over the host link."""
        return blocks * self.block_bytes / self.gpu_profile.host_link_bytes_per_s

    def describe(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            total_blocks=self.total_blocks,
            effective_block_size=self.effective_block_size,
            kv_pool_bytes=self.kv_pool_bytes,
            total_cpu_blocks=self.total_cpu_blocks if self.strategy["offload"] or self.preemption_mode == "swap" else 0,
            prefill_tokens_per_s=self.prefill_rate,
            gpu_profile=asdict(self.gpu_profile),
        )
        return data

    def with_(self, **changes: Any) -> "SimConfig":
        return replace(self, **changes)

    @classmethod
    def from_capacity_plan(cls, plan: Any, **overrides: Any) -> "SimConfig":
        """Build from a capacity plan (duck-typed): reads only block_size, num_blocks,
        kv_bytes_per_token_total and weight_bytes_per_rank."""
        values = dict(
            block_size=int(plan.block_size),
            num_blocks=int(plan.num_blocks),
            kv_bytes_per_token=int(plan.kv_bytes_per_token_total),
            weight_bytes=int(plan.weight_bytes_per_rank),
        )
        values.update(overrides)
        return cls(**values)


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size) if tokens > 0 else 0


__all__ = [
    "GPU_PROFILES",
    "SCHEDULING_POLICIES",
    "STRATEGIES",
    "GpuProfile",
    "SimConfig",
    "SimConfigError",
    "blocks_for",
]
