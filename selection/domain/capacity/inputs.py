"""What a plan is computed from: the validated `CapacityInputs`, a GPU's memory by name, and the
inputs an engine's launch flags set (llama-server's -c/-np, vLLM's --gpu-memory-utilization, ...).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from selection.domain.capacity.base import ENGINES, GPU_MEMORY_GIB, CapacityError, GiB
from selection.domain.capacity.memory import kv_element_bytes, validate_parallelism
from selection.domain.capacity.model_config import ModelSpec


@dataclass
class CapacityInputs:
    """Everything a capacity plan depends on. Byte quantities are per GPU (per rank)."""

    model: ModelSpec
    gpu_memory_bytes: int
    kv_dtype: str = "bf16"
    tp: int = 1
    pp: int = 1
    engine: str = "vllm"
    contexts: tuple[int, ...] = (4096, 32768, 131072)
    max_model_len: int | None = None
    gpu_name: str | None = None
    weight_dtype: str | None = None
    block_size: int | None = None
    # vLLM
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int = 256
    enforce_eager: bool = False
    # SGLang
    mem_fraction_static: float | None = None
    # TensorRT-LLM
    free_gpu_memory_fraction: float | None = None
    max_tokens: int | None = None
    # LMDeploy
    cache_max_entry_count: float | None = None
    # llama.cpp (llama-server flags -c, -np, --kv-unified / --no-kv-unified, -ub)
    ctx_size: int | None = None
    n_parallel: int | None = None
    kv_unified: bool | None = None
    n_ubatch: int | None = None
    # the engine version's default memory fraction and where it is stated (the catalog's
    # memory_budget fact), used when the fraction itself is not given
    memory_default: tuple[float, str] | None = None
    # measured overrides for estimated quantities (bytes per GPU)
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    ssm_state_dtype: str | None = None

    def validate(self) -> None:
        if self.engine not in ENGINES:
            raise CapacityError(f"engine: must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if (
            isinstance(self.gpu_memory_bytes, bool)
            or not isinstance(self.gpu_memory_bytes, (int, float))
            or self.gpu_memory_bytes <= 0
        ):
            raise CapacityError(f"gpu_memory: must be positive, got {self.gpu_memory_bytes!r}")
        if not self.contexts:
            raise CapacityError("contexts: give at least one context length")
        for c in self.contexts:
            if isinstance(c, bool) or not isinstance(c, int) or c <= 0:
                raise CapacityError(f"contexts: every context length must be a positive integer, got {c!r}")
        for name in (
            "gpu_memory_utilization",
            "mem_fraction_static",
            "free_gpu_memory_fraction",
            "cache_max_entry_count",
        ):
            v = getattr(self, name)
            if v is not None and not (0 < v <= 1):
                raise CapacityError(f"{name}: must be in (0, 1], got {v!r}")
        for name in (
            "kv_cache_memory_bytes",
            "max_tokens",
            "ctx_size",
            "block_size",
            "max_model_len",
            "max_num_batched_tokens",
            "n_parallel",
            "n_ubatch",
        ):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise CapacityError(f"{name}: must be a positive integer, got {v!r}")
        for name in ("activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise CapacityError(f"{name}: must be >= 0, got {v!r}")
        if self.kv_unified is not None and not isinstance(self.kv_unified, bool):
            raise CapacityError(f"kv_unified: must be true or false, got {self.kv_unified!r}")
        if self.memory_default is not None:
            value = self.memory_default[0] if isinstance(self.memory_default, tuple) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise CapacityError(
                    f"memory_default: must be (a fraction in (0, 1], its source), got {self.memory_default!r}"
                )
        validate_parallelism(self.model, self.tp, self.pp)
        kv_element_bytes(self.kv_dtype, self.engine)


# engine -> {flag spelling: (CapacityInputs field, type)}; "switch" flags take no value
_FLAGS: dict[str, dict[str, tuple[str, Any]]] = {
    "vllm": {
        "--gpu-memory-utilization": ("gpu_memory_utilization", float),
        "--max-model-len": ("max_model_len", int),
        "--max-num-batched-tokens": ("max_num_batched_tokens", int),
        "--block-size": ("block_size", int),
        "--kv-cache-memory": ("kv_cache_memory_bytes", int),
        "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", int),
        "--max-num-seqs": ("max_num_seqs", int),
        "--enforce-eager": ("enforce_eager", "switch"),
    },
    "sglang": {
        "--mem-fraction-static": ("mem_fraction_static", float),
        "--context-length": ("max_model_len", int),
        "--page-size": ("block_size", int),
    },
    "trtllm": {
        "--kv_cache_free_gpu_memory_fraction": ("free_gpu_memory_fraction", float),
        "--max_seq_len": ("max_model_len", int),
    },
    "lmdeploy": {
        "--cache-max-entry-count": ("cache_max_entry_count", float),
        "--cache-block-seq-len": ("block_size", int),
        "--block-size": ("block_size", int),
        "--session-len": ("max_model_len", int),
    },
    "llamacpp": {
        "-c": ("ctx_size", int),
        "--ctx-size": ("ctx_size", int),
        "-np": ("n_parallel", int),
        "--parallel": ("n_parallel", int),
        "-ub": ("n_ubatch", int),
        "--ubatch-size": ("n_ubatch", int),
        "-kvu": ("kv_unified", True),
        "--kv-unified": ("kv_unified", True),
        "-no-kvu": ("kv_unified", False),
        "--no-kv-unified": ("kv_unified", False),
    },
}


def inputs_from_flags(engine: str, text: str) -> dict[str, Any]:
    """The plan inputs an engine's launch flags set (`--flag value` or `--flag=value`; the last
    one wins; flags the plan does not use are ignored). A bad value names its flag."""
    table = _FLAGS.get(engine, {})
    try:
        words = shlex.split(text or "")
    except ValueError as exc:
        raise CapacityError(f"launch_flags: cannot split them ({exc})") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        flag, sep, inline = word.partition("=")
        entry = table.get(flag if sep else word)
        i += 1
        if entry is None:
            continue
        name, kind = entry
        if kind == "switch":
            out[name] = True
            continue
        if isinstance(kind, bool):
            out[name] = kind
            continue
        if sep:
            raw = inline
        elif i < len(words):
            raw = words[i]
            i += 1
        else:
            raise CapacityError(f"launch_flags: {flag} needs a value")
        try:
            value = kind(raw)
        except ValueError:
            raise CapacityError(f"launch_flags: {flag} needs a number, got {raw!r}") from None
        if name == "ctx_size" and value == 0:
            out.pop(name, None)  # -c 0: the model's trained context
            continue
        if name == "n_parallel" and value < 0:
            out.pop(name, None)  # -np -1: auto
            continue
        out[name] = value
    return out


def gpu_memory_bytes(gpu: str | None = None, gib: float | None = None) -> tuple[int, str]:
    """Resolve GPU memory from a known GPU name or an explicit GiB figure."""
    if gib is not None:
        if gib <= 0:
            raise CapacityError(f"gpu_mem_gib: must be positive, got {gib!r}")
        return int(gib * GiB), gpu or f"{gib:g} GiB GPU"
    if gpu is None:
        gpu = "H100-80GB"
    for name, value in GPU_MEMORY_GIB.items():
        if name.lower() == gpu.lower():
            return int(value * GiB), name
    raise CapacityError(f"gpu: unknown GPU {gpu!r} (known: {', '.join(GPU_MEMORY_GIB)}); give gpu_mem_gib instead")
