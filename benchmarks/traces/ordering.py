"""A trace's rows in arrival order at any size: checked in one pass, or merge-sorted through disk.

Production logs are not always in time order: a request log written as requests complete, two
days' logs appended, a file concatenated from several servers. The statistics (concurrency
sweep, sessions, prefixes seen before, the LRU cache) need the rows in arrival order, exactly.

- `in_order(chunks)`: each chunk sorted by (arrival, line); raises `OutOfOrder` as soon as a chunk
  starts before the previous one ended. The caller restarts with `sorted_chunks` (cheap for the
  usual ordered log: no copy is written).
- `sorted_chunks(chunks)`: an external merge sort. Rows are gathered into runs of `run_rows`,
  each sorted and written to a temporary Arrow IPC file; the runs are then merged in batches
  whose size is bounded whatever the number of rows (`merge_rows` across all runs). The key is
  (arrival, line): lines are unique, so the order is total and the result is the same however the
  file was cut into chunks.
- `Disorder` counts the rows that arrived before a row above them in the file (behind the
  running maximum of the arrivals), for the statistics to report.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.traces.formats import COLUMNS, TraceChunk

RUN_ROWS = 262_144  # rows sorted in memory per run (a few tens of MiB)
MERGE_ROWS = 524_288  # rows held by the merge across all runs
RUN_BATCH_ROWS = 1024  # record batches of a run file: the merge reads a run in steps of these

SCHEMA = pa.schema(
    [
        ("line", pa.int64()),
        ("arrival_s", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("session_id", pa.string()),
        ("tenant", pa.string()),
        ("prefix_key", pa.string()),
        ("prefix_tokens", pa.float64()),
        ("ttft_ms", pa.float64()),
        ("e2e_ms", pa.float64()),
        ("failed", pa.bool_()),
        ("hash_ids", pa.list_(pa.int64())),
    ]
)


class OutOfOrder(Exception):
    """A chunk starts before the rows already passed on: the caller restarts with `sorted_chunks`."""


class Disorder:
    """Counts rows behind the running maximum of the arrivals, in file order."""

    def __init__(self) -> None:
        self.latest = -math.inf
        self.rows_behind = 0

    def see(self, arrival: np.ndarray) -> None:
        if arrival.size == 0:
            return
        running = np.maximum.accumulate(np.concatenate([[self.latest], arrival]))
        self.rows_behind += int((arrival < running[:-1]).sum())
        self.latest = float(running[-1])


def _order(arrival: np.ndarray, line: np.ndarray) -> np.ndarray:
    return np.lexsort((line, arrival))


def take(chunk: TraceChunk, index: np.ndarray) -> TraceChunk:
    """The rows `index` of a chunk, hash ids aligned."""
    frame = chunk.frame.iloc[index].reset_index(drop=True)
    hashes = chunk.hash_ids.take(pa.array(index, type=pa.int64())) if chunk.hash_ids is not None else None
    return TraceChunk(frame=frame, hash_ids=hashes, bytes_read=chunk.bytes_read)


def sort_chunk(chunk: TraceChunk) -> TraceChunk:
    """The chunk sorted by (arrival, line); the same object when it already is."""
    arrival = chunk.frame["arrival_s"].to_numpy(dtype=np.float64)
    if arrival.size < 2 or bool(np.all(arrival[1:] >= arrival[:-1])):
        return chunk
    return take(chunk, _order(arrival, chunk.frame["line"].to_numpy(dtype=np.int64)))


def in_order(chunks: Iterable[TraceChunk], disorder: Disorder | None = None) -> Iterator[TraceChunk]:
    """The chunks, each sorted; `OutOfOrder` when one starts before the previous one's last row."""
    latest = -math.inf
    for chunk in chunks:
        if chunk.frame.empty:
            continue
        arrival = chunk.frame["arrival_s"].to_numpy(dtype=np.float64)
        if disorder is not None:
            disorder.see(arrival)
        if float(arrival.min()) < latest:
            raise OutOfOrder
        latest = float(arrival.max())
        yield sort_chunk(chunk)


# --------------------------------------------------------------------------- external merge sort


def _table(chunk: TraceChunk) -> pa.Table:
    frame = chunk.frame
    arrays = []
    for field in SCHEMA:
        if field.name == "hash_ids":
            hashes = chunk.hash_ids
            if hashes is None:
                arrays.append(pa.nulls(len(frame), type=field.type))
            else:
                arrays.append(hashes.cast(field.type) if hashes.type != field.type else hashes)
        elif pa.types.is_string(field.type):
            arrays.append(pa.array(frame[field.name].to_numpy(dtype=object), type=field.type, from_pandas=True))
        else:
            arrays.append(pa.array(frame[field.name].to_numpy(), type=field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _chunk(table: pa.Table, bytes_read: int = 0) -> TraceChunk:
    frame = pd.DataFrame(
        {name: table.column(name).combine_chunks().to_numpy(zero_copy_only=False) for name in COLUMNS},
        columns=list(COLUMNS),
    )
    hashes = table.column("hash_ids").combine_chunks()
    if hashes.null_count == len(hashes):
        hashes = None
    return TraceChunk(frame=frame, hash_ids=hashes, bytes_read=bytes_read)


def _sorted_table(table: pa.Table) -> pa.Table:
    order = _order(table.column("arrival_s").to_numpy(), table.column("line").to_numpy())
    return table.take(pa.array(order, type=pa.int64()))


class _Run:
    """One sorted run on disk, read back batch by batch."""

    def __init__(self, path: Path, batch_rows: int) -> None:
        self.source = pa.OSFile(str(path), "rb")
        self.reader = pa.ipc.open_file(self.source)
        self.next_batch = 0
        self.batch_rows = batch_rows
        self.buffer: pa.Table | None = None  # rows read, not yet passed on

    @property
    def exhausted(self) -> bool:
        return self.next_batch >= self.reader.num_record_batches and self.buffer is None

    def fill(self) -> None:
        """Read the next record batches, about `batch_rows` rows, when the buffer is empty."""
        if self.buffer is not None:
            return
        pieces, rows = [], 0
        while self.next_batch < self.reader.num_record_batches and (not pieces or rows < self.batch_rows):
            batch = self.reader.get_batch(self.next_batch)
            self.next_batch += 1
            pieces.append(batch)
            rows += batch.num_rows
        self.buffer = pa.Table.from_batches(pieces, schema=SCHEMA) if rows else None

    def last_key(self) -> tuple[float, int]:
        return (self.buffer.column("arrival_s")[-1].as_py(), self.buffer.column("line")[-1].as_py())

    def split(self, key: tuple[float, int]) -> pa.Table | None:
        """Pass on the buffered rows at or before `key`; keep the rest."""
        arrival = self.buffer.column("arrival_s").to_numpy()
        line = self.buffer.column("line").to_numpy()
        upto = int(np.count_nonzero((arrival < key[0]) | ((arrival == key[0]) & (line <= key[1]))))
        if upto == 0:
            return None
        head = self.buffer.slice(0, upto)
        self.buffer = self.buffer.slice(upto) if upto < self.buffer.num_rows else None
        return head

    def close(self) -> None:
        self.source.close()


def _write_run(tables: list[pa.Table], directory: Path, index: int, batch_rows: int) -> Path:
    path = directory / f"run-{index:06d}.arrow"
    table = _sorted_table(pa.concat_tables(tables))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(table, max_chunksize=batch_rows)
    return path


def sorted_chunks(
    chunks: Iterable[TraceChunk],
    run_rows: int = RUN_ROWS,
    merge_rows: int = MERGE_ROWS,
    disorder: Disorder | None = None,
    directory: str | Path | None = None,
    run_batch_rows: int = RUN_BATCH_ROWS,
) -> Iterator[TraceChunk]:
    """Every row of `chunks` in (arrival, line) order, memory bounded by `run_rows` + `merge_rows` (+ one
    record batch of `run_batch_rows` per run)."""
    with tempfile.TemporaryDirectory(prefix="kvselect-trace-sort-", dir=directory) as tmp:
        folder = Path(tmp)
        runs: list[Path] = []
        pending: list[pa.Table] = []
        held = 0
        bytes_read = 0
        for chunk in chunks:
            if chunk.frame.empty:
                continue
            if disorder is not None:
                disorder.see(chunk.frame["arrival_s"].to_numpy(dtype=np.float64))
            bytes_read = chunk.bytes_read
            pending.append(_table(chunk))
            held += len(chunk.frame)
            if held >= run_rows:
                runs.append(_write_run(pending, folder, len(runs), run_batch_rows))
                pending, held = [], 0
        if not runs:  # everything fits in one run: sort it in memory
            if pending:
                table = _sorted_table(pa.concat_tables(pending))
                for start in range(0, table.num_rows, run_rows):
                    yield _chunk(table.slice(start, run_rows), bytes_read)
            return
        if pending:
            runs.append(_write_run(pending, folder, len(runs), run_batch_rows))
        pending = []
        yield from _merge(runs, max(merge_rows // len(runs), 1), bytes_read)


def _merge(paths: list[Path], batch_rows: int, bytes_read: int) -> Iterator[TraceChunk]:
    """k-way merge: pass on every buffered row up to the smallest last key among the buffers."""
    runs = [_Run(path, batch_rows) for path in paths]
    try:
        while True:
            for run in runs:
                run.fill()
            active = [run for run in runs if run.buffer is not None]
            if not active:
                return
            horizon = min(run.last_key() for run in active)
            heads = [head for run in active if (head := run.split(horizon)) is not None]
            yield _chunk(_sorted_table(pa.concat_tables(heads)), bytes_read)
    finally:
        for run in runs:
            run.close()
