"""Ragged and untidy CSV rows: refused with the exact line and column wherever they are, however the
file is cut into chunks; blank lines and CRLF ends keep every row on its own physical line."""

from __future__ import annotations

import gzip

import pytest

from benchmarks.traces.formats import TraceError, read_trace

HEADER = "timestamp,input_tokens,output_tokens\n"


def rows(n: int, start: int = 0) -> str:
    return "".join(f"{start + i},{100 + i % 7},{5 + i % 3}\n" for i in range(n))


def read_all(path, chunk_rows=65_536):
    return [chunk for chunk in read_trace(path, chunk_rows=chunk_rows)]


@pytest.mark.parametrize("chunk_rows", [1, 64, 65_536])
@pytest.mark.parametrize(
    "bad, message",
    [
        ("7,100\n", "column 3 ('output_tokens'): missing; the header has 3 columns, the row 2"),
        ("7,100,5,surplus\n", "column 4: unexpected value 'surplus'; the header has 3 columns, the row 4"),
    ],
)
def test_a_ragged_row_at_the_start_names_its_line_and_column(tmp_path, chunk_rows, bad, message):
    path = tmp_path / "k.csv"
    path.write_text(HEADER + rows(1) + bad + rows(10, start=8))
    with pytest.raises(TraceError) as error:
        read_all(path, chunk_rows)
    assert str(error.value) == f"line 3: {message}"


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
@pytest.mark.parametrize("chunk_rows", [100, 65_536])
def test_a_ragged_row_far_in_names_its_exact_line(tmp_path, suffix, chunk_rows):
    text = HEADER + rows(44_998) + "44998,100\n" + rows(20_000, start=44_999)  # line 45,000
    path = tmp_path / f"k{suffix}"
    if suffix.endswith(".gz"):
        with gzip.open(path, "wt") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    with pytest.raises(TraceError, match=r"^line 45000: column 3 \('output_tokens'\): missing"):
        read_all(path, chunk_rows)


def test_blank_lines_and_crlf_keep_rows_on_their_physical_lines(tmp_path):
    path = tmp_path / "k.csv"
    path.write_bytes(b"\r\n" + HEADER.encode() + b"1,10,2\r\n\r\n\n2,11,3\r\n3,abc,4\r\n")
    with pytest.raises(TraceError, match=r"^line 7: input_tokens: not a number, got 'abc'"):
        read_all(path, 1)
    path.write_bytes(b"\r\n" + HEADER.encode() + b"1,10,2\r\n\r\n\n2,11,3\r\n")
    lines = [line for chunk in read_all(path, 1) for line in chunk.frame["line"].tolist()]
    assert lines == [3, 6]


def test_a_value_in_a_wrong_encoding_names_its_line(tmp_path):
    path = tmp_path / "k.csv"
    path.write_bytes(HEADER.encode() + b"1,10,2\n2,1\xff,3\n")
    with pytest.raises(TraceError, match=r"^line 3: "):
        read_all(path)


def test_a_header_only_file_has_no_rows(tmp_path):
    path = tmp_path / "k.csv"
    path.write_text(HEADER)
    assert read_all(path) == []
