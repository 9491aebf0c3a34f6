"""KV-cache capacity planning from a model's real config.json, engine-exact where engines are exact.

Why this module exists: memory, not compute, is usually the first limit of an inference service,
and published planners get it wrong in known ways (skipping vLLM's memory fraction, charging
sliding-window layers for the whole context, dividing MLA caches by tensor parallelism, using query
heads instead of KV heads). Everything here is plain Python so that the CLI, the API and the tests
share one model. Quantities that are not fixed by the config or the engine's documented rules
(activation peak, non-torch memory, CUDA-graph memory, SGLang's auto memory fraction) are returned
as labelled *estimates* with their source and can be overridden with measured values.

Assumptions worth knowing (also repeated in the plan's ``estimates``/``notes``):

* KV precision bytes per element: bf16/fp16 2, fp8 1 (per-tensor scales, nothing stored per
  token in vLLM, SGLang and TensorRT-LLM). int8: TensorRT-LLM INT8 KV uses a per-tensor scale
  (1 byte/element); llama.cpp ``q8_0`` stores an fp16 scale per 32 elements (34/32 bytes/element).
  int4: llama.cpp ``q4_0`` (18/32 bytes/element). vLLM and SGLang have no int8/int4 KV cache, so
  those combinations are rejected instead of guessed.
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
* Engines' memory budgets: vLLM ``gpu_memory_utilization`` of TOTAL memory (0.9 in v0.11.0 and
  earlier, 0.92 by v0.33.0; the catalog holds the default of each version), SGLang
  ``mem_fraction_static`` of total memory for weights + KV, TensorRT-LLM
  ``free_gpu_memory_fraction`` and LMDeploy ``cache_max_entry_count`` (0.8) of the memory FREE
  after loading (LMDeploy's PyTorch engine first sets aside its prefill/logits runtime buffers),
  llama.cpp exactly ``-c`` cells: not a share of memory at all.
* llama.cpp (``llama-server``): ``-c`` 0 means the model's trained context; ``-np`` slots (default
  auto: 4 slots over one unified buffer) split it (``n_ctx / np`` cells each, padded to 256) unless
  ``--kv-unified`` shares it; sliding-window layers keep ``min(n_ctx_seq, n_swa x (np if unified
  else 1) + n_ubatch)`` cells per stream, padded to 256 (src/llama-context.cpp,
  src/llama-kv-cache-iswa.cpp; tools/server/README.md at the catalog's commit). At most ``np``
  requests run at once.
* SSM (Mamba-2) and linear-attention layers hold a constant per-sequence state, computed from the
  config, in the model dtype unless ``ssm_state_dtype`` says otherwise (vLLM's "auto").
* Pipeline parallelism splits layers contiguously, earlier stages taking the remainder; the stage
  with the largest KV footprint binds the capacity.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from selection.domain.messages import Message


def _(text: str) -> str:  # named `_` so `makemessages` collects the templates; translated where shown
    return text


GiB = 1024**3
MiB = 1024**2

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "model_configs"

ENGINES = ("vllm", "sglang", "trtllm", "lmdeploy", "llamacpp")
KV_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")

DEFAULT_BLOCK_SIZE = {"vllm": 16, "sglang": 1, "trtllm": 32, "lmdeploy": 64, "llamacpp": 1}
VLLM_MLA_BLOCK_SIZE = 64
# Used only when the engine version's own default is not given (plans for candidates take it from
# the catalog): 0.92 in vllm/config/cache.py of v0.33.0, 0.9 in v0.11.0 and before.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
VLLM_PREVIOUS_DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
# vllm/engine/arg_utils.py (v0.11.0) API-server default max_num_batched_tokens: 8192 on GPUs of at
# least 70 GiB that are not A100s, else 2048.
VLLM_BATCHED_TOKENS_LARGE_GPU, VLLM_BATCHED_TOKENS_OTHER = 8192, 2048
TRTLLM_DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
# lmdeploy/messages.py and lmdeploy/cli/utils.py at v0.16.0: --cache-max-entry-count 0.8 ("the
# percentage of free gpu memory occupied by the k/v cache, excluding weights"), blocks of 64
# tokens, max_prefill_token_num 8192; lmdeploy/utils.py get_max_batch_size for the logits reserve.
LMDEPLOY_DEFAULT_CACHE_MAX_ENTRY_COUNT = 0.8
LMDEPLOY_MAX_PREFILL_TOKEN_NUM = 8192
LMDEPLOY_MAX_BATCH_SIZE = {"a100": 384, "a800": 384, "h100": 1024, "h800": 1024, "l20y": 1024, "h200": 1024}
LMDEPLOY_OTHER_MAX_BATCH_SIZE = 128
# llama.cpp (tools/server/README.md at 00dc805): -np -1 = auto = 4 slots over a unified buffer;
# -ub 512; cells padded to 256 (src/llama-context.cpp, src/llama-kv-cache-iswa.cpp).
LLAMACPP_AUTO_SLOTS = 4
LLAMACPP_DEFAULT_UBATCH = 512
LLAMACPP_PAD = 256

# GPU memory as the driver reports it (what torch.cuda.mem_get_info / vLLM's "total_gpu_memory"
# see), not the marketing figure.
# Approximate: measure yours (vLLM logs it as "total_gpu_memory (...GiB)") and pass gpu_mem_gib.
GPU_MEMORY_GIB = {
    "A100-40GB": 39.39,  # vLLM issue 12330 log: total_gpu_memory (39.39GiB)
    "A100-80GB": 79.15,
    "H100-80GB": 79.22,  # vLLM PR 10511 / 12126 logs on H100-80G: total_gpu_memory 79.22GiB
    "H200-141GB": 139.81,  # 143,771 MiB board as torch sees it, approximately
    "L40S-48GB": 44.39,
}

_DTYPE_BYTES = {
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "float32": 4.0,
    "fp32": 4.0,
    "float": 4.0,
    "fp8": 1.0,
    "float8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


class CapacityError(ValueError):
    """Invalid model config or capacity input; the message names the field and the problem."""


# --------------------------------------------------------------------------------------------
# Loading and validating a config.json
# --------------------------------------------------------------------------------------------


def shipped_models(directory: Path | None = None) -> list[str]:
    """Names of the model configs shipped under selection/fixtures/model_configs/.

    A config is either ``<name>.json`` or a folder ``<name>/`` holding a Hugging Face ``config.json``.
    """
    directory = directory or FIXTURES_DIR
    if not directory.is_dir():
        return []
    names = {p.stem for p in directory.glob("*.json")} | {p.parent.name for p in directory.glob("*/config.json")}
    return sorted(names)


def _shipped_path(name: str) -> Path:
    flat = FIXTURES_DIR / f"{name}.json"
    return flat if flat.is_file() else FIXTURES_DIR / name / "config.json"


def model_context(name: str) -> int | None:
    """The context a shipped model serves (its max_position_embeddings), or None when the name is not a
    shipped config or the config does not state it: the one-pager's longest request must fit in it."""
    spec = model_spec(name)
    return (spec.max_position_embeddings or None) if spec is not None else None


def load_model_config(name_or_path: str | Path) -> dict:
    """Return the raw config dict for a shipped model name (case-insensitive) or a JSON file path."""
    text = str(name_or_path).strip()
    if not text:
        raise CapacityError("model: must be a shipped model name or a path to a config.json, got ''")
    path = Path(text)
    if path.is_file():
        return _read_json(path, text)
    wanted = path.name[:-5] if path.name.endswith(".json") else path.name
    wanted = wanted.split("/")[-1].lower()
    for stem in shipped_models():
        if stem.lower() == wanted:
            return _read_json(_shipped_path(stem), stem)
    raise CapacityError(
        f"model: {text!r} is neither a readable config.json nor a shipped model "
        f"(shipped: {', '.join(shipped_models())})"
    )


def _read_json(path: Path, label: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CapacityError(f"model: {label!r} is not a readable JSON config ({exc})") from exc
    if not isinstance(data, dict):
        raise CapacityError(f"model: {label!r} must hold a JSON object, got {type(data).__name__}")
    # a Hugging Face folder's config.json is named after its folder
    data.setdefault("_name", path.parent.name if path.name == "config.json" and path.parent.name else path.stem)
    return data


@dataclass
class ModelSpec:
    """What the capacity model needs from a config, validated. Per-layer kinds drive growth.

    layer_kinds: one entry per layer: "full" (attention over the whole context), "sliding"
    (attention over at most ``sliding_window`` tokens), "ssm" (Mamba-2 state), "linear"
    (linear attention / gated delta net state) or "none" (MLP/MoE-only block, no cache).
    """

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    intermediate_size: int = 0  # MLP width (per expert for MoE); sizes the activation estimate
    attention: str = "standard"  # "standard" | "mla"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    layer_kinds: tuple[str, ...] = ()
    sliding_window: int | None = None
    local_attention: str = "sliding"  # what the "sliding" layers do: "sliding" window or "chunked" (Llama 4)
    ssm_state_elements_per_layer: int = 0  # per sequence, whole model width (sharded by TP)
    linear_state_elements_per_layer: int = 0
    params: dict[str, int] = field(default_factory=dict)  # breakdown, whole model
    quantized_groups: tuple[str, ...] = ()  # param groups stored in the quantised format
    weight_quant: str | None = None  # "fp8", "mxfp4", "int4", "int8" or None
    weight_quant_bytes: float = 2.0  # bytes per quantised parameter incl. scales
    torch_dtype: str = "bf16"
    notes: tuple[Message, ...] = ()

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    def count(self, kind: str) -> int:
        return sum(1 for k in self.layer_kinds if k == kind)


def _flatten(config: Mapping[str, Any]) -> dict:
    """Multimodal configs nest the language model under text_config; lift it, keep quantisation."""
    if not isinstance(config, Mapping):
        raise CapacityError(f"config: must be a JSON object, got {type(config).__name__}")
    flat = dict(config)
    text = config.get("text_config")
    if text is not None:
        if not isinstance(text, Mapping):
            raise CapacityError("config.text_config: must be an object")
        flat = {k: v for k, v in config.items() if k not in ("text_config", "vision_config")}
        flat.update(text)
        for key in ("quantization_config", "torch_dtype"):
            if key in config and key not in text:
                flat[key] = config[key]
    return flat


def _pos_int(cfg: Mapping, key: str, default: Any = ..., *, allow_none: bool = False) -> Any:
    if key not in cfg or (cfg[key] is None and not allow_none and default is not ...):
        if default is ...:
            raise CapacityError(f"config.{key}: missing (required)")
        return default
    value = cfg[key]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CapacityError(f"config.{key}: must be a positive integer, got {value!r}")
    return value


# transformers defaults that published configs omit
_MODEL_TYPE_DEFAULTS = {
    "gemma3_text": {
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
        "head_dim": 256,
    },
    "gemma2": {"sliding_window_pattern": 2, "tie_word_embeddings": True},
}


def validate_model_config(config: Mapping[str, Any]) -> ModelSpec:
    """Validate a Hugging Face config.json dict and derive the spec; errors name the field."""
    cfg = _flatten(config)
    model_type = str(cfg.get("model_type") or "unknown")
    notes: list[Message] = []
    for key, value in _MODEL_TYPE_DEFAULTS.get(model_type, {}).items():
        if key not in cfg:
            cfg[key] = value
            notes.append(
                Message(
                    _("config.%(key)s absent: transformers' %(model_type)s default %(value)s applied"),
                    {"key": key, "model_type": model_type, "value": repr(value)},
                )
            )

    layers = _pos_int(cfg, "num_hidden_layers")
    hidden = _pos_int(cfg, "hidden_size")
    heads = _pos_int(cfg, "num_attention_heads")
    vocab = _pos_int(cfg, "vocab_size")
    max_pos = _pos_int(cfg, "max_position_embeddings", 0) or 0
    is_mla = cfg.get("kv_lora_rank") is not None

    if "num_key_value_heads" in cfg and cfg["num_key_value_heads"] is not None:
        kv_heads = _pos_int(cfg, "num_key_value_heads")
    else:
        kv_heads = heads
        if not is_mla:
            notes.append(
                Message(
                    _("config.num_key_value_heads absent: multi-head attention assumed (kv heads = attention heads)")
                )
            )
    if not is_mla:
        if kv_heads > heads:
            raise CapacityError(f"config.num_key_value_heads: {kv_heads} exceeds num_attention_heads ({heads})")
        if heads % kv_heads:
            raise CapacityError(f"config.num_key_value_heads: {kv_heads} must divide num_attention_heads ({heads})")

    head_dim = _pos_int(cfg, "head_dim", None, allow_none=True)
    if head_dim is None:
        if hidden % heads:
            raise CapacityError(
                f"config.head_dim: missing and hidden_size ({hidden}) is not a multiple of "
                f"num_attention_heads ({heads})"
            )
        head_dim = hidden // heads

    kv_lora = rope_dim = 0
    if is_mla:
        kv_lora = _pos_int(cfg, "kv_lora_rank")
        rope_dim = _pos_int(cfg, "qk_rope_head_dim")

    window = cfg.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise CapacityError(f"config.sliding_window: must be a positive integer or null, got {window!r}")

    kinds, used_window, kind_notes = _layer_kinds(cfg, model_type, layers, window)
    notes.extend(kind_notes)
    local = "chunked" if _chunked_local(cfg, model_type) and "sliding" in kinds else "sliding"

    ssm_elems = _mamba_state_elements(cfg, hidden) if "ssm" in kinds else 0
    lin_elems = _linear_state_elements(cfg) if "linear" in kinds else 0

    torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if torch_dtype not in _DTYPE_BYTES:
        raise CapacityError(f"config.torch_dtype: unsupported dtype {torch_dtype!r}")
    torch_dtype = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}.get(
        torch_dtype, torch_dtype
    )

    spec = ModelSpec(
        name=str(cfg.get("_name") or cfg.get("_name_or_path") or model_type),
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=1 if is_mla else kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        intermediate_size=int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 4 * hidden),
        attention="mla" if is_mla else "standard",
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope_dim,
        layer_kinds=tuple(kinds),
        sliding_window=used_window,
        local_attention=local,
        ssm_state_elements_per_layer=ssm_elems,
        linear_state_elements_per_layer=lin_elems,
        torch_dtype=torch_dtype,
    )
    spec.params = _count_params(cfg, spec)
    quant, qbytes, groups, qnotes = _weight_quantization(cfg)
    spec.weight_quant, spec.weight_quant_bytes, spec.quantized_groups = quant, qbytes, groups
    notes.extend(qnotes)
    spec.notes = tuple(notes)
    return spec


_LAYER_TYPE_MAP = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "full": "full",
    "sliding_attention": "sliding",
    "sliding": "sliding",
    "local": "sliding",
    "sliding_window": "sliding",
    "chunked_attention": "sliding",
    "linear_attention": "linear",
    "mamba": "ssm",
    "mamba2": "ssm",
    "ssm": "ssm",
}


def _chunked_local(cfg: Mapping, model_type: str) -> bool:
    """Whether the model's local layers attend within fixed chunks (Llama 4) rather than a window."""
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if "chunked_attention" in types and any(t in ("sliding_attention", "sliding", "local") for t in types):
            raise CapacityError("config.layer_types: sliding-window and chunked-local layers in one model")
        return "chunked_attention" in types
    return model_type.startswith("llama4") and cfg.get("attention_chunk_size") is not None


def _layer_kinds(cfg: Mapping, model_type: str, layers: int, window: int | None):
    """Per-layer cache kind. Honours use_sliding_window, layer_types, patterns, hybrid layouts."""
    notes: list[Message] = []
    if cfg.get("layer_types") is None and model_type.startswith("llama4") and cfg.get("attention_chunk_size"):
        # Llama 4: layers with RoPE (no_rope_layers[i] == 1) attend within attention_chunk_size
        # chunks, the NoPE layers (every 4th by transformers' default) globally
        chunk = _pos_int(cfg, "attention_chunk_size")
        flags = cfg.get("no_rope_layers")
        if flags is None:
            every = cfg.get("no_rope_layer_interval") or 4
            flags = [int((i + 1) % every != 0) for i in range(layers)]
            notes.append(
                Message(
                    _("config.no_rope_layers absent: transformers' default (every %(every)sth layer global) applied"),
                    {"every": every},
                )
            )
        if not isinstance(flags, list) or len(flags) != layers:
            raise CapacityError(f"config.no_rope_layers: must list one flag per layer ({layers})")
        return ["sliding" if flag else "full" for flag in flags], chunk, notes
    if cfg.get("layer_types") is not None:
        types = cfg["layer_types"]
        if not isinstance(types, list) or len(types) != layers:
            raise CapacityError(
                f"config.layer_types: must list one type per layer ({layers}), got "
                f"{len(types) if isinstance(types, list) else type(types).__name__}"
            )
        kinds = []
        for i, t in enumerate(types):
            if t not in _LAYER_TYPE_MAP:
                raise CapacityError(f"config.layer_types[{i}]: unknown layer type {t!r}")
            kinds.append(_LAYER_TYPE_MAP[t])
        if "sliding" in kinds and window is None:
            window = cfg.get("attention_chunk_size")
            if window is None:
                raise CapacityError("config.sliding_window: required when layer_types has sliding layers")
        return kinds, (window if "sliding" in kinds else None), notes

    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) != layers:
            raise CapacityError(
                f"config.hybrid_override_pattern: must have one character per layer ({layers}), "
                f"got {len(pattern) if isinstance(pattern, str) else pattern!r}"
            )
        mapping = {"M": "ssm", "*": "full", "-": "none", "E": "none"}
        bad = sorted(set(pattern) - set(mapping))
        if bad:
            raise CapacityError(f"config.hybrid_override_pattern: unknown layer symbols {bad}")
        return [mapping[c] for c in pattern], None, notes

    if model_type == "qwen3_next" and cfg.get("full_attention_interval"):
        every = _pos_int(cfg, "full_attention_interval")
        return ["full" if (i + 1) % every == 0 else "linear" for i in range(layers)], None, notes

    if window is None:
        return ["full"] * layers, None, notes

    swp = cfg.get("sliding_window_pattern")
    if swp is not None:
        if isinstance(swp, bool) or not isinstance(swp, int) or swp <= 0:
            raise CapacityError(f"config.sliding_window_pattern: must be a positive integer, got {swp!r}")
        return ["full" if (i + 1) % swp == 0 else "sliding" for i in range(layers)], window, notes

    if "use_sliding_window" in cfg:
        if not cfg["use_sliding_window"]:
            notes.append(
                Message(_("config.sliding_window=%(window)s ignored: use_sliding_window is false"), {"window": window})
            )
            return ["full"] * layers, None, notes
        first = cfg.get("max_window_layers")
        first = 0 if first is None else _pos_int(cfg, "max_window_layers")
        kinds = ["sliding" if i >= first else "full" for i in range(layers)]
        return kinds, (window if "sliding" in kinds else None), notes

    # Mistral v0.1 style: a window and no flag means every layer slides.
    return ["sliding"] * layers, window, notes


def _mamba_state_elements(cfg: Mapping, hidden: int) -> int:
    """Mamba-2 per-sequence state per layer: conv state + SSM state (elements, whole width)."""
    nheads = cfg.get("mamba_num_heads") or cfg.get("mamba_n_heads")
    head_dim = cfg.get("mamba_head_dim") or cfg.get("mamba_d_head")
    d_state = cfg.get("ssm_state_size") or cfg.get("mamba_d_state")
    groups = cfg.get("n_groups") or cfg.get("mamba_n_groups") or 1
    kernel = cfg.get("conv_kernel") or cfg.get("mamba_d_conv") or 4
    if not nheads or not head_dim or not d_state:
        raise CapacityError(
            "config.mamba_num_heads/mamba_head_dim/ssm_state_size: required to size the SSM state of a hybrid model"
        )
    d_inner = nheads * head_dim
    conv_dim = d_inner + 2 * groups * d_state
    return conv_dim * (kernel - 1) + nheads * head_dim * d_state


def _linear_state_elements(cfg: Mapping) -> int:
    """Gated DeltaNet (Qwen3-Next style) per-sequence state per layer: recurrent + conv state."""
    nk = cfg.get("linear_num_key_heads")
    nv = cfg.get("linear_num_value_heads")
    dk = cfg.get("linear_key_head_dim")
    dv = cfg.get("linear_value_head_dim")
    kernel = cfg.get("linear_conv_kernel_dim") or 4
    if not all((nk, nv, dk, dv)):
        raise CapacityError(
            "config.linear_num_key_heads/linear_num_value_heads/linear_key_head_dim/"
            "linear_value_head_dim: required to size the linear-attention state"
        )
    conv_dim = 2 * nk * dk + nv * dv
    return nv * dk * dv + conv_dim * (kernel - 1)


def _attention_params_per_layer(cfg: Mapping, spec: ModelSpec) -> int:
    """Parameters of one attention layer (MLA's low-rank projections, or Q/K/V/O with biases)."""
    H, heads, kvh, hd = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    if spec.attention == "mla":
        nope = cfg.get("qk_nope_head_dim") or 128
        vdim = cfg.get("v_head_dim") or 128
        q_rank = cfg.get("q_lora_rank")
        qk = nope + spec.qk_rope_head_dim
        q = (H * q_rank + q_rank + q_rank * heads * qk) if q_rank else H * heads * qk
        kv = (
            H * (spec.kv_lora_rank + spec.qk_rope_head_dim)
            + spec.kv_lora_rank
            + spec.kv_lora_rank * heads * (nope + vdim)
        )
        return q + kv + heads * vdim * H
    attn = H * heads * hd + 2 * H * kvh * hd + heads * hd * H
    if spec.model_type == "qwen2" or cfg.get("attention_bias"):
        attn += (heads + 2 * kvh) * hd
        if cfg.get("attention_bias"):
            attn += H
    if spec.model_type == "gpt_oss":
        attn += heads  # attention sinks
    return attn


def _mlp_params(cfg: Mapping, spec: ModelSpec) -> dict[str, int]:
    """Dense MLP, routed experts, shared experts and router parameters, whole model."""
    H = spec.hidden_size
    p = {"dense_mlp": 0, "experts": 0, "shared_experts": 0, "router": 0}
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    inter = cfg.get("intermediate_size") or 4 * H
    moe_inter = cfg.get("moe_intermediate_size") or inter
    gated = str(cfg.get("mlp_hidden_act") or cfg.get("hidden_act") or "silu") != "relu2"
    mats = 3 if gated else 2
    first_dense = cfg.get("first_k_dense_replace") or 0
    freq = cfg.get("moe_layer_freq") or 1
    shared = cfg.get("n_shared_experts") or 0
    shared_inter = cfg.get("shared_expert_intermediate_size") or cfg.get("moe_shared_expert_intermediate_size")

    def add_moe() -> None:
        per_expert = mats * H * moe_inter
        if spec.model_type == "gpt_oss":
            per_expert += 2 * moe_inter + H  # gate_up and down biases
        p["experts"] += experts * per_expert
        p["router"] += H * experts + (experts if spec.model_type == "gpt_oss" else 0)
        if shared:
            p["shared_experts"] += shared * mats * H * moe_inter
        elif shared_inter:
            p["shared_experts"] += mats * H * shared_inter

    if spec.model_type == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern", "")
        for ch in pattern:
            if ch == "-":
                p["dense_mlp"] += mats * H * inter
            elif ch == "E":
                add_moe()
        return p
    for i in range(spec.num_layers):
        if spec.layer_kinds and spec.layer_kinds[i] == "none":
            continue
        if experts and i >= first_dense and i % freq == 0:
            add_moe()
        else:
            p["dense_mlp"] += mats * H * inter
    return p


def _ssm_params_per_layer(cfg: Mapping, spec: ModelSpec) -> int:
    """Parameters of one Mamba-2 block."""
    H = spec.hidden_size
    nh = cfg.get("mamba_num_heads") or 0
    d_inner = nh * (cfg.get("mamba_head_dim") or 0)
    ds, g = cfg.get("ssm_state_size") or 0, cfg.get("n_groups") or 1
    kernel = cfg.get("conv_kernel") or 4
    conv_dim = d_inner + 2 * g * ds
    return H * (2 * d_inner + 2 * g * ds + nh) + conv_dim * (kernel + 1) + 3 * nh + d_inner + d_inner * H


def _linear_params_per_layer(cfg: Mapping, spec: ModelSpec) -> int:
    """Parameters of one linear-attention (gated delta net) layer."""
    H = spec.hidden_size
    nk, nv = cfg.get("linear_num_key_heads"), cfg.get("linear_num_value_heads")
    dk, dv = cfg.get("linear_key_head_dim"), cfg.get("linear_value_head_dim")
    kernel = cfg.get("linear_conv_kernel_dim") or 4
    return H * (2 * nk * dk + 2 * nv * dv + 2 * nv) + (2 * nk * dk + nv * dv) * kernel + nv * dv * H


def _count_params(cfg: Mapping, spec: ModelSpec) -> dict[str, int]:
    """Parameter count by group from the config (embeddings, attention, MLP, experts, SSM)."""
    H, L, V = spec.hidden_size, spec.num_layers, spec.vocab_size
    n_attn = sum(1 for k in spec.layer_kinds if k in ("full", "sliding"))
    n_ssm, n_lin = spec.count("ssm"), spec.count("linear")
    mlp = _mlp_params(cfg, spec)
    return {
        "embedding": V * H,
        "lm_head": 0 if cfg.get("tie_word_embeddings", True) else V * H,
        "attention": n_attn * _attention_params_per_layer(cfg, spec),
        "dense_mlp": mlp["dense_mlp"],
        "experts": mlp["experts"],
        "shared_experts": mlp["shared_experts"],
        "router": mlp["router"],
        "ssm": n_ssm * _ssm_params_per_layer(cfg, spec) if n_ssm else 0,
        "linear_attention": n_lin * _linear_params_per_layer(cfg, spec) if n_lin else 0,
        "norms_and_biases": H + 2 * H * L,
    }


_LINEAR_GROUPS = ("attention", "dense_mlp", "experts", "shared_experts", "ssm", "linear_attention")


def _weight_quantization(cfg: Mapping):
    """Which parameter groups a checkpoint stores quantised, and bytes per quantised parameter."""
    q = cfg.get("quantization_config")
    if not q:
        return None, 2.0, (), []
    if not isinstance(q, Mapping):
        raise CapacityError("config.quantization_config: must be an object")
    method = str(q.get("quant_method") or "").lower()
    if method == "fp8":
        block = q.get("weight_block_size") or [128, 128]
        per = 1.0 + 4.0 / (block[0] * block[1])  # fp32 scale_inv per block
        note = Message(_("weights: fp8 checkpoint, block %(block)s scales counted"), {"block": str(block)})
        return "fp8", per, _LINEAR_GROUPS, [note]
    if method == "mxfp4":
        return (
            "mxfp4",
            4.25 / 8,
            ("experts",),
            [Message(_("weights: MXFP4 experts (4-bit + one 8-bit scale per 32), other modules in torch_dtype"))],
        )
    if method in ("awq", "gptq", "compressed-tensors", "bitsandbytes"):
        bits = q.get("bits") or q.get("w_bit") or 4
        group = q.get("group_size") or q.get("q_group_size") or 128
        per = bits / 8 + (2 + bits / 8) / group  # fp16 scale + packed zero per group
        note = Message(
            _("weights: %(method)s int%(bits)s, group %(group)s"), {"method": method, "bits": bits, "group": group}
        )
        return f"int{bits}", per, _LINEAR_GROUPS, [note]
    raise CapacityError(f"config.quantization_config.quant_method: unsupported {method!r}")


# --------------------------------------------------------------------------------------------
# KV bytes per token
# --------------------------------------------------------------------------------------------


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


def model_spec(name: str) -> ModelSpec | None:
    """The shipped model config `name` as a ModelSpec, or None when it is not one kvselect ships."""
    if not (name or "").strip():
        return None
    try:
        return validate_model_config(load_model_config(name))
    except CapacityError:
        return None


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


def _stage_layers(num_layers: int, pp: int) -> list[range]:
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
    stages = _stage_layers(spec.num_layers, pp)
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


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def weight_bytes(spec: ModelSpec, weight_dtype: str | None = None) -> float:
    """Bytes of all weights. weight_dtype overrides the checkpoint (bf16/fp16/fp8/int8/int4)."""
    total = spec.total_params
    if weight_dtype is None:
        base = _DTYPE_BYTES[spec.torch_dtype]
        quantized = sum(spec.params.get(g, 0) for g in spec.quantized_groups)
        return quantized * spec.weight_quant_bytes + (total - quantized) * base
    if weight_dtype not in ("bf16", "fp16", "fp8", "int8", "int4", "fp32"):
        raise CapacityError(f"weight_dtype: must be bf16, fp16, fp8, int8 or int4, got {weight_dtype!r}")
    if weight_dtype in ("bf16", "fp16", "fp32"):
        return total * _DTYPE_BYTES[weight_dtype]
    linear = sum(spec.params.get(g, 0) for g in _LINEAR_GROUPS)
    return linear * _DTYPE_BYTES[weight_dtype] + (total - linear) * 2.0


def weight_bytes_per_rank(spec: ModelSpec, tp: int, pp: int, weight_dtype: str | None = None) -> float:
    """Weights on the busiest GPU: layers split by PP, everything sharded by TP (vocab-parallel
    embeddings), the first/last stage also holding the embedding/LM head."""
    total = weight_bytes(spec, weight_dtype)
    if pp == 1:
        return total / tp
    emb_bytes = (spec.params["embedding"] + spec.params["lm_head"]) * 2.0
    layer_bytes = max(total - emb_bytes, 0.0)
    stage = max(len(r) for r in _stage_layers(spec.num_layers, pp))
    edge = max(spec.params["embedding"], spec.params["lm_head"]) * 2.0
    return (layer_bytes * stage / spec.num_layers + edge) / tp


# --------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------


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
        return _sequence_bytes(self.inputs, self.kv, self.block_size, context)

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
            "kv_bytes_per_token": _num(self.kv_bytes_per_token),
            "kv_bytes_per_token_total": _num(self.kv_bytes_per_token_total),
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
            "bytes_per_block": _num(self.bytes_per_block),
            "num_blocks": self.num_blocks,
            "token_capacity": self.token_capacity,
            "kv_memory_bytes": int(self.kv_memory_bytes),
            "kv_memory_gib": round(self.kv_memory_bytes / GiB, 2),
            "weight_bytes_per_rank": int(self.weight_bytes_per_rank),
            "weight_gib_per_rank": round(self.weight_bytes_per_rank / GiB, 2),
            "weight_bytes_total": int(self.weight_bytes_total),
            "params_total": i.model.total_params,
            "state_bytes_per_sequence": _num(self.state_bytes_per_sequence),
            "max_model_len": self.max_model_len,
            "max_concurrency": {str(k): v for k, v in self.max_concurrency.items()},
            "max_sequences": {str(k): v for k, v in self.max_sequences.items()},
            "bytes_per_sequence": {str(k): _num(v) for k, v in self.bytes_per_sequence.items()},
            "headroom": self.headroom,
            "memory_by_context": self.memory_by_context,
            "memory_breakdown": {k: _num(v) for k, v in self.memory_breakdown.items()},
            "estimates": self.estimates,
            "notes": [note.to_dict() for note in self.notes],  # stored messages; plain() gives the English
        }


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 4)


def _estimate(name: str, value: float, source: str, overridden: bool = False) -> dict:
    return {
        "name": name,
        "value": _num(value),
        "source": ("measured/override: " if overridden else "estimate: ") + source,
    }


def _block_size(inputs: CapacityInputs, notes: list[Message]) -> int:
    if inputs.block_size:
        return inputs.block_size
    if inputs.engine == "vllm" and inputs.model.attention == "mla":
        notes.append(Message(_("vLLM MLA: block_size 64 (the FlashMLA backend forces it)")))
        return VLLM_MLA_BLOCK_SIZE
    return DEFAULT_BLOCK_SIZE[inputs.engine]


def _state_bytes(inputs: CapacityInputs) -> float:
    """Constant per-sequence state on one rank (SSM / linear attention), binding stage."""
    spec = inputs.model
    if not (spec.ssm_state_elements_per_layer or spec.linear_state_elements_per_layer):
        return 0.0
    dtype = inputs.ssm_state_dtype or spec.torch_dtype
    if dtype not in _DTYPE_BYTES:
        raise CapacityError(f"ssm_state_dtype: unsupported {dtype!r}")
    elt = _DTYPE_BYTES[dtype]
    best = 0.0
    for r in _stage_layers(spec.num_layers, inputs.pp):
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


def _max_model_len(inputs: CapacityInputs) -> int:
    return inputs.max_model_len or inputs.model.max_position_embeddings or max(inputs.contexts)


def _vllm_batched_tokens(inputs: CapacityInputs) -> int:
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
        batched, longest = _vllm_batched_tokens(inputs), _max_model_len(inputs)
        if spec.local_attention == "chunked":  # ChunkedLocalAttentionSpec (v0.11.0)
            return math.ceil(min(window + batched, longest) / block)
        return math.ceil(min(window - 1 + batched, longest) / block) + 1  # SlidingWindowSpec (v0.11.0)
    return window if block == 1 else math.ceil(window / block) + 1


def _sequence_bytes(inputs: CapacityInputs, kv: KVBytes, block: int, context: int) -> float:
    """Bytes one sequence of `context` tokens holds on the binding rank, paging included."""
    spec = inputs.model
    blocks_full = math.ceil(context / block)
    cap_blocks = _local_cap_blocks(inputs, block)
    best = 0.0
    for r in _stage_layers(spec.num_layers, inputs.pp):
        kinds = [spec.layer_kinds[i] for i in r]
        full, sliding = kinds.count("full"), kinds.count("sliding")
        tokens_full = blocks_full * block
        if sliding:
            tokens_sliding = (blocks_full if cap_blocks is None else min(blocks_full, cap_blocks)) * block
        else:
            tokens_sliding = 0
        best = max(best, kv.per_layer_per_rank * (full * tokens_full + sliding * tokens_sliding))
    return best + _state_bytes(inputs)


def _pad(value: int, to: int = LLAMACPP_PAD) -> int:
    return -(-value // to) * to


@dataclass(frozen=True)
class LlamaCppLayout:
    """How llama-server lays out its KV buffer from its flags (see the module docstring)."""

    n_ctx: int  # cells of the full-attention buffer, all streams
    n_ctx_seq: int  # the longest sequence one slot holds
    slots: int  # -np: requests served at once
    unified: bool
    streams: int  # 1 when unified, else one per slot
    swa_cells: int  # cells per stream of a sliding-window layer
    notes: tuple[Message, ...]


def llamacpp_layout(inputs: CapacityInputs) -> LlamaCppLayout:
    spec = inputs.model
    notes = []
    ctx = inputs.ctx_size
    if ctx is None:
        if not spec.max_position_embeddings:
            raise CapacityError(
                "ctx_size: llama-server's -c 0 takes the model's trained context, and the config has no "
                "max_position_embeddings; give -c"
            )
        ctx = spec.max_position_embeddings
        notes.append(Message(_("-c not given: llama-server takes the model's trained context (%(ctx)s)"), {"ctx": ctx}))
    if inputs.n_parallel is None:  # tools/server: "n_parallel is set to auto, using n_parallel = 4 and kv_unified"
        slots, unified = LLAMACPP_AUTO_SLOTS, True
        notes.append(
            Message(
                _("-np not given: llama-server's auto is %(slots)s slots over one unified KV buffer"), {"slots": slots}
            )
        )
    else:
        slots, unified = inputs.n_parallel, bool(inputs.kv_unified)
    n_ctx = _pad(ctx)
    if unified:
        n_ctx_seq, streams = n_ctx, 1
    else:
        n_ctx_seq, streams = _pad(n_ctx // slots), slots
        n_ctx = n_ctx_seq * slots
    ubatch = min(inputs.n_ubatch or LLAMACPP_DEFAULT_UBATCH, 2048, n_ctx)  # n_ubatch <= n_batch (2048) <= n_ctx
    swa_cells = n_ctx_seq
    if spec.sliding_window:
        swa_cells = _pad(min(n_ctx_seq, spec.sliding_window * (slots if unified else 1) + ubatch))
    if n_ctx_seq > (spec.max_position_embeddings or n_ctx_seq):
        notes.append(
            Message(
                _("a slot holds %(tokens)s tokens, more than the model's %(positions)s positions"),
                {"tokens": n_ctx_seq, "positions": spec.max_position_embeddings},
            )
        )
    return LlamaCppLayout(n_ctx, n_ctx_seq, slots, unified, streams, swa_cells, tuple(notes))


def _llamacpp_pool_bytes(inputs: CapacityInputs, kv: KVBytes, layout: LlamaCppLayout) -> float:
    """The KV buffer llama-server allocates on the binding rank (exactly, from its flags)."""
    spec = inputs.model
    best = 0.0
    for r in _stage_layers(spec.num_layers, inputs.pp):
        kinds = [spec.layer_kinds[i] for i in r]
        cells = kinds.count("full") * layout.n_ctx_seq + kinds.count("sliding") * layout.swa_cells
        best = max(best, kv.per_layer_per_rank * cells * layout.streams)
    return best + _state_bytes(inputs) * layout.slots


def _default_fraction(inputs: CapacityInputs, fallback: float, fallback_source: str) -> tuple[float, str]:
    """The engine version's default memory fraction (from the catalog) when given, else `fallback`."""
    if inputs.memory_default is not None:
        value, source = inputs.memory_default
        return float(value), f"{source}; pass the value you run"
    return fallback, f"{fallback_source}; pass the value you run"


def _activation_estimate(inputs: CapacityInputs) -> tuple[float, str]:
    spec = inputs.model
    tokens = _vllm_batched_tokens(inputs)
    inter = spec.intermediate_size or 4 * spec.hidden_size
    per_token = (3 * inter / inputs.tp + 6 * spec.hidden_size) * 2
    logits = inputs.max_num_seqs * spec.vocab_size / inputs.tp * 4 * 2
    value = tokens * per_token + logits
    src = (
        f"profile-run heuristic: {tokens} batched tokens x (3 x MLP width / TP + 6 x hidden) x 2 B "
        f"+ {inputs.max_num_seqs} seqs x vocab logits fp32 x 2; replace with the engine log's "
        f"'activation peak' / torch peak"
    )
    return value, src


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
    estimates.append(_estimate("activation_peak_bytes", value, source, given))
    return value


def _overhead(inputs: CapacityInputs, name: str, default: float, source: str, estimates: list[dict]) -> float:
    """Memory outside the engine's pools (`non_torch_bytes` when given, else `default`, an estimate)."""
    given = inputs.non_torch_bytes
    value = float(given) if given is not None else default
    estimates.append(_estimate(name, value, source, given is not None))
    return value


def _context_overhead(inputs: CapacityInputs) -> float:
    """CUDA context and NCCL buffers: ~0.25 GiB on one GPU, ~1.5 GiB with TP/PP."""
    return 0.25 * GiB if inputs.tp * inputs.pp == 1 else 1.5 * GiB


def _vllm_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """vLLM: gpu_memory_utilization of total memory, less weights, activation peak, non-torch
    memory and CUDA graphs; kv_cache_memory_bytes, when set, is the pool."""
    if inputs.kv_cache_memory_bytes:
        kv_mem = float(inputs.kv_cache_memory_bytes)
        note = Message(_("vLLM kv_cache_memory_bytes set: the KV pool is exactly that, gpu_memory_utilization ignored"))
        return KVPool(kv_mem, {"kv_cache_memory_bytes": kv_mem}, notes=[note])
    total, estimates = float(inputs.gpu_memory_bytes), []
    util = inputs.gpu_memory_utilization
    if util is None:
        util, source = _default_fraction(
            inputs,
            VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
            f"vLLM default {VLLM_DEFAULT_GPU_MEMORY_UTILIZATION} in v0.33.0 "
            f"({VLLM_PREVIOUS_DEFAULT_GPU_MEMORY_UTILIZATION} in v0.11.0 and before; vllm/config/cache.py)",
        )
        estimates.append(_estimate("gpu_memory_utilization", util, source))
    budget = total * util
    act = _activation(inputs, estimates)
    non_torch = _overhead(
        inputs,
        "non_torch_bytes",
        _context_overhead(inputs),
        "typical vLLM 'non_torch_memory' (CUDA context allocations outside torch, NCCL buffers "
        "under TP): ~0.25 GiB on one GPU, ~1.5 GiB with TP/PP",
        estimates,
    )
    cg = inputs.cuda_graph_bytes
    graphs = float(cg) if cg is not None else (0.0 if inputs.enforce_eager else 0.5 * GiB)
    estimates.append(
        _estimate(
            "cuda_graph_bytes",
            graphs,
            "vLLM CUDA-graph capture estimate (~0.5 GiB; 0 with enforce_eager)",
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
        frac, source = _default_fraction(inputs, 0.0, "")
        estimates.append(_estimate("mem_fraction_static", frac, source))
    elif frac is None:
        frac = {1: 0.88, 2: 0.87, 4: 0.85, 8: 0.83}.get(inputs.tp, 0.79 if inputs.tp >= 16 else 0.88)
        estimates.append(
            _estimate(
                "mem_fraction_static",
                frac,
                "SGLang server_args default by TP (1: 0.88, 2: 0.87, 4: 0.85, 8: 0.83, 16: 0.79); newer "
                "releases derive it from GPU memory - pass the value you run",
            )
        )
    breakdown = {"static_budget": total * frac, "activations_and_graphs": total * (1 - frac)}
    note = Message(_("SGLang: mem_fraction_static of total memory covers weights + KV pool"))
    return KVPool(total * frac - w_rank, breakdown, estimates, [note])


def _trtllm_pool(inputs: CapacityInputs, kv: KVBytes, w_rank: float) -> KVPool:
    """TensorRT-LLM: free_gpu_memory_fraction of the memory free after loading, capped by max_tokens."""
    estimates: list[dict] = []
    frac = inputs.free_gpu_memory_fraction
    if frac is None:
        frac, source = _default_fraction(
            inputs, TRTLLM_DEFAULT_FREE_GPU_MEMORY_FRACTION, "TensorRT-LLM KvCacheConfig default 0.9"
        )
        estimates.append(_estimate("free_gpu_memory_fraction", frac, source))
    act = _activation(inputs, estimates)
    runtime = _overhead(
        inputs, "runtime_overhead_bytes", 1.0 * GiB, "CUDA context + runtime buffers (~1 GiB)", estimates
    )
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
            "LMDeploy --cache-max-entry-count default 0.8 (lmdeploy/messages.py, v0.16.0)",
        )
        estimates.append(_estimate("cache_max_entry_count", frac, source))
    non_torch = _overhead(
        inputs,
        "non_torch_bytes",
        _context_overhead(inputs),
        "CUDA context and NCCL buffers outside torch: ~0.25 GiB on one GPU, ~1.5 GiB with TP/PP",
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
        _estimate(
            "activation_peak_bytes",
            runtime,
            f"LMDeploy PyTorch engine runtime reserve (max_prefill_token_num {LMDEPLOY_MAX_PREFILL_TOKEN_NUM} "
            f"+ 2 x max_batch_size {batches}) x vocab x 2 B, set aside before the fraction "
            "(lmdeploy/pytorch/engine/executor/base.py _get_runtime_size, v0.16.0)",
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
    kv_mem = float(_llamacpp_pool_bytes(inputs, kv, layout))
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
    buffers = _overhead(
        inputs, "compute_buffers_bytes", 1.0 * GiB, "llama.cpp compute buffers + CUDA context (~1 GiB)", estimates
    )
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
        source = (
            f"{inputs.gpu_name} total as torch/vLLM report it (approximate table value); pass the "
            f"measured 'total_gpu_memory' to be exact"
        )
        return [_estimate("gpu_memory_bytes", total, source)]
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
        b = _sequence_bytes(inputs, kv, block, c)
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
        b = _sequence_bytes(inputs, kv, block, c)
        rows.append(
            {
                "context": c,
                "bytes_per_sequence": _num(b),
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
    block = _block_size(inputs, notes)
    total = float(inputs.gpu_memory_bytes)
    w_rank = weight_bytes_per_rank(spec, inputs.tp, inputs.pp, inputs.weight_dtype)
    max_model_len = _max_model_len(inputs)
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
            _estimate(
                "max_num_batched_tokens",
                _vllm_batched_tokens(inputs),
                "vLLM API-server default for this GPU (v0.11.0 vllm/engine/arg_utils.py: 8192 from 70 GiB, not on "
                "A100s, else 2048); a sliding-window or chunked-local layer holds one such chunk beyond its window",
            )
        )
    bytes_per_block = kv.per_rank * block
    num_blocks = int(kv_mem // bytes_per_block) if bytes_per_block else 0
    state = _state_bytes(inputs)
    uniform = spec.count("sliding") == 0 and state == 0
    layout = llamacpp_layout(inputs) if inputs.engine == "llamacpp" else None
    if layout is not None:
        token_capacity = layout.n_ctx
    elif uniform:
        token_capacity = num_blocks * block
    else:
        per_seq = _sequence_bytes(inputs, kv, block, max_model_len)
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


# --------------------------------------------------------------------------------------------
# Launch flags -> plan inputs
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Verdict against a selection's constraints
# --------------------------------------------------------------------------------------------

_CONSTRAINT_KEYS = (
    "peak_concurrency",
    "avg_input_tokens",
    "avg_output_tokens",
    "max_input_tokens",
    "max_output_tokens",
)


def _read_constraints(constraints: Mapping[str, Any]) -> dict:
    if not isinstance(constraints, Mapping):
        raise CapacityError("constraints: must be a mapping")
    out = {}
    for key in _CONSTRAINT_KEYS:
        v = constraints.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "peak_concurrency" else 0):
            raise CapacityError(
                f"constraints.{key}: must be a {'positive' if key == 'peak_concurrency' else 'non-negative'} "
                f"integer, got {v!r}"
            )
        out[key] = v
    budget = constraints.get("gpu_budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise CapacityError(f"constraints.gpu_budget: must be a positive integer, got {budget!r}")
    out["gpu_budget"] = budget
    return out


def _assess(plan: CapacityPlan, c: dict) -> dict:
    avg_ctx = max(1, c["avg_input_tokens"] + c["avg_output_tokens"])
    max_ctx = max(1, c["max_input_tokens"] + c["max_output_tokens"], avg_ctx)
    pool = plan.pool_bytes
    per_avg = plan.sequence_bytes(avg_ctx)
    per_max = plan.sequence_bytes(max_ctx)
    need = (c["peak_concurrency"] - 1) * per_avg + per_max
    return {
        "avg_context": avg_ctx,
        "max_context": max_ctx,
        "need_bytes": need,
        "pool_bytes": pool,
        "fits_30": pool > 0 and need <= 0.7 * pool,
        "fits_20": pool > 0 and need <= 0.8 * pool,
        "seqs_80": int(0.8 * pool // per_avg) if per_avg else 0,
        "seqs_70": int(0.7 * pool // per_avg) if per_avg else 0,
        "max_fits": pool > 0 and per_max <= 0.8 * pool,
    }


def _alternatives(plan: CapacityPlan, c: dict, a: dict, over_budget: bool) -> list[dict]:
    """Changes that would make the plan fit, each planned under the same engine rules: fp8 (or
    int8) KV, a larger TP up to the GPU budget, or replicas of the plan as it is."""
    i, gpus = plan.inputs, plan.inputs.tp * plan.inputs.pp
    alternatives: list[dict] = []
    budget = c["gpu_budget"]
    if i.kv_dtype in ("bf16", "fp16"):
        try:
            alt = plan_capacity(replace(i, kv_dtype="fp8" if i.engine != "llamacpp" else "int8"))
            aa = _assess(alt, c)
            alternatives.append(
                {
                    "change": f"kv_dtype={alt.inputs.kv_dtype}",
                    "gpus": gpus,
                    "fits": aa["fits_20"] and not over_budget,
                    "headroom_30": aa["fits_30"],
                    "sequences_at_80pct": aa["seqs_80"],
                }
            )
        except CapacityError:
            pass
    for k in (2, 4, 8, 16, 32):
        if k <= i.tp or (budget is not None and k * i.pp > budget):
            continue
        try:
            alt = plan_capacity(replace(i, tp=k))
        except CapacityError:
            continue
        aa = _assess(alt, c)
        alternatives.append(
            {
                "change": f"tp={k}",
                "gpus": k * i.pp,
                "fits": aa["fits_20"],
                "headroom_30": aa["fits_30"],
                "sequences_at_80pct": aa["seqs_80"],
            }
        )
        if aa["fits_30"]:
            break
    if a["max_fits"] and a["seqs_80"] > 0:
        replicas = math.ceil(c["peak_concurrency"] / a["seqs_80"])
        if replicas > 1:
            n = replicas * gpus
            alternatives.append(
                {
                    "change": f"{replicas} replicas of TP={i.tp}",
                    "gpus": n,
                    "fits": budget is None or n <= budget,
                    "headroom_30": False,
                    "sequences_at_80pct": a["seqs_80"] * replicas,
                }
            )
    return alternatives


def verdict(plan_or_inputs: CapacityPlan | CapacityInputs, constraints: Mapping[str, Any]) -> dict:
    """Fits / does not fit against peak concurrency and context lengths, with alternatives
    (fp8 KV, a larger TP, more replicas) checked under the same engine rules. The summary and the
    reasons are `Message`s (``str()`` gives English; `messages.to_json` makes the dict JSON)."""
    plan = plan_or_inputs if isinstance(plan_or_inputs, CapacityPlan) else plan_capacity(plan_or_inputs)
    c = _read_constraints(constraints)
    i = plan.inputs
    gpus = i.tp * i.pp
    a = _assess(plan, c)
    reasons: list[Message] = []
    gib = lambda b: f"{b / GiB:.2f} GiB"  # noqa: E731
    reasons.append(
        Message(
            _(
                "KV pool %(pool)s per GPU (%(blocks)s blocks of %(block)s tokens); %(peak)s concurrent sequences "
                "(one at max context %(max)s, the rest at avg %(avg)s) need %(need)s"
            ),
            {
                "pool": gib(a["pool_bytes"]),
                "blocks": str(plan.num_blocks),
                "block": str(plan.block_size),
                "peak": str(c["peak_concurrency"]),
                "max": str(a["max_context"]),
                "avg": str(a["avg_context"]),
                "need": gib(a["need_bytes"]),
            },
        )
    )
    mp = i.model.max_position_embeddings
    too_long = bool(mp) and a["max_context"] > mp
    if too_long:
        reasons.append(
            Message(
                _("max context %(max)s exceeds the model's %(positions)s positions"),
                {"max": str(a["max_context"]), "positions": str(mp)},
            )
        )
    if plan.kv_memory_bytes <= 0:
        reasons.append(
            Message(
                _("weights (%(weights)s per GPU) leave no room for KV cache"),
                {"weights": gib(plan.weight_bytes_per_rank)},
            )
        )
    over_budget = c["gpu_budget"] is not None and gpus > c["gpu_budget"]
    if over_budget:
        reasons.append(
            Message(
                _("the plan uses %(gpus)s GPUs, above the budget of %(budget)s"),
                {"gpus": str(gpus), "budget": str(c["gpu_budget"])},
            )
        )
    few_slots = plan.slots is not None and c["peak_concurrency"] > plan.slots
    if few_slots:
        reasons.append(
            Message(
                _(
                    "llama-server serves at most %(slots)s requests at once (-np); "
                    "%(wait)s of the peak %(peak)s would wait"
                ),
                {
                    "slots": str(plan.slots),
                    "wait": str(c["peak_concurrency"] - plan.slots),
                    "peak": str(c["peak_concurrency"]),
                },
            )
        )
    short_slot = plan.sequence_limit is not None and a["max_context"] > plan.sequence_limit
    if short_slot:
        reasons.append(
            Message(
                _("a slot holds at most %(limit)s tokens, less than the max context %(max)s"),
                {"limit": str(plan.sequence_limit), "max": str(a["max_context"])},
            )
        )
    fits = a["fits_20"] and not too_long and not over_budget and not few_slots and not short_slot
    if a["fits_30"] and fits:
        summary = Message(
            _("fits with 30%% headroom on %(gpus)s GPU(s) (TP=%(tp)s, PP=%(pp)s, %(kv)s KV)"),
            {"gpus": str(gpus), "tp": str(i.tp), "pp": str(i.pp), "kv": i.kv_dtype},
        )
    elif fits:
        summary = Message(
            _("fits with 20%% headroom only on %(gpus)s GPU(s); below the 30%% comfort margin"), {"gpus": str(gpus)}
        )
        reasons.append(
            Message(_("at 70%% of the pool only %(seqs)s sequences of avg context fit"), {"seqs": str(a["seqs_70"])})
        )
    else:
        summary = Message(_("does not fit"))
        if not too_long and plan.kv_memory_bytes > 0 and not a["fits_20"]:
            reasons.append(
                Message(
                    _("at 80%% of the pool only %(seqs)s sequences of avg context fit (peak %(peak)s)"),
                    {"seqs": str(a["seqs_80"]), "peak": str(c["peak_concurrency"])},
                )
            )

    alternatives = _alternatives(plan, c, a, over_budget) if not a["fits_30"] and not too_long else []
    good = [x for x in alternatives if x["fits"]]
    if not fits and good:
        best = min(good, key=lambda x: (x["gpus"], not x["headroom_30"]))
        summary = Message(
            _("does not fit as planned; fits with %(change)s (%(gpus)s GPUs)"),
            {"change": best["change"], "gpus": str(best["gpus"])},
        )
    return {
        "fits": fits,
        "summary": summary,
        "reasons": reasons,
        "alternatives": alternatives,
        "avg_context": a["avg_context"],
        "max_context": a["max_context"],
        "sequences_at_70pct": a["seqs_70"],
        "sequences_at_80pct": a["seqs_80"],
    }


# --------------------------------------------------------------------------------------------
# Measured capacity from engine logs
# --------------------------------------------------------------------------------------------

_INT = r"(\d{1,3}(?:,\d{3})+|\d+)"
_LOG_PATTERNS = {
    # vLLM V1 (vllm/v1/core/kv_cache_utils.py) and worker
    "vllm_tokens": re.compile(r"GPU KV cache size:\s*" + _INT + r"\s*tokens"),
    "vllm_concurrency": re.compile(r"Maximum concurrency for\s*" + _INT + r"\s*tokens per request:\s*([\d.]+)x"),
    "vllm_available": re.compile(r"Available KV cache memory:\s*([\d.]+)\s*GiB"),
    "vllm_v0_blocks": re.compile(r"#\s*(?:GPU|cuda) blocks:\s*" + _INT, re.IGNORECASE),
    "vllm_v0_kv_gib": re.compile(r"reserved for KV Cache is\s*([\d.]+)\s*GiB", re.IGNORECASE),
    # SGLang scheduler / memory pool
    "sglang_max_total": re.compile(r"max_total_num_tokens=\s*" + _INT),
    "sglang_allocated": re.compile(
        r"KV Cache is allocated\.\s*#tokens:\s*" + _INT + r"(?:,\s*K size:\s*([\d.]+)\s*GB,\s*V size:\s*([\d.]+)\s*GB)?"
    ),
    # llama.cpp
    "llamacpp_n_ctx": re.compile(r"\bn_ctx\s*=\s*(\d+)"),
    "llamacpp_kv_size": re.compile(r"size\s*=\s*([\d.]+)\s*MiB\s*\(\s*(\d+)\s*cells,\s*(\d+)\s*layers"),
    "llamacpp_kv_buffer": re.compile(r"KV buffer size\s*=\s*([\d.]+)\s*MiB"),
}


def _i(s: str) -> int:
    return int(s.replace(",", ""))


def parse_engine_capacity_log(text: str) -> dict:
    """Pull the capacity an engine actually allocated from its start-up log.

    Returns {engine, kv_cache_tokens, max_concurrency {context: x}, kv_cache_memory_gib,
    num_gpu_blocks, ...}; keys are present only when found; engine is None when nothing matched.
    The last occurrence wins (restarts append to the same log).
    """
    if not isinstance(text, str):
        raise CapacityError("log: must be text")
    out: dict[str, Any] = {"engine": None}
    P = _LOG_PATTERNS
    m = P["vllm_tokens"].findall(text)
    conc = P["vllm_concurrency"].findall(text)
    blocks = P["vllm_v0_blocks"].findall(text)
    if m or conc or blocks:
        out["engine"] = "vllm"
        if m:
            out["kv_cache_tokens"] = _i(m[-1])
        if conc:
            out["max_concurrency"] = {_i(ctx): float(x) for ctx, x in conc}
        if blocks:
            out["num_gpu_blocks"] = _i(blocks[-1])
        avail = P["vllm_available"].findall(text) or P["vllm_v0_kv_gib"].findall(text)
        if avail:
            out["kv_cache_memory_gib"] = float(avail[-1])
        return out
    sg = P["sglang_max_total"].findall(text)
    alloc = P["sglang_allocated"].findall(text)
    if sg or alloc:
        out["engine"] = "sglang"
        out["kv_cache_tokens"] = _i(sg[-1]) if sg else _i(alloc[-1][0])
        if alloc and alloc[-1][1]:
            out["kv_cache_memory_gib"] = round((float(alloc[-1][1]) + float(alloc[-1][2])) * 1e9 / GiB, 3)
        return out
    kvs = P["llamacpp_kv_size"].findall(text)
    nctx = P["llamacpp_n_ctx"].findall(text)
    if kvs or (nctx and "llama" in text):
        out["engine"] = "llamacpp"
        if nctx:
            out["n_ctx"] = int(nctx[-1])
        if kvs:
            mib, cells, layers = kvs[-1]
            out["kv_cache_tokens"] = int(cells)
            out["kv_cache_memory_gib"] = round(float(mib) / 1024, 4)
            out["kv_layers"] = int(layers)
        elif nctx:
            out["kv_cache_tokens"] = int(nctx[-1])
        bufs = P["llamacpp_kv_buffer"].findall(text)
        if bufs and "kv_cache_memory_gib" not in out:
            out["kv_cache_memory_gib"] = round(sum(float(b) for b in bufs) / 1024, 4)
    return out


def compare_predicted_measured(predicted_tokens: float, measured_tokens: float, threshold_pct: float = 10.0) -> dict:
    """Predicted vs measured KV token capacity; more than threshold_pct apart is flagged."""
    for name, v in (("predicted_tokens", predicted_tokens), ("measured_tokens", measured_tokens)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise CapacityError(f"{name}: must be a non-negative number, got {v!r}")
    if measured_tokens == 0:
        diff = 0.0 if predicted_tokens == 0 else math.inf
    else:
        diff = (predicted_tokens - measured_tokens) / measured_tokens * 100
    return {
        "predicted_tokens": predicted_tokens,
        "measured_tokens": measured_tokens,
        "difference_pct": round(diff, 2) if math.isfinite(diff) else None,
        "flagged": (not math.isfinite(diff)) or abs(diff) > threshold_pct,
        "threshold_pct": threshold_pct,
    }


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


__all__ = [
    "CapacityError",
    "ModelSpec",
    "KVBytes",
    "CapacityInputs",
    "CapacityPlan",
    "ENGINES",
    "KV_DTYPES",
    "GPU_MEMORY_GIB",
    "shipped_models",
    "load_model_config",
    "validate_model_config",
    "validate_parallelism",
    "kv_element_bytes",
    "kv_bytes_per_token",
    "weight_bytes",
    "weight_bytes_per_rank",
    "plan_capacity",
    "plan_for_model",
    "gpu_memory_bytes",
    "verdict",
    "parse_engine_capacity_log",
    "compare_predicted_measured",
    "inputs_from_flags",
    "llamacpp_layout",
    "LlamaCppLayout",
]
