"""A model's config.json, validated into the `ModelSpec` the capacity model reads.

Loads a shipped config (selection/fixtures/model_configs/) or a file, lifts a multimodal model's
``text_config``, applies transformers' defaults that published configs omit (each one noted),
derives one cache kind per layer (full, sliding, ssm, linear, none) from ``use_sliding_window``,
``layer_types``, patterns and hybrid layouts, sizes the constant SSM and linear-attention state,
counts the parameters by group and reads the checkpoint's weight quantisation. Every error names
the config field and the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from selection.domain.capacity.base import DTYPE_BYTES, CapacityError
from selection.domain.messages import Message
from selection.domain.messages import marked as _

FIXTURES_DIR = Path(__file__).resolve().parent.parent.parent / "fixtures" / "model_configs"


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
    if torch_dtype not in DTYPE_BYTES:
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


LINEAR_GROUPS = ("attention", "dense_mlp", "experts", "shared_experts", "ssm", "linear_attention")


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
        return "fp8", per, LINEAR_GROUPS, [note]
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
        return f"int{bits}", per, LINEAR_GROUPS, [note]
    raise CapacityError(f"config.quantization_config.quant_method: unsupported {method!r}")


def model_spec(name: str) -> ModelSpec | None:
    """The shipped model config `name` as a ModelSpec, or None when it is not one kvselect ships."""
    if not (name or "").strip():
        return None
    try:
        return validate_model_config(load_model_config(name))
    except CapacityError:
        return None


def model_context(name: str) -> int | None:
    """The context a shipped model serves (its max_position_embeddings), or None when the name is not a
    shipped config or the config does not state it: the one-pager's longest request must fit in it."""
    spec = model_spec(name)
    return (spec.max_position_embeddings or None) if spec is not None else None
