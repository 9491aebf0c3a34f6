"""The engine's documented KV-cache model, as the validation tests judge it.

Why: the tests observe behaviour (is the KV released after aborts, is an idle session's KV
evicted, does caching hold less memory) that some engines do not have *by design*. llama.cpp's
slots keep their last prompt's KV resident until another request takes the slot, so "KV back to
its baseline" can never happen there, and a prefix is cached per slot, so caching saves prefill,
not memory. An engine without an offload tier drops evicted KV and recomputes it, so "resuming is
cheaper than recomputing" is not something it claims. Judging those as failures punishes the
engine for what its documentation says it does; the verdict is "not applicable", with the reason
and the source, and the criterion is scored from what the engine does offer.

The kinds (the engine catalog states each engine version's kind with its source; the shell hands
it to the harness on the `Target`):

- `slot_resident` (llama.cpp): a fixed number of slots; each keeps the KV of the last prompt it
  served for reuse by the next prompt with a common prefix; nothing is shared between slots; a
  slot is overwritten (its prompt recomputed later) when another request takes it.
- `radix_tree` (SGLang): a token radix tree over one pool; finished requests' KV stays in the tree
  as evictable cache, shared by every request with the same prefix; evicted leaves are dropped
  (or backed up to host memory with the hierarchical cache).
- `paged_blocks` (vLLM, TensorRT-LLM, LMDeploy, TGI): fixed-size blocks; a finished request's full
  blocks stay cached (evictable, not counted as used) and are shared by hash; evicted blocks are
  dropped, or moved to a CPU tier when an offload connector is configured.

`offload` says whether the deployment (the catalog's tiers as the launch flags enable them) moves
evicted KV to another tier and loads it back. Pure Python: no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selection.domain.messages import Message
from selection.domain.messages import marked as _

# why a verdict does not apply (the verdict adds the source)
RESIDENT_KV = _(
    "%(engine)s keeps each slot's last prompt in its KV cache for reuse until another request takes "
    "the slot, so KV usage stays up after requests end by design"
)
PER_SLOT_PREFIX = _(
    "%(engine)s caches a prompt per slot and shares nothing between slots: every slot holds its own copy "
    "of the shared prefix, so prefix caching saves prefill compute, not KV memory (judged by the prompt "
    "tokens the engine processed instead)"
)
NO_OFFLOAD = _(
    "%(engine)s as deployed has no offload tier: KV evicted from the GPU is dropped and a resumed "
    "session's history is recomputed by design, so there is no swap-in to be cheaper than a recompute"
)

SLOT_RESIDENT = "slot_resident"
RADIX_TREE = "radix_tree"
PAGED_BLOCKS = "paged_blocks"
KINDS = (SLOT_RESIDENT, RADIX_TREE, PAGED_BLOCKS)


@dataclass(frozen=True)
class CacheModel:
    """One engine's documented cache model: its kind, whether the deployment offloads evicted KV,
    the documentation that states it (URL) and the engine's name as readers know it."""

    kind: str
    offload: bool = False
    source: str | None = None
    engine: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"cache_model.kind: must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def keeps_finished_kv(self) -> bool:
        """A finished (or aborted) request's KV stays counted as used until another request needs the
        room: KV usage does not fall back to its baseline, by design."""
        return self.kind == SLOT_RESIDENT

    @property
    def shares_prefix(self) -> bool:
        """Concurrent requests with one prefix hold it once: caching saves memory as well as prefill."""
        return self.kind != SLOT_RESIDENT

    @property
    def name(self) -> str:
        return self.engine or self.kind.replace("_", " ")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "offload": self.offload, "source": self.source, "engine": self.engine}

    # why a verdict does not apply, as messages (the verdict adds the source)
    def resident_kv_reason(self) -> Message:
        return Message(RESIDENT_KV, {"engine": self.name})

    def per_slot_prefix_reason(self) -> Message:
        return Message(PER_SLOT_PREFIX, {"engine": self.name})

    def no_offload_reason(self) -> Message:
        return Message(NO_OFFLOAD, {"engine": self.name})


def from_dict(data: dict[str, Any] | None) -> CacheModel | None:
    """A cache model from its `describe()` form (a run's metadata, the CLI), None when absent."""
    if not data:
        return None
    return CacheModel(
        kind=str(data.get("kind")),
        offload=bool(data.get("offload")),
        source=data.get("source") or None,
        engine=str(data.get("engine") or ""),
    )
