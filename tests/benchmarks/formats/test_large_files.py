"""The large-file paths (pyarrow, head-only sniffing) give the same results as the small ones."""

import json

import numpy as np
import pytest

import benchmarks.formats.base as common
from benchmarks.formats import FormatError, detect_and_parse, detect_and_parse_file
from benchmarks.perf.ingest import write_aiperf, write_vllm

from .conftest import FIXTURES, load


@pytest.fixture
def everything_is_large(monkeypatch):
    monkeypatch.setattr(common, "LARGE_FILE", 0)


def compare(small, large):
    assert small.format == large.format
    for a, b in zip(small.points, large.points, strict=False):
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for stat in ("mean", "p50", "p90", "p99", "max"):
                x, y = getattr(getattr(a, metric), stat), getattr(getattr(b, metric), stat)
                assert (x is None and y is None) or x == pytest.approx(y), (metric, stat)
    assert small.requests["ttft_ms"].to_numpy() == pytest.approx(large.requests["ttft_ms"].to_numpy(), nan_ok=True)
    assert small.requests["ok"].tolist() == large.requests["ok"].tolist()


@pytest.mark.parametrize("name", ["vllm_bench_serve.json", "recon_vllm_legacy_benchmark_serving.json"])
def test_vllm_pyarrow_path_matches(name, monkeypatch):
    small = detect_and_parse(load(name), name)
    monkeypatch.setattr(common, "LARGE_FILE", 0)
    compare(small, detect_and_parse(load(name), name))


def test_vllm_pyarrow_path_rejects_wrong_types(everything_is_large):
    doc = json.loads(load("vllm_bench_serve.json"))
    doc["ttfts"] = ["a", "b"]
    with pytest.raises(FormatError, match="ttfts: expected a list of numbers"):
        detect_and_parse(json.dumps(doc).encode(), "v.json")
    doc["ttfts"] = 3
    with pytest.raises(FormatError, match="ttfts: expected a list"):
        detect_and_parse(json.dumps(doc).encode(), "v.json")


def test_vllm_pyarrow_path_truncated(everything_is_large):
    data = load("vllm_bench_serve.json")
    with pytest.raises(FormatError, match="unreadable JSON"):
        detect_and_parse(data[:-100], "v.json", format="vllm")


def test_generated_perf_files_parse(tmp_path):
    write_aiperf(str(tmp_path / "p.jsonl"), 500)
    write_vllm(str(tmp_path / "v.json"), 300)
    aiperf = detect_and_parse((tmp_path / "p.jsonl").read_bytes(), "p.jsonl")
    vllm = detect_and_parse((tmp_path / "v.json").read_bytes(), "v.json")
    assert len(aiperf.requests) == 500 and aiperf.points[0].requests_completed == 500
    assert len(vllm.requests) == 300
    # one token per chunk in the generated file -> exact per-token ITL percentiles
    assert vllm.points[0].itl_ms.p99 is not None
    frame = vllm.requests
    assert np.allclose(frame["tpot_ms"], frame["itl_ms_mean"], atol=1e-3)  # 6-decimal seconds in the file


def test_aiperf_warmup_records_are_dropped():
    data = load("aiperf.profile_export.jsonl").replace(
        b'"benchmark_phase":"profiling"', b'"benchmark_phase":"warmup"', 1
    )
    result = detect_and_parse(data, "profile_export.jsonl")
    assert len(result.requests) == 1 and result.requests["ok"].tolist() == [False]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".json", ".jsonl", ".csv")))
def test_a_file_on_disk_parses_as_its_bytes_do(name):
    """detect_and_parse_file (the stored upload, read from its path) gives what detect_and_parse gives."""
    path = FIXTURES / name
    try:
        expected = detect_and_parse(path.read_bytes(), name)
    except ValueError as error:
        with pytest.raises(type(error)):
            detect_and_parse_file(str(path), name)
        return
    got = detect_and_parse_file(str(path), name)
    assert got.format == expected.format and len(got.points) == len(expected.points)
    if expected.requests is not None:
        compare(expected, got)


def test_a_large_jsonl_on_disk_is_parsed_without_reading_it_whole(tmp_path):
    """Per-request JSONL is read in blocks from the path: no Python copy of the file, ever."""
    import tracemalloc

    path = tmp_path / "profile_export.jsonl"
    write_aiperf(str(path), 10_000, chunks_per_record=400)  # ~3.7 KB a record, as aiperf writes them
    size = path.stat().st_size
    assert size > 30_000_000
    detect_and_parse(load("aiperf.profile_export.jsonl"), "profile_export.jsonl")  # imports are not the file
    tracemalloc.start()
    try:
        result = detect_and_parse_file(str(path), path.name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.requests) == 10_000
    assert peak < size / 3, f"peak Python allocation {peak / 1e6:.0f} MB for a {size / 1e6:.0f} MB file"
