"""The identity of a request's full KV blocks, what the prefix cache is keyed by: real token ids
hashed as a chain (live mode, `TokenStream`) or symbolic integer keys per shared prefix and session
(offline, `KeySpace` and `SymbolicKeys`), both behind the `BlockKeys` protocol the engine reads."""

from __future__ import annotations

from typing import Any, Hashable, Protocol

from benchmarks.simulator.tokens import chain_hashes, corrupt, output_token, prompt_digest


class BlockKeys(Protocol):
    """Identity of the full blocks of a request's token stream (prompt then outputs)."""

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Hashable]: ...


class TokenStream:
    """Real token ids (live mode): prompt ids plus deterministic outputs, hashed as a chain."""

    __slots__ = ("prompt", "outputs", "digest", "corrupted", "_hashes", "_hash_bs", "_salt")

    def __init__(self, prompt: list[int], seed: int = 0, private_to: Any = None) -> None:
        self.prompt = list(prompt)
        self.outputs: list[int] = []
        self.digest = prompt_digest(self.prompt, seed)
        self.corrupted = False
        self._hashes: list[Any] = []
        self._hash_bs = 0
        # a request that must not share its cache (llama.cpp `cache_prompt: false`): its chain
        # starts from its own salt, so it neither hits cached blocks nor leaves any others can hit
        self._salt = None if private_to is None else ("private", private_to)

    def extend_outputs(self, count: int) -> list[int]:
        """Generate outputs up to `count` tokens; returns the new ones."""
        new = []
        while len(self.outputs) < count:
            token = output_token(self.digest, len(self.outputs))
            if self.corrupted:
                token = corrupt(token)
            self.outputs.append(token)
            new.append(token)
        return new

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Hashable]:
        if block_size != self._hash_bs:
            self._hashes, self._hash_bs = [], block_size
        if stop > len(self._hashes):
            tokens = self.prompt + self.outputs
            previous = self._hashes[-1] if self._hashes else self._salt
            self._hashes.extend(chain_hashes(tokens[: stop * block_size], block_size, len(self._hashes), previous))
        return self._hashes[start:stop]


class KeySpace:
    """Allocates integer key ranges to named streams for one simulation (see SymbolicKeys)."""

    def __init__(self) -> None:
        self._bases: dict[Any, int] = {}
        self._next = 1

    def base(self, name: Any = None) -> int:
        """The base of a named stream (None: a fresh anonymous one)."""
        if name is not None and name in self._bases:
            return self._bases[name]
        base = self._next
        self._next += 1
        if name is not None:
            self._bases[name] = base
        return base

    def keys(self, prefix_id: Any = None, prefix_tokens: int = 0, session_id: Any = None) -> "SymbolicKeys":
        return SymbolicKeys(self, prefix_id, prefix_tokens, session_id)


class SymbolicKeys:
    """Offline block identity without token ids: a shared prefix's blocks, then the session's
    stream (append-only across turns), then the request's own blocks.

    Keys are integers `stream_id + block_index * STEP` with an odd STEP larger than any stream
    id: unique, spread over the hash table's low bits (Python hashes small ints to themselves),
    and a run of keys is a `range`, so bulk cache operations stay in C."""

    STEP = 0x9E3779B1

    __slots__ = ("prefix_base", "prefix_blocks_tokens", "stream_base")

    def __init__(self, space: KeySpace, prefix_id: Any = None, prefix_tokens: int = 0, session_id: Any = None) -> None:
        self.prefix_base = space.base(("p", prefix_id)) if prefix_id is not None else 0
        self.prefix_blocks_tokens = prefix_tokens if prefix_id is not None else 0
        self.stream_base = space.base(("s", session_id, prefix_id)) if session_id is not None else space.base()

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Hashable]:
        prefix_full = self.prefix_blocks_tokens // block_size
        step = self.STEP
        if stop <= prefix_full:
            return list(range(self.prefix_base + start * step, self.prefix_base + stop * step, step))
        if start >= prefix_full:
            return list(range(self.stream_base + start * step, self.stream_base + stop * step, step))
        return list(range(self.prefix_base + start * step, self.prefix_base + prefix_full * step, step)) + list(
            range(self.stream_base + prefix_full * step, self.stream_base + stop * step, step)
        )
