"""Faults on real services (issue 20): a private PostgreSQL cluster and redis-server, gunicorn and
real Celery workers; PostgreSQL restarted or stopped, Redis stopped, workers SIGKILLed mid-run.

Each test gets its own database (a copy of one migrated template) and an empty broker, and is
bounded in time. The engine is the in-process mock (loopback).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.environment import IN_CI, ROOT
from tests.support.readme import readme_topology

from .services import PostgresCluster, RedisServer, Stack, free_port, http, wait_until

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

LOAD = {  # a short closed-loop test against the mock engine
    "concurrency": 2,
    "duration_s": 4.0,
    "warmup_s": 0.0,
    "input_tokens": 16,
    "output_tokens": 8,
    "settle_s": 0.0,
    "abort_fraction": 0.0,
    # closed loop at fixed lengths: one point per run (the constraints' request rate would make it
    # open loop, and drawn lengths add a point per traffic group)
    "rate": None,
    "input_distribution": None,
    "output_distribution": None,
}
TERMINAL = ("succeeded", "failed", "cancelled")

WORLD = """
import json
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from rest_framework.authtoken.models import Token
from selection.candidates.services import add_candidate, load_engine_catalog
from selection.models import Engine, Membership, Team
from selection.setup.services import create_selection, save_constraints

load_engine_catalog()
team = Team.objects.create(name="reliability")
user = get_user_model().objects.create_user("architect", password="reliability-Password-1")
Membership.objects.create(team=team, user=user, role=Membership.Role.ARCHITECT)
owners = {}
for role in ("business", "platform", "security"):  # three different people (separation of duties)
    owners[role] = get_user_model().objects.create_user(role, password="reliability-Password-1")
    Membership.objects.create(team=team, user=owners[role], role=Membership.Role.REVIEWER)
selection = create_selection(user=user, team=team, name="Faults", business_owner=owners["business"],
                             platform_owner=owners["platform"], security_owner=owners["security"])
save_constraints(selection=selection, user=user, data={
    "peak_concurrency": 8, "request_rate": 2.0, "avg_input_tokens": 16, "p95_input_tokens": 16,
    "max_input_tokens": 64, "avg_output_tokens": 8, "max_output_tokens": 16, "multi_turn": False,
    "ttft_p95_ms": 800.0, "tpot_p95_ms": 60.0, "e2e_p95_ms": 15000.0, "gpu_model": "H100",
    "gpu_memory_gib": 80.0, "gpu_count_budget": 1, "cost_per_gpu_hour": "2.50", "ops_team_size": 3,
    "target_model": "Llama-3.1-8B", "kv_precisions_allowed": ["bf16"]})
candidate = add_candidate(selection=selection, user=user, data={
    "engine": Engine.objects.get(slug="vllm"), "engine_version": "0.11.0", "endpoint_url": ENDPOINT,
    "metrics_url": ENDPOINT + "/metrics", "model_name": "mock"})
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print(json.dumps({"selection": selection.pk, "candidate": candidate.pk, "token": Token.objects.create(user=user).key,
                  "session": session.session_key}))
"""

REAP = """
import json
from datetime import timedelta
from django.utils import timezone
from benchmarks.tasks import reap_stale_runs
print(json.dumps(reap_stale_runs(now=timezone.now() + timedelta(seconds=LATER))))
"""


@pytest.fixture(scope="module")
def services():
    """One PostgreSQL cluster with a migrated template database, one redis-server: per module."""
    postgres = PostgresCluster()
    redis = RedisServer()
    try:
        postgres.start()
        redis.start()
        postgres.execute("CREATE DATABASE kvselect_template")
        env = Stack(postgres, redis, "kvselect_template", postgres.directory).env
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-4000:]
        yield postgres, redis
    finally:
        redis.close()
        postgres.close()


@pytest.fixture
def stack(services, tmp_path, mock_engine):
    """A fresh database copied from the template, an empty broker, the world: a candidate on the mock."""
    postgres, redis = services
    if not redis.answers():
        redis.start()
    database = f"kvselect_{uuid.uuid4().hex[:10]}"
    postgres.execute(f'CREATE DATABASE "{database}" TEMPLATE kvselect_template')
    redis_flush(redis)
    stack = Stack(postgres, redis, database, tmp_path)
    stack.world = stack.django(WORLD.replace("ENDPOINT", repr(mock_engine.url)))
    yield stack
    stack.close()
    for log in sorted(tmp_path.glob("*.log")):  # shown by pytest only when the test failed
        print(f"===== {log.name}\n{log.read_text(errors='replace')[-4000:]}")
    try:
        postgres.start()
    except RuntimeError:  # already running
        pass
    if not redis.answers():
        redis.start()
    postgres.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def redis_flush(redis: RedisServer) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as sock:
        sock.sendall(b"FLUSHALL\r\n")
        assert sock.recv(16).startswith(b"+OK")


def start_run(stack: Stack, web, params: dict | None = None) -> tuple[int, dict]:
    status, headers, body = http(
        f"{web.url}/api/v1/candidates/{stack.world['candidate']}/validations/",
        data=json.dumps({"test": "concurrency_stress", "params": params or LOAD}).encode(),
        headers={"Authorization": f"Token {stack.world['token']}", "Content-Type": "application/json"},
    )
    assert status in (202, 503), (status, body[:500])
    return status, json.loads(body)


def loading(stack: Stack, run_id: int) -> bool:
    row = stack.run_row(run_id)
    return row["status"] == "running" and bool((row["progress"] or {}).get("requests_done"))


def terminal(stack: Stack, run_id: int) -> dict | None:
    try:
        row = stack.run_row(run_id)
    except Exception:  # the database is coming back
        return None
    return row if row["status"] in TERMINAL else None


def pending_file(stack: Stack, run_id: int, attempt: int = 1) -> Path:
    return stack.media / "runs" / str(run_id) / "pending" / f"attempt-{attempt}.json"


@pytest.mark.timeout(240)
def test_a_validation_finishing_across_a_postgres_restart_is_stored(stack):
    """Item 1: before, the task crashed writing its last progress over the connection the restart had
    killed; the run sat `running` until the reaper failed it with no data."""
    web = stack.web()
    stack.worker("gpu-worker")
    _, run = start_run(stack, web)
    wait_until(lambda: loading(stack, run["id"]), 60, "the load running")
    stack.postgres.restart()  # every connection of the worker (task thread, reporter) is terminated
    row = wait_until(lambda: terminal(stack, run["id"]), 90, "the run finishing")
    assert row["status"] == "succeeded", row
    assert row["points"] == 1 and row["artifacts"] >= 2  # native JSON and per-request Parquet
    assert row["progress"]["percent"] == 100 and not row["error"]
    pending = pending_file(stack, run["id"])
    wait_until(lambda: not pending.exists(), 10, "the write-ahead file removed once the result is stored")


@pytest.mark.timeout(240)
def test_a_result_the_database_never_received_is_stored_by_the_reaper_from_its_write_ahead_file(stack):
    """Item 1: PostgreSQL is down when the load ends and the worker dies while it retries; the
    result it wrote ahead is stored by the reaper, which says what happened."""
    web = stack.web()
    worker = stack.worker("gpu-worker")
    _, run = start_run(stack, web)
    wait_until(lambda: loading(stack, run["id"]), 60, "the load running")
    stack.postgres.stop("fast")
    pending = pending_file(stack, run["id"])
    wait_until(pending.exists, 60, "the write-ahead file")
    wait_until(
        lambda: "store_error" in pending.read_text() and json.loads(pending.read_text())["store_error"],
        30,
        "the worker's failed write recorded",
    )
    worker.kill()
    stack.postgres.start()
    assert stack.run_row(run["id"])["status"] == "running"
    assert stack.django(REAP.replace("LATER", "120")) == [run["id"]]
    row = stack.run_row(run["id"])
    assert row["status"] == "succeeded" and row["points"] == 1 and row["artifacts"] >= 2, row
    note = row["notes"][-1]
    assert "Stored by the reaper from the worker's write-ahead file" in note
    assert "the database refused the worker's write" in note and "OperationalError" in note
    assert not pending.exists()


@pytest.mark.timeout(240)
def test_a_validation_started_while_redis_is_down_runs_once_redis_is_back(stack):
    """Item 2: before, the API answered 202 and the run stayed `queued` forever."""
    web = stack.web()
    stack.redis.stop()
    status, run = start_run(stack, web, dict(LOAD, duration_s=2.0))
    assert status == 202 and run["status"] == "queued"
    row = stack.run_row(run["id"])
    assert row["status"] == "queued" and row["progress"]["phase"] == "waiting for the job queue"
    stack.redis.start()
    stack.worker("gpu-worker")
    stack.django(REAP.replace("LATER", "60"))  # the reaper's next pass, after its grace period
    row = wait_until(lambda: terminal(stack, run["id"]), 90, "the run picked up and finished")
    assert row["status"] == "succeeded" and row["attempt"] == 1, row
    assert row["progress"] == {"phase": "succeeded", "percent": 100}, row  # no longer "waiting for the job queue"


@pytest.mark.timeout(180)
def test_pages_during_a_postgres_outage_are_a_branded_503_and_come_back(stack):
    """Item 4: before, every page was a bare 500 while the API said 503."""
    web = stack.web()
    cookie = {"Cookie": f"sessionid={stack.world['session']}"}
    pages = ["/", f"/selections/{stack.world['selection']}/"]
    assert all(http(web.url + page, headers=cookie)[0] == 200 for page in pages)
    stack.postgres.stop("fast")
    for page in pages:
        status, headers, body = http(web.url + page, headers=cookie)
        assert status == 503, (page, status, body[:300])
        assert headers.get("Retry-After") == "5"
        assert b"kvselect is temporarily unavailable" in body
    status, headers, body = http(f"{web.url}/api/v1/selections/", headers=cookie)
    assert status == 503 and headers.get("Retry-After") == "5" and b"temporarily unavailable" in body
    stack.postgres.start()
    wait_until(lambda: http(web.url + "/", headers=cookie)[0] == 200, 30, "pages back after the restart")


@pytest.mark.timeout(240)
def test_an_unacked_task_of_a_killed_worker_is_redelivered_and_runs_once(stack):
    """Redis's visibility timeout (6 s here) brings back the task of a SIGKILLed worker; the new
    worker restarts the run from a clean state, exactly once (attempt 2, one load point)."""
    fast = {
        "KVSELECT_BROKER_VISIBILITY_TIMEOUT_S": "6",
        "KVSELECT_HEARTBEAT_INTERVAL_S": "1",
        "KVSELECT_HEARTBEAT_STALE_S": "4",
    }
    web = stack.web(**fast)
    first = stack.worker("first", **fast)
    _, run = start_run(stack, web, dict(LOAD, duration_s=5.0))
    wait_until(lambda: loading(stack, run["id"]), 60, "the load running")
    first.kill()
    time.sleep(7)  # past the visibility timeout: the replacement worker restores the message at start
    second = stack.worker("second", **fast)
    row = wait_until(lambda: terminal(stack, run["id"]), 90, "the redelivered run finishing")
    assert row["status"] == "succeeded" and row["attempt"] == 2 and row["points"] == 1, row
    assert "run_validation[" in second.log()
    # the run's row is written before Celery logs the task's end: wait for the line, do not race it
    wait_until(lambda: "succeeded" in second.log(), 15, "the second worker logging the task's success")


@pytest.mark.timeout(240)
def test_a_killed_worker_is_detected_within_a_minute_and_its_run_says_no_data(stack):
    """Item 9 with the shipped defaults (heartbeat 5 s, stale after 30 s, reaper every 15 s):
    before, detection took 135-143 s and the run kept 'running 100 %' and claimed partial data."""
    web = stack.web()
    stack.worker("reaper", queues="default", beat=True)
    gpu = stack.worker("gpu-worker", queues="gpu")
    _, run = start_run(stack, web, dict(LOAD, duration_s=120.0))
    wait_until(lambda: loading(stack, run["id"]), 60, "the load running")
    gpu.kill()
    killed = time.monotonic()
    row = wait_until(lambda: terminal(stack, run["id"]), 75, "the lost worker detected", interval=0.5)
    detected = time.monotonic() - killed
    assert detected <= 60, f"detected after {detected:.0f} s"
    assert row["status"] == "failed" and "worker lost" in row["error"] and "no data" in row["error"]
    assert row["progress"] == {"phase": "failed", "percent": 0} and not row["partial"] and row["points"] == 0


# --- the production topology of the README (issue 38 item 4) ---------------------------------------


def topology_argv(command: str, *, pool: str, port: int, directory: Path) -> list[str]:
    """A README command as this test runs it: only the address, the beat schedule's place and the pool
    differ; the program runs from this interpreter's environment."""
    command = command.replace("<pool>", pool).replace("0.0.0.0:8000", f"127.0.0.1:{port}")
    command = command.replace("/var/lib/kvselect/", f"{directory}/")
    program, *arguments = shlex.split(command)
    assert program in ("gunicorn", "celery"), command
    return [sys.executable, "-m", program, *arguments]


ACTIVE_QUEUES = """
import json
from config.celery import app
replies = app.control.inspect(timeout=5).active_queues() or {}
print(json.dumps({name.split("@")[0]: sorted(q["name"] for q in queues) for name, queues in replies.items()}))
"""

ON_POOL = """
import json
from selection.models import Candidate
print(json.dumps(Candidate.objects.filter(pk=CANDIDATE).update(gpu_pool=POOL)))
"""


def multipart_upload(url: str, token: str, data: bytes, key: str) -> tuple[int, dict]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="test"\r\n\r\nconcurrency_stress\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="v.json"\r\n'
            "Content-Type: application/json\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    status, _headers, answer = http(
        url,
        data=body,
        headers={
            "Authorization": f"Token {token}",
            "Idempotency-Key": key,
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    return status, json.loads(answer or b"{}")


@pytest.mark.timeout(420)
def test_the_readmes_production_topology_runs_every_kind_of_work_on_its_own_process(stack):
    """gunicorn, one worker per queue (`default`, `parse`, `render`, `gpu.<pool>`) and beat, started from
    the README's own lines: each worker consumes exactly its queue, and a validation run, a large upload,
    the rescoring after them and beat's reaper each happen on the process the README says."""
    commands = readme_topology()
    assert [shlex.split(c)[:2] for c in commands] == [["gunicorn", "config.wsgi:application"]] + [["celery", "-A"]] * 5
    pool = f"p{uuid.uuid4().hex[:6]}"
    port = free_port()
    fast = {"KVSELECT_SYNC_PARSE_BYTES": "512", "KVSELECT_REAPER_INTERVAL_S": "2"}
    processes = {}
    for command in commands:  # all at once, as a deployment starts them; then each must come up
        argv = topology_argv(command, pool=pool, port=port, directory=stack.directory)
        name = "gunicorn" if "gunicorn" in argv[2] else ("beat" if "beat" in argv else argv[argv.index("--queues") + 1])
        processes[name] = stack.start(f"topology-{name}", argv, ready=None, **fast)
    web = f"http://127.0.0.1:{port}"
    wait_until(lambda: http(web + "/accounts/login/")[0] == 200, 180, "gunicorn serving")
    for name, process in processes.items():
        ready = "beat: Starting" if name == "beat" else "ready."
        if name != "gunicorn":
            wait_until(lambda process=process, ready=ready: ready in process.log(), 180, f"{name} ready")

    queues = stack.django(ACTIVE_QUEUES)
    assert queues == {
        "default": ["default"],
        "parse": ["parse"],
        "render": ["render"],
        f"gpu-{pool}": [f"gpu.{pool}"],
    }, queues

    world = stack.world
    assert stack.django(ON_POOL.replace("CANDIDATE", str(world["candidate"])).replace("POOL", repr(pool))) == 1
    web_app = processes["gunicorn"]
    web_app.url = web
    _, run = start_run(stack, web_app, dict(LOAD, duration_s=2.0))
    data = (ROOT / "tests" / "benchmarks" / "formats" / "fixtures" / "vllm_bench_serve.json").read_bytes()
    status, upload = multipart_upload(
        f"{web}/api/v1/candidates/{world['candidate']}/results/", world["token"], data, "topology-1"
    )
    assert status == 202 and upload["status"] == "parsing", (status, upload)

    row = wait_until(lambda: terminal(stack, run["id"]), 120, "the validation run on the GPU pool's worker")
    assert row["status"] == "succeeded", row
    worker = stack.postgres.query(
        "SELECT worker FROM benchmarks_benchmarkrun WHERE id = %s", (run["id"],), database=stack.database
    )[0][0]
    assert worker.startswith(f"gpu-{pool}@"), worker
    parsed = wait_until(lambda: terminal(stack, upload["id"]), 60, "the upload parsed on the parse worker")
    assert parsed["status"] == "succeeded" and parsed["progress"] == {"phase": "succeeded", "percent": 100}

    def rescored() -> bool:
        rows = stack.postgres.query(
            "SELECT scores_requested_at IS NULL AND rescoring_queued_at IS NULL FROM selection_selection WHERE id = %s",
            (world["selection"],),
            database=stack.database,
        )
        return rows[0][0]

    wait_until(rescored, 120, "the rescoring after the run and the upload")
    logs = {name: app.log() for name, app in processes.items()}
    assert "benchmarks.tasks.parse_upload[" in logs["parse"]
    assert "selection.tasks.recompute_scores[" in logs["default"]
    assert "benchmarks.tasks.run_validation[" in logs[f"gpu.{pool}"]
    for name in ("parse", "render", f"gpu.{pool}"):
        assert "recompute_scores[" not in logs[name], name  # no other worker scores
    assert "Sending due task reap-stale-runs" in logs["beat"]
    wait_until(
        lambda: "benchmarks.tasks.reap_stale_runs[" in processes["default"].log(), 30, "beat's reaper on default"
    )


# --- the media volume full or read-only (issue 38 item 2) ------------------------------------------


@contextmanager
def tiny_volume(path: Path, size: str):
    """A tmpfs of `size` mounted at `path` (a full disk after `size`; `remount` makes it read-only)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        message = f"cannot mount a tmpfs ({mounted.stderr.decode().strip()}): needs root with CAP_SYS_ADMIN"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True)


def open_under(path: Path) -> list[str]:
    """Every process's open files under `path` (what kept the disk full until gunicorn was restarted)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(path)):
                found.append(f"{pid}: {target}")
    return found


@pytest.mark.timeout(240)
def test_uploads_to_a_read_only_or_full_media_volume_are_a_json_507_leaving_nothing_behind(stack):
    """Before: a large upload got a 500 HTML page, and on a full disk its partial temporary file stayed on
    disk, held open by the gunicorn worker, until the worker was restarted."""
    small = (ROOT / "tests" / "benchmarks" / "formats" / "fixtures" / "vllm_bench_serve.json").read_bytes()
    large = b'{"pad": "' + b"x" * (6 * 1024 * 1024) + b'"}'  # over the 5 MiB Django keeps in memory
    url = f"/api/v1/candidates/{stack.world['candidate']}/results/"
    with tiny_volume(stack.media, "1m") as volume:
        web = stack.web()
        incoming = volume / "incoming"
        remount(volume, "ro")
        for name, data in (("small", small), ("large", large)):
            status, body = multipart_upload(web.url + url, stack.world["token"], data, f"ro-{name}")
            assert status == 507 and "Read-only file system" in body["detail"], (name, status, body)
        remount(volume, "rw")
        status, body = multipart_upload(web.url + url, stack.world["token"], large, "full-large")
        assert status == 507 and "No space left on device" in body["detail"], (status, body)
        assert list(incoming.iterdir()) == []  # the partial file is gone...
        assert open_under(volume) == []  # ...and no process holds it open
        status, body = multipart_upload(web.url + url, stack.world["token"], small, "after")
        assert status == 201, (status, body)  # the volume has its room back: nothing was left filling it
        runs = stack.postgres.query(
            "SELECT idempotency_key FROM benchmarks_benchmarkrun WHERE origin = 'upload'", database=stack.database
        )
        assert runs == [("after",)]  # nothing half-written by the refused uploads
        web.kill()
