"""Prompts of exact token lengths for the engine under test.

Why: KV usage, prefix reuse and long-context rungs are about token counts, and tokenizers differ per
model. When the engine has a `/tokenize` endpoint (llama.cpp, vLLM, SGLang), the factory keeps only
words that are a single token with a leading space; a whitespace-pre-tokenized BPE then makes a
prompt of n such words exactly n tokens (checked once against the engine). Without `/tokenize`
it calibrates tokens per word from the usage of two probe requests (`exact` is then False). Either
way the engine-reported prompt tokens of every request are recorded by the client.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.request_record import RequestSpec

WORD_POOL = (
    "the key value cache stores attention keys and values for every token of request paged blocks memory "
    "prefix caching lets requests that share system prompt reuse same when runs out scheduler preempts "
    "recomputes or swaps later benchmarks measure time first per output throughput under load quick brown "
    "fox jumps over lazy dog one two three four five six seven eight nine ten eleven twelve a so is it to "
    "in on at by we he she they this that with from as be are was were not but all can has have had"
).split()


@dataclass
class PromptFactory:
    """Makes prompts of a given token length; `describe()` records how the length was obtained."""

    words: list[str]
    exact: bool = True
    tokens_per_word: float = 1.0
    overhead_tokens: float = 0.0  # tokens the engine adds (template, BOS) in the calibration
    source: str = "whitespace"
    checks: list[dict[str, Any]] = field(default_factory=list)
    # Tokens the request format adds around the words (`measure_template`): the chat template's
    # markers and the BOS around a first message, and what one more (assistant, user) pair adds.
    # None: not measured. A prompt of exactly n tokens sends n minus these in words.
    template_tokens: int | None = None
    turn_template_tokens: int | None = None

    def word_count(self, n_tokens: int) -> int:
        if self.exact:
            return max(int(n_tokens), 1)
        return max(int(round((n_tokens - self.overhead_tokens) / self.tokens_per_word)), 1)

    def text(self, n_tokens: int, seed: int = 0) -> str:
        """A prompt of `n_tokens` tokens (exact when `exact`), different for each seed."""
        rng = random.Random(seed)
        words = self.words
        return " " + " ".join(rng.choice(words) for _ in range(self.word_count(n_tokens)))

    def shared_prefix(self, prefix_tokens: int, suffix_tokens: int, seed: int, prefix_seed: int = 12345) -> str:
        """A prompt whose first `prefix_tokens` are the same for every seed (prefix-reuse test)."""
        return self.text(prefix_tokens, prefix_seed) + self.text(suffix_tokens, seed)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "exact": self.exact,
            "tokens_per_word": self.tokens_per_word,
            "overhead_tokens": self.overhead_tokens,
            "vocabulary_words": len(self.words),
            "checks": self.checks,
            "template_tokens": self.template_tokens,
            "turn_template_tokens": self.turn_template_tokens,
        }


async def tokenize_count(client: OpenAIClient, text: str) -> int | None:
    """Token count from the engine's /tokenize (llama.cpp `content`, vLLM/SGLang `prompt`), or None."""
    for body in (
        {"content": text, "add_special": False},
        {"model": client.model, "prompt": text, "add_special_tokens": False},
    ):
        try:
            status, data = await client.post_json("/tokenize", body, timeout_s=30.0)
        except Exception:  # any failure means "no usable endpoint"
            return None
        if status == 404:
            return None
        if status < 400 and isinstance(data, dict):
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
            if isinstance(data.get("count"), int):
                return int(data["count"])
    return None


async def calibrate(client: OpenAIClient, api: str = "completions", pool: list[str] | None = None) -> PromptFactory:
    """A PromptFactory for this engine: exact through /tokenize, else calibrated from usage."""
    pool = list(pool or WORD_POOL)
    probe = await tokenize_count(client, " the")
    if probe is not None:
        single = []
        for word in pool:
            if await tokenize_count(client, " " + word) == 1:
                single.append(word)
        if len(single) >= 4:
            factory = PromptFactory(words=single, exact=True, source="tokenize")
            for n in (32, 300):
                text = factory.text(n, seed=n)
                counted = await tokenize_count(client, text)
                factory.checks.append({"requested": n, "engine_tokens": counted})
                if counted != n:
                    factory.exact = False
                    factory.tokens_per_word = (counted or n) / n
                    factory.source = "tokenize-approximate"
            return factory
    return await _calibrate_from_usage(client, api, pool)


async def _calibrate_from_usage(client: OpenAIClient, api: str, pool: list[str]) -> PromptFactory:
    rng = random.Random(7)
    counts = []
    for words in (20, 120):
        text = " " + " ".join(rng.choice(pool) for _ in range(words))
        record = await client.send(
            RequestSpec(
                api=api, prompt=text, max_tokens=1, ignore_eos=None, request_id=f"calibrate-{words}", tag="calibrate"
            )
        )
        if record.prompt_tokens is None:
            return PromptFactory(
                words=pool, exact=False, source="default (engine reports no prompt tokens)", tokens_per_word=1.3
            )
        counts.append((words, record.prompt_tokens))
    (w1, t1), (w2, t2) = counts
    slope = max((t2 - t1) / (w2 - w1), 0.1)
    return PromptFactory(
        words=pool,
        exact=False,
        source="usage-calibrated",
        tokens_per_word=slope,
        overhead_tokens=t1 - slope * w1,
        checks=[{"words": w, "engine_tokens": t} for w, t in counts],
    )


async def measure_template(client: OpenAIClient, factory: PromptFactory, api: str = "chat") -> PromptFactory:
    """Measure what the request format adds to the words, from the engine's own `usage.prompt_tokens`.

    Why: a chat template wraps each message in markers (the simulator: `<|user|>` ... `<|assistant|>`,
    two tokens; Llama 3: a dozen) and completions may add a BOS, so n words of exactly one token
    each are not an n-token prompt. Two probes (max_tokens 1): one user message, then (user,
    assistant, user); their prompt tokens minus their words give the first message's overhead and
    each later turn's. Only meaningful when the words count exactly (`factory.exact`); left None
    when the engine reports no usage (a chat prompt is then no longer called exact)."""
    if not factory.exact:
        return factory
    words = [factory.text(24, seed=101), factory.text(16, seed=102), factory.text(8, seed=103)]
    counts = [factory.word_count(24), factory.word_count(16), factory.word_count(8)]
    if api == "chat":
        probes = [
            ([{"role": "user", "content": words[0]}], counts[0]),
            (
                [
                    {"role": "user", "content": words[0]},
                    {"role": "assistant", "content": words[1]},
                    {"role": "user", "content": words[2]},
                ],
                sum(counts),
            ),
        ]
    else:
        probes = [(words[0], counts[0])]
    overheads = []
    for index, (prompt, sent) in enumerate(probes):
        spec = RequestSpec(
            api=api,  # type: ignore[arg-type]
            prompt=prompt if isinstance(prompt, str) else None,
            messages=prompt if isinstance(prompt, list) else None,
            max_tokens=1,
            ignore_eos=None,
            request_id=f"template-{index}",
            tag="calibrate",
        )
        record = await client.send(spec)
        if record.prompt_tokens is None:  # the engine does not say: the words are exact, the prompt may not be
            if api == "chat":
                factory.exact = False
                factory.source += " (chat template not measured: the engine reports no prompt tokens)"
            return factory
        overheads.append(int(record.prompt_tokens) - sent)
        factory.checks.append({"template_probe": index, "words": sent, "engine_tokens": record.prompt_tokens})
    factory.template_tokens = overheads[0]
    factory.turn_template_tokens = overheads[1] - overheads[0] if len(overheads) > 1 else 0
    return factory
