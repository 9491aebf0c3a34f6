"""A lean HTTP/1.1 client on asyncio.Protocol for streamed responses over plain http.

Why: with aiohttp every network read goes through a StreamReader and a task wake-up before the
client can take its timestamp, which costs CPU per token and, on a busy event loop, skews TTFT and
ITL. Here the time is taken in `data_received` itself and the body is handed over in the same
call. It speaks only what the harness needs: one request at a time per connection, Content-Length
or chunked bodies, keep-alive with a small pool, and a read timeout. https targets use aiohttp.

On Linux the connections read with recvmsg and take the kernel's receive stamp of every read
(see wireclock): the time handed to `on_body` is when the bytes reached this host, so a busy
event loop no longer adds its lag to TTFT and ITL. Elsewhere, asyncio's own transport is used and
the time is taken in `data_received`.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable

from benchmarks.harness import wireclock

BodyCallback = Callable[["_ResponseProtocol", float, bytes], None]
# A read of a chunked body handed over whole, before any parsing: True when the callee consumed it
# (one whole chunk it recognised), False to parse it here. The per-token path of a stream.
FrameCallback = Callable[[float, bytes], bool]


class HTTPError(Exception):
    """Protocol-level failure (malformed response); the message says what was wrong."""


class StaleConnection(ConnectionError):
    """The server closed a kept-alive connection before answering: nothing reached it."""


class _ResponseProtocol(asyncio.Protocol):
    __slots__ = (
        "transport",
        "buffer",
        "state",
        "status",
        "headers",
        "on_body",
        "done",
        "remaining",
        "chunked",
        "keep_alive",
        "last_activity",
        "closed",
        "got_bytes",
        "header_time",
        "frames",
        "offered_frames",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.buffer = b""
        self.state = "idle"
        self.status = 0
        self.headers: dict[str, str] = {}
        self.on_body: BodyCallback | None = None
        self.done: asyncio.Future | None = None
        self.remaining = 0
        self.chunked = False
        self.keep_alive = True
        self.got_bytes = False
        self.last_activity = 0.0
        self.header_time = 0.0
        self.frames: FrameCallback | None = None  # set once a successful chunked response's head is read
        self.offered_frames: FrameCallback | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        done = self.done
        if done is not None and not done.done():
            if self.state == "body" and not self.chunked and self.remaining < 0:  # read-until-close body
                done.set_result(None)
            elif not self.got_bytes:
                done.set_exception(StaleConnection("connection closed before any response"))
            else:
                done.set_exception(ConnectionResetError("connection closed mid-response"))

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost settles the request

    def start(
        self, request: bytes, on_body: BodyCallback, done: asyncio.Future, frames: FrameCallback | None = None
    ) -> None:
        self.state = "head"
        self.on_body = on_body
        self.done = done
        self.offered_frames = frames
        self.last_activity = time.perf_counter()
        self.transport.write(request)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        frames = self.frames
        if frames is not None and frames(now, data):
            self.last_activity = now
            return
        self.received(now, data)

    def received(self, now: float, data: bytes) -> None:
        """Bytes that arrived at `now` (perf_counter seconds)."""
        self.last_activity = now
        self.got_bytes = True
        try:
            if self.remaining == -1 and not self.buffer and self.chunked and self.state == "body":
                # the usual read of a stream: exactly one whole chunk (an engine writes an event per chunk)
                line_end = data.find(b"\r\n", 0, 10)
                if line_end > 0:
                    try:
                        end = line_end + 2 + int(data[:line_end], 16)
                    except ValueError:
                        end = -1
                    if end > line_end + 2 and len(data) == end + 2 and data.endswith(b"\r\n"):
                        self.on_body(self, now, data[line_end + 2 : end])  # type: ignore[misc]
                        return
            self._consume(now, data)
        except Exception as exc:  # noqa: BLE001 - any parse failure ends this request
            if self.done is not None and not self.done.done():
                self.done.set_exception(exc if isinstance(exc, HTTPError) else HTTPError(str(exc)))
            self.keep_alive = False
            if self.transport is not None:
                self.transport.close()

    def _consume(self, now: float, data: bytes) -> None:
        if self.state == "head":
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65536:
                    raise HTTPError("response headers larger than 64 KiB")
                return
            head, data = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
            self.buffer = b""
            lines = head.split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
                raise HTTPError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            self.status = int(parts[1])
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.headers = headers
            self.header_time = now
            self.keep_alive = parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.chunked = True
                self.remaining = -1
                self.state = "body"
                if self.status < 400:
                    self.frames = self.offered_frames
            elif "content-length" in headers:
                self.remaining = int(headers["content-length"])
                self.state = "body"
                if self.remaining == 0:
                    self._finish()
                    return
            else:
                self.remaining = -1  # until the connection closes
                self.keep_alive = False
                self.state = "body"
            if not data:
                return
        if self.state != "body":
            return
        if not self.chunked:
            if self.remaining >= 0:
                data = data[: self.remaining]
                self.remaining -= len(data)
            if data:
                self.on_body(self, now, data)  # type: ignore[misc]
            if self.remaining == 0:
                self._finish()
            return
        self._consume_chunked(now, data)

    def _consume_chunked(self, now: float, data: bytes) -> None:
        if not self.buffer and self.remaining == -1:
            # Whole chunks (a busy client reads several events at once; `received` takes a single
            # one). A tight loop over them; anything else goes to the general parser below.
            size = len(data)
            position = 0
            pieces = []
            while position < size:
                line_end = data.find(b"\r\n", position, position + 10)
                if line_end < 0:
                    break
                try:
                    length = int(data[position:line_end], 16)
                except ValueError:
                    break
                start = line_end + 2
                end = start + length
                if length <= 0 or end + 2 > size or data[end : end + 2] != b"\r\n":
                    break
                pieces.append(data[start:end])
                position = end + 2
            if position == size:
                self.on_body(self, now, pieces[0] if len(pieces) == 1 else b"".join(pieces))  # type: ignore[misc]
                return
            if pieces:  # whole chunks, then the rest (a partial chunk, the last-chunk marker) below
                self.on_body(self, now, b"".join(pieces))  # type: ignore[misc]
                data = data[position:]
        buffer = self.buffer + data if self.buffer else data
        out = []
        position = 0
        size = len(buffer)
        while True:
            if self.remaining > 0:  # inside a chunk's data
                take = min(self.remaining, size - position)
                if take <= 0:
                    break
                out.append(buffer[position : position + take])
                position += take
                self.remaining -= take
                if self.remaining == 0:
                    self.remaining = -2  # expect the CRLF after the chunk data
                continue
            if self.remaining == -2:
                if size - position < 2:
                    break
                position += 2
                self.remaining = -1
                continue
            line_start = position
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                break
            chunk_size = int(buffer[position:line_end].split(b";", 1)[0].strip(), 16)
            position = line_end + 2
            if chunk_size == 0:
                trailer_end = buffer.find(b"\r\n", position)
                if trailer_end < 0:
                    position = line_start  # wait for the final CRLF
                    break
                self.buffer = b""
                if out:
                    self.on_body(self, now, b"".join(out))  # type: ignore[misc]
                self._finish()
                return
            self.remaining = chunk_size
        self.buffer = buffer[position:]
        if out:
            self.on_body(self, now, out[0] if len(out) == 1 else b"".join(out))  # type: ignore[misc]

    def _finish(self) -> None:
        done = self.done
        self.state = "idle"
        self.frames = None
        if done is not None and not done.done():
            done.set_result(None)


class RawHTTPPool:
    """A pool of kept-alive connections to one host:port (plain http only)."""

    def __init__(
        self,
        host: str,
        port: int,
        keep_alive: bool = True,
        connect_timeout_s: float = 10.0,
        kernel_timestamps: bool = True,
    ) -> None:
        self.host, self.port = host, port
        self.keep_alive = keep_alive
        self.connect_timeout_s = connect_timeout_s
        self.kernel_timestamps = kernel_timestamps and wireclock.SUPPORTED
        self.stamped_reads = 0  # reads timed by the kernel's receive stamp
        self.unstamped_reads = 0  # reads timed in user space (no stamp came with them)
        self._idle: list[_ResponseProtocol] = []
        # Linux switches packet stamping on lazily (deferred work) when the first socket asks, and
        # off when the last one closes: a socket held for the pool's life switches it on before
        # the first connection, so its first reads are stamped too.
        self._stamping_switch: socket.socket | None = None
        if self.kernel_timestamps:
            self._stamping_switch = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            wireclock.enable_receive_timestamps(self._stamping_switch)
        self.reader = wireclock.StampedReader()  # one read buffer for all the pool's connections

    def timestamping(self) -> dict[str, Any]:
        """Where this pool's receive times came from, for the run's metadata."""
        if not self.kernel_timestamps:  # reads are not counted on this clock (a counter per token costs)
            return {"receive_clock": "user space", "kernel_stamped_read_fraction": None, "reads": None,
                    "unstamped_reads": None}  # fmt: skip
        reads = self.stamped_reads + self.unstamped_reads
        return {
            "receive_clock": "kernel (SO_TIMESTAMPNS)",
            "kernel_stamped_read_fraction": round(self.stamped_reads / reads, 4) if reads else None,
            "reads": reads,
            "unstamped_reads": self.unstamped_reads,
        }

    async def _connection(self) -> tuple[_ResponseProtocol, bool]:
        while self._idle:
            protocol = self._idle.pop()
            if not protocol.closed and protocol.transport is not None and not protocol.transport.is_closing():
                return protocol, True
        loop = asyncio.get_running_loop()
        if self.kernel_timestamps:
            return await asyncio.wait_for(self._open_stamped(loop), self.connect_timeout_s), False
        _, protocol = await asyncio.wait_for(
            loop.create_connection(_ResponseProtocol, self.host, self.port), self.connect_timeout_s
        )
        return protocol, False  # type: ignore[return-value]

    async def _open_stamped(self, loop: asyncio.AbstractEventLoop) -> _ResponseProtocol:
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        error: OSError = OSError(f"no address for {self.host}:{self.port}")
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                wireclock.enable_receive_timestamps(sock)
                await loop.sock_connect(sock, address)
            except BaseException as exc:
                sock.close()
                if not isinstance(exc, OSError):
                    raise
                error = exc
                continue
            protocol = _ResponseProtocol()
            _StampedTransport(loop, sock, protocol, self)
            return protocol
        raise error

    async def request(
        self,
        head: bytes,
        body: bytes,
        on_body: BodyCallback,
        timeout_s: float,
        on_start: Callable[[], None] | None = None,
        frames: FrameCallback | None = None,
    ) -> tuple[int, dict[str, str], _ResponseProtocol]:
        """Send one request; body bytes go to `on_body(time, bytes)` as they arrive (each read of a
        successful chunked body offered whole to `frames` first). Returns at the end."""
        for attempt in range(4):
            protocol, reused = await self._connection()
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            protocol._reset()
            if on_start is not None:
                on_start()
            protocol.start(head + body, on_body, done, frames)
            watchdog = _Watchdog(loop, protocol, done, timeout_s)
            try:
                await done
            except StaleConnection:
                watchdog.cancel()
                protocol.transport.close()  # type: ignore[union-attr]
                if reused and attempt < 3:
                    self.keep_alive = self.keep_alive and attempt == 0
                    continue
                raise
            except BaseException:
                watchdog.cancel()
                protocol.transport.close()  # type: ignore[union-attr]
                raise
            watchdog.cancel()
            if self.keep_alive and protocol.keep_alive and not protocol.closed:
                self._idle.append(protocol)
            else:
                protocol.transport.close()  # type: ignore[union-attr]
            return protocol.status, protocol.headers, protocol
        raise StaleConnection("no usable connection")

    def abort(self, protocol: _ResponseProtocol) -> None:
        if protocol.transport is not None:
            protocol.transport.close()

    def close(self) -> None:
        for protocol in self._idle:
            if protocol.transport is not None:
                protocol.transport.close()
        self._idle.clear()
        if self._stamping_switch is not None:
            self._stamping_switch.close()
            self._stamping_switch = None


class _StampedTransport:
    """Just enough of an asyncio transport over a non-blocking socket, reading with recvmsg.

    One read per readiness event (as asyncio's transports do); each read goes to the protocol
    with the kernel's receive time, or the user-space time when no stamp came with it.
    """

    __slots__ = ("loop", "sock", "fd", "protocol", "pool", "pending", "closing", "read")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: _ResponseProtocol, pool: RawHTTPPool
    ) -> None:
        self.loop, self.sock, self.fd, self.protocol, self.pool = loop, sock, sock.fileno(), protocol, pool
        self.read = pool.reader.read
        self.pending = bytearray()
        self.closing = False
        protocol.connection_made(self)  # type: ignore[arg-type]
        loop.add_reader(self.fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data, now, arrival = self.read(self.sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not data:
            self.protocol.eof_received()
            self._lose(None)
            return
        if arrival is None:
            self.pool.unstamped_reads += 1
            arrival = now
        else:
            self.pool.stamped_reads += 1
        protocol = self.protocol
        frames = protocol.frames
        if frames is not None and frames(arrival, data):
            protocol.last_activity = arrival
            return
        protocol.received(arrival, data)

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if not self.pending:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lose(exc)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self.loop.add_writer(self.fd, self._on_writable)
        self.pending += data

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self.pending[:sent]
        if not self.pending:
            self.loop.remove_writer(self.fd)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self._lose(None)

    def _lose(self, exc: Exception | None) -> None:
        if self.closing:
            return
        self.closing = True
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.sock.close()
        self.loop.call_soon(self.protocol.connection_lost, exc)


class _Watchdog:
    """Fails a request when no byte arrived for `timeout_s` (one timer, re-armed lazily)."""

    __slots__ = ("loop", "protocol", "done", "timeout", "handle")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, protocol: _ResponseProtocol, done: asyncio.Future, timeout: float
    ) -> None:
        self.loop, self.protocol, self.done, self.timeout = loop, protocol, done, timeout
        self.handle = loop.call_later(timeout, self._check)

    def _check(self) -> None:
        if self.done.done():
            return
        idle = time.perf_counter() - self.protocol.last_activity
        if idle >= self.timeout:
            self.done.set_exception(asyncio.TimeoutError())
        else:
            self.handle = self.loop.call_later(self.timeout - idle, self._check)

    def cancel(self) -> None:
        self.handle.cancel()
