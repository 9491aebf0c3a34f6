"""OpenAI-compatible streaming client that records what kvselect's definitions need, per request.

Every engine kvselect validates (vLLM, SGLang, TensorRT-LLM, LMDeploy, TGI, llama.cpp) speaks this
API, but they differ at the edges: some streams end without `data: [DONE]`, some carry usage only in
the last chunk, some send errors inside the stream. The client takes the time of every network
read once (perf_counter), keeps the per-chunk token counts, and takes token counts from the
engine's usage whenever it reports them (never guessed when usage exists).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

from benchmarks.harness import safety, safety_aiohttp
from benchmarks.harness.completion_payloads import fail, handle_complete_response, http_error
from benchmarks.harness.rawhttp import HTTPError, RawHTTPPool
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.stream_recorder import StreamRecorder

_STALE_CONNECTION_RETRIES = 4


class OpenAIClient:
    """One HTTP session against one OpenAI-compatible endpoint (base URL without `/v1/...`)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        keep_text: bool = False,
        max_connections: int = 0,
        keep_alive: bool = True,
        transport: Literal["auto", "raw", "aiohttp"] = "auto",
        kernel_timestamps: bool = True,
        allowed_hosts: safety.Allowed = None,
    ) -> None:
        """`allowed_hosts`: the outbound allow-list; when set, every connection goes to an address the
        outbound guard checked (`harness.safety`), else (the harness by hand) no check."""
        # what clone() needs to open the same client again in a worker process
        self._settings = {
            "base_url": base_url,
            "model": model,
            "api_key": api_key,
            "request_timeout_s": request_timeout_s,
            "connect_timeout_s": connect_timeout_s,
            "keep_text": keep_text,
            "max_connections": max_connections,
            "transport": transport,
            "kernel_timestamps": kernel_timestamps,
            "allowed_hosts": allowed_hosts,
        }
        self.allowed_hosts = allowed_hosts
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.model = model
        self.keep_text = keep_text
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=request_timeout_s)
        self._max_connections = max_connections
        # Reuse connections between requests. Some servers (llama.cpp's) close a connection after
        # every streamed response while advertising keep-alive; the client then switches this off
        # by itself at the first stale connection (see send), or it can be off from the start.
        self.keep_alive = keep_alive
        self.request_timeout_s = request_timeout_s
        # Transport for completions: the lean protocol client on plain http (cheaper per token and
        # timestamps taken where bytes arrive), aiohttp for https or when asked.
        parts = urlsplit(self.base_url)
        use_raw = transport == "raw" or (transport == "auto" and parts.scheme == "http")
        if transport == "raw" and parts.scheme != "http":
            raise ValueError(f"OpenAIClient.transport: 'raw' needs a plain http URL, got {parts.scheme!r}")
        self._raw: RawHTTPPool | None = None
        if use_raw:
            host = parts.hostname or "127.0.0.1"
            port = parts.port or 80
            self._raw = RawHTTPPool(
                host,
                port,
                keep_alive=keep_alive,
                connect_timeout_s=connect_timeout_s,
                kernel_timestamps=kernel_timestamps,
                allowed_hosts=allowed_hosts,
            )
            host_header = parts.netloc.rsplit("@", 1)[-1]
            auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
            prefix = parts.path.rstrip("/")
            self._raw_head_template = (
                "POST "
                + prefix.replace("{", "{{").replace("}", "}}")
                + "{path} HTTP/1.1\r\nHost: "
                + host_header.replace("{", "{{").replace("}", "}}")
                + "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {length}\r\n"
                + auth.replace("{", "{{").replace("}", "}}")
                + "\r\n"
            )
        self._session: aiohttp.ClientSession | None = None

    def timestamping(self) -> dict[str, Any]:
        """How response times were taken (kernel receive stamps or user space), for a run's metadata."""
        if self._raw is not None:
            return {"transport": "raw", **self._raw.timestamping()}
        return {
            "transport": "aiohttp",
            "receive_clock": "user space",
            "kernel_stamped_read_fraction": None,
            "reads": None,
            "unstamped_reads": None,
        }

    def clone(self) -> "OpenAIClient":
        """A new, unopened client with the same settings (one per worker process: sockets and
        sessions belong to the event loop that opened them)."""
        return OpenAIClient(**self._settings, keep_alive=self.keep_alive)

    def absorb_reads(self, stamped: int, unstamped: int) -> None:
        """Count reads that clones made in worker processes, so timestamping() covers the whole run."""
        if self._raw is not None:
            self._raw.stamped_reads += stamped
            self._raw.unstamped_reads += unstamped

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIClient({self.base_url!r}, model={self.model!r})"

    async def __aenter__(self) -> "OpenAIClient":
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def open(self) -> None:
        if self._session is None:
            connector = safety_aiohttp.tcp_connector(
                self.allowed_hosts, limit=self._max_connections, ttl_dns_cache=300, force_close=not self.keep_alive
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers=self._headers, auto_decompress=False
            )

    async def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("OpenAIClient: call open() or use 'async with' before sending")
        return self._session

    async def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        async with self.session.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            response.raise_for_status()
            return await response.json(content_type=None)

    async def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 30.0) -> tuple[int, Any]:
        async with self.session.post(
            self.base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            try:
                data = await response.json(content_type=None)
            except ValueError:
                data = None
            return response.status, data

    async def send(self, spec: RequestSpec, record: RequestRecord | None = None) -> RequestRecord:
        """Send one request and record it. Never raises for engine/network failures: they are recorded.

        Pass `record` to keep a reference that survives cancellation (the partial data stays in it).
        """
        if record is None:
            record = RequestRecord()
        record.request_id, record.tag, record.streamed = spec.request_id, spec.tag, spec.stream
        path = "/v1/chat/completions" if spec.api == "chat" else "/v1/completions"
        data = json.dumps(spec.body(self.model)).encode()
        if self._raw is not None:
            return await self._send_raw(spec, record, path, data)
        session = self.session
        perf = time.perf_counter
        record.send_time = perf()
        try:
            attempt = 0
            while True:
                try:
                    response_cm = await session.post(self.base_url + path, data=data)
                    break
                except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                    # A kept-alive connection the server had already closed (llama.cpp's HTTP
                    # server does this routinely): no response came, so retrying is safe; the
                    # send time restarts. Pooled connections may all be stale: a few attempts.
                    attempt += 1
                    self.keep_alive = False
                    if attempt >= _STALE_CONNECTION_RETRIES:
                        raise
                    record.send_time = perf()
                    record.retries = attempt
            async with response_cm as response:
                record.http_status = response.status
                if response.status >= 400:
                    http_error(record, response.status, (await response.text(errors="replace"))[:500])
                    return record
                if not spec.stream:
                    payload = await response.read()
                    record.end_time = perf()
                    handle_complete_response(record, payload, spec.api, self.keep_text)
                    return record
                await self._read_stream(response, record, spec)
                if not self.keep_alive:
                    response.close()  # do not return a connection the server is about to close
        except asyncio.CancelledError:
            fail(record, "cancelled", "cancelled by the load controller")
            raise
        except asyncio.TimeoutError:
            fail(record, "timeout", "no data within the read timeout")
        except aiohttp.ClientConnectorError as exc:
            fail(record, "connect", str(exc))
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            ConnectionError,
        ) as exc:
            fail(record, "disconnect", f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientError as exc:
            fail(record, "client", f"{type(exc).__name__}: {exc}")
        return record

    async def _send_raw(self, spec: RequestSpec, record: RequestRecord, path: str, data: bytes) -> RequestRecord:
        """The same request over the lean protocol client (plain http): timestamps in data_received."""
        pool = self._raw
        assert pool is not None
        head = self._raw_head_template.format(path=path, length=len(data)).encode("latin-1")
        recorder = StreamRecorder(record, spec.api, self.keep_text, spec.abort_after_tokens) if spec.stream else None
        collected: list[bytes] = []
        perf = time.perf_counter

        def on_body(protocol: Any, now: float, chunk: bytes) -> None:
            if recorder is None or protocol.status >= 400:
                collected.append(chunk)
                return
            if record.aborted:
                return
            if recorder.feed(now, chunk):
                pool.abort(protocol)  # the engine sees the client disconnect

        sent = False

        def on_start() -> None:
            nonlocal sent
            sent = True
            record.send_time = perf()

        record.send_time = perf()  # a request that never connects is still timed, on the clock of the others
        try:
            status, _, _ = await pool.request(
                head,
                data,
                on_body,
                self.request_timeout_s,
                on_start=on_start,
                frames=recorder if recorder is not None and recorder.abort_after is None else None,
            )
        except asyncio.CancelledError:
            fail(record, "cancelled", "cancelled by the load controller")
            raise
        except asyncio.TimeoutError:
            fail(record, "timeout", "no data within the read timeout")
            return record
        except OSError as exc:
            if record.aborted:
                return record
            refused = isinstance(exc, (ConnectionRefusedError, socket.gaierror)) or not sent
            fail(record, "connect" if refused else "disconnect", f"{type(exc).__name__}: {exc}")
            return record
        except HTTPError as exc:
            fail(record, "client", f"malformed HTTP response: {exc}")
            return record
        record.http_status = status
        if record.aborted:
            return record
        if status >= 400:
            http_error(record, status, b"".join(collected).decode("utf-8", "replace")[:500])
            return record
        if recorder is None:
            record.end_time = perf()
            handle_complete_response(record, b"".join(collected), spec.api, self.keep_text)
            return record
        recorder.finish(recorder.last_arrival() or perf())
        return record

    async def _read_stream(self, response: aiohttp.ClientResponse, record: RequestRecord, spec: RequestSpec) -> None:
        recorder = StreamRecorder(record, spec.api, self.keep_text, spec.abort_after_tokens)
        perf = time.perf_counter
        content = response.content
        last_data = perf()
        while True:
            data = await content.readany()
            now = perf()
            if not data:
                break
            last_data = now
            if recorder.feed(now, data):
                response.close()  # drops the connection: the engine sees a client disconnect
                return
        recorder.finish(last_data)
