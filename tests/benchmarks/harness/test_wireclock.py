"""Kernel receive stamps: the time of a read is when its bytes reached the host, not when the
client's event loop got round to them."""

import asyncio
import socket
import struct
import threading
import time

import pytest

from benchmarks.harness import wireclock
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.request_record import RequestSpec

from .conftest import run


def stamp(seconds_ago: float, now_wall: float) -> list[tuple[int, int, bytes]]:
    value = now_wall - seconds_ago
    return [(socket.SOL_SOCKET, wireclock.SO_TIMESTAMPNS, struct.pack("@ll", int(value), int((value % 1) * 1e9)))]


def test_arrival_is_the_read_time_minus_the_stamps_age():
    assert wireclock.arrival_time(stamp(0.25, 1000.0), now=50.0, wall_now=1000.0) == pytest.approx(49.75, abs=1e-6)


def test_missing_foreign_or_implausible_stamps_give_none():
    assert wireclock.arrival_time([], now=5.0, wall_now=10.0) is None
    assert wireclock.arrival_time([(socket.SOL_SOCKET, 99, b"\0" * 16)], now=5.0, wall_now=10.0) is None
    assert wireclock.arrival_time(stamp(-5.0, 1000.0), now=5.0, wall_now=1000.0) is None  # from the future
    assert wireclock.arrival_time(stamp(3600.0, 1000.0), now=5.0, wall_now=1000.0) is None  # a clock step


class OneShotServer(threading.Thread):
    """Answers one request: headers and a first token 50 ms after it arrived, the rest 0.4 s later."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = threading.Event()
        self.first_sent = 0.0
        self.body_bytes = 0

    def run(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(
                [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0]
            )
            while len(body) < length:
                body += conn.recv(1 << 20)
            self.body_bytes = len(body)
            self.received.set()
            time.sleep(0.05)
            token = b'data: {"choices":[{"index":0,"delta":{"content":"a "},"finish_reason":null}]}\n\n'
            self.first_sent = time.perf_counter()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n%s\r\n" % (len(token), token)
            )
            time.sleep(0.4)
            tail = (
                b'data: {"choices":[{"index":0,"delta":{"content":"b "},"finish_reason":"length"}],'
                b'"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
            )
            conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))


def send_while_the_loop_is_blocked(prompt: str, **client_kwargs):
    """Send one request; block the client's event loop from its arrival at the server for 0.3 s
    (the first token arrives 50 ms into that)."""
    server = OneShotServer()
    server.start()

    async def go():
        async with OpenAIClient(f"http://127.0.0.1:{server.port}", "m", transport="raw", **client_kwargs) as client:
            task = asyncio.ensure_future(client.send(RequestSpec(prompt=prompt, max_tokens=2)))
            while not server.received.is_set():
                await asyncio.sleep(0.001)
            time.sleep(0.3)  # a busy loop: the bytes sit in the socket buffer meanwhile
            record = await task
            return record, client.timestamping()

    record, timestamping = run(go())
    server.join(5)
    return record, server, timestamping


@pytest.mark.skipif(not wireclock.SUPPORTED, reason="kernel receive stamps are Linux-only")
def test_first_token_time_is_the_kernel_arrival_even_when_the_loop_was_busy():
    record, server, timestamping = send_while_the_loop_is_blocked("hello")
    assert record.ok and record.output_tokens == 2
    assert abs(record.first_token_time - server.first_sent) < 0.02  # not 0.3 s late
    assert timestamping["receive_clock"].startswith("kernel")


def test_without_kernel_stamps_the_busy_loop_shows_in_the_first_token_time():
    """The same scenario on the user-space clock: the lag is there (what the stamps remove)."""
    record, server, timestamping = send_while_the_loop_is_blocked("hello", kernel_timestamps=False)
    assert record.ok and record.first_token_time - server.first_sent > 0.2  # the loop's 0.25 s lag
    assert timestamping["receive_clock"] == "user space"


def test_a_request_larger_than_the_socket_buffer_is_sent_whole():
    prompt = "word " * 1_500_000  # 7.5 MB: the stamped transport's partial writes must resume
    record, server, _ = send_while_the_loop_is_blocked(prompt)
    assert record.ok and server.body_bytes > 7_000_000
