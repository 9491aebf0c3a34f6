"""Each engine's memory rule: how much of a GPU its KV pool gets (`ENGINE_RULES`, one row each).

* vLLM: ``gpu_memory_utilization`` of TOTAL memory (0.9 in v0.11.0 and earlier, 0.92 by v0.33.0;
  the catalog holds the default of each version), less weights, activation peak, non-torch memory
  and CUDA graphs. SGLang: ``mem_fraction_static`` of total memory for weights + KV.
  TensorRT-LLM ``free_gpu_memory_fraction`` and LMDeploy ``cache_max_entry_count`` (0.8): a share
  of the memory FREE after loading (LMDeploy's PyTorch engine first sets aside its prefill/logits
  runtime buffers). llama.cpp: exactly ``-c`` cells (see `llamacpp`), not a share of memory at all.
* What the config and the documented rules do not fix (activation peak, non-torch memory,
  CUDA-graph memory, SGLang's auto memory fraction) is returned as a labelled *estimate* with its
  source, and a measured value given in the inputs replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from selection.domain.capacity.base import GiB, labelled_estimate
from selection.domain.capacity.inputs import CapacityInputs
from selection.domain.capacity.llamacpp import llamacpp_layout, llamacpp_pool_bytes
from selection.domain.capacity.memory import KVBytes
from selection.domain.capacity.paging import vllm_batched_tokens
from selection.domain.messages import Message
from selection.domain.messages import marked as _

# Used only when the engine version's own default is not given (plans for candidates take it from
# the catalog): 0.92 in vllm/config/cache.py of v0.33.0, 0.9 in v0.11.0 and before.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
VLLM_PREVIOUS_DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
TRTLLM_DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
# lmdeploy/messages.py and lmdeploy/cli/utils.py at v0.16.0: --cache-max-entry-count 0.8 ("the
# percentage of free gpu memory occupied by the k/v cache, excluding weights"), blocks of 64
# tokens, max_prefill_token_num 8192; lmdeploy/utils.py get_max_batch_size for the logits reserve.
LMDEPLOY_DEFAULT_CACHE_MAX_ENTRY_COUNT = 0.8
LMDEPLOY_MAX_PREFILL_TOKEN_NUM = 8192
LMDEPLOY_MAX_BATCH_SIZE = {"a100": 384, "a800": 384, "h100": 1024, "h800": 1024, "l20y": 1024, "h200": 1024}
LMDEPLOY_OTHER_MAX_BATCH_SIZE = 128


# Where each estimated input comes from (the plan's `estimates`), as message templates: the capacity
# page shows them in its language; the API and the CLI keep the English text.
PASS_YOURS = _("%(source)s; pass the value you run")
ACTIVATION_HEURISTIC = _(
    "profile-run heuristic: %(tokens)s batched tokens x (3 x MLP width / TP + 6 x hidden) x 2 B + %(seqs)s seqs x "
    "vocab logits fp32 x 2; replace with the engine log's 'activation peak' / torch peak"
)
VLLM_DEFAULT_SOURCE = _(
    "vLLM default %(default)s in v0.33.0 (%(previous)s in v0.11.0 and before; vllm/config/cache.py)"
)
VLLM_NON_TORCH = _(
    "typical vLLM memory outside torch (CUDA context allocations, NCCL buffers under TP): ~0.25 GiB on one GPU, "
    "~1.5 GiB with TP/PP"
)
VLLM_CUDA_GRAPHS = _("vLLM CUDA-graph capture estimate (~0.5 GiB; 0 with --enforce-eager)")
SGLANG_DEFAULT_BY_TP = _(
    "SGLang default by TP in server_args.py (1: 0.88, 2: 0.87, 4: 0.85, 8: 0.83, 16: 0.79); newer releases derive "
    "it from GPU memory - pass the value you run"
)
TRTLLM_DEFAULT = _("TensorRT-LLM KvCacheConfig default 0.9")
RUNTIME_OVERHEAD = _("CUDA context + runtime buffers (~1 GiB)")
LMDEPLOY_DEFAULT = _("LMDeploy --cache-max-entry-count default 0.8 (lmdeploy/messages.py, v0.16.0)")
CONTEXT_OUTSIDE_TORCH = _("CUDA context and NCCL buffers outside torch: ~0.25 GiB on one GPU, ~1.5 GiB with TP/PP")
LMDEPLOY_RUNTIME = _(
    "LMDeploy PyTorch engine runtime reserve (max_prefill_token_num %(prefill)s + 2 x max_batch_size %(batches)s) x "
    "vocab x 2 B, set aside before the fraction (lmdeploy/pytorch/engine/executor/base.py _get_runtime_size, v0.16.0)"
)
LLAMACPP_BUFFERS = _("llama.cpp compute buffers + CUDA context (~1 GiB)")
# the settings in words: a note is prose on the capacity page (the flags and keys are the inputs' code)
VLLM_KV_CACHE_SET = _(
    "vLLM's KV cache size is set: the KV pool is exactly that size, and the GPU memory share is ignored"
)


def _default_fraction(inputs: CapacityInputs, fallback: float, fallback_source: Message) -> tuple[float, Message]:
    """The engine version's default memory fraction (from the catalog) when given, else `fallback`."""
    if inputs.memory_default is not None:
        value, source = inputs.memory_default
        return float(value), Message(PASS_YOURS, {"source": source})
    return fallback, Message(PASS_YOURS, {"source": fallback_source})


def _activation_estimate(inputs: CapacityInputs) -> tuple[float, Message]:
    spec = inputs.model
    tokens = vllm_batched_tokens(inputs)
    inter = spec.intermediate_size or 4 * spec.hidden_size
    per_token = (3 * inter / inputs.tp + 6 * spec.hidden_size) * 2
    logits = inputs.max_num_seqs * spec.vocab_size / inputs.tp * 4 * 2
    value = tokens * per_token + logits
    return value, Message(ACTIVATION_HEURISTIC, {"tokens": tokens, "seqs": inputs.max_num_seqs})


@dataclass
class KVPool:
    """What an engine's memory rule leaves for the KV cache on one GPU, and how it got there."""

    memory: float
    breakdown: dict[str, float] = field(default_factory=dict)  # the rule's terms, after total and weights
    estimates: list[dict] = field(default_factory=list)
    notes: list[Message] = field(default_factory=list)


@dataclass(frozen=True)
class EngineRules:
    """One engine's memory semantics: how it sizes its KV pool from the GPU, weights and flags."""

    kv_pool: Callable[[CapacityInputs, KVBytes, float], KVPool]  # (inputs, KV bytes, weights per rank)


def _activation(inputs: CapacityInputs, estimates: list[dict]) -> float:
    """The activation peak: the one given, else the profile-run heuristic (listed as an estimate)."""
    value, source = _activation_estimate(inputs)
    given = inputs.activation_peak_bytes is not None
    if given:
        value = float(inputs.activation_peak_bytes)
    estimates.append(labelled_estimate("activation_peak_bytes", value, source, given))
    return value


def _overhead(inputs: CapacityInputs, name: str, default: float, source: Message, estimates: list[dict]) -> float:
    """Memory outside the engine's pools (`non_torch_bytes` when given, else `default`, an estimate)."""
    given = inputs.non_torch_bytes
    value = float(given) if given is not None else default
    estimates.append(labelled_estimate(name, value, source, given is not None))
    return value


def _context_overhead(inputs: CapacityInputs) -> float:
    """CUDA context and NCCL buffers: ~0.25 GiB on one GPU, ~1.5 GiB with TP/PP."""
    return 0.25 * GiB if inputs.tp * inputs.pp == 1 else 1.5 * GiB


def _vllm_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """vLLM: gpu_memory_utilization of total memory, less weights, activation peak, non-torch
    memory and CUDA graphs; kv_cache_memory_bytes, when set, is the pool."""
    if inputs.kv_cache_memory_bytes:
        kv_mem = float(inputs.kv_cache_memory_bytes)
        note = Message(VLLM_KV_CACHE_SET)
        return KVPool(kv_mem, {"kv_cache_memory_bytes": kv_mem}, notes=[note])
    total, estimates = float(inputs.gpu_memory_bytes), []
    util = inputs.gpu_memory_utilization
    if util is None:
        util, source = _default_fraction(
            inputs,
            VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
            Message(
                VLLM_DEFAULT_SOURCE,
                {
                    "default": f"{VLLM_DEFAULT_GPU_MEMORY_UTILIZATION}",
                    "previous": f"{VLLM_PREVIOUS_DEFAULT_GPU_MEMORY_UTILIZATION}",
                },
            ),
        )
        estimates.append(labelled_estimate("gpu_memory_utilization", util, source))
    budget = total * util
    act = _activation(inputs, estimates)
    non_torch = _overhead(
        inputs,
        "non_torch_bytes",
        _context_overhead(inputs),
        Message(VLLM_NON_TORCH),
        estimates,
    )
    cg = inputs.cuda_graph_bytes
    graphs = float(cg) if cg is not None else (0.0 if inputs.enforce_eager else 0.5 * GiB)
    estimates.append(
        labelled_estimate(
            "cuda_graph_bytes",
            graphs,
            Message(VLLM_CUDA_GRAPHS),
            cg is not None,
        )
    )
    breakdown = {
        "budget": budget,
        "activation_peak": act,
        "non_torch": non_torch,
        "cuda_graphs": graphs,
        "unused_by_engine": total - budget,
    }
    return KVPool(budget - w_rank - act - non_torch - graphs, breakdown, estimates)


def _sglang_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """SGLang: mem_fraction_static of total memory holds the weights and the KV pool."""
    total, estimates = float(inputs.gpu_memory_bytes), []
    frac = inputs.mem_fraction_static
    if frac is None and inputs.memory_default is not None:
        frac, source = _default_fraction(inputs, 0.0, Message(SGLANG_DEFAULT_BY_TP))
        estimates.append(labelled_estimate("mem_fraction_static", frac, source))
    elif frac is None:
        frac = {1: 0.88, 2: 0.87, 4: 0.85, 8: 0.83}.get(inputs.tp, 0.79 if inputs.tp >= 16 else 0.88)
        estimates.append(
            labelled_estimate(
                "mem_fraction_static",
                frac,
                Message(SGLANG_DEFAULT_BY_TP),
            )
        )
    breakdown = {"static_budget": total * frac, "activations_and_graphs": total * (1 - frac)}
    note = Message(
        _("SGLang: the static memory fraction (--mem-fraction-static) of total memory covers weights + KV pool")
    )
    return KVPool(total * frac - w_rank, breakdown, estimates, [note])


def _trtllm_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """TensorRT-LLM: free_gpu_memory_fraction of the memory free after loading, capped by max_tokens."""
    estimates: list[dict] = []
    frac = inputs.free_gpu_memory_fraction
    if frac is None:
        frac, source = _default_fraction(inputs, TRTLLM_DEFAULT_FREE_GPU_MEMORY_FRACTION, Message(TRTLLM_DEFAULT))
        estimates.append(labelled_estimate("free_gpu_memory_fraction", frac, source))
    act = _activation(inputs, estimates)
    runtime = _overhead(inputs, "runtime_overhead_bytes", 1.0 * GiB, Message(RUNTIME_OVERHEAD), estimates)
    free = float(inputs.gpu_memory_bytes) - w_rank - act - runtime
    pool = KVPool(free * frac, {"free_after_load": free, "activation_peak": act, "runtime": runtime}, estimates)
    pool.notes.append(Message(_("TensorRT-LLM: free_gpu_memory_fraction applies to FREE memory after loading")))
    if inputs.max_tokens and inputs.max_tokens * kv.per_rank < pool.memory:
        pool.memory = inputs.max_tokens * kv.per_rank
        pool.notes.append(
            Message(_("TensorRT-LLM max_tokens is the tighter limit (min of max_tokens and the fraction)"))
        )
    return pool


def _lmdeploy_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """LMDeploy: cache_max_entry_count of the memory free after the weights and the runtime reserve."""
    estimates: list[dict] = []
    frac = inputs.cache_max_entry_count
    if frac is None:
        frac, source = _default_fraction(
            inputs,
            LMDEPLOY_DEFAULT_CACHE_MAX_ENTRY_COUNT,
            Message(LMDEPLOY_DEFAULT),
        )
        estimates.append(labelled_estimate("cache_max_entry_count", frac, source))
    non_torch = _overhead(
        inputs,
        "non_torch_bytes",
        _context_overhead(inputs),
        Message(CONTEXT_OUTSIDE_TORCH),
        estimates,
    )
    batches = next(
        (v for k, v in LMDEPLOY_MAX_BATCH_SIZE.items() if k in (inputs.gpu_name or "").lower()),
        LMDEPLOY_OTHER_MAX_BATCH_SIZE,
    )
    runtime = (LMDEPLOY_MAX_PREFILL_TOKEN_NUM + 2 * batches) * inputs.model.vocab_size * 2
    if inputs.activation_peak_bytes is not None:
        runtime = float(inputs.activation_peak_bytes)
    estimates.append(
        labelled_estimate(
            "activation_peak_bytes",
            runtime,
            Message(LMDEPLOY_RUNTIME, {"prefill": LMDEPLOY_MAX_PREFILL_TOKEN_NUM, "batches": batches}),
            inputs.activation_peak_bytes is not None,
        )
    )
    free = float(inputs.gpu_memory_bytes) - w_rank - non_torch
    note = Message(
        _(
            "LMDeploy: cache_max_entry_count is a share of the memory FREE after loading the weights "
            "(and after the runtime reserve), not of total memory"
        )
    )
    breakdown = {"free_after_load": free, "activation_peak": runtime, "non_torch": non_torch}
    return KVPool((free - runtime) * frac, breakdown, estimates, [note])


def _llamacpp_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """llama.cpp: the buffer its flags lay out, whatever memory is free."""
    layout = llamacpp_layout(inputs)
    kv_mem = float(llamacpp_pool_bytes(inputs, kv, layout))
    notes = list(layout.notes)
    if layout.unified:
        template = _(
            "llama-server allocates exactly %(cells)s cells (one buffer shared by %(slots)s slots, "
            "%(per_sequence)s tokens per sequence at most), whatever memory is free"
        )
    else:
        template = _(
            "llama-server allocates exactly %(cells)s cells (split over %(slots)s slots, "
            "%(per_sequence)s tokens per sequence at most), whatever memory is free"
        )
    notes.append(Message(template, {"cells": layout.n_ctx, "slots": layout.slots, "per_sequence": layout.n_ctx_seq}))
    estimates: list[dict] = []
    buffers = _overhead(inputs, "compute_buffers_bytes", 1.0 * GiB, Message(LLAMACPP_BUFFERS), estimates)
    if w_rank + buffers + kv_mem > inputs.gpu_memory_bytes:
        notes.append(
            Message(
                _(
                    "weights + compute buffers + this KV buffer exceed the GPU: llama-server's --fit (on by default) "
                    "lowers an unset -c until it fits, else it fails to start; set -c/-np to what fits"
                )
            )
        )
    return KVPool(kv_mem, {"kv_pool_from_flags": kv_mem}, estimates, notes)


# engine -> its memory rules; ENGINES lists the same engines (tests check the two agree)
ENGINE_RULES: dict[str, EngineRules] = {
    "vllm": EngineRules(_vllm_pool),
    "sglang": EngineRules(_sglang_pool),
    "trtllm": EngineRules(_trtllm_pool),
    "lmdeploy": EngineRules(_lmdeploy_pool),
    "llamacpp": EngineRules(_llamacpp_pool),
}
