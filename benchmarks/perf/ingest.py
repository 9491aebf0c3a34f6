"""Ingest benchmark: parse 1,000,000-record per-request files (aiperf JSONL, vLLM --save-detailed
JSON) and compare with the time pyarrow alone needs to read the same bytes; then stream a 4 GiB
upload through the web app and parse it from disk, reporting each process's peak memory.

    python -m benchmarks.perf.ingest [--records N] [--keep DIR] [--upload-gib 4] [--skip-parse]

Each measurement runs in a fresh subprocess so its peak RSS (resource.getrusage) is its own.
Targets (issue 4): < 30 s, < 2 GiB peak, ratio parse/pyarrow <= 2.

The streamed upload (issue 16 item 10): an aiperf profile_export.jsonl of `--upload-gib` GiB
(1M records carry ~3.7 KB each in real files) is generated in var/, POSTed to gunicorn on
loopback as a CI job would (multipart, Content-Length, read from disk as it is sent), stored,
then parsed from its stored path by `parse_stored_upload` in its own process. Reported: the web
worker's peak RSS (VmHWM) and the parse's; target < 2 GiB each. The file and the scratch
database are deleted afterwards.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit

import numpy as np

from benchmarks.perf.api_load import ROOT, SETUP, ScratchDatabase, free_port, http_ok, run_django, wait_ready

AIPERF_LINE = (
    '{{"metadata":{{"session_num":{i},"x_request_id":"req-{i}","x_correlation_id":"c-{i}","conversation_id":"conv-{i}",'
    '"turn_index":0,"request_start_ns":{start},"request_ack_ns":{ack},"request_end_ns":{end},"worker_id":"worker_0",'
    '"record_processor_id":"rp_0","benchmark_phase":"profiling","was_cancelled":false}},'
    '"metrics":{{"time_to_first_token":{{"value":{ttft:.6f},"unit":"ms"}},"request_latency":{{"value":{lat:.6f},"unit":"ms"}},'
    '"inter_token_latency":{{"value":{itl:.6f},"unit":"ms"}},"output_sequence_length":{{"value":{osl},"unit":"tokens"}},'
    '"input_sequence_length":{{"value":{isl},"unit":"tokens"}},"inter_chunk_latency":{{"value":[{chunks}],"unit":"ms"}}}},'
    '"error":null}}\n'
)


def write_aiperf(path: str, n: int, seed: int = 0, chunks_per_record: int = 3) -> None:
    """An aiperf profile_export.jsonl of `n` records; each carries `chunks_per_record` inter-chunk
    latencies (real files carry one per streamed chunk: ~3.7 KB a record at a few hundred tokens)."""
    rng = np.random.default_rng(seed)
    ttft = rng.uniform(20, 200, n)
    itl = rng.uniform(1, 20, n)
    osl = rng.integers(8, 64, n)
    isl = rng.integers(64, 2048, n)
    lat = ttft + itl * (osl - 1)
    start = 1_795_991_479_000_000_000 + np.cumsum(rng.integers(10_000, 1_000_000, n))
    # A pool of chunk lists reused across records: formatting every value would dominate the run.
    pool = [",".join(f"{v:.4f}" for v in rng.uniform(1, 20, chunks_per_record)) for _ in range(64)]
    with open(path, "w") as handle:
        for i in range(n):
            handle.write(
                AIPERF_LINE.format(
                    i=i,
                    start=start[i],
                    ack=start[i] + int(ttft[i] * 1e6),
                    end=start[i] + int(lat[i] * 1e6),
                    ttft=ttft[i],
                    lat=lat[i],
                    itl=itl[i],
                    osl=osl[i],
                    isl=isl[i],
                    chunks=pool[i % 64],
                )
            )


def write_vllm(path: str, n: int, seed: int = 0, out_len: int = 16) -> None:
    """A `vllm bench serve --save-result --save-detailed` file (one-token chunks, fixed length)."""
    rng = np.random.default_rng(seed)
    ttfts = rng.uniform(0.02, 0.2, n)
    itls = rng.uniform(0.001, 0.02, (n, out_len - 1))
    latencies = ttfts + itls.sum(axis=1)
    head = {
        "date": "20261129-224535",
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": None,
        "model_id": "perf-model",
        "tokenizer_id": "perf-model",
        "num_prompts": n,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 256,
        "duration": float(latencies.sum() / 256),
        "completed": n,
        "failed": 0,
        "total_input_tokens": 512 * n,
        "total_output_tokens": out_len * n,
        "request_throughput": 1000.0,
        "request_goodput": None,
        "output_throughput": 16000.0,
        "total_token_throughput": 528000.0,
    }

    def floats(values: np.ndarray) -> str:
        return ", ".join(f"{v:.6f}" for v in values)

    with open(path, "w") as handle:
        handle.write(json.dumps(head)[:-1])
        handle.write(', "input_lens": [' + ", ".join(["512"] * n) + "]")
        handle.write(', "output_lens": [' + ", ".join([str(out_len)] * n) + "]")
        handle.write(', "ttfts": [' + floats(ttfts) + "]")
        handle.write(', "itls": [')
        for start in range(0, n, 100_000):
            block = itls[start : start + 100_000]
            text = "], [".join(floats(row) for row in block)
            handle.write(("" if start == 0 else ", ") + "[" + text + "]")
        handle.write("]")
        handle.write(', "latencies": [' + floats(latencies) + "]")
        handle.write(', "start_times": [' + floats(np.cumsum(rng.uniform(0, 0.001, n)) + 1000.0) + "]")
        handle.write(', "errors": [' + ", ".join(['""'] * n) + "]")
        handle.write(
            ', "mean_ttft_ms": 110.0, "median_ttft_ms": 110.0, "p99_ttft_ms": 198.0, "mean_tpot_ms": 10.5,'
            ' "median_tpot_ms": 10.5, "p99_tpot_ms": 19.8, "mean_itl_ms": 10.5, "median_itl_ms": 10.5,'
            ' "p99_itl_ms": 19.8}'
        )


CHILD = r"""
import resource, sys, time
import io
import pyarrow.compute, pyarrow.json as pj
path, mode = sys.argv[1], sys.argv[2]
if mode != "pyarrow":
    from benchmarks.formats import detect_and_parse  # imports (pandas, numpy) are not timed
with open(path, "rb") as handle:
    data = handle.read()
start = time.perf_counter()
if mode == "pyarrow":
    if path.endswith(".jsonl"):
        table = pj.read_json(io.BytesIO(data))
    else:
        table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(block_size=len(data) + 1))
    rows = table.num_rows
else:
    result = detect_and_parse(data, path.rsplit("/", 1)[-1])
    rows = len(result.requests)
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{elapsed:.3f} {peak:.0f} {rows}")
"""


def measure(path: str, mode: str) -> tuple[float, float, int]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    output = subprocess.run(
        [sys.executable, "-c", CHILD, path, mode], capture_output=True, text=True, cwd=root, check=True
    )
    seconds, peak, rows = output.stdout.split()
    return float(seconds), float(peak), int(rows)


UPLOAD_PARSE = r"""
import json, resource, sys, time
import django
django.setup()
from benchmarks.uploads.parse import parse_stored_upload
started = time.perf_counter()
run = parse_stored_upload(int(sys.argv[1]))
point = run.points.first()
print(json.dumps({"status": run.status, "error": run.error[:300], "seconds": time.perf_counter() - started,
                  "requests": point.requests_completed if point else None,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def peak_rss_mib(pid: int) -> float:
    """A process's peak resident set (VmHWM), MiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(p) for p in handle.read().split()]


def post_file(url: str, token: str, path: str, chunk: int = 1024 * 1024) -> tuple[int, dict]:
    """POST a file as multipart/form-data, streamed from disk with its Content-Length (as curl -F does)."""
    boundary = "kvselect-bench-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="test"\r\n\r\nconcurrency_stress\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="profile_export.jsonl"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=1800)
    connection.putrequest("POST", parts.path)
    connection.putheader("Authorization", f"Token {token}")
    connection.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    connection.putheader("Content-Length", str(len(head) + os.path.getsize(path) + len(tail)))
    connection.endheaders()
    connection.send(head)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            connection.send(block)
    connection.send(tail)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, json.loads(body)


def streamed_upload(size_gib: float) -> None:
    """Generate, upload (streamed) and parse a `size_gib` GiB aiperf JSONL; print each peak RSS."""

    workdir = ROOT / "var" / f"bench-ingest-{os.getpid()}"
    workdir.mkdir(parents=True)
    path = str(workdir / "profile_export.jsonl")
    gunicorn = None
    try:
        chunks = 400  # ~3.7 KB a record, as aiperf writes them at a few hundred output tokens
        probe = str(workdir / "probe.jsonl")
        write_aiperf(probe, 100, chunks_per_record=chunks)
        records = int(size_gib * 2**30 / (os.path.getsize(probe) / 100))
        os.remove(probe)
        began = time.perf_counter()
        write_aiperf(path, records, chunks_per_record=chunks)
        size = os.path.getsize(path)
        print(
            f"streamed upload: {size / 2**30:.2f} GiB aiperf JSONL, {records:,} records "
            f"(generated in {time.perf_counter() - began:.0f} s)",
            flush=True,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KVSELECT_", "CELERY_", "DATABASE_URL"))}
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            DATABASE_URL=ScratchDatabase(None, workdir).url,
            CELERY_BROKER_URL=f"sqla+sqlite:///{workdir / 'broker.sqlite3'}",  # no worker: parsed below
            KVSELECT_VAR_DIR=str(workdir / "var"),
            KVSELECT_MEDIA_ROOT=str(workdir / "media"),
            KVSELECT_MAX_UPLOAD_BYTES=str(size + 2**20),
            SECRET_KEY=os.environ.get("SECRET_KEY") or "kvselect-bench-only",
            LOG_LEVEL="WARNING",
            PYTHONPATH=str(ROOT),
        )
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=600
        )
        candidate, token = run_django(env, SETUP).split()[-2:]
        port = free_port()
        log = workdir / "gunicorn.log"
        gunicorn = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "-b",
                f"127.0.0.1:{port}",
                "-w",
                "1",
                "--threads",
                "1",
                "-k",
                "gthread",
                "--timeout",
                "1800",
            ],
            cwd=ROOT,
            env=env,
            stdout=open(log, "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        wait_ready(lambda: http_ok(base + "/api/v1/"), "gunicorn", 60, gunicorn, log)
        (worker,) = children(gunicorn.pid)
        idle = peak_rss_mib(worker)
        began = time.perf_counter()
        status, body = post_file(f"{base}/api/v1/candidates/{candidate}/results/", token, path)
        upload_s = time.perf_counter() - began
        web_peak = peak_rss_mib(worker)
        if status != 202:
            raise RuntimeError(f"upload answered {status}: {str(body)[:500]}")
        os.remove(path)  # the stored copy is the one parsed; keep the disk footprint at one file
        result = subprocess.run(
            [sys.executable, "-c", UPLOAD_PARSE, str(body["id"])],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"parse failed:\n{result.stderr[-3000:]}")
        parsed = json.loads(result.stdout.strip().splitlines()[-1])
        verdict = "OK" if max(web_peak, parsed["peak_mib"]) < 2048 else "OVER"
        print(
            f"  web worker (gunicorn): peak RSS {web_peak:.0f} MiB (idle {idle:.0f} MiB), upload {upload_s:.0f} s "
            f"({size / 2**20 / upload_s:.0f} MiB/s), answered {status} {body['status']}"
        )
        print(
            f"  parse from the stored path: peak RSS {parsed['peak_mib']:.0f} MiB, {parsed['seconds']:.0f} s, "
            f"{parsed['requests']:,} requests, run {parsed['status']} {parsed['error']}"
        )
        print(
            f"  peak memory of a streamed {size / 2**30:.1f} GiB upload: "
            f"{max(web_peak, parsed['peak_mib']):.0f} MiB (target < 2048 MiB: {verdict})"
        )
    finally:
        if gunicorn is not None and gunicorn.poll() is None:
            os.killpg(gunicorn.pid, signal.SIGTERM)
            gunicorn.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", help="directory to write the generated files to (kept)")
    parser.add_argument("--upload-gib", type=float, default=4.0, help="streamed upload size; 0 skips it")
    parser.add_argument("--skip-parse", action="store_true", help="only the streamed upload")
    args = parser.parse_args()
    if not args.skip_parse:
        parse_benchmark(args)
    if args.upload_gib > 0:
        streamed_upload(args.upload_gib)


def parse_benchmark(args: argparse.Namespace) -> None:
    directory = args.keep or tempfile.mkdtemp(prefix="kvselect-ingest-")
    os.makedirs(directory, exist_ok=True)
    cases = [
        ("aiperf profile_export.jsonl", os.path.join(directory, "profile_export.jsonl"), write_aiperf),
        ("vLLM --save-detailed JSON", os.path.join(directory, "vllm_detailed.json"), write_vllm),
    ]
    print(
        f"{'file':30} {'records':>9} {'MiB':>7} {'pyarrow s':>9} {'parse s':>8} {'ratio':>6} "
        f"{'peak MiB (pyarrow/parse)':>26}"
    )
    try:
        for label, path, writer in cases:
            began = time.perf_counter()
            writer(path, args.records)
            generated = time.perf_counter() - began
            size = os.path.getsize(path) / 2**20
            base_s, base_peak, _ = measure(path, "pyarrow")
            parse_s, parse_peak, rows = measure(path, "parse")
            print(
                f"{label:30} {rows:>9} {size:>7.0f} {base_s:>9.2f} {parse_s:>8.2f} {parse_s / base_s:>6.2f} "
                f"{base_peak:>12.0f} / {parse_peak:<8.0f}  (generated in {generated:.0f} s)"
            )
    finally:
        if not args.keep:
            for _, path, _ in cases:
                if os.path.exists(path):
                    os.remove(path)
            os.rmdir(directory)


if __name__ == "__main__":
    main()
