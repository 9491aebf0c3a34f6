"""The simulator's deterministic tokenizer, chat template and output generator.

Tokenizer: text is split on whitespace; each word is one token. A word from the output
vocabulary (`VOCAB`) maps to its index; any other word maps to `VOCAB_SIZE + crc32(word) % 2**24`.
So identical text always gives identical token ids (prefix hashing works across requests and
processes), and output text re-tokenizes to exactly the generated ids (multi-turn continuations
line up with the previous turn's prompt + output).

Chat template: each message renders as the marker word `<|role|>` followed by its content
words; the prompt ends with `<|assistant|>`, the generation prompt. An assistant message in a
later turn therefore reproduces the earlier prompt + output token for token.

Outputs: output token j of a request is a pure function of (prompt tokens, j, seed), so a
continuation after swap-out can be checked against a reference computed without the engine.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Iterable, Sequence

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "do", "ga", "hu", "ji", "fe", "bo")
VOCAB: tuple[str, ...] = tuple(a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES[:4])  # 1024 words
VOCAB_SIZE = len(VOCAB)
_INDEX = {word: i for i, word in enumerate(VOCAB)}


def tokenize(text: str) -> list[int]:
    """Whitespace word split; one id per word (see module docstring)."""
    ids = []
    for word in text.split():
        index = _INDEX.get(word)
        ids.append(index if index is not None else VOCAB_SIZE + (zlib.crc32(word.encode("utf-8")) & 0xFFFFFF))
    return ids


def detokenize(ids: Iterable[int]) -> str:
    return " ".join(VOCAB[i] if 0 <= i < VOCAB_SIZE else f"<{i}>" for i in ids)


def render_chat(messages: Sequence[dict[str, Any]]) -> str:
    """The chat template: `<|role|> content` per message, then `<|assistant|>`."""
    parts = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        parts.append(f"<|{message.get('role', 'user')}|> {content}")
    parts.append("<|assistant|>")
    return " ".join(parts)


def prompt_digest(prompt_ids: Sequence[int], seed: int) -> int:
    """A stable 64-bit digest of the prompt tokens and the seed."""
    hasher = hashlib.blake2b(digest_size=8)
    hasher.update(seed.to_bytes(8, "little", signed=True))
    hasher.update(",".join(map(str, prompt_ids)).encode())
    return int.from_bytes(hasher.digest(), "little")


def output_token(digest: int, position: int) -> int:
    """Output token at `position` for a prompt digest: a cheap deterministic mix (splitmix64)."""
    z = (digest + 0x9E3779B97F4A7C15 * (position + 1)) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) % VOCAB_SIZE


def reference_output(prompt_ids: Sequence[int], count: int, seed: int = 0) -> list[int]:
    """What an uncorrupted engine generates for this prompt: the continuation check's oracle."""
    digest = prompt_digest(prompt_ids, seed)
    return [output_token(digest, j) for j in range(count)]


def corrupt(token: int) -> int:
    """The corruption fault: a different, still valid, token."""
    return (token + 1) % VOCAB_SIZE


def chain_hashes(tokens: Sequence[int], block_size: int, start: int = 0, previous: Any = None) -> list[Any]:
    """Hash chain over full blocks: hash(block k) = hash((hash(block k-1), tokens of block k)).

    Returns the hashes of full blocks from block `start`, given the hash of block start-1."""
    hashes = []
    full = len(tokens) // block_size
    for k in range(start, full):
        previous = hash((previous, tuple(tokens[k * block_size : (k + 1) * block_size])))
        hashes.append(previous)
    return hashes
