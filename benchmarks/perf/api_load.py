"""API load benchmark: concurrent CI clients uploading ~1 MB result files to gunicorn (issue 10).

    python -m benchmarks.perf.api_load [--clients 50] [--duration 60] [--size-kb 1024] [--retry-fraction 0.1]

Loopback only and bounded in time. It creates a scratch database (PostgreSQL when DATABASE_URL
points at one, else a SQLite file), migrates it, creates a selection, a candidate and an upload
token, starts `gunicorn config.wsgi` on 127.0.0.1 and a Celery worker on the configured broker
(CELERY_BROKER_URL, else the embedded one), then runs the clients for `--duration` seconds. Each
upload carries a unique Idempotency-Key; a fraction are sent again with the same key (a CI retry),
some of those concurrently with the first attempt. Afterwards it waits for asynchronous parsing
to finish and counts runs in the database:

    lost        accepted keys with no run
    duplicated  runs beyond one per key
    errors      responses other than 200/201/202 (and client exceptions)

and prints `lost=0 duplicated=0` when that holds, with p50/p99 upload latency.

It runs the production topology's workers (README): one on `default` (scoring, beat's jobs), one on
`parse` (large uploads). Right after the burst it prints the depth of each queue and of the
rescoring tasks the burst made (issue 38: every upload used to queue its own full rescoring, 904
after a 60-s burst, and a large upload sent afterwards waited ~100 minutes behind them to be parsed),
then sends a large upload (over KVSELECT_SYNC_PARSE_BYTES) and prints how long it waited to be
parsed (asked: under 30 s). Exit status 0 only when lost, duplicated, errors and unfinished runs are
all zero and the large upload was parsed within that time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[2]


def vllm_detailed_result(size_bytes: int, seed: int = 0) -> bytes:
    """A `vllm bench serve --save-detailed` JSON of about `size_bytes` (per-request arrays)."""
    rng = random.Random(seed)
    n = max(size_bytes // 1250, 10)
    ttfts = [round(rng.uniform(0.02, 0.4), 6) for _ in range(n)]
    itls = [[round(rng.uniform(0.005, 0.03), 6) for _ in range(100)] for _ in range(n)]
    latencies = [round(t + sum(i), 6) for t, i in zip(ttfts, itls, strict=False)]
    document = {
        "date": "20261129-224535",
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 64,
        "duration": round(max(latencies) + n * 0.01, 4),
        "completed": n,
        "failed": 0,
        "total_input_tokens": 0,
        "total_output_tokens": 101 * n,
        "input_lens": [rng.randint(100, 2000) for _ in range(n)],
        "output_lens": [101] * n,
        "ttfts": ttfts,
        "itls": itls,
        "latencies": latencies,
        "start_times": [round(i * 0.01, 4) for i in range(n)],
        "generated_texts": ["x" * 150] * n,
        "errors": [""] * n,
    }
    document["total_input_tokens"] = sum(document["input_lens"])
    duration = document["duration"]
    document.update(
        request_throughput=round(n / duration, 4),
        request_goodput=round(n / duration, 4),
        output_throughput=round(101 * n / duration, 4),
        total_token_throughput=round((101 * n + document["total_input_tokens"]) / duration, 4),
    )
    tpots = [(lat - t) / 100 for lat, t in zip(latencies, ttfts, strict=False)]
    flat_itls = [x for row in itls for x in row]
    for metric, seconds in (("ttft", ttfts), ("tpot", tpots), ("itl", flat_itls), ("e2el", latencies)):
        ms = [v * 1000 for v in seconds]
        mean = sum(ms) / len(ms)
        document[f"mean_{metric}_ms"] = round(mean, 4)
        document[f"median_{metric}_ms"] = round(percentile(ms, 50), 4)
        document[f"std_{metric}_ms"] = round((sum((v - mean) ** 2 for v in ms) / len(ms)) ** 0.5, 4)
        for q in (50, 90, 99):
            document[f"p{q}_{metric}_ms"] = round(percentile(ms, q), 4)
    return json.dumps(document).encode()


def private_broker(configured: str | None, workdir: Path) -> str:
    """A broker no other worker listens on: Redis database 13 of the configured server, else a SQLite file."""
    if configured and configured.startswith(("redis://", "rediss://")):
        parts = urlparse(configured)
        return urlunparse(parts._replace(path="/13"))
    return f"sqla+sqlite:///{workdir / 'broker.sqlite3'}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(round(q / 100 * (len(ordered) - 1))), len(ordered) - 1)]


# ------------------------------------------------------------------------------------------- setup


class ScratchDatabase:
    """A throw-away database next to the configured one (never the configured one itself)."""

    def __init__(self, base_url: str | None, workdir: Path) -> None:
        self.base_url, self.workdir = base_url, workdir
        self.name = f"kvselect_apiload_{os.getpid()}"
        self.postgres = bool(base_url and base_url.startswith(("postgres://", "postgresql://")))

    @property
    def url(self) -> str:
        if not self.postgres:
            return f"sqlite:///{self.workdir / 'load.sqlite3'}"
        parts = urlparse(self.base_url)
        return urlunparse(parts._replace(path=f"/{self.name}"))

    def _admin(self, sql: str) -> None:
        import psycopg

        parts = urlparse(self.base_url)
        with psycopg.connect(urlunparse(parts._replace(path="/postgres")), autocommit=True) as connection:
            connection.execute(sql)

    def create(self) -> None:
        if self.postgres:
            self._admin(f'DROP DATABASE IF EXISTS "{self.name}"')
            self._admin(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        if self.postgres:
            try:
                self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            except Exception as exc:  # report, never hide
                print(f"warning: could not drop {self.name}: {exc}", file=sys.stderr)


def run_django(env: dict[str, str], code: str) -> str:
    """Run Django code in a subprocess on the scratch database; returns its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"setup step failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return result.stdout


SETUP = """
from benchmarks.uploads.tokens import create_upload_token
from selection.candidates.services import add_candidate, load_engine_catalog
from selection.models import Engine, Membership, Team
from selection.setup.services import create_selection, save_constraints
from django.contrib.auth import get_user_model
load_engine_catalog()
team = Team.objects.create(name="load")
user = get_user_model().objects.create_user("load-architect", password="load-Password-1")
Membership.objects.create(team=team, user=user, role=Membership.Role.ARCHITECT)
owners = {}
for role in ("business", "platform", "security"):  # three different people (separation of duties)
    owners[role] = get_user_model().objects.create_user(f"load-{role}", password="load-Password-1")
    Membership.objects.create(team=team, user=owners[role], role=Membership.Role.REVIEWER)
selection = create_selection(user=user, team=team, name="API load", business_owner=owners["business"],
                             platform_owner=owners["platform"], security_owner=owners["security"])
save_constraints(selection=selection, user=user, data={  # a selection that scores: rescoring is real work
    "peak_concurrency": 64, "avg_input_tokens": 1000, "max_input_tokens": 8000, "avg_output_tokens": 200,
    "max_output_tokens": 1000, "ttft_p95_ms": 800.0, "tpot_p95_ms": 50.0, "gpu_model": "H100",
    "gpu_memory_gib": 80, "gpu_count_budget": 4, "cost_per_gpu_hour": "2.00", "ops_team_size": 3,
    "target_model": "Llama-3.1-8B", "kv_precisions_allowed": ["bf16"]})
engine = Engine.objects.get(slug="vllm")
candidate = add_candidate(selection=selection, user=user, data={"engine": engine,
                          "engine_version": engine.versions[0] if engine.versions else "0.11.0"})
_, raw = create_upload_token(selection=selection, user=user, name="load")
print(candidate.pk, raw)
"""

COUNT = """
import json
from django.db.models import Count
from benchmarks.models import BenchmarkRun
runs = BenchmarkRun.objects.filter(candidate_id={candidate}, idempotency_key__startswith="load-")
print(json.dumps({{
    "runs": runs.count(),
    "keys": {{row["idempotency_key"]: row["n"] for row in runs.values("idempotency_key").annotate(n=Count("id"))}},
    "status": {{row["status"]: row["n"] for row in runs.values("status").annotate(n=Count("id"))}},
    "errors": list(runs.exclude(error="").values_list("error", flat=True)[:5]),
}}))
"""


def wait_ready(check, what: str, timeout: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{log.read_text(errors='replace')[-3000:]}")
        if check():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} not ready within {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")


def http_ok(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=2)  # loopback only
        return True
    except urllib.error.HTTPError:
        return True  # it answers
    except OSError:
        return False


# ------------------------------------------------------------------------------------------- load


async def run_clients(
    base: str,
    candidate: int,
    token: str,
    payload: bytes,
    clients: int,
    duration: float,
    retry_fraction: float,
    seed: int,
) -> dict:
    import aiohttp

    rng = random.Random(seed)
    url = f"{base}/api/v1/candidates/{candidate}/results/"
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    accepted: dict[str, int] = {}  # key -> run id
    mismatched: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + duration

    async def post(session, key: str) -> tuple[int, dict | None]:
        form = aiohttp.FormData()
        form.add_field("test", "concurrency_stress")
        form.add_field("file", payload, filename="vllm_bench_serve.json", content_type="application/json")
        started = time.perf_counter()
        try:
            async with session.post(
                url, data=form, headers={"Authorization": f"Token {token}", "Idempotency-Key": key}
            ) as response:
                body = await response.read()
                status = response.status
        except Exception as exc:  # counted as an error, never hidden
            errors.append(f"{type(exc).__name__}: {exc}")
            statuses["exception"] = statuses.get("exception", 0) + 1
            return 0, None
        latencies.append(time.perf_counter() - started)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status not in (200, 201, 202):
            errors.append(f"HTTP {status}: {body[:300]!r}")
            return status, None
        return status, json.loads(body)

    def note(key: str, body: dict | None) -> None:
        if body is None:
            return
        previous = accepted.setdefault(key, body["id"])
        if previous != body["id"]:
            mismatched.append(f"{key}: runs {previous} and {body['id']}")

    async def client(number: int) -> None:
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            sequence = 0
            while time.monotonic() < deadline:
                sequence += 1
                key = f"load-{number}-{sequence}-{secrets.token_hex(4)}"
                roll = rng.random()
                if roll < retry_fraction / 2:  # a CI retry racing the first attempt
                    results = await asyncio.gather(post(session, key), post(session, key))
                    for _, body in results:
                        note(key, body)
                else:
                    _, body = await post(session, key)
                    note(key, body)
                    if roll < retry_fraction and body is not None:  # a retry after a lost response
                        _, again = await post(session, key)
                        note(key, again)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return {
        "latencies": latencies,
        "statuses": statuses,
        "accepted": accepted,
        "mismatched": mismatched,
        "errors": errors,
    }


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--size-kb", type=int, default=1024, help="upload size")
    parser.add_argument("--retry-fraction", type=float, default=0.1, help="uploads sent again with the same key")
    parser.add_argument("--gunicorn-workers", type=int, default=4)
    parser.add_argument("--gunicorn-threads", type=int, default=4)
    parser.add_argument(
        "--sync-parse-bytes",
        type=int,
        default=None,
        help="KVSELECT_SYNC_PARSE_BYTES for the server (default: the setting's; lower it to "
        "send uploads through the worker)",
    )
    parser.add_argument(
        "--broker-url",
        default=None,
        help="default: database 13 of CELERY_BROKER_URL's Redis, else a private SQLite broker",
    )
    parser.add_argument("--drain-timeout", type=float, default=180.0, help="wait this long for queued parsing")
    parser.add_argument("--large-mb", type=int, default=9, help="the upload sent after the burst (parsed later)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


LARGE_PARSE_TARGET_S = 30.0
WORKER_QUEUES = ("default", "parse")  # the README's production topology, less the GPU and render workers


def queue_depths(broker_url: str, queues: tuple[str, ...]) -> dict[str, int]:
    """Messages waiting in each queue (Redis lists or the SQLite broker's table), read through kombu."""
    from kombu import Connection

    depths = {}
    with Connection(broker_url) as connection:
        channel = connection.default_channel
        for queue in queues:
            try:
                depths[queue] = channel.queue_declare(queue=queue, passive=True).message_count
            except Exception:  # never declared: nothing was ever sent to it
                depths[queue] = 0
    return depths


def tasks_received(log: Path, name: str) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if f"{name}[" in line and "received" in line)


def large_upload_wait(base: str, candidate: int, token: str, size_bytes: int, timeout: float) -> tuple[int, float]:
    """POST a large result (parsed on the `parse` queue) and poll its run: (run id, seconds from the
    202 to `succeeded`); inf when it was not parsed within `timeout`."""
    import urllib.request

    boundary = secrets.token_hex(16)
    payload = vllm_detailed_result(size_bytes, seed=99)
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="test"\r\n\r\nconcurrency_stress\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="large.json"\r\n'
            "Content-Type: application/json\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {
        "Authorization": f"Token {token}",
        "Idempotency-Key": f"large-after-burst-{secrets.token_hex(4)}",
        "Content-Type": f"multipart/form-data; boundary={boundary}",
    }
    request = urllib.request.Request(f"{base}/api/v1/candidates/{candidate}/results/", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:  # loopback only
        run = json.loads(response.read())
        assert response.status == 202, (response.status, run)
    accepted, auth = time.monotonic(), headers["Authorization"]
    while time.monotonic() - accepted < timeout:
        poll = urllib.request.Request(f"{base}/api/v1/runs/{run['id']}/", headers={"Authorization": auth})
        with urllib.request.urlopen(poll, timeout=30) as response:
            status = json.loads(response.read())["status"]
        if status == "succeeded":
            return run["id"], time.monotonic() - accepted
        if status == "failed":
            raise RuntimeError(f"the large upload #{run['id']} failed to parse")
        time.sleep(0.5)
    return run["id"], float("inf")


def report(outcome: dict, counted: dict, elapsed: float, payload_bytes: int) -> int:
    """Print what the clients saw against what the database holds; 0 when nothing was lost, duplicated or failed."""
    accepted = outcome["accepted"]
    in_db = counted["keys"]
    lost = sum(1 for key in accepted if key not in in_db)
    duplicated = sum(n - 1 for n in in_db.values() if n > 1) + len(outcome["mismatched"])
    unknown = sum(1 for key in in_db if key not in accepted)  # stored though the client saw an error
    not_succeeded = sum(n for status, n in counted["status"].items() if status != "succeeded")
    errors = len(outcome["errors"])
    lat = outcome["latencies"]
    requests = sum(outcome["statuses"].values())
    print(
        f"requests={requests} ({requests / elapsed:.1f}/s, {requests * payload_bytes / elapsed / 1e6:.1f} MB/s) "
        f"statuses={outcome['statuses']} unique_keys={len(accepted)} runs={counted['runs']} "
        f"run_status={counted['status']}"
    )
    print(
        f"upload latency p50={percentile(lat, 50) * 1000:.0f} ms p90={percentile(lat, 90) * 1000:.0f} ms "
        f"p99={percentile(lat, 99) * 1000:.0f} ms max={max(lat, default=float('nan')) * 1000:.0f} ms"
    )
    print(f"errors={errors} not_succeeded={not_succeeded} stored_after_error={unknown}")
    for line in outcome["errors"][:5] + counted["errors"]:
        print(f"  {line}")
    print(f"lost={lost} duplicated={duplicated}")
    return 0 if lost == duplicated == errors == not_succeeded == 0 and requests else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="kvselect-apiload-"))
    database = ScratchDatabase(os.environ.get("DATABASE_URL"), workdir)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database.url,
        KVSELECT_VAR_DIR=str(workdir / "var"),
        KVSELECT_MEDIA_ROOT=str(workdir / "media"),
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(40),
        LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    if args.sync_parse_bytes is not None:
        env["KVSELECT_SYNC_PARSE_BYTES"] = str(args.sync_parse_bytes)
    env["CELERY_BROKER_URL"] = args.broker_url or private_broker(os.environ.get("CELERY_BROKER_URL"), workdir)
    processes: list[subprocess.Popen] = []
    payload = vllm_detailed_result(args.size_kb * 1024, args.seed)
    print(
        f"database={'postgresql' if database.postgres else 'sqlite'} broker={env['CELERY_BROKER_URL'].split(':')[0]} "
        f"clients={args.clients} duration={args.duration:g}s upload={len(payload) / 1e6:.2f} MB",
        flush=True,
    )
    try:
        database.create()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=600
        )
        candidate_text, token = run_django(env, SETUP).split()[-2:]
        candidate = int(candidate_text)

        port = free_port()
        server_log = workdir / "gunicorn.log"
        gunicorn = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "-b",
                f"127.0.0.1:{port}",
                "-w",
                str(args.gunicorn_workers),
                "--threads",
                str(args.gunicorn_threads),
                "-k",
                "gthread",
                "--timeout",
                "120",
                "--backlog",
                "2048",
            ],
            cwd=ROOT,
            env=env,
            stdout=open(server_log, "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(gunicorn)
        for queue in WORKER_QUEUES:
            worker_log = workdir / f"worker-{queue}.log"
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue, "--pool", "threads"]
                + ["-c", "2", "-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
                cwd=ROOT,
                env=env,
                stdout=open(worker_log, "wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            processes.append(worker)
        base = f"http://127.0.0.1:{port}"
        wait_ready(lambda: http_ok(base + "/api/v1/"), "gunicorn", 60, gunicorn, server_log)

        started = time.monotonic()
        outcome = asyncio.run(
            run_clients(base, candidate, token, payload, args.clients, args.duration, args.retry_fraction, args.seed)
        )
        elapsed = time.monotonic() - started

        # Right after the burst: what waits in each queue, how many rescorings the burst made, and how
        # long a large upload sent now waits to be parsed.
        depths = queue_depths(env["CELERY_BROKER_URL"], WORKER_QUEUES)
        rescorings = tasks_received(workdir / "worker-default.log", "selection.tasks.recompute_scores")
        print(f"queue depth after the burst: {depths}; rescoring tasks received so far: {rescorings}", flush=True)
        large_id, large_wait = large_upload_wait(
            base, candidate, token, args.large_mb * 1024 * 1024, args.drain_timeout
        )
        verdict = "ok" if large_wait < LARGE_PARSE_TARGET_S else "OVER"
        print(
            f"large upload #{large_id} ({args.large_mb} MB) sent after the burst: parsed {large_wait:.1f} s after "
            f"its 202 (target < {LARGE_PARSE_TARGET_S:.0f} s) {verdict}",
            flush=True,
        )

        # Let queued parsing finish, then count what the database holds.
        deadline = time.monotonic() + args.drain_timeout
        while True:
            counted = json.loads(run_django(env, COUNT.format(candidate=candidate)).strip().splitlines()[-1])
            pending = counted["status"].get("parsing", 0) + counted["status"].get("queued", 0)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(2)
        rescorings = tasks_received(workdir / "worker-default.log", "selection.tasks.recompute_scores")
        print(f"rescoring tasks in all: {rescorings} for {len(outcome['accepted'])} uploads", flush=True)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        database.drop()

    status = report(outcome, counted, elapsed, len(payload))
    return status or int(not large_wait < LARGE_PARSE_TARGET_S)


if __name__ == "__main__":
    sys.exit(main())
