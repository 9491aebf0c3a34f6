"""The trace formats kvselect reads, streamed in chunks and normalised to one set of columns.

Four formats, each with a sniff (does the file look like it?) and a reader:

- `kvselect`: kvselect's own request log, CSV with a header or JSONL, one request per row:
  `timestamp` (seconds, since the trace start or the epoch, or an ISO 8601 time), `input_tokens`,
  `output_tokens`, optional `session_id`, `tenant`, `prefix_group` or `prefix_hash` (requests
  with the same value share their first `prefix_tokens` tokens), `prefix_tokens`, and `ttft_ms` /
  `e2e_ms` as observed in production. For a turn of a session, `input_tokens` is the whole prompt
  the engine saw (the earlier turns included).
- `mooncake`: the Mooncake traces (github.com/kvcache-ai/Mooncake, FAST'25 release), JSONL with
  `timestamp` (ms since the first request), `input_length`, `output_length` and `hash_ids` (one
  id per 512-token block; equal ids are the same prefix block). An optional `session_id` (as
  aiperf's multi-turn Mooncake traces write it) groups turns.
- `azure`: the Azure LLM inference traces 2023/2024 (github.com/Azure/AzurePublicDataset,
  AzureLLMInferenceDataset2023.md / 2024.md), CSV `TIMESTAMP` (a date and time, e.g.
  `2023-11-16 18:17:03.9799600`), `ContextTokens`, `GeneratedTokens`.
- `burstgpt`: BurstGPT (github.com/HPMLL/BurstGPT), CSV `Timestamp` (seconds from 0:00 on the
  first day), `Model`, `Request tokens`, `Response tokens`, `Total tokens`, `Log Type`; a failed
  request has `Response tokens` 0. A `Session ID` column, announced by the authors, is read when
  present.

Files are read with pyarrow in blocks of a few MiB (`.gz` is decompressed on the fly), so memory
does not grow with the file. Every chunk comes out as a `TraceChunk` whose frame has the columns
`COLUMNS` in file order. Problems raise `TraceError` naming the line and the column as the file
spells it; a file no format accepts raises `UnrecognisedTrace` with every format's reason.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from benchmarks.traces.catalog import (
    AZURE,
    BLOCK_BYTES,
    BURSTGPT,
    COLUMNS,
    FORMATS,
    HEAD_BYTES,
    KVSELECT,
    MAX_TOKENS,
    MOONCAKE,
    MOONCAKE_BLOCK_TOKENS,
    NEWLINE,
    Head,
    TraceError,
    TraceFormat,
    UnrecognisedTrace,
    detect,
    file_sha256,
    file_size,
    format_named,
    open_streams,
    read_head,
)

__all__ = [  # the catalogue is re-exported: a reader of traces needs one import
    "AZURE",
    "BLOCK_BYTES",
    "BURSTGPT",
    "COLUMNS",
    "FORMATS",
    "HEAD_BYTES",
    "Head",
    "KVSELECT",
    "MAX_TOKENS",
    "MOONCAKE",
    "MOONCAKE_BLOCK_TOKENS",
    "NEWLINE",
    "TraceChunk",
    "TraceError",
    "TraceFormat",
    "UnrecognisedTrace",
    "detect",
    "file_sha256",
    "file_size",
    "format_named",
    "open_streams",
    "read_head",
    "read_trace",
    "write_kvselect_csv",
]


@dataclass
class TraceChunk:
    """Rows of a trace in file order, in `COLUMNS`; Mooncake's block hashes aligned with them."""

    frame: pd.DataFrame
    hash_ids: pa.ListArray | None = None
    bytes_read: int = 0  # of the file on disk (compressed bytes for .gz), for progress


def read_trace(
    path: str | Path, fmt: TraceFormat | str | None = None, chunk_rows: int = 65_536
) -> Iterator[TraceChunk]:
    """The trace's rows in chunks of about `chunk_rows`, normalised (see the module docstring)."""
    path = Path(path)
    head = read_head(path)
    if fmt is None:
        fmt = detect(path)
    elif isinstance(fmt, str):
        fmt = format_named(fmt)
    reason = fmt.sniff(head)
    if reason is not None:
        raise TraceError(f"{path.name} is not a {fmt.name} trace: {reason}")
    if head.kind == "jsonl":
        yield from _jsonl_chunks(path, fmt, chunk_rows)
    else:
        yield from _csv_chunks(path, fmt, head, chunk_rows)


# --------------------------------------------------------------------------- CSV


def _csv_chunks(path: Path, fmt: TraceFormat, head: Head, chunk_rows: int) -> Iterator[TraceChunk]:
    """Blocks cut at line ends and parsed one by one, so that every row keeps its physical line
    (blank lines are skipped, as pyarrow skips them) and a ragged row names its line and column."""
    wanted = {name: fmt.column(name, head.keys) for name in fmt.fields}
    present = [c for cols in fmt.fields.values() for c in cols if c in head.keys]
    raw, stream = open_streams(path)
    block_bytes = min(BLOCK_BYTES, max(chunk_rows * 64, 256))
    try:
        line = 1  # the physical line the next block starts on
        rest = b""
        header_seen = False
        while True:
            data = stream.read(block_bytes)
            block = rest + data
            if data:
                cut = block.rfind(b"\n")
                if cut < 0:
                    rest = block
                    continue
                block, rest = block[: cut + 1], block[cut + 1 :]
            else:
                rest = b""
            if not header_seen:
                block, skipped = _skip_header(block)
                if skipped is None:  # no header line complete yet
                    rest, block = block + rest, b""
                    if not data:
                        break
                    continue
                header_seen = True
                line += skipped
            if block:
                chunk = _csv_block(path, block, fmt, head, present, wanted, line)
                if chunk is not None:
                    chunk.bytes_read = raw.tell()
                    yield chunk
                line += block.count(b"\n")
            if not data:
                break
    finally:
        stream.close()
        raw.close()


def _skip_header(block: bytes) -> tuple[bytes, int | None]:
    """The block after the header (the first line that is not blank) and how many lines that was."""
    if block.startswith(b"\xef\xbb\xbf"):
        block = block[3:]
    offset = lines = 0
    while True:
        end = block.find(b"\n", offset)
        if end < 0:
            return block, None
        lines += 1
        if block[offset:end].strip():
            return block[end + 1 :], lines
        offset = end + 1


def _record_lines(block: bytes, first_line: int) -> np.ndarray:
    """The physical line of every non-blank line of a block (pyarrow skips the blank ones)."""
    data = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    if not block.endswith(b"\n"):
        ends = np.append(ends, len(block))
    starts = np.concatenate([[0], ends[:-1] + 1])
    lengths = ends - starts
    crlf_blank = (lengths == 1) & (data[np.minimum(starts, max(len(block) - 1, 0))] == 13)
    blank = (lengths == 0) | crlf_blank
    return first_line + np.flatnonzero(~blank)


def _csv_block(
    path: Path,
    block: bytes,
    fmt: TraceFormat,
    head: Head,
    present: list[str],
    wanted: dict[str, str | None],
    first_line: int,
) -> TraceChunk | None:
    try:
        table = pa_csv.read_csv(
            io.BytesIO(block),
            read_options=pa_csv.ReadOptions(column_names=list(head.keys), use_threads=False),
            parse_options=pa_csv.ParseOptions(newlines_in_values=False),
            convert_options=pa_csv.ConvertOptions(
                include_columns=present,
                column_types={c: pa.string() for c in present},
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise _csv_block_error(path, block, head, first_line, exc) from None
    if table.num_rows == 0:
        return None
    lines = _record_lines(block, first_line)
    if lines.size != table.num_rows:  # a quoted field pyarrow read differently: say so rather than guess
        last = first_line + block.count(NEWLINE)
        raise TraceError(
            f"{path.name}: lines {first_line}-{last}: {table.num_rows} rows read from {lines.size} lines "
            "(a quoted value spanning lines?)"
        )
    columns = _columns(fmt, head.keys, lambda c: table.column(c).combine_chunks())
    return _normalise(columns, fmt, wanted, first_line, table.num_rows, lines, 0)


def _csv_block_error(path: Path, block: bytes, head: Head, first_line: int, exc: Exception) -> TraceError:
    """The exact line and column of the row pyarrow refused (found with Python's csv module)."""
    expected = len(head.keys)
    for offset, raw_line in enumerate(block.split(NEWLINE)):
        if not raw_line.strip(b"\r"):
            continue
        number = first_line + offset
        try:
            text = raw_line.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError as error:
            return TraceError(f"line {number}: byte {error.start + 1}: not UTF-8 text")
        try:
            cells = next(csv.reader([text]))
        except csv.Error as error:
            return TraceError(f"line {number}: not readable as CSV ({error})")
        if len(cells) < expected:
            missing = head.keys[len(cells)]
            return TraceError(
                f"line {number}: column {len(cells) + 1} ({missing!r}): missing; the header has {expected} "
                f"columns, the row {len(cells)}"
            )
        if len(cells) > expected:
            return TraceError(
                f"line {number}: column {expected + 1}: unexpected value {cells[expected][:40]!r}; the header "
                f"has {expected} columns, the row {len(cells)}"
            )
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    last = first_line + block.count(NEWLINE)
    return TraceError(f"{path.name}: lines {first_line}-{last}: not readable as CSV ({reason})")


# --------------------------------------------------------------------------- JSONL


def _jsonl_chunks(path: Path, fmt: TraceFormat, chunk_rows: int) -> Iterator[TraceChunk]:
    raw, stream = open_streams(path)
    block_bytes = min(BLOCK_BYTES, max(chunk_rows * 128, 256))
    try:
        line = 1
        rest = b""
        while True:
            data = stream.read(block_bytes)
            block = rest + data
            if not data:
                rest = b""
            else:
                cut = block.rfind(b"\n")
                if cut < 0:
                    rest = block
                    continue
                block, rest = block[: cut + 1], block[cut + 1 :]
            if block.strip():
                for chunk in _jsonl_block(block, fmt, line):
                    chunk.bytes_read = raw.tell()
                    yield chunk
            line += block.count(b"\n")
            if not data:
                break
    finally:
        stream.close()
        raw.close()


def _jsonl_block(block: bytes, fmt: TraceFormat, first_line: int) -> Iterator[TraceChunk]:
    if block.startswith(b"\xef\xbb\xbf"):
        block = block[3:]
    table = None
    # The fast path (pyarrow's JSON reader) needs one row per line; blank lines would shift the numbering.
    if fmt.jsonl_schema is not None and not block.startswith(b"\n") and b"\n\n" not in block and b"\n\r\n" not in block:
        try:
            table = pa_json.read_json(
                io.BytesIO(block),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=fmt.jsonl_schema, unexpected_field_behavior="ignore"
                ),
            )
        except pa.ArrowInvalid:
            table = None  # mixed types or a broken line: the line-by-line path says which
    if table is None:
        table, lines = _jsonl_lines(block, fmt, first_line)
    else:
        lines = None
    if table.num_rows == 0:
        return
    wanted = {name: fmt.column(name, tuple(table.column_names)) for name in fmt.fields}
    columns = _columns(fmt, tuple(table.column_names), lambda c: table.column(c).combine_chunks())
    hashes = columns.pop("hash_ids", None)
    yield _normalise(columns, fmt, wanted, first_line, table.num_rows, lines, 0, hashes)


def _jsonl_lines(block: bytes, fmt: TraceFormat, first_line: int) -> tuple[pa.Table, np.ndarray]:
    """Parse a block line by line: exact line numbers, values of any JSON type converted or refused."""
    names = list(dict.fromkeys(c for cols in fmt.fields.values() for c in cols))
    values: dict[str, list[Any]] = {name: [] for name in names}
    lines: list[int] = []
    for offset, text in enumerate(block.split(b"\n")):
        if not text.strip():
            continue
        number = first_line + offset
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(f"line {number}: not JSON ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"line {number}: must be a JSON object, got {type(obj).__name__}")
        lines.append(number)
        for name in names:
            value = obj.get(name)
            if name == "hash_ids":
                if value is not None and (
                    not isinstance(value, list)
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                ):
                    raise TraceError(f"line {number}: hash_ids: must be a list of integers, got {value!r}")
            elif isinstance(value, (dict, list)):
                raise TraceError(f"line {number}: {name}: must be a number or a string, got {value!r}")
            elif value is not None and not isinstance(value, str):
                value = str(value) if not isinstance(value, bool) else str(value).lower()
            values[name].append(value)
    arrays = {
        name: pa.array(column, type=pa.list_(pa.int64()) if name == "hash_ids" else pa.string())
        for name, column in values.items()
    }
    return pa.table(arrays), np.asarray(lines, dtype=np.int64)


# --------------------------------------------------------------------------- normalising


def _normalise(
    columns: dict[str, pa.Array],
    fmt: TraceFormat,
    wanted: dict[str, str | None],
    first_line: int,
    rows: int,
    lines: np.ndarray | None,
    bytes_read: int,
    hashes: pa.Array | None = None,
) -> TraceChunk:
    line = lines if lines is not None else np.arange(first_line, first_line + rows, dtype=np.int64)

    def where(index: int) -> int:
        return int(line[index])

    def name_of(key: str) -> str:
        return wanted.get(key) or key

    missing = [fmt.fields[key][0] for key in fmt.required if wanted.get(key) is None]
    if missing:
        raise TraceError(f"line {first_line}: missing {', '.join(repr(m) for m in missing)}")
    arrival = _times(columns["arrival"], fmt.time_unit, name_of("arrival"), where)
    input_tokens = _integers(columns["input_tokens"], name_of("input_tokens"), where, minimum=1)
    output_tokens = _integers(columns["output_tokens"], name_of("output_tokens"), where, minimum=0)
    prefix_tokens = (
        _numbers(columns["prefix_tokens"], name_of("prefix_tokens"), where, required=False)
        if "prefix_tokens" in columns
        else np.full(rows, np.nan)
    )
    bad = np.flatnonzero(~np.isnan(prefix_tokens) & ((prefix_tokens < 0) | (prefix_tokens > input_tokens)))
    if bad.size:
        i = bad[0]
        raise TraceError(
            f"line {where(i)}: {name_of('prefix_tokens')}: must be between 0 and the input tokens "
            f"({input_tokens[i]}), got {prefix_tokens[i]:g}"
        )
    observed = {}
    for key in ("ttft_ms", "e2e_ms"):
        values = (
            _numbers(columns[key], name_of(key), where, required=False) if key in columns else np.full(rows, np.nan)
        )
        negative = np.flatnonzero(values < 0)
        if negative.size:
            raise TraceError(f"line {where(negative[0])}: {name_of(key)}: must be >= 0, got {values[negative[0]]:g}")
        observed[key] = values
    frame = pd.DataFrame(
        {
            "line": line,
            "arrival_s": arrival,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "session_id": _strings(columns.get("session_id"), rows),
            "tenant": _strings(columns.get("tenant"), rows),
            "prefix_key": _prefix_keys(columns, rows),
            "prefix_tokens": prefix_tokens,
            "ttft_ms": observed["ttft_ms"],
            "e2e_ms": observed["e2e_ms"],
            "failed": output_tokens == 0,
        },
        columns=list(COLUMNS),
    )
    if hashes is not None and hashes.null_count == len(hashes):
        hashes = None
    return TraceChunk(frame=frame, hash_ids=hashes, bytes_read=bytes_read)


def _as_strings(array: pa.Array) -> pa.Array:
    return (
        array if pa.types.is_string(array.type) or pa.types.is_large_string(array.type) else pc.cast(array, pa.string())
    )


def _numbers(array: pa.Array, name: str, where: Callable[[int], int], required: bool = True) -> np.ndarray:
    """float64 values (NaN for empty cells); a value that is not a number names its line."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_floating(array.type) or pa.types.is_integer(array.type):
        values = array.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if array.null_count:
            values = np.where(array.is_null().to_numpy(zero_copy_only=False), np.nan, values)
    else:
        strings = _as_strings(array)
        trimmed = pc.utf8_trim_whitespace(strings)
        empty = pc.or_kleene(pc.is_null(trimmed), pc.equal(trimmed, "")).to_numpy(zero_copy_only=False)
        try:
            values = pc.cast(pc.if_else(pc.equal(trimmed, ""), None, trimmed), pa.float64()).to_numpy(
                zero_copy_only=False
            )
            values = np.where(empty, np.nan, values)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            text = pd.Series(trimmed.to_pylist(), dtype=object)
            parsed = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
            bad = np.flatnonzero(np.isnan(parsed) & ~empty)
            if bad.size:
                raise TraceError(f"line {where(bad[0])}: {name}: not a number, got {text[bad[0]]!r}") from None
            values = parsed
    if required:
        missing = np.flatnonzero(np.isnan(values))
        if missing.size:
            raise TraceError(f"line {where(missing[0])}: {name}: missing")
    infinite = np.flatnonzero(np.isinf(values))
    if infinite.size:
        raise TraceError(f"line {where(infinite[0])}: {name}: must be finite, got {values[infinite[0]]}")
    return values


def _integers(array: pa.Array, name: str, where: Callable[[int], int], minimum: int) -> np.ndarray:
    values = _numbers(array, name, where)
    bad = np.flatnonzero((values != np.floor(values)) | (values < minimum) | (values > MAX_TOKENS))
    if bad.size:
        value = values[bad[0]]
        kind = "a positive integer" if minimum >= 1 else "an integer >= 0"
        raise TraceError(f"line {where(bad[0])}: {name}: must be {kind} up to {MAX_TOKENS:,}, got {value:g}")
    return values.astype(np.int64)


def _times(array: pa.Array, unit: str, name: str, where: Callable[[int], int]) -> np.ndarray:
    """Seconds (float64) from numbers in `unit` or ISO 8601 date-times."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if unit in ("s", "ms"):
        values = _numbers(array, name, where) * (0.001 if unit == "ms" else 1.0)
    else:
        strings = pc.utf8_trim_whitespace(_as_strings(array))
        numeric = np.full(len(strings), np.nan)
        if unit == "s-or-datetime":
            try:
                numeric = pc.cast(strings, pa.float64()).to_numpy(zero_copy_only=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                numeric = pd.to_numeric(pd.Series(strings.to_pylist(), dtype=object), errors="coerce").to_numpy(
                    dtype=np.float64
                )
        todo = np.isnan(numeric)
        values = numeric
        if todo.any():
            values = numeric.copy()
            values[todo] = _datetimes(strings.filter(pa.array(todo)))
            bad = np.flatnonzero(np.isnan(values))
            if bad.size:
                value = strings[int(bad[0])].as_py()
                if value is None or value == "":
                    raise TraceError(f"line {where(bad[0])}: {name}: missing")
                expected = "seconds or an ISO 8601 time" if unit == "s-or-datetime" else "a date and time"
                raise TraceError(f"line {where(bad[0])}: {name}: must be {expected}, got {value!r}")
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        raise TraceError(f"line {where(bad[0])}: {name}: must be a non-negative time, got {values[bad[0]]:g}")
    return values


def _datetimes(strings: pa.Array) -> np.ndarray:
    """Epoch seconds of ISO 8601 date-times (NaN where unreadable): Arrow's parser, pandas' for mixed zones."""
    for target in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
        try:
            nanos = pc.cast(pc.cast(strings, target), pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        return nanos.to_numpy(zero_copy_only=False).astype(np.float64) / 1e9
    text = pd.Series(strings.to_pylist(), dtype=object)
    parsed = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
    seconds = (parsed - pd.Timestamp("1970-01-01", tz="UTC")) / pd.Timedelta(seconds=1)
    return seconds.to_numpy(dtype=np.float64, na_value=np.nan)


def _strings(array: pa.Array | None, rows: int) -> np.ndarray:
    if array is None:
        return np.full(rows, None, dtype=object)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    values = pc.utf8_trim_whitespace(_as_strings(array))
    values = pc.if_else(pc.equal(values, ""), None, values)
    return values.to_pandas().to_numpy(dtype=object)


def _prefix_keys(columns: dict[str, pa.Array], rows: int) -> np.ndarray:
    return _strings(columns.get("prefix_key"), rows)


def _columns(fmt: TraceFormat, keys: tuple[str, ...], get: Callable[[str], pa.Array]) -> dict[str, pa.Array]:
    """Canonical name -> the file's column; several spellings present (prefix_group, prefix_hash) coalesce."""
    columns = {}
    for name, candidates in fmt.fields.items():
        present = [c for c in candidates if c in keys]
        if not present:
            continue
        if len(present) == 1 or name == "hash_ids":
            columns[name] = get(present[0])
        else:
            columns[name] = pc.coalesce(*[_as_strings(_combined(get(c))) for c in present])
    return columns


def _combined(array: pa.Array) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


# --------------------------------------------------------------------------- writing (tests, benchmarks)


def write_kvselect_csv(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write rows (dicts with kvselect's column names) as kvselect's CSV trace."""
    names = [
        "timestamp",
        "session_id",
        "tenant",
        "input_tokens",
        "output_tokens",
        "prefix_group",
        "prefix_tokens",
        "ttft_ms",
        "e2e_ms",
    ]
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        for row in rows:
            writer.writerow(["" if _blank(row.get(n)) else row.get(n) for n in names])


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
