"""A streaming mock engine timed on the wire: the reference clock of the TTFT fidelity benchmark.

Why: the general mock (`benchmarks/simulator/mock_server.py`) times a request from its handler's
start. On a loaded aiohttp loop that is milliseconds after the request arrived (the handlers of a
burst of requests run one after another), and that lag would be charged to the client under test.
This one reads with recvmsg and takes the kernel's receive stamp of a request's first bytes as its
arrival, sends the first token at arrival + TTFT and each next one ITL later (call_at on the plain
asyncio loop: microsecond timers, where uvloop's are milliseconds), and notes the time just before
each send(). Its true TTFT is therefore bytes-in to bytes-out on this host, whatever its own loop
did in between, and a client's error is what the client adds on both legs.

It speaks only what the benchmark needs: POST /v1/chat/completions (or /v1/completions) with a
Content-Length body and `stream: true`, chunked SSE in a real engine's exact shape (vLLM's by
default), keep-alive; GET /health and
GET /mock/true_times ({request id: [arrival, first token sent, last byte sent]}, perf_counter
seconds; a request without `kvselect_request_id`, as a peer client sends it, is numbered `anon-N`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import wireclock
from benchmarks.simulator.engine_streams import EngineStream, Shape


@dataclass(frozen=True)
class WireMockConfig:
    ttft_s: float = 0.050
    itl_s: float = 0.010
    shape: Shape = "vllm"  # whose stream to write (role chunk first, one event per token, usage, [DONE])


class _Connection:
    def __init__(self, server: "WireMockServer", sock: socket.socket) -> None:
        self.server, self.sock, self.fd = server, sock, sock.fileno()
        self.buffer = b""
        self.arrival: float | None = None  # of the request being read
        self.busy = False  # a response is streaming
        self.closed = False
        server.loop.add_reader(self.fd, self.on_readable)  # type: ignore[union-attr]

    def on_readable(self) -> None:
        try:
            data, now, stamp = self.server.reader.read(self.sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()
            return
        if not self.buffer:
            if stamp is None:
                self.server.unstamped += 1
            self.arrival = now if stamp is None else stamp
        self.buffer += data
        self.try_request()

    def try_request(self) -> None:
        if self.busy:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].decode("latin-1").split("\r\n")
        method, path = (head[0].split(" ") + ["", ""])[:2]
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return
        body, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
        arrival = self.arrival or time.perf_counter()
        self.arrival = time.perf_counter() if self.buffer else None
        if method == "GET":
            payload = {"status": "ok"} if path == "/health" else self.server.true_times
            self.send_simple(json.dumps(payload).encode())
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            self.stream(json.loads(body), arrival, chat=path.endswith("chat/completions"))
        else:
            self.send_simple(b'{"error": "not found"}', status="404 Not Found")

    def send_simple(self, payload: bytes, status: str = "200 OK") -> None:
        self.send(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), len(payload), payload)
        )
        self.try_request()

    def stream(self, body: dict[str, Any], arrival: float, chat: bool) -> None:
        self.busy = True
        config, loop = self.server.config, self.server.loop
        assert loop is not None
        tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        rid = body.get("kvselect_request_id")
        if rid is None:
            self.server.anonymous += 1
            rid = f"anon-{self.server.anonymous}"
        rid = str(rid)
        events = EngineStream(config.shape, chat, "wire-" + rid, str(body.get("model")), int(time.time()))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        # loop.time() is time.monotonic(): the same clock as perf_counter on Linux
        offset = loop.time() - time.perf_counter()

        def token(index: int) -> None:
            if self.closed:
                return
            last = index == tokens - 1
            event = events.token(f"w{index} ", "length" if last else None)
            if index == 0:
                self.server.true_times[rid] = [arrival, time.perf_counter()]
                opening = events.opening()  # vLLM writes its role chunk just before the first token
                if opening:
                    self.send(b"%x\r\n%s\r\n" % (len(opening), opening))
            self.send(b"%x\r\n%s\r\n" % (len(event), event))
            if not last:
                loop.call_at(offset + arrival + config.ttft_s + config.itl_s * (index + 1), token, index + 1)
                return
            if include_usage:
                usage = events.usage(1, tokens)
                self.send(b"%x\r\n%s\r\n" % (len(usage), usage))
            done = events.done()
            self.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            self.server.true_times[rid].append(time.perf_counter())
            self.busy = False
            self.try_request()

        loop.call_at(offset + arrival + config.ttft_s, token, 0)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)  # small writes on loopback: the socket buffer always has room
        except OSError:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.server.loop.remove_reader(self.fd)  # type: ignore[union-attr]
            self.sock.close()


class WireMockServer:
    def __init__(self, config: WireMockConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self.true_times: dict[str, list[float]] = {}
        self.unstamped = 0  # requests whose arrival had no kernel stamp
        self.anonymous = 0  # requests without a kvselect_request_id
        self.reader = wireclock.StampedReader()
        self.listener = socket.create_server((host, port), backlog=4096)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connections: list[_Connection] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve on `loop` (a plain asyncio loop: uvloop's timers have millisecond resolution)."""
        self.loop = loop
        loop.add_reader(self.listener.fileno(), self.on_accept)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.remove_reader(self.listener.fileno())
        for connection in self.connections:
            connection.close()
        self.listener.close()

    def on_accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            wireclock.enable_receive_timestamps(sock)
            self.connections = [c for c in self.connections if not c.closed]
            self.connections.append(_Connection(self, sock))


def serve_forever(config: WireMockConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Blocking entry point for the mock's own process."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    WireMockServer(config, host, port).start(loop)
    loop.run_forever()
