"""The trace formats kvselect reads (`benchmarks.traces.formats` reads them): each format's columns
and sniff, the normalised columns, the errors, a file's head and its SHA-256.

No pandas, and pyarrow only inside the functions that open a file: the pages and forms that list the
formats, and the services that detect one, import this catalogue; the readers (pandas) are loaded by
the import that reads a trace (tests/architecture/test_lean_imports.py).
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS = (
    "line",  # line number in the file (1 = the first line), for messages and request ids
    "arrival_s",  # seconds in the file's own time base (the stats and the replay rebase it)
    "input_tokens",
    "output_tokens",
    "session_id",  # str or None
    "tenant",  # str or None
    "prefix_key",  # str or None: requests with the same key share their first prefix_tokens tokens
    "prefix_tokens",  # float, NaN when not given
    "ttft_ms",  # float, NaN when not observed
    "e2e_ms",  # float, NaN when not observed
    "failed",  # no output to replay (BurstGPT's failures, output 0)
)
MOONCAKE_BLOCK_TOKENS = 512  # the Mooncake traces' block size (the length of hash_ids = ceil(input / 512))
MAX_TOKENS = 10_000_000  # the constraints one-pager's own ceiling
BLOCK_BYTES = 1024 * 1024  # per chunk: tens of thousands of rows, a few tens of MiB of work
HEAD_BYTES = 64 * 1024
NEWLINE = b"\n"


class TraceError(ValueError):
    """A trace that cannot be read; the message names the line and the column."""


class UnrecognisedTrace(TraceError):
    """No format accepts the file; `reasons` maps each format to why it refused."""

    def __init__(self, reasons: dict[str, str]):
        self.reasons = reasons
        super().__init__(
            "not a trace kvselect reads: " + "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
        )


@dataclass(frozen=True)
class Head:
    """The start of a file: what a sniff looks at."""

    kind: str  # "jsonl" or "csv"
    keys: tuple[str, ...]  # JSONL: the first object's keys; CSV: the header's columns
    first: dict[str, Any] | None = None  # JSONL: the first object


@dataclass(frozen=True)
class TraceFormat:
    name: str
    title: str
    source: str  # where the format is described
    kind: str  # "jsonl", "csv" or "either"
    fields: dict[str, tuple[str, ...]]  # canonical name -> the file's column names, first found wins
    required: tuple[str, ...]  # canonical names that must be present
    time_unit: str  # "s", "ms" or "datetime" ("s-or-datetime": numbers are seconds, strings ISO 8601)
    # JSONL: each column's name and pyarrow type (a `pyarrow` factory's name, `list_int64` a list of
    # int64): the reader's explicit schema, built by `jsonl_schema` when a file is read
    jsonl_columns: tuple[tuple[str, str], ...] = ()

    @property
    def jsonl_schema(self) -> pa.Schema | None:
        """The explicit schema the JSONL reader parses with (None: let pyarrow infer it)."""
        if not self.jsonl_columns:
            return None
        import pyarrow as pa

        types = {"list_int64": lambda: pa.list_(pa.int64())}
        return pa.schema(
            [(name, types[kind]() if kind in types else getattr(pa, kind)()) for name, kind in self.jsonl_columns]
        )

    def sniff(self, head: Head) -> str | None:
        """None when the file looks like this format, else why not."""
        if self.kind != "either" and head.kind != self.kind:
            return f"not {self.kind.upper()}"
        missing = [self.fields[name][0] for name in self.required if not any(c in head.keys for c in self.fields[name])]
        if missing:
            return "no " + ", ".join(repr(m) for m in missing) + (" key" if head.kind == "jsonl" else " column")
        return None

    def column(self, name: str, keys: tuple[str, ...]) -> str | None:
        return next((c for c in self.fields.get(name, ()) if c in keys), None)


KVSELECT = TraceFormat(
    name="kvselect",
    title="kvselect request log (CSV or JSONL)",
    source="docs/domain.md (Production traces)",
    kind="either",
    fields={
        "arrival": ("timestamp",),
        "input_tokens": ("input_tokens",),
        "output_tokens": ("output_tokens",),
        "session_id": ("session_id",),
        "tenant": ("tenant",),
        "prefix_key": ("prefix_group", "prefix_hash"),
        "prefix_tokens": ("prefix_tokens",),
        "ttft_ms": ("ttft_ms",),
        "e2e_ms": ("e2e_ms",),
    },
    required=("arrival", "input_tokens", "output_tokens"),
    time_unit="s-or-datetime",
    jsonl_columns=(
        ("timestamp", "float64"),
        ("input_tokens", "int64"),
        ("output_tokens", "int64"),
        ("session_id", "string"),
        ("tenant", "string"),
        ("prefix_group", "string"),
        ("prefix_hash", "string"),
        ("prefix_tokens", "float64"),
        ("ttft_ms", "float64"),
        ("e2e_ms", "float64"),
    ),
)
MOONCAKE = TraceFormat(
    name="mooncake",
    title="Mooncake trace (JSONL)",
    source="https://github.com/kvcache-ai/Mooncake/tree/main/FAST25-release/traces",
    kind="jsonl",
    fields={
        "arrival": ("timestamp",),
        "input_tokens": ("input_length",),
        "output_tokens": ("output_length",),
        "session_id": ("session_id",),
        "hash_ids": ("hash_ids",),
    },
    required=("arrival", "input_tokens", "output_tokens"),
    time_unit="ms",
    jsonl_columns=(
        ("timestamp", "float64"),
        ("input_length", "int64"),
        ("output_length", "int64"),
        ("hash_ids", "list_int64"),
        ("session_id", "string"),
    ),
)
AZURE = TraceFormat(
    name="azure",
    title="Azure LLM inference trace (CSV)",
    source="https://github.com/Azure/AzurePublicDataset/blob/master/AzureLLMInferenceDataset2023.md",
    kind="csv",
    fields={
        "arrival": ("TIMESTAMP",),
        "input_tokens": ("ContextTokens",),
        "output_tokens": ("GeneratedTokens",),
    },
    required=("arrival", "input_tokens", "output_tokens"),
    time_unit="datetime",
)
BURSTGPT = TraceFormat(
    name="burstgpt",
    title="BurstGPT trace (CSV)",
    source="https://github.com/HPMLL/BurstGPT#schema",
    kind="csv",
    fields={
        "arrival": ("Timestamp",),
        "input_tokens": ("Request tokens",),
        "output_tokens": ("Response tokens",),
        "session_id": ("Session ID", "SessionID"),
    },
    required=("arrival", "input_tokens", "output_tokens"),
    time_unit="s",
)

# Sniffs are mutually exclusive (the required column names differ); order is for the messages.
FORMATS: dict[str, TraceFormat] = {f.name: f for f in (KVSELECT, MOONCAKE, AZURE, BURSTGPT)}


# --------------------------------------------------------------------------- files


def file_size(path: str | Path) -> int:
    return Path(path).stat().st_size


def file_sha256(path: str | Path) -> str:
    """SHA-256 of the file's bytes as stored (compressed for .gz), read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def open_streams(path: Path) -> tuple[pa.NativeFile, pa.NativeFile]:
    """(the file on disk, its decompressed stream): `.gz` files are read through gzip."""
    import pyarrow as pa

    raw = pa.OSFile(str(path), "rb")
    if path.suffix.lower() == ".gz":
        return raw, pa.CompressedInputStream(raw, "gzip")
    return raw, raw


def read_head(path: str | Path) -> Head:
    """The first line of the file, as a JSONL object or a CSV header."""
    import pyarrow as pa

    path = Path(path)
    try:
        raw, stream = open_streams(path)
    except OSError as exc:
        raise TraceError(f"{path.name}: cannot open ({exc})") from None
    try:
        data = stream.read(HEAD_BYTES)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(f"{path.name}: cannot read ({exc})") from None
    finally:
        stream.close()
        raw.close()
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise TraceError(f"{path.name}: the file is empty")
    if first.lstrip().startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError as exc:
            raise TraceError(f"line 1: not a JSON object ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise TraceError("line 1: not a JSON object")
        return Head("jsonl", tuple(obj), obj)
    header = next(csv.reader([first]))
    return Head("csv", tuple(name.strip() for name in header))


def detect(path: str | Path) -> TraceFormat:
    """The format whose sniff accepts the file, or UnrecognisedTrace with every format's reason."""
    head = read_head(path)
    reasons = {}
    for fmt in FORMATS.values():
        reason = fmt.sniff(head)
        if reason is None:
            return fmt
        reasons[fmt.name] = reason
    raise UnrecognisedTrace(reasons)


def format_named(name: str) -> TraceFormat:
    if name not in FORMATS:
        raise TraceError(f"format: must be one of {', '.join(FORMATS)}, got {name!r}")
    return FORMATS[name]
