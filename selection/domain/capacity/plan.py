"""The capacity plan: the KV pool per GPU under the engine's rule, blocks, token capacity, and how
many sequences fit at each context length, with the 20-30% headroom rule (docs/domain.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from selection.domain.capacity.base import GPU_MEMORY_GIB, GiB, json_number, labelled_estimate
from selection.domain.capacity.engines import ENGINE_RULES
from selection.domain.capacity.inputs import CapacityInputs, gpu_memory_bytes
from selection.domain.capacity.llamacpp import LlamaCppLayout, llamacpp_layout
from selection.domain.capacity.memory import KVBytes, kv_bytes_per_token, weight_bytes, weight_bytes_per_rank
from selection.domain.capacity.model_config import ModelSpec, load_model_config, validate_model_config
from selection.domain.capacity.paging import (
    block_size_for,
    planned_max_model_len,
    sequence_bytes,
    state_bytes,
    vllm_batched_tokens,
)
from selection.domain.messages import Message
from selection.domain.messages import marked as _


@dataclass
class CapacityPlan:
    """The result. Byte figures are per GPU unless named *_total; contexts are tokens."""

    inputs: CapacityInputs
    kv: KVBytes
    kv_bytes_per_token: float
    kv_bytes_per_token_total: float
    block_size: int
    bytes_per_block: float
    num_blocks: int
    token_capacity: int
    kv_memory_bytes: float
    pool_bytes: float  # usable KV bytes: whole blocks for paged uniform layouts, else kv_memory_bytes
    weight_bytes_per_rank: float
    weight_bytes_total: float
    state_bytes_per_sequence: float
    max_model_len: int
    max_concurrency: dict[int, float]
    max_sequences: dict[int, int]
    bytes_per_sequence: dict[int, float]
    headroom: dict
    memory_by_context: list[dict]
    memory_breakdown: dict[str, float]
    estimates: list[dict]
    notes: list[Message]
    slots: int | None = None  # llama.cpp: requests served at once (-np)
    sequence_limit: int | None = None  # llama.cpp: the longest sequence one slot holds

    def sequence_bytes(self, context: int) -> float:
        return sequence_bytes(self.inputs, self.kv, self.block_size, context)

    def to_dict(self) -> dict:
        i = self.inputs
        return {
            "model": i.model.name,
            "model_type": i.model.model_type,
            "attention": i.model.attention,
            "engine": i.engine,
            "kv_dtype": i.kv_dtype,
            "tp": i.tp,
            "pp": i.pp,
            "gpus": i.tp * i.pp,
            "gpu_name": i.gpu_name,
            "gpu_memory_bytes": int(i.gpu_memory_bytes),
            "gpu_memory_gib": round(i.gpu_memory_bytes / GiB, 2),
            "kv_bytes_per_token": json_number(self.kv_bytes_per_token),
            "kv_bytes_per_token_total": json_number(self.kv_bytes_per_token_total),
            "kv_heads_per_rank": self.kv.kv_heads_per_rank,
            "kv_replicated_across_tp": self.kv.replicated_across_tp,
            "attention_layers_per_rank": self.kv.attention_layers_per_rank,
            "layer_kinds": {
                k: i.model.count(k) for k in ("full", "sliding", "ssm", "linear", "none") if i.model.count(k)
            },
            "sliding_window": i.model.sliding_window,
            "local_attention": i.model.local_attention if i.model.sliding_window else None,
            "slots": self.slots,
            "sequence_limit": self.sequence_limit,
            "block_size": self.block_size,
            "bytes_per_block": json_number(self.bytes_per_block),
            "num_blocks": self.num_blocks,
            "token_capacity": self.token_capacity,
            "kv_memory_bytes": int(self.kv_memory_bytes),
            "kv_memory_gib": round(self.kv_memory_bytes / GiB, 2),
            "weight_bytes_per_rank": int(self.weight_bytes_per_rank),
            "weight_gib_per_rank": round(self.weight_bytes_per_rank / GiB, 2),
            "weight_bytes_total": int(self.weight_bytes_total),
            "params_total": i.model.total_params,
            "state_bytes_per_sequence": json_number(self.state_bytes_per_sequence),
            "max_model_len": self.max_model_len,
            "max_concurrency": {str(k): v for k, v in self.max_concurrency.items()},
            "max_sequences": {str(k): v for k, v in self.max_sequences.items()},
            "bytes_per_sequence": {str(k): json_number(v) for k, v in self.bytes_per_sequence.items()},
            "headroom": self.headroom,
            "memory_by_context": self.memory_by_context,
            "memory_breakdown": {k: json_number(v) for k, v in self.memory_breakdown.items()},
            "estimates": self.estimates,
            "notes": [note.to_dict() for note in self.notes],  # stored messages; plain() gives the English
        }


def _layout_notes(inputs: CapacityInputs) -> list[Message]:
    """Where the cache layout departs from one KV head per rank."""
    spec, notes = inputs.model, []
    if spec.attention == "mla" and inputs.tp > 1:
        notes.append(
            Message(
                _("MLA latent cache is replicated on each of the %(tp)s TP ranks (not divided by TP)"),
                {"tp": inputs.tp},
            )
        )
    if spec.attention == "standard" and inputs.tp > spec.num_kv_heads:
        notes.append(
            Message(
                _("TP %(tp)s > %(kv_heads)s KV heads: each KV head is replicated on %(ranks)s ranks"),
                {"tp": inputs.tp, "kv_heads": spec.num_kv_heads, "ranks": inputs.tp // spec.num_kv_heads},
            )
        )
    return notes


def _gpu_memory_estimates(inputs: CapacityInputs) -> list[dict]:
    """The GPU's total memory, listed as an estimate when it came from the table of GPUs."""
    total = float(inputs.gpu_memory_bytes)
    if inputs.gpu_name in GPU_MEMORY_GIB and int(GPU_MEMORY_GIB[inputs.gpu_name] * GiB) == int(total):
        source = Message(
            _(
                "%(gpu)s total as torch/vLLM report it (approximate table value); pass the measured "
                "'total_gpu_memory' to be exact"
            ),
            {"gpu": inputs.gpu_name},
        )
        return [labelled_estimate("gpu_memory_bytes", total, source)]
    return []


@dataclass(frozen=True)
class _Pool:
    """The usable KV pool of a plan and how sequences fit in it."""

    bytes: float
    layout: LlamaCppLayout | None

    def fitting(self, context: int, share: float, per_sequence: float) -> int:
        """Sequences of `context` tokens in `share` of the pool (llama.cpp: no more than its slots,
        none longer than a slot)."""
        n = int(self.bytes * share // per_sequence) if per_sequence else 0
        if self.layout is not None:
            n = 0 if context > self.layout.n_ctx_seq else min(n, self.layout.slots)
        return n


def _concurrency(inputs: CapacityInputs, kv: KVBytes, block: int, pool: _Pool, notes: list[Message]):
    """(concurrency, sequences, bytes per sequence) at each planned context."""
    spec = inputs.model
    conc, seqs, per = {}, {}, {}
    for c in sorted(set(inputs.contexts)):
        b = sequence_bytes(inputs, kv, block, c)
        per[c] = b
        conc[c] = round(pool.bytes / b, 2) if b else 0.0
        seqs[c] = pool.fitting(c, 1.0, b)
        if pool.layout is not None:
            conc[c] = float(min(conc[c], seqs[c]))
        if spec.max_position_embeddings and c > spec.max_position_embeddings:
            notes.append(
                Message(
                    _("context %(context)s exceeds the model's max_position_embeddings (%(positions)s)"),
                    {"context": c, "positions": spec.max_position_embeddings},
                )
            )
    return conc, seqs, per


def _memory_by_context(inputs: CapacityInputs, kv: KVBytes, block: int, pool: _Pool, max_model_len: int) -> list:
    """Sequences that fit at powers of two from 1K to the longest context, and at the planned ones."""
    grid = sorted(
        {2**k for k in range(10, 21) if 2**k <= max(max_model_len, max(inputs.contexts))} | set(inputs.contexts)
    )
    rows = []
    for c in grid:
        b = sequence_bytes(inputs, kv, block, c)
        rows.append(
            {
                "context": c,
                "bytes_per_sequence": json_number(b),
                "max_sequences": pool.fitting(c, 1.0, b),
                "sequences_at_80pct": pool.fitting(c, 0.8, b),
                "sequences_at_70pct": pool.fitting(c, 0.7, b),
            }
        )
    return rows


def _headroom(pool: _Pool, per: dict[int, float]) -> dict:
    return {
        "rule": "plan with 20-30% memory headroom, never from the theoretical maximum (docs/domain.md)",
        "pool_bytes_at_70pct": int(pool.bytes * 0.7),
        "pool_bytes_at_80pct": int(pool.bytes * 0.8),
        "sequences_at_70pct": {str(c): pool.fitting(c, 0.7, per[c]) for c in per},
        "sequences_at_80pct": {str(c): pool.fitting(c, 0.8, per[c]) for c in per},
    }


def plan_capacity(inputs: CapacityInputs) -> CapacityPlan:
    """Compute the capacity plan: KV pool per GPU under the engine's memory rules, blocks,
    token capacity and concurrent sequences per context length, with the headroom rule."""
    inputs.validate()
    spec = inputs.model
    notes: list[Message] = list(spec.notes)
    kv = kv_bytes_per_token(spec, inputs.kv_dtype, inputs.tp, inputs.pp, inputs.engine)
    block = block_size_for(inputs, notes)
    total = float(inputs.gpu_memory_bytes)
    w_rank = weight_bytes_per_rank(spec, inputs.tp, inputs.pp, inputs.weight_dtype)
    max_model_len = planned_max_model_len(inputs)
    notes.extend(_layout_notes(inputs))

    engine_pool = ENGINE_RULES[inputs.engine].kv_pool(inputs, kv, w_rank)
    estimates = _gpu_memory_estimates(inputs) + engine_pool.estimates
    notes.extend(engine_pool.notes)
    kv_mem = engine_pool.memory
    breakdown = {"total": total, "weights": w_rank, **engine_pool.breakdown, "kv_pool": max(kv_mem, 0.0)}
    if kv_mem <= 0:
        notes.append(Message(_("weights and runtime overheads exceed the engine's memory budget: no KV cache fits")))
        kv_mem = 0.0

    if inputs.engine == "vllm" and spec.count("sliding") and not inputs.max_num_batched_tokens:
        estimates.append(
            labelled_estimate(
                "max_num_batched_tokens",
                vllm_batched_tokens(inputs),
                "vLLM API-server default for this GPU (v0.11.0 vllm/engine/arg_utils.py: 8192 from 70 GiB, not on "
                "A100s, else 2048); a sliding-window or chunked-local layer holds one such chunk beyond its window",
            )
        )
    bytes_per_block = kv.per_rank * block
    num_blocks = int(kv_mem // bytes_per_block) if bytes_per_block else 0
    state = state_bytes(inputs)
    uniform = spec.count("sliding") == 0 and state == 0
    layout = llamacpp_layout(inputs) if inputs.engine == "llamacpp" else None
    if layout is not None:
        token_capacity = layout.n_ctx
    elif uniform:
        token_capacity = num_blocks * block
    else:
        per_seq = sequence_bytes(inputs, kv, block, max_model_len)
        token_capacity = int(kv_mem / per_seq * max_model_len) if per_seq else 0
        notes.append(
            Message(
                _(
                    "token_capacity = max concurrency at max_model_len (%(max_model_len)s) x max_model_len "
                    "(vLLM's definition for sliding/hybrid layouts)"
                ),
                {"max_model_len": max_model_len},
            )
        )

    pool = _Pool(num_blocks * bytes_per_block if uniform and layout is None else kv_mem, layout)
    conc, seqs, per = _concurrency(inputs, kv, block, pool, notes)
    return CapacityPlan(
        inputs=inputs,
        kv=kv,
        kv_bytes_per_token=kv.per_rank,
        kv_bytes_per_token_total=kv.total,
        block_size=block,
        bytes_per_block=bytes_per_block,
        num_blocks=num_blocks,
        token_capacity=token_capacity,
        kv_memory_bytes=kv_mem,
        pool_bytes=pool.bytes,
        weight_bytes_per_rank=w_rank,
        weight_bytes_total=weight_bytes(spec, inputs.weight_dtype),
        state_bytes_per_sequence=state,
        max_model_len=max_model_len,
        max_concurrency=conc,
        max_sequences=seqs,
        bytes_per_sequence=per,
        headroom=_headroom(pool, per),
        memory_by_context=_memory_by_context(inputs, kv, block, pool, max_model_len),
        memory_breakdown=breakdown,
        estimates=estimates,
        notes=notes,
        slots=layout.slots if layout is not None else None,
        sequence_limit=layout.n_ctx_seq if layout is not None else None,
    )


def plan_for_model(model: str | Mapping[str, Any] | ModelSpec, **kwargs: Any) -> CapacityPlan:
    """Convenience: name/path/config dict/spec + CapacityInputs keywords -> plan.
    gpu / gpu_mem_gib resolve the memory when gpu_memory_bytes is not given."""
    if isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, Mapping):
        spec = validate_model_config(model)
    else:
        spec = validate_model_config(load_model_config(model))
    if "gpu_memory_bytes" not in kwargs:
        mem, name = gpu_memory_bytes(kwargs.pop("gpu", None), kwargs.pop("gpu_mem_gib", None))
        kwargs["gpu_memory_bytes"] = mem
        kwargs.setdefault("gpu_name", name)
    else:
        kwargs.pop("gpu", None)
        kwargs.pop("gpu_mem_gib", None)
    if "contexts" in kwargs and kwargs["contexts"] is not None:
        kwargs["contexts"] = tuple(kwargs["contexts"])
    return plan_capacity(CapacityInputs(model=spec, **kwargs))
