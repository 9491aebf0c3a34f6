"""Write a tiny random-weight Llama model as GGUF, so a real llama.cpp server can run without downloads.

Why: the harness must be exercised against an engine nobody here wrote; llama-server needs a
model file, and no model may be downloaded. A byte-level BPE tokenizer is trained on a few
sentences with `tokenizers`, the weights are random (seeded), and the output rows of special and
non-printable tokens are zeroed so greedy generation keeps producing printable text (one token
per streamed chunk) and never stops early. Generation quality is irrelevant; timing, KV usage and
metrics are real.

    python -m benchmarks.harness.tiny_gguf OUT.gguf [--hidden 64 --layers 2 --context 8192]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A key value cache stores attention keys and values for every token of every request.",
    "Paged attention splits the cache into blocks so that memory is not wasted on padding.",
    "Prefix caching lets requests that share a system prompt reuse the same blocks.",
    "When memory runs out the scheduler preempts a request and recomputes or swaps it later.",
    "Benchmarks measure time to first token, time per output token and throughput under load.",
    "one two three four five six seven eight nine ten eleven twelve",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tokenizer(vocab_size: int = 400) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on CORPUS (specials first: ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tokenizer


def _train_tokenizer(vocab_size: int) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    tokenizer = train_tokenizer(vocab_size)
    model = json.loads(tokenizer.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]  # 3 = control, 1 = normal
    return tokens, types, merges, vocab


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable stand-in character -> byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=False)}


def write_tiny_llama(
    path: str | Path,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    context: int = 8192,
    vocab_size: int = 400,
    seed: int = 0,
) -> Path:
    """Write the model and return its path. A few hundred KB at the defaults, under a second."""
    import gguf

    if hidden % heads or heads % kv_heads:
        raise ValueError(f"tiny_gguf: hidden ({hidden}) must divide by heads ({heads}), heads by kv_heads ({kv_heads})")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges, vocab = _train_tokenizer(vocab_size)
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    kv_dim = head_dim * kv_heads

    def weight(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("kvselect-tiny-llama")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab["<|endoftext|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    output = weight(n_vocab, hidden)
    decoder = _byte_decoder()
    for index, token in enumerate(tokens):
        raw = bytes(decoder.get(ch, 0) for ch in token) if token not in SPECIALS else b""
        printable = bool(raw) and all(32 <= b < 127 for b in raw)
        if not printable:
            output[index, :] = 0.0  # never chosen by greedy decoding: no EOS, no partial UTF-8
    writer.add_tensor("token_embd.weight", weight(n_vocab, hidden))
    for layer in range(layers):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"{prefix}.attn_q.weight", weight(hidden, hidden))
        writer.add_tensor(f"{prefix}.attn_k.weight", weight(kv_dim, hidden))
        writer.add_tensor(f"{prefix}.attn_v.weight", weight(kv_dim, hidden))
        writer.add_tensor(f"{prefix}.attn_output.weight", weight(hidden, hidden))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"{prefix}.ffn_gate.weight", weight(ffn, hidden))
        writer.add_tensor(f"{prefix}.ffn_up.weight", weight(ffn, hidden))
        writer.add_tensor(f"{prefix}.ffn_down.weight", weight(hidden, ffn))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args(argv)
    print(write_tiny_llama(args.out, hidden=args.hidden, layers=args.layers, context=args.context))


if __name__ == "__main__":
    main()
