"""The compiled per-token read (benchmarks/harness/framereader.c) against the Python read path."""

import asyncio
import socket
import sys
import time

import pytest
from hypothesis import given, settings

from benchmarks.harness import rawhttp, wireclock
from benchmarks.harness.request_record import RequestRecord
from benchmarks.harness.stream_recorder import StreamRecorder
from tests.benchmarks.harness.test_sse import CHUNKED_STREAM_CASES, chunked_reads, sse_event

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="recvmsg stamps are Linux-only")


def test_the_compiled_reader_is_built_and_used_on_linux():
    # pip install builds it (optional in pyproject.toml); a CI without it would silently measure
    # the Python path, so its absence fails here
    assert rawhttp.compiled_reader_available()
    pool = rawhttp.RawHTTPPool("127.0.0.1", 1)
    try:
        assert pool.compiled and pool.timestamping()["reader"] == "compiled (framereader.c)"
    finally:
        pool.close()
    assert not rawhttp.RawHTTPPool("127.0.0.1", 1, kernel_timestamps=False).compiled


class _Loop:
    """The event loop's part in a transport's life, run by hand: the test calls the read callback."""

    def add_reader(self, fd, callback):
        pass

    def remove_reader(self, fd):
        pass

    def remove_writer(self, fd):
        pass

    def call_soon(self, callback, *args):
        callback(*args)


def _python_record(reads, api):
    """The reads through the Python path (take_frame, then the HTTP parser), read k at time k."""
    from unittest import mock

    record = RequestRecord()
    recorder = StreamRecorder(record, api, False, None)
    protocol = rawhttp._ResponseProtocol()
    protocol.transport = _Loop()  # write and close: nothing to do
    protocol.transport.write = protocol.transport.close = lambda *args: None
    loop = asyncio.new_event_loop()
    done = loop.create_future()
    moment = [0.0]
    with mock.patch.object(rawhttp.time, "perf_counter", lambda: moment[0]):
        protocol.start(b"", lambda _p, now, chunk: recorder.feed(now, chunk), done, recorder)
        for index, read in enumerate(reads):
            moment[0] = float(index)
            protocol.data_received(read)
    recorder.finish(recorder.last_arrival())
    assert done.done() and done.exception() is None
    loop.close()
    return record


def _compiled_record(reads, api):
    """The same reads through a real socket and the compiled reader; each read's time window."""
    record = RequestRecord()
    recorder = StreamRecorder(record, api, False, None)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    pool = rawhttp.RawHTTPPool("127.0.0.1", 1)
    protocol = rawhttp._ResponseProtocol()
    transport = rawhttp._StampedTransport(_Loop(), ours, protocol, pool)
    loop = asyncio.new_event_loop()
    done = loop.create_future()
    protocol.start(b"", lambda _p, now, chunk: recorder.feed(now, chunk), done, recorder)
    windows = []
    for read in reads:
        theirs.sendall(read)
        before = time.perf_counter()
        transport._on_readable_compiled()
        windows.append((before, time.perf_counter()))
    recorder.finish(recorder.last_arrival())
    assert done.done() and done.exception() is None
    taken = transport.compiled.frames_taken
    transport.close()
    theirs.close()
    loop.close()
    return record, windows, taken, pool


def _within(moment, windows, index):
    start, end = windows[int(index)]
    return start <= moment <= end


@settings(max_examples=150, deadline=None)
@given(*CHUNKED_STREAM_CASES)
def test_compiled_reads_record_what_the_python_path_records(kinds, api, compact, cuts, merge):
    """Token for token the same record; each time the arrival of the read the Python path gives it."""
    events = [sse_event(kind, api, compact) for kind in kinds] + [sse_event("done", api, compact)]
    reads = chunked_reads(events, cuts, merge)
    python = _python_record(reads, api)
    compiled, windows, taken, pool = _compiled_record(reads, api)
    assert compiled.chunk_tokens == python.chunk_tokens
    assert len(compiled.chunk_times) == len(python.chunk_times)
    assert all(_within(t, windows, k) for t, k in zip(compiled.chunk_times, python.chunk_times, strict=True))
    for name in ("first_token_time", "end_time"):
        theirs, mine = getattr(python, name), getattr(compiled, name)
        assert (theirs is None) == (mine is None)
        assert mine is None or _within(mine, windows, theirs)
    assert (compiled.output_tokens, compiled.finish_reason, compiled.done_marker, compiled.error_class) == (
        python.output_tokens,
        python.finish_reason,
        python.done_marker,
        python.error_class,
    )
    assert pool.timestamping()["reads"] == len(reads)  # every read counted once, in C or not
    if compact and not merge and not cuts and kinds.count("token") > 1 and "finish" not in kinds:
        # one chunk per read, as engines write them: after the first plain token (learnt from),
        # every other one is counted in C without reaching Python
        assert taken >= kinds.count("token") - 1


def test_a_read_of_two_events_or_an_escaped_quote_goes_back_to_python():
    event = sse_event("token", "chat", True)
    frame = b"%x\r\n%s\r\n" % (len(event), event)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    reader = rawhttp.framereader.Reader(ours.fileno())
    prefix, suffix = event.split(b'"tok ')[0], event.split(b'"tok ')[1][1:]
    times, tokens = [], []
    reader.arm(prefix, suffix, times, tokens)
    theirs.sendall(frame)
    assert reader.take() is None and tokens == [1] and times[0] == reader.last_arrival
    for other in (
        frame + frame,  # two events in one read: the Python parser splits them
        frame.replace(b'"tok "', b'"t\\"k"'),  # a quote inside the string
        frame.replace(b'"tok "', b'""'),  # empty content (vLLM's role chunk shape)
        b"%X\r\n%s\r\n" % (len(event), event[:-1] + b"!"),  # not this template's tail
        b"%x;ext=1\r\n%s\r\n" % (len(event), event),  # a chunk extension
    ):
        theirs.sendall(other)
        data, now, arrival = reader.take()
        assert data == other and arrival is None and now <= time.perf_counter()  # a socketpair has no stamps
    assert tokens == [1] and reader.frames_taken == 1 and reader.unstamped_reads == 6
    reader.disarm()
    theirs.sendall(frame)
    assert reader.take()[0] == frame  # disarmed: every read back to Python
    with pytest.raises(BlockingIOError):
        reader.take()
    theirs.close()
    assert reader.take()[0] == b""  # end of stream
    ours.close()


def test_tcp_reads_carry_the_kernel_stamp_of_their_arrival():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    wireclock.enable_receive_timestamps(client)
    peer, _ = server.accept()
    client.setblocking(False)
    reader = rawhttp.framereader.Reader(client.fileno())
    peer.sendall(b"warm-up")  # stamping switches on lazily; the first packets may come unstamped
    time.sleep(0.05)
    reader.take()
    peer.sendall(b"x" * 100)
    sent = time.perf_counter()
    time.sleep(0.05)  # the bytes wait in the socket buffer: the read is late, the stamp is not
    data, now, arrival = reader.take()
    assert data == b"x" * 100
    assert arrival is not None and sent - 0.005 <= arrival <= sent + 0.02 and now - arrival >= 0.04
    assert reader.stamped_reads >= 1
    for sock in (client, peer, server):
        sock.close()
