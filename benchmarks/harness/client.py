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
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

from benchmarks.harness import safety, safety_aiohttp
from benchmarks.harness.rawhttp import HTTPError, RawHTTPPool

Api = Literal["chat", "completions"]

# Engine out-of-memory messages (vLLM/torch, SGLang, TensorRT-LLM, llama.cpp, TGI).
_OOM_PATTERN = re.compile(
    r"out of memory|outofmemory|\bOOM\b|CUBLAS_STATUS_ALLOC_FAILED|failed to find free space in the KV cache"
    r"|KV cache is full|no free (?:kv|cache) blocks|not enough (?:kv|cache|memory)",
    re.IGNORECASE,
)

_STALE_CONNECTION_RETRIES = 4
# An event that carries any of these is never learnt as the plain-token template (StreamRecorder).
_NOT_PLAIN = (
    b'"usage":{',
    b'"usage": {',
    b'"error"',
    b'"finish_reason":"',
    b'"finish_reason": "',
    b'"reasoning_content":"',
    b'"reasoning_content": "',
    b'"reasoning":"',
    b'"reasoning": "',
)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")

ERROR_CLASSES = ("http", "timeout", "disconnect", "connect", "oom", "stream_error", "cancelled", "client")


class SSEParser:
    """Incremental Server-Sent-Events parser: feed raw bytes, get the `data` payloads of complete events.

    Handles LF, CRLF and CR line endings (also split across reads), comment lines, multi-line data
    fields and fields other than `data` (ignored). `flush()` returns an event left without its
    terminating blank line when the stream ends.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data if self._buffer else data
        if b"\r" in buffer:
            held = b""
            if buffer.endswith(b"\r"):  # may be the first half of a CRLF split across reads
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            blocks = buffer.split(b"\n\n")
            self._buffer = blocks.pop() + held
        else:
            blocks = buffer.split(b"\n\n")
            self._buffer = blocks.pop()
        payloads = []
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:  # the common case, inline for speed
                payloads.append(block[6:])
                continue
            payload = _event_data(block)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def take_complete(self, data: bytes) -> bytes:
        """Feed bytes; return the region of complete events (LF-normalised), keep the rest buffered."""
        if not self._buffer and data[-2:] == b"\n\n" and b"\r" not in data:  # whole events, the usual read
            return data
        buffer = self._buffer + data if self._buffer else data
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            self._buffer = buffer + held
            return b""
        self._buffer = buffer[cut + 2 :] + held
        return buffer[: cut + 2]

    @staticmethod
    def events_of(complete: bytes) -> list[bytes]:
        """The data payloads of a region returned by take_complete."""
        payloads = []
        for block in complete.split(b"\n\n")[:-1]:
            if block[:6] == b"data: " and b"\n" not in block:
                payloads.append(block[6:])
                continue
            payload = _event_data(block)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def flush(self) -> list[bytes]:
        rest, self._buffer = self._buffer, b""
        rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        payloads = []
        for block in rest.split(b"\n\n") if rest else ():
            payload = _event_data(block)
            if payload is not None:
                payloads.append(payload)
        return payloads


def _event_data(block: bytes) -> bytes | None:
    """The joined `data` field of one event block, or None when the block has no data field."""
    if block.startswith(b"data: ") and b"\n" not in block:  # the common case, fast
        return block[6:]
    parts = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None


def parse_sse(stream: bytes) -> list[bytes]:
    """All data payloads of a complete SSE byte stream (convenience for tests and tools)."""
    parser = SSEParser()
    return parser.feed(stream) + parser.flush()


@dataclass
class RequestSpec:
    """One request to send. `prompt` is a string or token ids (completions); `messages` for chat."""

    api: Api = "chat"
    prompt: str | list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int = 128
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    stream: bool = True
    include_usage: bool = True
    ignore_eos: bool | None = True  # None: not sent (engines that reject unknown fields)
    temperature: float | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    abort_after_tokens: int | None = None  # close the stream deliberately after this many tokens
    request_id: str = ""
    tag: str = ""  # free label (test phase, session id, ...)

    def body(self, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "stream": self.stream, self.max_tokens_field: self.max_tokens}
        if self.api == "chat":
            messages = self.messages
            if messages is None:
                if not isinstance(self.prompt, str):
                    raise ValueError("RequestSpec.messages: chat requests need messages or a string prompt")
                messages = [{"role": "user", "content": self.prompt}]
            body["messages"] = messages
        else:
            if self.prompt is None:
                raise ValueError("RequestSpec.prompt: completions requests need a prompt")
            body["prompt"] = self.prompt
        if self.stream and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos is not None:
            body["ignore_eos"] = self.ignore_eos
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.seed is not None:
            body["seed"] = self.seed
        body.update(self.extra_body)
        return body


@dataclass
class RequestRecord:
    """What happened to one request. Times are perf_counter seconds; latencies derived in ms."""

    request_id: str = ""
    tag: str = ""
    send_time: float = 0.0
    first_token_time: float | None = None
    end_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # each content chunk's arrival
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in that chunk
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    usage_reported: bool = False
    cached_tokens: int | None = None  # prompt tokens the engine took from its cache (see cached_source)
    # where cached_tokens came from: "usage" (usage.prompt_tokens_details.cached_tokens, vLLM, SGLang),
    # "timings" (llama.cpp's timings: cache_n, or the prompt's tokens less the prompt_n it processed)
    cached_source: str | None = None
    prompt_processed: int | None = None  # prompt tokens the engine computed (llama.cpp's timings.prompt_n)
    finish_reason: str | None = None
    text: str = ""
    error_class: str | None = None  # one of ERROR_CLASSES, None when ok
    error: str | None = None
    http_status: int | None = None
    aborted: bool = False  # closed deliberately mid-stream
    done_marker: bool = False  # saw data: [DONE]
    streamed: bool = True
    retries: int = 0  # re-sends after a stale kept-alive connection (nothing had reached the engine)

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def ttft_ms(self) -> float | None:
        if not self.streamed or self.first_token_time is None:
            return None
        return (self.first_token_time - self.send_time) * 1000.0

    @property
    def e2e_ms(self) -> float | None:
        return None if self.end_time is None else (self.end_time - self.send_time) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """(e2e - TTFT) / (output tokens - 1): excludes the first token."""
        ttft, e2e, tokens = self.ttft_ms, self.e2e_ms, self.output_tokens
        if ttft is None or e2e is None or tokens is None or tokens < 2:
            return None
        return (e2e - ttft) / (tokens - 1)

    def itl_ms(self) -> list[float]:
        """Gaps between consecutive tokens; a chunk of k tokens counts k gaps of dt/k."""
        times, counts = self.chunk_times, self.chunk_tokens
        gaps: list[float] = []
        for index in range(1, len(times)):
            k = counts[index] or 1
            gap = (times[index] - times[index - 1]) * 1000.0 / k
            if k == 1:
                gaps.append(gap)
            else:
                gaps.extend([gap] * k)
        return gaps


def classify_error_text(text: str) -> str:
    """`oom` when an engine's message says it ran out of (KV) memory, else `stream_error`."""
    return "oom" if _OOM_PATTERN.search(text or "") else "stream_error"


# What a JSON value of the wrong shape raises on the way through the chunk handlers.
_MALFORMED = (AttributeError, TypeError, ValueError, OverflowError, KeyError, IndexError, RecursionError)


def _handle_payload(record: RequestRecord, payload: bytes, now: float, api: Api, keep_text: bool) -> None:
    """Apply one SSE data payload to the record. A hostile or broken engine cannot raise out of here:
    a chunk that is not a completion chunk is ignored like keep-alive noise."""
    try:
        _apply_payload(record, payload, now, api, keep_text)
    except _MALFORMED:
        pass


def _apply_payload(record: RequestRecord, payload: bytes, now: float, api: Api, keep_text: bool) -> None:
    if payload == b"[DONE]":
        record.done_marker = True
        return
    try:
        obj = json.loads(payload)
    except ValueError:
        return  # keep-alive noise or a partial line from a broken server: ignore, timing stays
    if not isinstance(obj, dict):
        return
    if "error" in obj and obj["error"]:
        message = json.dumps(obj["error"]) if not isinstance(obj["error"], str) else obj["error"]
        record.error_class = classify_error_text(message)
        record.error = message[:500]
        return
    usage = obj.get("usage")
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        if api == "chat":
            delta = choice.get("delta") or {}
            content = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            content = choice.get("text")
        if content:
            tokens = 1
            if usage and usage.get("completion_tokens") is not None:  # continuous usage stats
                counted = sum(record.chunk_tokens)
                tokens = max(int(usage["completion_tokens"]) - counted, 1)
            if record.first_token_time is None:
                record.first_token_time = now
            record.chunk_times.append(now)
            record.chunk_tokens.append(tokens)
            if keep_text:
                record.text += content if isinstance(content, str) else str(content)
        reason = choice.get("finish_reason")
        if reason:
            record.finish_reason = reason
    if usage:
        if usage.get("prompt_tokens") is not None:
            record.prompt_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
            record.usage_reported = True
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            record.cached_tokens = int(details["cached_tokens"])
            record.cached_source = "usage"
    _apply_timings(record, obj.get("timings"))


def _apply_timings(record: RequestRecord, timings: Any) -> None:
    """llama.cpp's per-response `timings`: `prompt_n` is the prompt tokens it processed (the rest came
    from the slot's cache), `cache_n` (newer builds) the tokens it reused."""
    if not isinstance(timings, dict):
        return
    processed = timings.get("prompt_n")
    if isinstance(processed, int) and not isinstance(processed, bool) and processed >= 0:
        record.prompt_processed = processed
    reused = timings.get("cache_n")
    if isinstance(reused, int) and not isinstance(reused, bool) and reused >= 0 and record.cached_source != "usage":
        record.cached_tokens, record.cached_source = reused, "timings"


def _cached_from_timings(record: RequestRecord) -> None:
    """The cached prompt tokens from llama.cpp's timings when no usage field stated them: the prompt's
    tokens less those the engine processed (it always processes at least the last one)."""
    if record.cached_source is None and record.prompt_processed is not None and record.prompt_tokens is not None:
        record.cached_tokens = max(record.prompt_tokens - record.prompt_processed, 0)
        record.cached_source = "timings"


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
                    _http_error(record, response.status, (await response.text(errors="replace"))[:500])
                    return record
                if not spec.stream:
                    payload = await response.read()
                    record.end_time = perf()
                    _handle_complete_response(record, payload, spec.api, self.keep_text)
                    return record
                await self._read_stream(response, record, spec)
                if not self.keep_alive:
                    response.close()  # do not return a connection the server is about to close
        except asyncio.CancelledError:
            _fail(record, "cancelled", "cancelled by the load controller")
            raise
        except asyncio.TimeoutError:
            _fail(record, "timeout", "no data within the read timeout")
        except aiohttp.ClientConnectorError as exc:
            _fail(record, "connect", str(exc))
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            ConnectionError,
        ) as exc:
            _fail(record, "disconnect", f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientError as exc:
            _fail(record, "client", f"{type(exc).__name__}: {exc}")
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
            _fail(record, "cancelled", "cancelled by the load controller")
            raise
        except asyncio.TimeoutError:
            _fail(record, "timeout", "no data within the read timeout")
            return record
        except OSError as exc:
            if record.aborted:
                return record
            refused = isinstance(exc, (ConnectionRefusedError, socket.gaierror)) or not sent
            _fail(record, "connect" if refused else "disconnect", f"{type(exc).__name__}: {exc}")
            return record
        except HTTPError as exc:
            _fail(record, "client", f"malformed HTTP response: {exc}")
            return record
        record.http_status = status
        if record.aborted:
            return record
        if status >= 400:
            _http_error(record, status, b"".join(collected).decode("utf-8", "replace")[:500])
            return record
        if recorder is None:
            record.end_time = perf()
            _handle_complete_response(record, b"".join(collected), spec.api, self.keep_text)
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


class StreamRecorder:
    """Turns the bytes of one SSE response into a RequestRecord, read by read.

    Fast path: an engine writes a stream's token events from one template, the same bytes around a
    different content string (vLLM: `data: {"id":...,"delta":{"content":` + the string + `},
    "logprobs":null,"finish_reason":null,...}`). The first plain token event (a content string,
    no finish reason, usage, error or reasoning text) is parsed and its bytes before and after the
    string are kept; a later event that starts and ends with exactly those bytes and holds one
    JSON string between them is a token when that string is not empty, counted without a parse
    (a few C-level byte comparisons). Everything else — vLLM's and SGLang's opening role chunk, the
    finish, usage and `[DONE]`, an event whose template changed (SGLang and TGI stamp `created`
    per chunk, in seconds) — goes through the full parse, and a plain one teaches the new
    template. A string with an escaped quote is parsed too, so the template can never misread one.
    """

    __slots__ = (
        "record",
        "api",
        "keep_text",
        "abort_after",
        "parser",
        "key",
        "prefix",
        "suffix",
        "head",
        "tail",
        "last_data",
    )

    def __init__(self, record: RequestRecord, api: Api, keep_text: bool, abort_after: int | None) -> None:
        self.record, self.api, self.keep_text, self.abort_after = record, api, keep_text, abort_after
        self.parser = SSEParser()
        self.key = b'"content":' if api == "chat" else b'"text":'
        self.prefix: bytes | None = None  # the learnt template, None until a plain token event is seen
        self.suffix = b""
        self.head = self.tail = 0  # len(prefix), len(suffix) + 1
        self.last_data: float | None = None

    def take_frame(self, now: float, data: bytes) -> bool:
        """A read of the chunked body, before the HTTP parser: True when it was exactly one chunk
        holding one template token event, now counted. Anything else (False) goes through the
        parser and `feed`. The per-token path: the protocol calls it directly, not through `feed`,
        and only for streams that abort nothing (`abort_after` is checked in `feed`)."""
        if self.prefix is None or self.parser._buffer:
            return False
        line_end = data.find(b"\r\n", 0, 10)
        if line_end <= 0:
            return False
        try:
            size = int(data[:line_end], 16)
        except ValueError:
            return False
        start = line_end + 2
        end = start + size
        if len(data) != end + 2 or not data.endswith(b"\r\n") or not self._one_token(data, start, end):
            return False
        self.last_data = now
        record = self.record
        if record.first_token_time is None:
            record.first_token_time = now
        record.chunk_times.append(now)
        record.chunk_tokens.append(1)
        return True

    def frame_template(self) -> tuple[bytes, bytes, list[float], list[int]] | None:
        """What a compiled reader needs to do take_frame's work itself (rawhttp.FrameTaker): the
        template around the content string and the record's lists, while take_frame would take
        frames (a template learnt, no partial event waiting in the parser)."""
        if self.prefix is None or self.parser._buffer:
            return None
        return self.prefix, self.suffix, self.record.chunk_times, self.record.chunk_tokens

    def last_arrival(self) -> float | None:
        """The newest read's arrival: token events a compiled reader counted are only in chunk_times."""
        times = self.record.chunk_times
        if times and (self.last_data is None or times[-1] > self.last_data):
            return times[-1]
        return self.last_data

    def feed(self, now: float, data: bytes) -> bool:
        """Record one read; True when the stream should be closed now (deliberate abort)."""
        self.last_data = now
        record = self.record
        prefix = self.prefix
        if prefix is not None and not self.parser._buffer:
            # the usual read: one whole template token event (_one_token, inline: this runs per token)
            first, last = self.head, len(data) - self.tail
            if (
                last - first >= 2
                and data.startswith(prefix)
                and data.endswith(self.suffix)
                and data[first] == _QUOTE
                and data[last] == _QUOTE
                and data[last - 1] != _BACKSLASH
                and data.find(b'"', first + 1, last) < 0
            ):
                if record.first_token_time is None:
                    record.first_token_time = now
                record.chunk_times.append(now)
                record.chunk_tokens.append(1)
                if self.abort_after is not None:
                    return self._abort_due(now)
                return False
        complete = self.parser.take_complete(data)
        if not complete:
            return False
        if prefix is not None and self._one_token(complete, 0, len(complete)):
            if record.first_token_time is None:
                record.first_token_time = now
            record.chunk_times.append(now)
            record.chunk_tokens.append(1)
        else:
            self._feed_events(now, complete)
        if self.abort_after is not None:
            return self._abort_due(now)
        return False

    def _abort_due(self, now: float) -> bool:
        """A deliberate abort once `abort_after` tokens have arrived: True when the stream must close."""
        record = self.record
        if sum(record.chunk_tokens) < self.abort_after:  # type: ignore[operator]
            return False
        record.aborted = True
        record.end_time = now
        if not record.usage_reported:
            record.output_tokens = sum(record.chunk_tokens)
        return True

    def _one_token(self, data: bytes, start: int, end: int) -> bool:
        """Whether data[start:end] is one event of the template with a non-empty, plain string."""
        prefix, suffix = self.prefix, self.suffix
        first = start + len(prefix)  # type: ignore[arg-type]
        last = end - len(suffix) - 1  # the closing quote
        return (
            last - first >= 2
            and data.startswith(prefix, start)
            and data.endswith(suffix, start, end)  # type: ignore[arg-type]
            and data[first] == _QUOTE
            and data[last] == _QUOTE
            and data[last - 1] != _BACKSLASH
            and data.find(b'"', first + 1, last) < 0
        )

    def _feed_events(self, now: float, complete: bytes) -> None:
        """Each event in turn: template tokens counted, the others parsed (and perhaps learnt from)."""
        record, api, keep_text = self.record, self.api, self.keep_text
        prefix, suffix = self.prefix or b"", self.suffix
        fast = self.prefix is not None and not keep_text
        head, tail = len(prefix), len(suffix) + 1
        find, startswith, endswith = complete.find, complete.startswith, complete.endswith
        start, size, counted = 0, len(complete), 0
        while start < size:
            end = find(b"\n\n", start) + 2
            first, last = start + head, end - tail  # the string's opening and closing quotes, if it is one
            if (
                fast
                and last - first >= 2
                and startswith(prefix, start)
                and endswith(suffix, start, end)
                and complete[first] == _QUOTE
                and complete[last] == _QUOTE
                and complete[last - 1] != _BACKSLASH
                and find(b'"', first + 1, last) < 0
            ):
                counted += 1
            else:
                if counted:  # in order: a parsed event may count tokens from those before it
                    self._count(now, counted)
                    counted = 0
                payload = _event_data(complete[start : end - 2])
                if payload is not None:
                    tokens = len(record.chunk_tokens)
                    _handle_payload(record, payload, now, api, keep_text)
                    if (
                        not keep_text
                        and len(record.chunk_tokens) == tokens + 1
                        and record.error_class is None
                        and record.finish_reason is None
                        and self._learn(complete, start, end)
                    ):
                        prefix, suffix, fast = self.prefix or b"", self.suffix, True
                        head, tail = len(prefix), len(suffix) + 1
            start = end
        if counted:
            self._count(now, counted)

    def _count(self, now: float, tokens: int) -> None:
        record = self.record
        if record.first_token_time is None:
            record.first_token_time = now
        record.chunk_times.extend([now] * tokens)
        record.chunk_tokens.extend([1] * tokens)

    def _learn(self, data: bytes, start: int, end: int) -> bool:
        """Keep the bytes around the content string of a parsed plain token event as the template."""
        block = data[start:end]
        if b"\n" in block[:-2] or not block.startswith(b"data:") or any(marker in block for marker in _NOT_PLAIN):
            return False
        at = block.find(self.key + b'"')
        if at < 0 or block.find(self.key, at + 1) >= 0:
            return False
        first = at + len(self.key)
        last = first + 1
        while True:  # the string's closing quote: the first one not escaped
            last = block.find(b'"', last)
            if last < 0:
                return False
            backslashes = 0
            while block[last - 1 - backslashes] == _BACKSLASH:
                backslashes += 1
            if backslashes % 2 == 0:
                break
            last += 1
        self.prefix, self.suffix = block[:first], block[last + 1 :]
        self.head, self.tail = len(self.prefix), len(self.suffix) + 1
        return True

    def finish(self, end_time: float) -> None:
        """The stream ended (EOF) at `end_time`, the last byte's arrival."""
        record = self.record
        record.end_time = end_time
        for payload in self.parser.flush():
            _handle_payload(record, payload, end_time, self.api, self.keep_text)
        _finish(record)


def _fail(record: RequestRecord, error_class: str, message: str) -> None:
    """The request ended now in error: its class (one of ERROR_CLASSES) and at most 500 characters of why."""
    record.end_time = time.perf_counter()
    record.error_class, record.error = error_class, message[:500]


def _http_error(record: RequestRecord, status: int, text: str) -> None:
    """An HTTP error status: `oom` when the body says the engine ran out of (KV) memory, else `http`."""
    record.end_time = time.perf_counter()
    record.error = f"HTTP {status}: {text}"
    record.error_class = "oom" if _OOM_PATTERN.search(text) else "http"


def _handle_complete_response(record: RequestRecord, payload: bytes, api: Api, keep_text: bool) -> None:
    try:
        _apply_complete_response(record, payload, api, keep_text)
    except _MALFORMED:
        record.error_class, record.error = "stream_error", "response is not a completion object"


def _apply_complete_response(record: RequestRecord, payload: bytes, api: Api, keep_text: bool) -> None:
    try:
        obj = json.loads(payload)
    except ValueError:
        record.error_class, record.error = "stream_error", "response is not JSON"
        return
    if isinstance(obj, dict) and obj.get("error"):
        message = json.dumps(obj["error"])
        record.error_class, record.error = classify_error_text(message), message[:500]
        return
    choice = (obj.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") if api == "chat" else choice.get("text")
    if keep_text and text:
        record.text = text
    record.finish_reason = choice.get("finish_reason")
    usage = obj.get("usage") or {}
    if usage.get("prompt_tokens") is not None:
        record.prompt_tokens = int(usage["prompt_tokens"])
    if usage.get("completion_tokens") is not None:
        record.output_tokens = int(usage["completion_tokens"])
        record.usage_reported = True
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        record.cached_tokens, record.cached_source = int(details["cached_tokens"]), "usage"
    _apply_timings(record, obj.get("timings"))
    _cached_from_timings(record)


def _finish(record: RequestRecord) -> None:
    """Close the books on a stream that ended: token counts and the missing-end check."""
    counted = sum(record.chunk_tokens)
    if not record.usage_reported:
        record.output_tokens = counted  # no usage from the engine: the chunk count is all we have
    _cached_from_timings(record)
    if record.error_class is None and not (record.done_marker or record.finish_reason or record.usage_reported):
        record.error_class = "disconnect"
        record.error = "stream ended without finish_reason, usage or [DONE]"
