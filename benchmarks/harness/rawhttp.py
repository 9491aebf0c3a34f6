"""A lean HTTP/1.1 client on asyncio.Protocol for streamed responses over plain http.

Why: with aiohttp every network read goes through a StreamReader and a task wake-up before the
client can take its timestamp, which costs CPU per token and, on a busy event loop, skews TTFT and
ITL. Here the time is taken in `data_received` itself and the body is handed over in the same
call. It speaks only what the harness needs: one request at a time per connection, Content-Length
or chunked bodies, keep-alive with a small pool, and a read timeout. https targets use aiohttp.

On Linux the connections read with recvmsg and take the kernel's receive stamp of every read
(see wireclock): the time handed to `on_body` is when the bytes reached this host, so a busy
event loop no longer adds its lag to TTFT and ITL. Elsewhere, asyncio's own transport is used and
the time is taken in `data_received`. Where the compiled reader (framereader.c) is built, that
read and the check that it holds one token event of the stream's template are one C call: the
stream's other reads come back to this module exactly as the Python read would have returned them.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable, Protocol

from benchmarks.harness import safety, wireclock

try:  # the per-token read in C (Linux, built by pip install); else the same read in Python
    from benchmarks.harness import framereader
except ImportError:  # pragma: no cover - not built on this machine
    framereader = None

BodyCallback = Callable[["_ResponseProtocol", float, bytes], None]


class FrameTaker(Protocol):
    """The per-token path of a stream (client.StreamRecorder), offered each read of a successful
    chunked body before any parsing."""

    def take_frame(self, now: float, data: bytes) -> bool:
        """True when the read was one whole chunk the taker recognised and recorded."""

    def frame_template(self) -> tuple[bytes, bytes, list[float], list[int]] | None:
        """(bytes before a token event's content string, bytes after it, the lists each token's
        arrival and count go to) while every read of exactly one such event can be counted
        without the taker; None otherwise."""


def compiled_reader_available() -> bool:
    """Whether connections read through the compiled reader (framereader.c) on this machine."""
    return framereader is not None and wireclock.SUPPORTED


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
        self.frames: FrameTaker | None = None  # set once a successful chunked response's head is read
        self.offered_frames: FrameTaker | None = None

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
        self, request: bytes, on_body: BodyCallback, done: asyncio.Future, frames: FrameTaker | None = None
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
        if frames is not None and frames.take_frame(now, data):
            self.last_activity = now
            return
        self.received(now, data)

    def latest_activity(self) -> float:
        """When the last byte arrived: reads the compiled reader counted itself are known only to it."""
        reader = getattr(self.transport, "compiled", None)
        return self.last_activity if reader is None else max(self.last_activity, reader.last_arrival)

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
        except Exception as exc:  # any parse failure ends this request
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
        self._parse_chunks(now, data)

    def _parse_chunks(self, now: float, data: bytes) -> None:
        """The general chunked-body parser: chunks split across reads, chunk extensions, the last chunk
        and its trailer (the whole-chunks loop of `_consume_chunked` hands it what it cannot take)."""
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
        allowed_hosts: safety.Allowed = None,
    ) -> None:
        self.host, self.port = host, port
        self.allowed_hosts = allowed_hosts  # set: each connection goes to an address the outbound guard checked
        self.keep_alive = keep_alive
        self.connect_timeout_s = connect_timeout_s
        self.kernel_timestamps = kernel_timestamps and wireclock.SUPPORTED
        self.stamped_reads = 0  # reads timed by the kernel's receive stamp
        self.unstamped_reads = 0  # reads timed in user space (no stamp came with them)
        self.compiled = self.kernel_timestamps and compiled_reader_available()  # framereader.c, counting its own
        self.open_readers: set[Any] = set()  # compiled readers of open connections: counts join the totals at close
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
                    "unstamped_reads": None, "reader": "uvloop transport"}  # fmt: skip
        stamped, unstamped = self.stamped_reads, self.unstamped_reads
        for reader in self.open_readers:
            stamped, unstamped = stamped + reader.stamped_reads, unstamped + reader.unstamped_reads
        reads = stamped + unstamped
        return {
            "receive_clock": "kernel (SO_TIMESTAMPNS)",
            "kernel_stamped_read_fraction": round(stamped / reads, 4) if reads else None,
            "reads": reads,
            "unstamped_reads": unstamped,
            "reader": "compiled (framereader.c)" if self.compiled else "Python (recvmsg_into)",
        }

    async def _connection(self) -> tuple[_ResponseProtocol, bool]:
        while self._idle:
            protocol = self._idle.pop()
            if not protocol.closed and protocol.transport is not None and not protocol.transport.is_closing():
                return protocol, True
        loop = asyncio.get_running_loop()
        address = await safety.open_address(self.host, self.port, self.allowed_hosts)
        if self.kernel_timestamps:
            return await asyncio.wait_for(self._open_stamped(loop, address), self.connect_timeout_s), False
        _, protocol = await asyncio.wait_for(
            loop.create_connection(_ResponseProtocol, address, self.port), self.connect_timeout_s
        )
        return protocol, False  # type: ignore[return-value]

    async def _open_stamped(self, loop: asyncio.AbstractEventLoop, address: str) -> _ResponseProtocol:
        infos = await loop.getaddrinfo(address, self.port, type=socket.SOCK_STREAM)
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
        frames: FrameTaker | None = None,
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
    with the kernel's receive time, or the user-space time when no stamp came with it. With the
    compiled reader, a read of one token event of the stream's template is counted in C and never
    reaches Python; after every other read the reader is armed with the stream's current template
    (or disarmed), which is exactly when the template or the taker's state can change.
    """

    __slots__ = ("loop", "sock", "fd", "protocol", "pool", "pending", "closing", "read", "compiled", "armed")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: _ResponseProtocol, pool: RawHTTPPool
    ) -> None:
        self.loop, self.sock, self.fd, self.protocol, self.pool = loop, sock, sock.fileno(), protocol, pool
        self.pending = bytearray()
        self.closing = False
        self.armed: bytes | None = None  # the template prefix the compiled reader counts, if any
        protocol.connection_made(self)  # type: ignore[arg-type]
        if pool.compiled:
            self.compiled = framereader.Reader(self.fd)
            self.read = self.compiled.take
            pool.open_readers.add(self.compiled)
            loop.add_reader(self.fd, self._on_readable_compiled)
        else:
            self.compiled = None
            self.read = pool.reader.read
            loop.add_reader(self.fd, self._on_readable)

    def _on_readable_compiled(self) -> None:
        try:
            read = self.read()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if read is None:
            return  # one token event of the armed template, counted in C
        data, now, arrival = read
        if not data:
            self.protocol.eof_received()
            self._lose(None)
            return
        protocol = self.protocol
        protocol.received(now if arrival is None else arrival, data)
        frames = protocol.frames
        template = frames.frame_template() if frames is not None else None
        if template is None:
            if self.armed is not None:
                self.compiled.disarm()  # type: ignore[union-attr]
                self.armed = None
        elif template[0] is not self.armed:
            self.compiled.arm(*template)  # type: ignore[union-attr]
            self.armed = template[0]

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
        if frames is not None and frames.take_frame(arrival, data):
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
        if self.compiled is not None:
            self.compiled.disarm()
            self.pool.open_readers.discard(self.compiled)
            self.pool.stamped_reads += self.compiled.stamped_reads
            self.pool.unstamped_reads += self.compiled.unstamped_reads
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
        idle = time.perf_counter() - self.protocol.latest_activity()
        if idle >= self.timeout:
            self.done.set_exception(asyncio.TimeoutError())
        else:
            self.handle = self.loop.call_later(self.timeout - idle, self._check)

    def cancel(self) -> None:
        self.handle.cancel()
