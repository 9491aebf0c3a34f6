"""Prefix sharing a KV pool of a given size can reuse: an LRU cache of 512-token blocks, replayed.

The trace statistics' prefix-sharing ratio counts every prefix ever sent as still there (an
unbounded cache). An engine keeps only what fits its KV pool, so `LruBlocks` replays the trace's
requests in arrival order through a cache of `capacity_tokens // block_tokens` blocks:

- a request's prompt is a chain of whole blocks (a partial last block is never reused, as in
  vLLM's and SGLang's prefix caches): Mooncake's `hash_ids`; a prefix group's blocks then the
  request's own; a session turn's blocks are its session's running history (previous prompt +
  answer), the first turn's prefix group included;
- the hit is the leading run of the prompt's blocks found in the cache (a prefix cache matches from
  the first token; a block after a miss is not reused);
- then the request's blocks (prompt and answer, whole blocks) are cached and marked most recently
  used, its first blocks last, so that eviction takes a request's tail before its head (vLLM frees
  a finished request's blocks in reverse order for this reason);
- assumptions, stated with the figure: blocks are cached at admission and nothing else holds the
  pool (the running requests' own KV and the engine's preemptions are not modelled), one pool
  (no tensor-parallel sharding, no CPU offload tier).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable

BLOCK_TOKENS = 512


class LruBlocks:
    """One pool's LRU replay; `request(...)` returns the prompt tokens it would reuse."""

    def __init__(self, capacity_tokens: int, block_tokens: int = BLOCK_TOKENS) -> None:
        self.capacity_tokens = int(capacity_tokens)
        self.block_tokens = block_tokens
        self.capacity = max(self.capacity_tokens // block_tokens, 0)
        self.blocks: OrderedDict[Hashable, None] = OrderedDict()
        self.shared_tokens = 0
        self.evicted = 0

    def request(self, prompt: list[Hashable], cached: list[Hashable], counted: bool = True) -> int:
        """Reuse the leading blocks of `prompt` found in the cache, then cache `cached` (the request's
        whole blocks, prompt first); returns the reused tokens (also summed when `counted`)."""
        blocks = self.blocks
        hits = 0
        for key in prompt:
            if key not in blocks:
                break
            hits += 1
        if self.capacity:
            for key in reversed(cached):
                blocks[key] = None
                blocks.move_to_end(key)
            excess = len(blocks) - self.capacity
            for _ in range(max(excess, 0)):
                blocks.popitem(last=False)
            self.evicted += max(excess, 0)
        reused = hits * self.block_tokens
        if counted:
            self.shared_tokens += reused
        return reused

    def summary(self, input_tokens: int) -> dict[str, Any]:
        return {
            "capacity_tokens": self.capacity_tokens,
            "capacity_blocks": self.capacity,
            "block_tokens": self.block_tokens,
            "shared_tokens": self.shared_tokens,
            "sharing_ratio": self.shared_tokens / input_tokens if input_tokens else None,
            "evicted_blocks": self.evicted,
        }


class BlockKeys:
    """The block keys of each request (module docstring), carried across chunks: a session's stream."""

    def __init__(self, block_tokens: int = BLOCK_TOKENS) -> None:
        self.block_tokens = block_tokens
        self.streams: dict[str, tuple[int, str | None, int]] = {}  # session -> (stream, group, group blocks)
        self.next_stream = 0
        self.next_unique = 0

    def keys(
        self,
        input_tokens: int,
        output_tokens: int,
        hash_ids: list[int] | None,
        session: str | None,
        continuing: bool,
        prefix_key: str | None,
        prefix_tokens: float,
    ) -> tuple[list[Hashable], list[Hashable]]:
        """(the prompt's whole blocks, the request's whole blocks prompt + answer)."""
        size = self.block_tokens
        prompt_blocks = input_tokens // size
        all_blocks = (input_tokens + output_tokens) // size
        group_blocks = int(prefix_tokens // size) if prefix_key is not None and prefix_tokens == prefix_tokens else 0
        if session is not None:
            stream = self.streams.get(session) if continuing else None
            if stream is None:
                stream = (self.next_stream, prefix_key if group_blocks else None, group_blocks)
                self.next_stream += 1
                self.streams[session] = stream
            number, group, grouped = stream
            cached = [("g", group, i) if i < grouped else ("s", number, i) for i in range(all_blocks)]
            return cached[:prompt_blocks], cached
        if hash_ids:
            prompt = [("h", h) for h in hash_ids[:prompt_blocks]]
        else:
            prompt = [("g", prefix_key, i) for i in range(min(group_blocks, prompt_blocks))]
        unique = self.next_unique
        self.next_unique += 1
        cached = prompt + [("u", unique, i) for i in range(len(prompt), all_blocks)]
        return prompt, cached
