"""Real services for fault tests: a private PostgreSQL cluster (initdb + pg_ctl from Debian's
packages) and a private redis-server, each in a temporary directory on a free loopback port, and
the web app (gunicorn) and Celery workers as processes on them. The tests stop, restart and kill
them mid-run. Nothing here touches the machine's shared PostgreSQL or Redis.

In CI (CI=true) a missing binary fails the test; elsewhere it skips.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.environment import IN_CI, ROOT


def need_binary(name: str, *patterns: str) -> str:
    found = shutil.which(name) or next((p for pattern in patterns for p in sorted(glob.glob(pattern))), None)
    if found:
        return found
    message = f"{name} is not installed (Debian: postgresql / redis-server)"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


class PostgresCluster:
    """A throw-away cluster: trust auth, loopback only, no fsync (the data is discarded)."""

    def __init__(self) -> None:
        self.initdb = need_binary("initdb", "/usr/lib/postgresql/*/bin/initdb")
        self.pg_ctl = str(Path(self.initdb).with_name("pg_ctl"))
        self.directory = Path(tempfile.mkdtemp(prefix="kvselect-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.as_postgres: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the packages' user
            runuser = need_binary("runuser")
            self.as_postgres = [runuser, "-u", "postgres", "--"]
            shutil.chown(self.directory, "postgres")
        self._run([self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])

    def _run(self, argv: list[str], timeout: float = 120) -> None:
        result = subprocess.run(self.as_postgres + argv, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}\n{self.log()[-2000:]}")

    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _ctl(self, action: str, *extra: str) -> None:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        argv = [self.pg_ctl, "-D", str(self.data), "-l", str(self.directory / "server.log"), "-w", "-t", "60"]
        self._run(argv + ["-o", options, *extra, action])

    def start(self) -> None:
        self._ctl("start")

    def stop(self, mode: str = "fast") -> None:
        """fast: connections are terminated, as in a restart or a failover; immediate: a crash."""
        self._ctl("stop", "-m", mode)

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as connection:
            connection.execute(sql)

    def query(self, sql: str, params: tuple = (), database: str = "postgres") -> list[tuple]:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as connection:
            return connection.execute(sql, params).fetchall()

    def close(self) -> None:
        try:
            self.stop("immediate")
        except Exception:  # already stopped
            pass
        shutil.rmtree(self.directory, ignore_errors=True)


class RedisServer:
    def __init__(self) -> None:
        self.binary = need_binary("redis-server")
        self.directory = Path(tempfile.mkdtemp(prefix="kvselect-redis-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self.answers, 20, "redis-server answering")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class Stack:
    """The app's environment on the private services: one database, the broker, a var and media dir."""

    def __init__(self, postgres: PostgresCluster, redis: RedisServer, database: str, directory: Path) -> None:
        self.postgres, self.redis, self.database, self.directory = postgres, redis, database, directory
        self.media = directory / "media"
        self.processes: list[App] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KVSELECT_", "CELERY_"))}
        self.env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            DATABASE_URL=postgres.url(database),
            CELERY_BROKER_URL=redis.url,
            KVSELECT_VAR_DIR=str(directory / "var"),
            KVSELECT_MEDIA_ROOT=str(self.media),
            SECRET_KEY="kvselect-reliability-tests-only",
            LOG_LEVEL="INFO",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )

    def django(self, code: str, timeout: float = 120, **env: str) -> Any:
        """Run Django code against this stack in a subprocess; it prints one JSON value last."""
        result = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()\n" + code],
            cwd=ROOT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise RuntimeError(f"django step failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def run_row(self, run_id: int) -> dict[str, Any]:
        rows = self.postgres.query(
            "SELECT status, error, progress, partial, attempt, notes,"
            " (SELECT count(*) FROM benchmarks_runpoint p WHERE p.run_id = r.id),"
            " (SELECT count(*) FROM benchmarks_artifact a WHERE a.run_id = r.id)"
            " FROM benchmarks_benchmarkrun r WHERE id = %s",
            (run_id,),
            database=self.database,
        )
        status, error, progress, partial, attempt, notes, points, artifacts = rows[0]
        return dict(
            status=status,
            error=error,
            progress=progress,
            partial=partial,
            attempt=attempt,
            notes=notes,
            points=points,
            artifacts=artifacts,
        )

    def start(self, name: str, argv: list[str], ready: str | None = None, **env: str) -> "App":
        app = App(name, argv, {**self.env, **env}, self.directory / f"{name}.log")
        self.processes.append(app)
        app.start(ready)
        return app

    def web(self, **env: str) -> "App":
        port = free_port()
        app = self.start(
            "gunicorn",
            [sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}"]
            + ["-w", "1", "--threads", "4", "-k", "gthread", "--timeout", "60"],
            **env,
        )
        app.url = f"http://127.0.0.1:{port}"
        wait_until(lambda: http_status(app.url + "/accounts/login/") == 200, 60, "gunicorn serving")
        return app

    def worker(self, name: str, queues: str = "gpu,default,parse", beat: bool = False, **env: str) -> "App":
        argv = [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queues, "--pool", "threads"]
        argv += ["-c", "2", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
        if beat:
            argv += ["-B", "-s", str(self.directory / f"{name}-beat-schedule")]
        return self.start(name, argv, ready="ready.", **env)

    def close(self) -> None:
        for app in reversed(self.processes):
            app.kill()


class App:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log_path = name, argv, env, log
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self, ready: str | None) -> None:
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if ready:

            def up() -> bool:
                if self.process.poll() is not None:
                    raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
                return ready.encode() in self.log_path.read_bytes()[offset:]

            wait_until(up, 90, f"{self.name} ready")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group, as the OOM killer or a lost node would: no shutdown handlers."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(20)


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    return http(url, headers=headers)[0]


def http(
    url: str, data: bytes | None = None, headers: dict[str, str] | None = None, method: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # loopback only
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()
    except OSError:
        return 0, {}, b""


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None
