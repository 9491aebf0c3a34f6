"""What a token and the weights cost on one GPU: KV bytes per token and weight bytes per rank.

* KV precision bytes per element: bf16/fp16 2, fp8 1 (per-tensor scales, nothing stored per
  token in vLLM, SGLang and TensorRT-LLM). int8: TensorRT-LLM INT8 KV uses a per-tensor scale
  (1 byte/element); llama.cpp ``q8_0`` stores an fp16 scale per 32 elements (34/32 bytes/element).
  int4: llama.cpp ``q4_0`` (18/32 bytes/element). vLLM and SGLang have no int8/int4 KV cache, so
  those combinations are rejected instead of guessed.
* MLA (DeepSeek) caches one latent vector per token and layer, kept whole on every TP rank; a
  standard model's KV heads split across TP ranks, replicated when TP exceeds them.
* Pipeline parallelism splits layers contiguously, earlier stages taking the remainder; the stage
  with the largest KV footprint binds the capacity.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from selection.domain.capacity.base import DTYPE_BYTES, ENGINES, KV_DTYPES, CapacityError
from selection.domain.capacity.model_config import LINEAR_GROUPS, ModelSpec


def validate_parallelism(spec: ModelSpec, tp: int, pp: int) -> None:
    """Reject tensor/pipeline sizes the model cannot be split into, with the rule that fails."""
    for name, value in (("tp", tp), ("pp", pp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CapacityError(f"{name}: must be a positive integer, got {value!r}")
    if spec.num_attention_heads % tp:
        raise CapacityError(f"tp: {tp} must divide num_attention_heads ({spec.num_attention_heads})")
    if spec.attention == "standard":
        kv = spec.num_kv_heads
        if kv % tp and tp % kv:
            raise CapacityError(
                f"tp: {tp} is incompatible with num_key_value_heads ({kv}): need kv_heads % tp == 0 "
                f"(heads split) or tp % kv_heads == 0 (heads replicated)"
            )
    if pp > spec.num_layers:
        raise CapacityError(f"pp: {pp} exceeds num_hidden_layers ({spec.num_layers})")


def kv_element_bytes(kv_dtype: str, engine: str) -> float:
    """Bytes per stored K/V element, scales included where the engine stores them per block."""
    if kv_dtype not in KV_DTYPES:
        raise CapacityError(f"kv_dtype: must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    if engine not in ENGINES:
        raise CapacityError(f"engine: must be one of {', '.join(ENGINES)}, got {engine!r}")
    if kv_dtype in ("bf16", "fp16"):
        return 2.0
    if engine == "lmdeploy":
        raise CapacityError(
            f"kv_dtype: LMDeploy's quantised KV layouts (--quant-policy) are not modelled; plan {kv_dtype} from a "
            "measured engine log, or plan bf16"
        )
    if kv_dtype == "fp8":
        if engine == "llamacpp":
            raise CapacityError("kv_dtype: llama.cpp has no fp8 KV cache; use int8 (q8_0) or int4 (q4_0)")
        return 1.0
    if kv_dtype == "int8":
        if engine == "trtllm":
            return 1.0
        if engine == "llamacpp":
            return 34 / 32
    if kv_dtype == "int4" and engine == "llamacpp":
        return 18 / 32
    raise CapacityError(f"kv_dtype: {kv_dtype} KV cache is not offered by {engine} (use bf16, fp16 or fp8)")


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """The layers each pipeline stage holds: contiguous, earlier stages taking the remainder."""
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


@dataclass(frozen=True)
class KVBytes:
    """Per-token KV bytes. per_rank: one GPU (binding stage); total: all GPUs of the instance."""

    per_layer_per_rank: float  # one attention layer, one rank
    per_rank: float  # all attention layers of the binding stage, one rank
    total: float  # all ranks (TP x PP)
    kv_heads_per_rank: int
    attention_layers_per_rank: int
    replicated_across_tp: bool
    element_bytes: float

    def to_dict(self) -> dict:
        return asdict(self)


def _per_layer_bytes(spec: ModelSpec, kv_dtype: str, tp: int, engine: str) -> tuple[float, int, bool]:
    elt = kv_element_bytes(kv_dtype, engine)
    if spec.attention == "mla":
        # One latent vector (c_kv + k_rope) per token and layer: no separate K and V, no factor 2,
        # and every TP rank keeps the whole latent (it is not split by heads).
        return (spec.kv_lora_rank + spec.qk_rope_head_dim) * elt, 1, True
    kv_rank = max(1, spec.num_kv_heads // tp)
    return 2 * kv_rank * spec.head_dim * elt, kv_rank, tp > spec.num_kv_heads


def kv_bytes_per_token(
    spec: ModelSpec, kv_dtype: str = "bf16", tp: int = 1, pp: int = 1, engine: str = "vllm"
) -> KVBytes:
    """KV bytes one token costs in every attention layer (below any sliding window)."""
    validate_parallelism(spec, tp, pp)
    per_layer, kv_rank, replicated = _per_layer_bytes(spec, kv_dtype, tp, engine)
    attn = [i for i, k in enumerate(spec.layer_kinds) if k in ("full", "sliding")]
    stages = stage_layers(spec.num_layers, pp)
    per_stage = [sum(1 for i in attn if i in r) for r in stages]
    return KVBytes(
        per_layer_per_rank=per_layer,
        per_rank=per_layer * max(per_stage),
        total=per_layer * len(attn) * tp,
        kv_heads_per_rank=kv_rank,
        attention_layers_per_rank=max(per_stage),
        replicated_across_tp=replicated,
        element_bytes=kv_element_bytes(kv_dtype, engine),
    )


def weight_bytes(spec: ModelSpec, weight_dtype: str | None = None) -> float:
    """Bytes of all weights. weight_dtype overrides the checkpoint (bf16/fp16/fp8/int8/int4)."""
    total = spec.total_params
    if weight_dtype is None:
        base = DTYPE_BYTES[spec.torch_dtype]
        quantized = sum(spec.params.get(g, 0) for g in spec.quantized_groups)
        return quantized * spec.weight_quant_bytes + (total - quantized) * base
    if weight_dtype not in ("bf16", "fp16", "fp8", "int8", "int4", "fp32"):
        raise CapacityError(f"weight_dtype: must be bf16, fp16, fp8, int8 or int4, got {weight_dtype!r}")
    if weight_dtype in ("bf16", "fp16", "fp32"):
        return total * DTYPE_BYTES[weight_dtype]
    linear = sum(spec.params.get(g, 0) for g in LINEAR_GROUPS)
    return linear * DTYPE_BYTES[weight_dtype] + (total - linear) * 2.0


def weight_bytes_per_rank(spec: ModelSpec, tp: int, pp: int, weight_dtype: str | None = None) -> float:
    """Weights on the busiest GPU: layers split by PP, everything sharded by TP (vocab-parallel
    embeddings), the first/last stage also holding the embedding/LM head."""
    total = weight_bytes(spec, weight_dtype)
    if pp == 1:
        return total / tp
    emb_bytes = (spec.params["embedding"] + spec.params["lm_head"]) * 2.0
    layer_bytes = max(total - emb_bytes, 0.0)
    stage = max(len(r) for r in stage_layers(spec.num_layers, pp))
    edge = max(spec.params["embedding"], spec.params["lm_head"]) * 2.0
    return (layer_bytes * stage / spec.num_layers + edge) / tp


def valid_tensor_parallel(spec: ModelSpec, largest: int) -> list[int]:
    """The TP sizes up to `largest` the model can be split into (`validate_parallelism`'s rules)."""
    valid = []
    for tp in range(1, min(max(largest, 1), spec.num_attention_heads) + 1):  # a valid TP divides the heads
        try:
            validate_parallelism(spec, tp, 1)
        except CapacityError:
            continue
        valid.append(tp)
    return valid
