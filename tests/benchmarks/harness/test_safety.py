import ast
import asyncio
import http.server
import socket
import threading
from pathlib import Path
from unittest import mock

import aiohttp
import pytest

from benchmarks.harness import identity, safety, safety_aiohttp
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.metrics import MetricsSampler, probe_simulator
from benchmarks.harness.safety import TargetRefused, check_target


def fake_resolver(table):
    return lambda host, port: table[host]


def test_allow_listed_host_passes_and_is_normalised():
    assert (
        check_target(
            "http://Engine.Internal:8000/v1", ["engine.internal"], fake_resolver({"engine.internal": ["10.0.0.5"]})
        )
        == "engine.internal"
    )
    assert check_target("https://10.1.2.3/v1", "10.0.0.0/8, other") == "10.1.2.3"
    assert check_target(
        "http://gpu-7.pool.example.com", ["*.pool.example.com"], fake_resolver({"gpu-7.pool.example.com": ["10.0.0.7"]})
    )


def test_host_not_in_list_is_refused_naming_the_setting():
    with pytest.raises(TargetRefused, match="not in KVSELECT_ALLOWED_TARGETS"):
        check_target("http://evil.example.com/v1", ["engine.internal"])
    with pytest.raises(TargetRefused, match="allowed: empty"):
        check_target("http://127.0.0.1:8000", [])


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://169.254.1.1:80",
        "http://[fe80::1]:8000",
        "http://[::ffff:169.254.169.254]/",
        "http://metadata.google.internal/computeMetadata",
    ],
)
def test_link_local_and_metadata_always_refused_even_with_wildcard(url):
    with pytest.raises(TargetRefused, match="always refused"):
        check_target(url, ["*"])


def test_dns_name_resolving_to_link_local_is_refused_before_connecting():
    resolver = fake_resolver({"sneaky.example.com": ["10.0.0.1", "169.254.169.254"]})
    with pytest.raises(TargetRefused, match="resolves to 169.254.169.254"):
        check_target("http://sneaky.example.com", ["sneaky.example.com"], resolver)


def test_bad_scheme_and_credentials_refused():
    with pytest.raises(TargetRefused, match="scheme"):
        check_target("file:///etc/passwd", ["*"])
    with pytest.raises(TargetRefused, match="credentials"):
        check_target("http://user:pw@engine.internal", ["engine.internal"])
    assert issubclass(TargetRefused, ValueError)


# --- the one guard every outbound connection goes through --------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
            self.end_headers()
            return
        body = f"host={self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def local_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def connections(monkeypatch):
    """Every TCP connection the code opens with `socket.create_connection`: (address, port)."""
    opened = []
    real = socket.create_connection

    def record(address, *args, **kwargs):
        opened.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", record)
    return opened


def _resolving(table):
    return mock.patch.object(safety, "_resolve", side_effect=lambda host, port: table[host])


def test_urlopen_connects_to_the_address_it_checked_keeping_the_name(local_server, connections):
    with _resolving({"engine.internal": ["127.0.0.1"]}) as lookup:
        with safety.urlopen(f"http://engine.internal:{local_server}/health", ["engine.internal"], timeout=5) as r:
            assert r.read() == f"host=engine.internal:{local_server}".encode()
    assert connections == [("127.0.0.1", local_server)] and lookup.call_count == 1  # resolved once, by the guard


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "fe80::1"])
def test_urlopen_refuses_a_name_resolving_to_a_forbidden_address_before_connecting(connections, address):
    with _resolving({"engine.internal": [address]}), pytest.raises(safety.TargetRefused, match=address):
        safety.urlopen("http://engine.internal:8000/v1/models", ["engine.internal"], timeout=1)
    assert connections == []


def test_urlopen_refuses_unresolvable_names_other_hosts_and_schemes(connections):
    with pytest.raises(safety.TargetRefused, match="cannot resolve"):
        with mock.patch.object(safety, "_resolve", side_effect=socket.gaierror("no such name")):
            safety.urlopen("http://engine.internal:8000/", ["engine.internal"], timeout=1)
    with pytest.raises(safety.TargetRefused, match="not in KVSELECT_ALLOWED_TARGETS"):
        safety.urlopen("http://evil.example.com/", ["engine.internal"], timeout=1)
    with pytest.raises(safety.TargetRefused, match="scheme"):
        safety.urlopen("file:///etc/passwd", ["*"], timeout=1)
    assert connections == []


def test_a_redirect_to_the_metadata_service_is_refused_where_it_connects(local_server, connections):
    with pytest.raises(safety.TargetRefused, match="169.254.169.254"):
        safety.urlopen(f"http://127.0.0.1:{local_server}/redirect", ["*"], timeout=5)
    assert connections == [("127.0.0.1", local_server)]  # the first hop only


def test_the_identity_probe_goes_through_the_guard(connections):
    with _resolving({"engine.internal": ["169.254.169.254"]}):
        found = identity.probe("http://engine.internal:8000", allowed_hosts=["engine.internal"])
        assert identity.simulated_device("http://engine.internal:8000", allowed_hosts=["engine.internal"]) is None
    assert found["reachable"] is False and connections == []
    with pytest.raises(ValueError, match="allow-list"):  # no unguarded default
        identity.probe("http://engine.internal:8000")


def test_aiohttp_sessions_the_sampler_and_the_load_client_connect_only_to_checked_addresses(local_server):
    allowed = ["engine.internal"]

    async def scenario():
        # a checked name: connected to the address the guard returned, the Host header kept
        with _resolving({"engine.internal": ["127.0.0.1"]}):
            async with aiohttp.ClientSession(connector=safety_aiohttp.tcp_connector(allowed)) as session:
                async with session.get(f"http://engine.internal:{local_server}/x") as response:
                    assert await response.text() == f"host=engine.internal:{local_server}"
        with _resolving({"engine.internal": ["169.254.169.254"]}):
            async with aiohttp.ClientSession(connector=safety_aiohttp.tcp_connector(allowed)) as session:
                with pytest.raises(safety.TargetRefused):
                    await session.get("http://engine.internal:8000/metrics")
            assert not await probe_simulator("http://engine.internal:8000", allowed_hosts=allowed)
            sampler = MetricsSampler("http://engine.internal:8000/metrics", allowed_hosts=allowed)
            await sampler.start()
            await asyncio.sleep(0.1)
            with pytest.raises(safety.TargetRefused):  # the run fails, naming the refusal
                await sampler.stop()
            async with OpenAIClient("http://engine.internal:8000", "m", allowed_hosts=allowed, transport="raw") as raw:
                with pytest.raises(safety.TargetRefused):
                    await raw._raw._connection()
            async with OpenAIClient("http://engine.internal:8000", "m", allowed_hosts=allowed) as client:
                with pytest.raises(safety.TargetRefused):
                    await client.get_json("/v1/models")
        # a literal address, which aiohttp does not resolve, is checked too
        async with aiohttp.ClientSession(connector=safety_aiohttp.tcp_connector(["*"])) as session:
            with pytest.raises(safety.TargetRefused):
                await session.get("http://169.254.169.254/latest/meta-data")

    asyncio.run(scenario())


APP_CODE = ("benchmarks/harness", "benchmarks/validation", "benchmarks/suite", "benchmarks/api", "selection")
CONNECTING = {"urlopen", "ClientSession", "TCPConnector", "HTTPConnection", "HTTPSConnection", "create_connection"}


def test_no_outbound_connection_is_opened_outside_the_guard():
    """The code that contacts engines opens connections only through `harness.safety`: a bare
    `urlopen`, an aiohttp session without the guard's connector or a raw connect would bypass the
    allow-list (the identity probe once did)."""
    root = Path(__file__).resolve().parents[3]
    offenders = []
    for folder in APP_CODE:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name in ("safety.py", "safety_aiohttp.py"):  # the guard itself
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
                if name not in CONNECTING or owner in ("safety", "safety_aiohttp"):
                    continue
                if name == "ClientSession" and any(k.arg == "connector" for k in node.keywords):
                    continue
                if name == "create_connection" and owner == "loop":
                    continue  # the raw pool's, to the address `safety.open_address` returned (test above)
                offenders.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(func)}")
    assert offenders == []
