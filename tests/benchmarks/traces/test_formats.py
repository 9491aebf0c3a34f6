"""The four trace formats: recognised from their first line, read in any chunking, refused with the line
and the column named. The files are written here in each format's published layout."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from benchmarks.traces.formats import FORMATS, TraceError, UnrecognisedTrace, detect, read_trace

# Layouts as published (first lines of the public files, shortened).
MOONCAKE = (
    '{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}\n'
    '{"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20]}\n'
    '{"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29, 30, 31, 32, 33]}\n'
)
AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.9799600,4808,10\n"
    "2023-11-16 18:17:04.0319600,3180,8\n"
    "2023-11-16 18:17:04.0781490,110,27\n"
)
AZURE_2024 = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,2048,28\n"
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,245,662,API log\n"
)
KVSELECT = (
    "timestamp,session_id,tenant,input_tokens,output_tokens,prefix_group,prefix_tokens,ttft_ms,e2e_ms\n"
    "2026-03-01T09:00:00Z,s1,support,900,120,sys-a,800,210,3900\n"
    "2026-03-01T09:00:02.5Z,,search,300,40,,,95,1300\n"
    "2026-03-01T09:00:30Z,s1,support,1200,80,sys-a,800,230,2700\n"
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "name, text, fmt",
    [
        ("m.jsonl", MOONCAKE, "mooncake"),
        ("a.csv", AZURE, "azure"),
        ("a24.csv", AZURE_2024, "azure"),
        ("b.csv", BURSTGPT, "burstgpt"),
        ("k.csv", KVSELECT, "kvselect"),
    ],
)
def test_each_format_is_recognised_from_its_first_line(tmp_path, name, text, fmt):
    assert detect(write(tmp_path, name, text)).name == fmt


def test_mooncake_times_are_milliseconds_and_its_blocks_come_along(tmp_path):
    chunks = list(read_trace(write(tmp_path, "m.jsonl", MOONCAKE)))
    frame = pd.concat([c.frame for c in chunks])
    assert frame["arrival_s"].tolist() == [0.0, 0.0, 3.052]
    assert frame["input_tokens"].tolist() == [6755, 7319, 7234]
    assert chunks[0].hash_ids[1].as_py()[:2] == [0, 14]


def test_azure_times_are_dates_with_seven_fractional_digits_or_a_zone(tmp_path):
    frame = next(read_trace(write(tmp_path, "a.csv", AZURE))).frame
    assert frame["arrival_s"].diff().iloc[1] == pytest.approx(0.052, abs=1e-6)
    assert next(read_trace(write(tmp_path, "a24.csv", AZURE_2024))).frame["input_tokens"].tolist() == [2048]


def test_burstgpt_failures_have_no_output(tmp_path):
    frame = next(read_trace(write(tmp_path, "b.csv", BURSTGPT))).frame
    assert frame["failed"].tolist() == [False, True, False]
    assert frame["arrival_s"].tolist() == [5.0, 45.0, 118.0]


def test_kvselect_reads_iso_times_sessions_prefixes_and_observations(tmp_path):
    frame = next(read_trace(write(tmp_path, "k.csv", KVSELECT))).frame
    assert np.diff(frame["arrival_s"]).tolist() == [2.5, 27.5]
    assert frame["session_id"].iloc[0] == "s1" and pd.isna(frame["session_id"].iloc[1])
    assert frame["prefix_key"].iloc[2] == "sys-a" and frame["prefix_tokens"].iloc[2] == 800
    assert frame["e2e_ms"].tolist() == [3900, 1300, 2700]


def test_kvselect_jsonl_accepts_numbers_as_ids_and_prefix_hash(tmp_path):
    text = (
        '{"timestamp": 0.5, "session_id": 7, "input_tokens": 10, "output_tokens": 2, "prefix_hash": "ab12", '
        '"prefix_tokens": 8}\n'
        "\n"
        '{"timestamp": 1.5, "session_id": "7", "input_tokens": 20, "output_tokens": 2}\n'
    )
    frame = next(read_trace(write(tmp_path, "k.jsonl", text))).frame
    assert frame["line"].tolist() == [1, 3]
    assert frame["session_id"].tolist() == ["7", "7"]
    assert frame["prefix_key"].iloc[0] == "ab12"


def test_gzip_files_are_read_as_they_stream(tmp_path):
    path = tmp_path / "b.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(BURSTGPT)
    assert detect(path).name == "burstgpt"
    assert sum(len(c.frame) for c in read_trace(path)) == 3


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "k.csv",
            "timestamp,input_tokens,output_tokens\n1,10,3\n2,abc,4\n",
            "line 3: input_tokens: not a number, got 'abc'",
        ),
        (
            "k.csv",
            "timestamp,input_tokens,output_tokens\n1,10,3\n2,0,4\n",
            "line 3: input_tokens: must be a positive integer",
        ),
        ("k.csv", "timestamp,input_tokens,output_tokens\n1,10,3\n,10,4\n", "line 3: timestamp: missing"),
        (
            "k.csv",
            "timestamp,input_tokens,output_tokens\nyesterday,10,3\n",
            "line 2: timestamp: must be seconds or an ISO",
        ),
        (
            "k.csv",
            "timestamp,input_tokens,output_tokens,prefix_tokens\n1,10,3,11\n",
            "line 2: prefix_tokens: must be between",
        ),
        ("k.csv", "timestamp,input_tokens,output_tokens,e2e_ms\n1,10,3,-5\n", "line 2: e2e_ms: must be >= 0"),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5\n',
            "line 2: not JSON",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "x"}\n',
            "line 1: hash_ids: must be a list",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5}\n',
            "line 2: output_length: missing",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nnot a date,5,1\n",
            "line 2: TIMESTAMP: must be a date and time",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n-1,ChatGPT,5,1,6,API log\n",
            "line 2: Timestamp: must be a non-negative time",
        ),
    ],
)
def test_a_broken_row_is_refused_naming_its_line_and_column(tmp_path, name, text, message):
    with pytest.raises(TraceError) as error:
        for _chunk in read_trace(write(tmp_path, name, text)):
            pass
    assert message in str(error.value)


def test_a_file_no_format_accepts_lists_every_reason(tmp_path):
    with pytest.raises(UnrecognisedTrace) as error:
        detect(write(tmp_path, "x.csv", "when,prompt,answer\n1,2,3\n"))
    assert set(error.value.reasons) == set(FORMATS)
    assert "azure: no 'TIMESTAMP'" in str(error.value)


def test_a_forced_format_that_does_not_fit_says_why(tmp_path):
    with pytest.raises(TraceError, match="is not a mooncake trace: not JSONL"):
        next(read_trace(write(tmp_path, "a.csv", AZURE), "mooncake"))


def test_an_empty_file_is_refused(tmp_path):
    with pytest.raises(TraceError, match="empty"):
        detect(write(tmp_path, "e.csv", "\n\n"))
