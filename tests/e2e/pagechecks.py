"""What the page crawler refuses in a page's visible text (issue 37 item 2), as pure functions.

Visible text is what a person reads: text outside code blocks (`code`, `pre`, `kbd`, `samp`), as
the crawler's script collects it. Each check returns the offending fragments (empty: clean), so a
failure names what to fix:

* `identifiers`: code where words belong: snake_case ids (``long_context``, ``total_upper``),
  constants (``FORM_FILLING``), dotted codes (``readiness.logs``), raw dicts, raw DNs
  (``CN=…,O=…``).
* `english_phrases`: English on a Chinese page: any Latin word of three letters or more that is
  not an acronym, a unit or a name the allow-list holds (product names, people, what users typed).
* `punctuation`: ASCII punctuation right after a Chinese character (full-width expected), and the
  informal 你 where the product says 您.

No Django and no browser here: the crawler (tests/e2e/crawler.py) feeds these functions.
"""

from __future__ import annotations

import re
from typing import Iterable

# Names, units and product names that stay as they are on a Chinese page (matched as whole words,
# case-sensitively; longer entries are removed first so "llama.cpp (llama-server)" wins over "llama").
PRODUCT_NAMES = (
    "kvselect",
    "kvselect-sign",
    "vLLM",
    "SGLang",
    "llama.cpp",
    "llama-server",
    "LMDeploy",
    "TensorRT-LLM",
    "Text Generation Inference",
    "TGI",
    "Llama",
    "Qwen",
    "Mistral",
    "Mixtral",
    "DeepSeek",
    "Prometheus",
    "Grafana",
    "promtool",
    "pdfsig",
    "Adobe Acrobat",
    "Acrobat",
    "Poppler",
    "PAdES",
    "Celery",
    "Redis",
    "PostgreSQL",
    "SQLite",
    "Django",
    "Python",
    "PyTorch",
    "NVIDIA",
    "NVML",
    "OpenAI",
    "Swagger UI",
    "GitHub",
    "Parquet",
    "Apache",
    "aiperf",
    "genai-perf",
    "guidellm",
    "vegeta",
    "locust",
    "SoftHSM",
    "PKCS#11",
    "PKCS#12",
    "YubiKey",
    "Chromium",
    "pip",
    "CUDA",
    "HuggingFace",
    "Hugging Face",
    "Linux",
    "Docker",
    "Kubernetes",
    "simulator",  # the kvsim engine's own name in run provenance ("engine: simulator")
    "kvsim",
    "Noto Sans CJK",
    "htmx",
    # the trace formats and benchmark tools an upload or a trace import accepts, by their names
    "Mooncake",
    "Azure",
    "BurstGPT",
    "LLMPerf",
    "inference-perf",
    "English",  # the language switch offers each language by its own name (English, 简体中文)
    "kvselect-harness",  # kvselect's own load generator, named as a run's tool
    "Perf Analyzer",  # NVIDIA Triton's load client, named by a result format (perf_analyzer raw output)
    # KV precisions as engines name them (fp8 and bf16 hold no three-letter word and pass anyway)
    "int4",
    "int8",
)
# Units and measures written the same way in Chinese technical text (lowercased words).
UNIT_WORDS = frozenset(
    {
        "token",
        "tokens",
        "tok",
        "req",
        "gib",
        "mib",
        "kib",
        "gb",
        "mb",
        "kb",
        "ms",
        "min",
        "eur",
        "usd",
        "cny",
        "rmb",
        "api",
        "url",
        "ttft",
        "tpot",
        "itl",
        "e2e",
        "topsis",
        "bootstrap",
    }
)
# What a code block would hold, never prose: URLs, e-mail addresses, file names, hashes.
URL = re.compile(r"\b(?:https?|file)://\S+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
FILE_EXTENSIONS = frozenset(
    {"pdf", "json", "yml", "yaml", "csv", "jsonl", "parquet", "p7s", "p12", "pem", "der", "txt", "html", "py", "gguf"}
)
FILE_NAME = re.compile(r"[\w.\-…]+\.(?:" + "|".join(sorted(FILE_EXTENSIONS)) + r")\b")
HEX = re.compile(r"\b[0-9a-f]{8,}\b")
# References that name a thing the same way in every language, as ids do: a run ("run-12", the name its
# files, API paths and both languages' records share, as "DR-1-v2" names a record) and a build from a
# git ref ("master@00dc805", how llama-server reports its version).
REFERENCE = re.compile(r"(?<![\w-])run-\d+(?![\w-])|\b[\w.-]+@[0-9a-f]{7,40}\b")

IDENTIFIER = re.compile(r"(?<![\w.\-/@#])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w\-/@])")
CONSTANT = re.compile(r"(?<![\w\-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w\-])")
DOTTED = re.compile(r"(?<![\w.\-/@#])([a-z][a-z_]*)\.([a-z][a-z_]*)(?![\w\-/@(])")
RAW_DICT = re.compile(r"[{\[]\s*['\"]\w+['\"]\s*:|\{\s*\w+\s*:\s*|'\w+':\s")
DN = re.compile(r"\b(?:CN|OU|O|L|ST|C|DC|E)=[^,\s=][^,=]*,\s*(?:CN|OU|O|L|ST|C|DC|E)=")

LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
ASCII_AFTER_CJK = re.compile(rf"[{CJK}][,;:!?]|[{CJK}]\.(?!\w)")


# An allowed text cut short on a page ("Community support only; the platform team runs it, with a
# 4-hour response during busi…") is still what was typed, from this many characters on.
SHORTENED_MINIMUM = 16


def without_shortened(text: str, allowed: Iterable[str]) -> str:
    """`text` with every allowed text that a page cut short with "…" blanked out, the ellipsis too."""
    if "…" not in text:
        return text
    for name in {a.strip() for a in allowed if a and len(a.strip()) > SHORTENED_MINIMUM}:
        start = text.find(name[:SHORTENED_MINIMUM])
        while start >= 0:
            length = SHORTENED_MINIMUM
            while length < len(name) and start + length < len(text) and text[start + length] == name[length]:
                length += 1
            # the page's own cut may drop the trailing space before the ellipsis
            end = start + length + len(text[start + length :]) - len(text[start + length :].lstrip(" "))
            if text[end : end + 1] == "…":
                text = text[:start] + " " + text[end + 1 :]
            start = text.find(name[:SHORTENED_MINIMUM], start + 1)
    return text


def without(text: str, allowed: Iterable[str]) -> str:
    """`text` with every allowed string (whole words, or cut short with "…") and every URL, file name,
    hash and reference blanked out. An allowed text that names a file ("alerts.yml and dashboard.json
    exported from this record", typed in a project check) goes before the file names, or it would no
    longer be found as typed."""
    names = sorted({a.strip() for a in allowed if a and a.strip()}, key=len, reverse=True)
    text = URL.sub(" ", text)
    for name in (name for name in names if FILE_NAME.search(name)):
        text = re.sub(r"(?<![A-Za-z0-9])" + re.escape(name) + r"(?![A-Za-z0-9])", " ", text)
    text = FILE_NAME.sub(" ", text)
    text = HEX.sub(" ", text)
    text = REFERENCE.sub(" ", text)
    text = without_shortened(text, allowed)
    for name in names:
        text = re.sub(r"(?<![A-Za-z0-9])" + re.escape(name) + r"(?![A-Za-z0-9])", " ", text)
    return text


def identifiers(text: str, allowed: Iterable[str] = ()) -> list[str]:
    """Code identifiers, raw dicts and raw DNs in visible text (outside the allowed strings)."""
    text = without(text, [*PRODUCT_NAMES, *allowed])
    found = [m.group(0) for m in IDENTIFIER.finditer(text)]
    found += [m.group(0) for m in CONSTANT.finditer(text)]
    found += [
        m.group(0)
        for m in DOTTED.finditer(text)
        if len(m.group(1)) > 1 and len(m.group(2)) > 1 and m.group(2) not in FILE_EXTENSIONS
    ]
    found += [m.group(0) for m in RAW_DICT.finditer(text)]
    found += [m.group(0) for m in DN.finditer(text)]
    return found


def english_words(text: str, allowed: Iterable[str] = ()) -> list[str]:
    """Latin words a Chinese reader would have to read as English: three letters or more, not all
    capitals (acronyms, the SIMULATED badge), not a unit, not inside an allowed name."""
    text = without(text, [*PRODUCT_NAMES, *allowed])
    words = []
    for match in LATIN_WORD.finditer(text):
        word = match.group(0).strip("'’")
        if len(word) < 3 or word.isupper() or word.lower() in UNIT_WORDS:
            continue
        words.append(word)
    return words


def english_phrases(text: str, allowed: Iterable[str] = ()) -> list[str]:
    """The lines of `text` that hold English words (`english_words`), each once, for a report."""
    lines = []
    for line in text.splitlines():
        if english_words(line, allowed):
            lines.append(" ".join(line.split()))
    return list(dict.fromkeys(lines))


def punctuation(text: str) -> list[str]:
    """ASCII punctuation right after a Chinese character, and 你 (the product says 您)."""
    found = [text[max(0, m.start() - 6) : m.end() + 6] for m in ASCII_AFTER_CJK.finditer(text)]
    found += [text[max(0, m.start() - 6) : m.end() + 6] for m in re.finditer("你", text)]
    return found
