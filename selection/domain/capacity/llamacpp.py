"""llama.cpp's KV buffer, laid out exactly from llama-server's flags (not a share of memory).

``-c`` 0 means the model's trained context; ``-np`` slots (default auto: 4 slots over one unified
buffer) split it (``n_ctx / np`` cells each, padded to 256) unless ``--kv-unified`` shares it;
sliding-window layers keep ``min(n_ctx_seq, n_swa x (np if unified else 1) + n_ubatch)`` cells per
stream, padded to 256 (src/llama-context.cpp, src/llama-kv-cache-iswa.cpp; tools/server/README.md
at the catalog's commit). At most ``np`` requests run at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from selection.domain.capacity.base import CapacityError
from selection.domain.capacity.inputs import CapacityInputs
from selection.domain.capacity.memory import KVBytes, stage_layers
from selection.domain.capacity.paging import state_bytes
from selection.domain.messages import Message
from selection.domain.messages import marked as _

# llama.cpp (tools/server/README.md at 00dc805): -np -1 = auto = 4 slots over a unified buffer;
# -ub 512; cells padded to 256 (src/llama-context.cpp, src/llama-kv-cache-iswa.cpp).
LLAMACPP_AUTO_SLOTS = 4
LLAMACPP_DEFAULT_UBATCH = 512
LLAMACPP_PAD = 256


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
    """The cells, slots and streams llama-server allocates for these flags (the module's rules)."""
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


def llamacpp_pool_bytes(inputs: CapacityInputs, kv: KVBytes, layout: LlamaCppLayout) -> float:
    """The KV buffer llama-server allocates on the binding rank (exactly, from its flags)."""
    spec = inputs.model
    best = 0.0
    for r in stage_layers(spec.num_layers, inputs.pp):
        kinds = [spec.layer_kinds[i] for i in r]
        cells = kinds.count("full") * layout.n_ctx_seq + kinds.count("sliding") * layout.swa_cells
        best = max(best, kv.per_layer_per_rank * cells * layout.streams)
    return best + state_bytes(inputs) * layout.slots
