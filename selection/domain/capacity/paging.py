"""How one sequence occupies an engine's cache: blocks (pages), windows, constant state.

* Paging: vLLM blocks of 16 tokens (64 for MLA models: the FlashMLA backend forces it), SGLang
  pages of 1 token, TensorRT-LLM ``tokens_per_block`` 32, LMDeploy blocks of 64, llama.cpp one
  contiguous buffer of ``--ctx-size`` cells. A sequence occupies ceil(tokens / block) blocks in
  every layer.
* A sliding-window layer in vLLM holds, at its peak, the last ``window - 1`` tokens plus the
  tokens of one scheduled chunk: ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
  block) + 1`` blocks (``SlidingWindowSpec.max_memory_usage_bytes``, vllm/v1/kv_cache_interface.py
  at v0.11.0; the extra block covers a window that does not start on a block edge). That bound,
  not the bare window, is what vLLM admits a request against. A chunked-local layer (Llama 4)
  holds ``cdiv(min(attention_chunk_size + max_num_batched_tokens, max_model_len), block)`` blocks
  (``ChunkedLocalAttentionSpec``, same file). Other paged engines: ceil(window / block) + 1
  blocks; with 1-token pages the window.
* SSM (Mamba-2) and linear-attention layers hold a constant per-sequence state, computed from the
  config, in the model dtype unless ``ssm_state_dtype`` says otherwise (vLLM's "auto").
"""

from __future__ import annotations

import math

from selection.domain.capacity.base import DTYPE_BYTES, CapacityError, GiB
from selection.domain.capacity.inputs import CapacityInputs
from selection.domain.capacity.memory import KVBytes, stage_layers
from selection.domain.messages import Message
from selection.domain.messages import marked as _

DEFAULT_BLOCK_SIZE = {"vllm": 16, "sglang": 1, "trtllm": 32, "lmdeploy": 64, "llamacpp": 1}
VLLM_MLA_BLOCK_SIZE = 64
# vllm/engine/arg_utils.py (v0.11.0) API-server default max_num_batched_tokens: 8192 on GPUs of at
# least 70 GiB that are not A100s, else 2048.
VLLM_BATCHED_TOKENS_LARGE_GPU, VLLM_BATCHED_TOKENS_OTHER = 8192, 2048


def block_size_for(inputs: CapacityInputs, notes: list[Message]) -> int:
    """Tokens per block (page): the one given, else the engine's default (vLLM MLA: 64, noted)."""
    if inputs.block_size:
        return inputs.block_size
    if inputs.engine == "vllm" and inputs.model.attention == "mla":
        notes.append(Message(_("vLLM MLA: block_size 64 (the FlashMLA backend forces it)")))
        return VLLM_MLA_BLOCK_SIZE
    return DEFAULT_BLOCK_SIZE[inputs.engine]


def state_bytes(inputs: CapacityInputs) -> float:
    """Constant per-sequence state on one rank (SSM / linear attention), binding stage."""
    spec = inputs.model
    if not (spec.ssm_state_elements_per_layer or spec.linear_state_elements_per_layer):
        return 0.0
    dtype = inputs.ssm_state_dtype or spec.torch_dtype
    if dtype not in DTYPE_BYTES:
        raise CapacityError(f"ssm_state_dtype: unsupported {dtype!r}")
    elt = DTYPE_BYTES[dtype]
    best = 0.0
    for r in stage_layers(spec.num_layers, inputs.pp):
        kinds = [spec.layer_kinds[i] for i in r]
        b = (
            (
                kinds.count("ssm") * spec.ssm_state_elements_per_layer
                + kinds.count("linear") * spec.linear_state_elements_per_layer
            )
            * elt
            / inputs.tp
        )
        best = max(best, b)
    return best


def planned_max_model_len(inputs: CapacityInputs) -> int:
    """The longest sequence planned for: max_model_len, else the model's positions, else the longest context."""
    return inputs.max_model_len or inputs.model.max_position_embeddings or max(inputs.contexts)


def vllm_batched_tokens(inputs: CapacityInputs) -> int:
    """vLLM's max_num_batched_tokens: given, else the API server's default for the GPU (v0.11.0
    vllm/engine/arg_utils.py: 8192 with at least 70 GiB and not an A100, else 2048)."""
    if inputs.max_num_batched_tokens:
        return inputs.max_num_batched_tokens
    large = inputs.gpu_memory_bytes >= 70 * GiB and "a100" not in (inputs.gpu_name or "").lower()
    return VLLM_BATCHED_TOKENS_LARGE_GPU if large else VLLM_BATCHED_TOKENS_OTHER


def _local_cap_blocks(inputs: CapacityInputs, block: int) -> int | None:
    """Blocks one sequence holds at most in a sliding-window / chunked-local layer (None: no cap)."""
    spec = inputs.model
    window = spec.sliding_window
    if window is None:
        return None
    if inputs.engine == "vllm":
        batched, longest = vllm_batched_tokens(inputs), planned_max_model_len(inputs)
        if spec.local_attention == "chunked":  # ChunkedLocalAttentionSpec (v0.11.0)
            return math.ceil(min(window + batched, longest) / block)
        return math.ceil(min(window - 1 + batched, longest) / block) + 1  # SlidingWindowSpec (v0.11.0)
    return window if block == 1 else math.ceil(window / block) + 1


def sequence_bytes(inputs: CapacityInputs, kv: KVBytes, block: int, context: int) -> float:
    """Bytes one sequence of `context` tokens holds on the binding rank, paging included."""
    spec = inputs.model
    blocks_full = math.ceil(context / block)
    cap_blocks = _local_cap_blocks(inputs, block)
    best = 0.0
    for r in stage_layers(spec.num_layers, inputs.pp):
        kinds = [spec.layer_kinds[i] for i in r]
        full, sliding = kinds.count("full"), kinds.count("sliding")
        tokens_full = blocks_full * block
        if sliding:
            tokens_sliding = (blocks_full if cap_blocks is None else min(blocks_full, cap_blocks)) * block
        else:
            tokens_sliding = 0
        best = max(best, kv.per_layer_per_rank * (full * tokens_full + sliding * tokens_sliding))
    return best + state_bytes(inputs)
