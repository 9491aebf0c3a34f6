"""kvselect's load client side by side with the established ones, on the same vLLM-shaped wire mock.

Why: a client's efficiency and fidelity only mean something beside its peers on the same server,
and the server must stream as an engine does (vLLM's role chunk, one event per token, usage,
`[DONE]`: `engine_streams`). Each client runs as its own process tree, pinned to its own cores
(the mock and this script keep the others), and is measured from outside, the same way for all:

- the window: the steady part of the run, from the arrival at the mock that completed the requested
  concurrency to the last arrival (so start-up imports, the ramp, the drain and the report written
  after are not in it);
- requests: streams the mock finished inside the window;
- client CPU: the whole process tree's (live members' utime+stime plus their reaped children's),
  sampled from /proc every 20 ms and interpolated at the window's ends;
- TTFT error: the client's mean (and p99) TTFT minus the mock's true ones (kernel stamp of the
  request's arrival to the send of its first token), over the same requests;
- concurrency held, as the server saw it: requests between arrival and last byte, time-weighted
  over the steady part of the run (from the arrival that completed the requested concurrency to
  the last arrival).

kvselect runs twice, once on each receive clock (`client_timing.ReceiveClock`): the kernel's stamps, its
default (recvmsg in Python per read: exact TTFT whatever the loop does), and user-space time in
uvloop's own transport (cheaper per read, late by the loop's queue). Peers: a bare aiohttp loop and
two read-only floors (read each arrival and discard it, no HTTP or SSE parsing: with recvmsg and
its stamp, and in uvloop's transport: what a Python client on each clock pays per read) always;
`vllm bench serve` and guidellm when `scripts/install-bench-peers.sh` (`make bench BENCH=harness
PEERS=1`) put them under var/cache/bench-peers (guidellm reports only its summary: its TTFT error
is taken from its mean and p99). Repeats are interleaved
(every client once, then again) so a slow spell of the shared machine hits them alike.

    python -m benchmarks.perf.side_by_side [--concurrency 64 256] [--repeats 3] [--json OUT]
    python -m benchmarks.perf.side_by_side client KIND URL CONCURRENCY REQUESTS OUT  (KIND: a CLIENT_RUNNERS key)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import aiohttp

from benchmarks.formats import detect_and_parse
from benchmarks.harness import wireclock
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.client_timing import ReceiveClock
from benchmarks.harness.load import run_async, run_load
from benchmarks.harness.load_config import LoadConfig
from benchmarks.harness.request_record import RequestSpec
from benchmarks.perf.wire_mock import WireMockConfig
from benchmarks.perf.wire_mock import serve_forever as serve_wire_mock

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = ROOT / "var" / "cache" / "bench-peers"
TOKENS = 128
PROMPT_TOKENS = 16
MOCK = WireMockConfig(ttft_s=0.050, itl_s=0.010, shape="vllm")
REQUESTS_PER_SLOT = 8  # each slot of the concurrency streams about this many requests (~10 s at 1.32 s each)
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- placement and measurement


def cpu_split() -> tuple[set[int], set[int]]:
    """(mock and this script's cores, the client's cores): the client gets the last core to itself."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set(cores)
    return set(cores[:-1]), {cores[-1]}


def _pinned_mock(config: WireMockConfig, port: int, cpus: set[int]) -> None:
    os.sched_setaffinity(0, cpus)
    serve_wire_mock(config, "127.0.0.1", port)


def start_mock(config: WireMockConfig, cpus: set[int]) -> tuple[str, multiprocessing.Process]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = multiprocessing.get_context("spawn").Process(target=_pinned_mock, args=(config, port, cpus), daemon=True)
    process.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return url, process
        except OSError:
            time.sleep(0.05)
    process.terminate()
    raise RuntimeError("wire mock did not start")


def _proc_cpu_ticks(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime+cutime+cstime) of a live process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), sum(int(value) for value in fields[11:15])


class TreeCPU:
    """Samples the CPU seconds of a process tree every `interval` s, on the perf_counter clock."""

    def __init__(self, root: int, interval: float = 0.02) -> None:
        self.root, self.interval = root, interval
        self.samples: list[tuple[float, float]] = []
        self._members = {root}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "TreeCPU":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _discover(self) -> None:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                found = _proc_cpu_ticks(int(entry))
                if found is not None:
                    parents[int(entry)] = found[0]
        members, grew = {self.root}, True
        while grew:
            grew = False
            for pid, parent in parents.items():
                if parent in members and pid not in members:
                    members.add(pid)
                    grew = True
        self._members = members

    def _run(self) -> None:
        last_discovery = 0.0
        while not self._stop.is_set():
            now = time.perf_counter()
            if now - last_discovery > 0.5:
                self._discover()
                last_discovery = now
            ticks = 0
            for pid in list(self._members):
                found = _proc_cpu_ticks(pid)
                if found is not None:
                    ticks += found[1]
            self.samples.append((time.perf_counter(), ticks / CLK_TCK))
            self._stop.wait(self.interval)

    def at(self, moment: float) -> float:
        """CPU seconds used by the tree up to `moment`, interpolated between samples."""
        samples = self.samples
        if not samples:
            return 0.0
        previous = samples[0]
        for sample in samples:
            if sample[0] >= moment:
                if sample[0] == previous[0]:
                    return sample[1]
                share = (moment - previous[0]) / (sample[0] - previous[0])
                return previous[1] + share * (sample[1] - previous[1])
            previous = sample
        return samples[-1][1]


def held_by_server(truth: dict[str, list[float]], concurrency: int) -> float | None:
    """Time-weighted requests in flight at the mock over the steady part of the run."""
    intervals = [(times[0], times[2]) for times in truth.values() if len(times) >= 3]
    if len(intervals) <= concurrency:
        return None
    arrivals = sorted(start for start, _ in intervals)
    begin, end = arrivals[concurrency - 1], arrivals[-1]
    if end <= begin:
        return None
    area = sum(max(0.0, min(stop, end) - max(start, begin)) for start, stop in intervals)
    return area / (end - begin)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


# ---------------------------------------------------------------- the clients


def _body(index: int) -> dict[str, Any]:
    words = " ".join(f"w{(index * 7 + k) % 97}" for k in range(PROMPT_TOKENS))
    return {
        "model": "mock",
        "messages": [{"role": "user", "content": words}],
        "max_tokens": TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "kvselect_request_id": str(index),
    }


async def kvselect_client(
    url: str, concurrency: int, requests: int, receive_clock: ReceiveClock = "kernel"
) -> dict[str, Any]:
    """kvselect's harness as a validation run drives it (its transport and processes), on either
    receive clock: the kernel's stamps (the default) or user-space time in uvloop's own transport."""
    async with OpenAIClient(url, "mock", kernel_timestamps=receive_clock == "kernel") as client:

        def make(index: int) -> RequestSpec:
            body = _body(index)
            return RequestSpec(
                messages=body["messages"],
                max_tokens=TOKENS,
                request_id=str(index),
                extra_body={"kvselect_request_id": str(index)},
            )

        outcome = await run_load(
            client, make, LoadConfig(concurrency=concurrency, max_requests=requests, drain_timeout_s=30)
        )
    ok = [r for r in outcome.records if r.ok]
    return {
        "ttft_ms": [r.ttft_ms for r in ok if r.ttft_ms is not None],
        "completed": len(ok),
        "achieved_concurrency": outcome.achieved_concurrency,
        "client_bound": outcome.client_bound,
        "reasons": outcome.client_bound_reasons,
        "processes": outcome.processes,
    }


async def bare_client(url: str, concurrency: int, requests: int) -> dict[str, Any]:
    """A minimal aiohttp streaming loop (reads every chunk, parses nothing): the floor of client cost."""
    ttfts: list[float] = []
    counter = iter(range(requests))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> None:
            for index in counter:
                start = time.perf_counter()
                first = None
                async with session.post(
                    url + "/v1/chat/completions",
                    data=json.dumps(_body(index)).encode(),
                    headers={"Content-Type": "application/json"},
                ) as response:
                    async for _ in response.content.iter_any():
                        if first is None:
                            first = time.perf_counter()
                if first is not None:
                    ttfts.append((first - start) * 1000.0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"ttft_ms": ttfts, "completed": len(ttfts)}


async def read_floor_client(url: str, concurrency: int, requests: int) -> dict[str, Any]:
    """The floor of any Python client on these streams: per connection, send a request, then read
    each arrival with recvmsg (kernel stamp) and discard it; no HTTP or SSE parsing, no records.
    What kvselect's client costs above this is its parsing and bookkeeping."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    reader = wireclock.StampedReader()
    counter = iter(range(requests))
    completed = 0

    async def worker() -> None:
        nonlocal completed
        sock = socket.socket()
        sock.setblocking(False)
        wireclock.enable_receive_timestamps(sock)
        await loop.sock_connect(sock, (host, int(port)))
        for index in counter:
            body = json.dumps(_body(index)).encode()
            finished = loop.create_future()

            def on_read(finished: asyncio.Future = finished) -> None:
                data, _, _ = reader.read(sock)
                if data.endswith(b"0\r\n\r\n") and not finished.done():
                    finished.set_result(None)

            sock.send(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            loop.add_reader(sock.fileno(), on_read)
            await finished
            loop.remove_reader(sock.fileno())
            completed += 1
        sock.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"ttft_ms": [], "completed": completed}  # it sees no tokens, so it reports no TTFT


async def kvselect_user_clock_client(url: str, concurrency: int, requests: int) -> dict[str, Any]:
    return await kvselect_client(url, concurrency, requests, receive_clock="user")


async def native_read_floor_client(url: str, concurrency: int, requests: int) -> dict[str, Any]:
    """The floor on the user-space clock: uvloop's transport reads, data_received discards."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    counter = iter(range(requests))
    completed = 0

    class Discard(asyncio.Protocol):
        finished: asyncio.Future | None = None

        def data_received(self, data: bytes) -> None:
            if data.endswith(b"0\r\n\r\n") and self.finished is not None and not self.finished.done():
                self.finished.set_result(None)

    async def worker() -> None:
        nonlocal completed
        transport, protocol = await loop.create_connection(Discard, host, int(port))
        for index in counter:
            body = json.dumps(_body(index)).encode()
            protocol.finished = loop.create_future()
            transport.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await protocol.finished
            completed += 1
        transport.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"ttft_ms": [], "completed": completed}


CLIENT_RUNNERS = {
    "kvselect": kvselect_client,
    "kvselect-user": kvselect_user_clock_client,
    "bare": bare_client,
    "floor": read_floor_client,
    "floor-user": native_read_floor_client,
}
KVSELECT_CLIENTS = ("kvselect", "kvselect, user-space clock")  # the default first
LOCAL_CLIENTS = (*KVSELECT_CLIENTS, "bare aiohttp loop", "read-only floor", "read-only floor, user-space")


def client_main(kind: str, url: str, concurrency: int, requests: int, out: str) -> None:
    runner = CLIENT_RUNNERS[kind]
    Path(out).write_text(json.dumps(run_async(runner(url, concurrency, requests))))


def make_tokenizer(python: Path, directory: Path) -> Path:
    """A word-level Hugging Face tokenizer written by the peer's own venv (no model download)."""
    if (directory / "tokenizer.json").exists():
        return directory
    script = (
        "import sys\nfrom tokenizers import Tokenizer, models, pre_tokenizers\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "vocab = {'[UNK]': 0, '[EOS]': 1, **{f'w{i}': i + 2 for i in range(4000)}}\n"
        "tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token='[UNK]'))\n"
        "tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()\n"
        "fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token='[UNK]', eos_token='[EOS]')\n"
        "fast.save_pretrained(sys.argv[1])\n"
    )
    subprocess.run([str(python), "-c", script, str(directory)], check=True, capture_output=True, timeout=300)
    return directory


def vllm_command(
    url: str, concurrency: int, requests: int, work: Path
) -> tuple[list[str], Callable[[], dict[str, Any]]]:
    venv = PEERS_DIR / "vllm"
    tokenizer = make_tokenizer(venv / "bin" / "python", PEERS_DIR / "tokenizer")
    command = [
        str(venv / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "mock",
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(PROMPT_TOKENS),
        "--random-output-len",
        str(TOKENS),
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(work),
        "--result-filename",
        "vllm.json",
        "--percentile-metrics",
        "ttft",
        "--metric-percentiles",
        "99",
    ]

    def read() -> dict[str, Any]:
        data = json.loads((work / "vllm.json").read_text())
        ttfts = [value * 1000.0 for value in data.get("ttfts") or [] if value]
        return {
            "ttft_ms": ttfts,
            "completed": data.get("completed"),
            "max_concurrent": data.get("max_concurrent_requests"),
        }

    return command, read


def guidellm_command(
    url: str, concurrency: int, requests: int, work: Path
) -> tuple[list[str], Callable[[], dict[str, Any]]]:
    """guidellm 0.8: concurrent profile, synthetic prompts, its JSON report read by kvselect's own parser."""
    venv = PEERS_DIR / "guidellm"
    tokenizer = make_tokenizer(PEERS_DIR / "vllm" / "bin" / "python", PEERS_DIR / "tokenizer")
    out = work / "guidellm.json"
    command = [
        str(venv / "bin" / "guidellm"), "run",
        "--backend", f"kind=openai_http,target={url},model=mock",
        "--profile", f"kind=concurrent,streams={concurrency}",
        "--constraint", f"kind=max_requests,count={requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={TOKENS}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={out}",
        "--disable-console",
    ]  # fmt: skip

    def read() -> dict[str, Any]:
        result = detect_and_parse(out.read_bytes(), out.name)
        point = result.points[-1]
        return {"ttft_mean_ms": point.ttft_ms.mean, "ttft_p99_ms": point.ttft_ms.p99,
                "completed": point.requests_completed}  # fmt: skip

    return command, read


def kvselect_command(kind: str) -> Callable[[str, int, int, Path], tuple[list[str], Callable[[], dict[str, Any]]]]:
    def build(url: str, concurrency: int, requests: int, work: Path) -> tuple[list[str], Callable[[], dict[str, Any]]]:
        out = work / f"{kind}.json"
        command = [
            sys.executable,
            "-m",
            "benchmarks.perf.side_by_side",
            "client",
            kind,
            url,
            str(concurrency),
            str(requests),
            str(out),
        ]
        return command, lambda: json.loads(out.read_text())

    return build


def available_clients() -> dict[str, Callable[..., tuple[list[str], Callable[[], dict[str, Any]]]]]:
    clients = {
        "kvselect": kvselect_command("kvselect"),
        "kvselect, user-space clock": kvselect_command("kvselect-user"),
        "bare aiohttp loop": kvselect_command("bare"),
        "read-only floor": kvselect_command("floor"),
        "read-only floor, user-space": kvselect_command("floor-user"),
    }
    if (PEERS_DIR / "vllm" / "bin" / "vllm").exists():
        clients["vllm bench serve"] = vllm_command
    if (PEERS_DIR / "guidellm" / "bin" / "guidellm").exists() and (PEERS_DIR / "vllm" / "bin" / "python").exists():
        clients["guidellm"] = guidellm_command  # its tokenizer is written by the vllm venv's transformers
    return clients


def run_one(
    name: str, build: Callable[..., Any], concurrency: int, requests: int, cpus: tuple[set[int], set[int]], work: Path
) -> dict[str, Any]:
    """One client, one run, against a fresh mock; measured from outside."""
    mock_cpus, client_cpus = cpus
    url, mock = start_mock(MOCK, mock_cpus)
    try:
        command, read = build(url, concurrency, requests, work)
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        os.sched_setaffinity(process.pid, client_cpus)  # before it is done importing, long before it forks
        with TreeCPU(process.pid) as tree:
            output, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            return {"error": f"exit {process.returncode}: {output.decode(errors='replace')[-800:]}"}
        with urllib.request.urlopen(url + "/mock/true_times", timeout=10) as response:
            truth: dict[str, list[float]] = json.load(response)
    finally:
        mock.terminate()
        mock.join(5)
    result = read()
    finished = [times for times in truth.values() if len(times) >= 3]
    arrivals = sorted(t[0] for t in finished)
    begin, end = arrivals[min(concurrency, len(arrivals)) - 1], arrivals[-1]
    in_window = sum(1 for t in finished if begin <= t[2] <= end)
    cpu = tree.at(end) - tree.at(begin)
    true_ttfts = [(t[1] - t[0]) * 1000.0 for t in finished]
    ttfts = result.get("ttft_ms") or []
    mean = statistics.fmean(ttfts) if ttfts else result.get("ttft_mean_ms")
    p99 = _percentile(ttfts, 0.99) if ttfts else result.get("ttft_p99_ms")
    return {
        "client": name,
        "concurrency": concurrency,
        "requests": len(finished),
        "requests_in_window": in_window,
        "cpu_s": cpu,
        "window_s": end - begin,
        "req_per_cpu_s": in_window / cpu if cpu > 0 else None,
        "cpu_share_of_a_core": cpu / (end - begin) if end > begin else None,
        "ttft_mean_error_ms": mean - statistics.fmean(true_ttfts) if mean is not None else None,
        "ttft_p99_error_ms": p99 - _percentile(true_ttfts, 0.99) if p99 is not None else None,
        "held_server": held_by_server(truth, concurrency),
        **{
            key: result[key]
            for key in ("achieved_concurrency", "client_bound", "reasons", "processes")
            if key in result
        },
    }


def side_by_side(
    concurrencies: tuple[int, ...] = (64, 256),
    repeats: int = 3,
    requests_per_slot: int = REQUESTS_PER_SLOT,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Every available client at every concurrency, `repeats` interleaved rounds; medians and ranges."""
    cpus = cpu_split()
    clients = {name: build for name, build in available_clients().items() if not only or name in only}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kvselect-sbs-") as tmp:
        for concurrency in concurrencies:
            for repeat in range(repeats):
                for name, build in clients.items():
                    result = run_one(name, build, concurrency, concurrency * requests_per_slot, cpus, Path(tmp))
                    result.update(client=name, concurrency=concurrency, repeat=repeat)
                    runs.append(result)
                    print("   ", format_run(result), flush=True)
    return {
        "runs": runs,
        "summary": summarize(runs),
        "mock": vars(MOCK) | {"tokens": TOKENS},
        "placement": {"mock": sorted(cpus[0]), "client": sorted(cpus[1])},
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per (concurrency, client): median and range of each figure over the repeats, and the ratios."""
    table: dict[str, dict[str, Any]] = {}
    for run in runs:
        if "error" in run:
            continue
        key = f"c={run['concurrency']}"
        entry = table.setdefault(key, {}).setdefault(run["client"], {})
        for figure in (
            "req_per_cpu_s",
            "ttft_mean_error_ms",
            "ttft_p99_error_ms",
            "held_server",
            "achieved_concurrency",
            "cpu_share_of_a_core",
        ):
            if run.get(figure) is not None:
                entry.setdefault(figure, []).append(run[figure])
        if run.get("client_bound") is not None:
            entry.setdefault("client_bound", []).append(run["client_bound"])
    for clients in table.values():
        for entry in clients.values():
            for figure, values in list(entry.items()):
                if figure != "client_bound" and values:
                    entry[figure] = {
                        "median": statistics.median(values),
                        "min": min(values),
                        "max": max(values),
                        "values": values,
                    }
        for name in KVSELECT_CLIENTS:
            ours = clients.get(name, {}).get("req_per_cpu_s")
            for peer in ("vllm bench serve", "bare aiohttp loop", "read-only floor", "read-only floor, user-space"):
                theirs = clients.get(peer, {}).get("req_per_cpu_s")
                if ours and theirs:
                    clients.setdefault("ratios", {})[f"{name} / {peer}"] = ours["median"] / theirs["median"]
    return table


def format_run(run: dict[str, Any]) -> str:
    if "error" in run:
        return f"c={run['concurrency']:<4} {run['client']:20} failed: {run['error']}"
    held = run.get("held_server")
    mean, p99 = run.get("ttft_mean_error_ms"), run.get("ttft_p99_error_ms")
    ttft = "TTFT n/a" if mean is None else f"TTFT error mean {mean:+.2f} ms p99 {p99:+.2f} ms"
    return (
        f"c={run['concurrency']:<4} {run['client']:20} {run['req_per_cpu_s'] or 0:7.0f} req/CPU-s "
        f"({run['requests_in_window']} requests, {run['cpu_s']:.2f} CPU-s in {run['window_s']:.1f} s: client at "
        f"{run['cpu_share_of_a_core'] or 0:.0%} of a core), {ttft}, held "
        f"{held if held is None else round(held, 1)} (server)"
        + (f", kvselect says held {run['achieved_concurrency']:.1f}" if run.get("achieved_concurrency") else "")
        + (f", client-bound: {'; '.join(run['reasons'])}" if run.get("client_bound") else "")
    )


def print_table(summary: dict[str, dict[str, Any]]) -> None:
    def cell(entry: dict[str, Any], figure: str, fmt: str) -> str:
        value = entry.get(figure)
        if not value:
            return "n/a"
        return f"{value['median']:{fmt}} ({value['min']:{fmt}} to {value['max']:{fmt}})"

    for key, clients in summary.items():
        print(f"  {key}: client | req/CPU-s median (range) | TTFT mean error ms | TTFT p99 error ms | held (server)")
        for name, entry in clients.items():
            if name == "ratios":
                continue
            print(
                f"    {name:20} | {cell(entry, 'req_per_cpu_s', '.0f')} | "
                f"{cell(entry, 'ttft_mean_error_ms', '+.2f')} | {cell(entry, 'ttft_p99_error_ms', '+.1f')} | "
                f"{cell(entry, 'held_server', '.1f')}"
            )
        for ratio, value in clients.get("ratios", {}).items():
            print(f"    {ratio} = {value:.2f}x")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "client":
        client_main(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
        return {}
    parser = argparse.ArgumentParser(description="kvselect's client side by side with its peers")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests-per-slot", type=int, default=REQUESTS_PER_SLOT)
    parser.add_argument("--client", action="append", help="run only this client (repeatable)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    report = side_by_side(tuple(args.concurrency), args.repeats, args.requests_per_slot, args.client)
    print_table(report["summary"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return report


if __name__ == "__main__":
    main()
