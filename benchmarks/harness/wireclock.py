"""Kernel receive timestamps: when a response's bytes reached this host, not when Python saw them.

Why: a load client takes its TTFT/ITL timestamps when its event loop gets round to a read. On a
busy loop (hundreds of streams, a shared core) that is milliseconds after the bytes arrived, and
every established client reports that lag as engine latency. Linux stamps each received packet
(SO_TIMESTAMPNS); `recvmsg` hands the stamp over with the data, so the client can use the time
the bytes arrived whatever its loop was doing. For TCP the stamp is that of the newest segment
in the read, so it is never earlier than the true arrival of any byte in it.

The stamp is CLOCK_REALTIME; the harness's clock is perf_counter (CLOCK_MONOTONIC). The stamp is
converted by its age at the moment of the read (`time.time() - stamp`), which is immune to the
offset between the clocks and to NTP slewing over the few milliseconds that matter. A read
without a stamp (another OS, the first packets after the kernel switched stamping on, a clock
step) falls back to the user-space time of the read.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

# <asm-generic/socket.h>: SO_TIMESTAMPNS_OLD = 35 (SCM_TIMESTAMPNS); a struct timespec of two longs.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# A stamp older than this is not a packet that waited in the socket buffer but a clock that stepped.
_MAX_PLAUSIBLE_AGE_S = 60.0
_SOL_SOCKET = socket.SOL_SOCKET

SUPPORTED = sys.platform.startswith("linux") and ANCILLARY_SPACE > 0


def enable_receive_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what this socket receives; False where it cannot."""
    if not SUPPORTED:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def arrival_time(ancillary: list[tuple[int, int, bytes]], now: float, wall_now: float | None = None) -> float | None:
    """The perf_counter time at which the read's bytes arrived, from recvmsg's ancillary data.

    `now` is perf_counter() taken right after the read; `wall_now` is time.time() taken with it.
    None when the read carries no usable stamp.
    """
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            age = (time.time() if wall_now is None else wall_now) - (seconds + nanoseconds * 1e-9)
            if -0.001 <= age <= _MAX_PLAUSIBLE_AGE_S:
                return now - max(age, 0.0)
            return None
    return None


class StampedReader:
    """Reads sockets with recvmsg into one reused buffer, returning each read's kernel stamp.

    recvmsg(n) would allocate (and for 256 KiB, mmap) n bytes per read; sockets served by one
    event loop share this reader's buffer instead, since each read is copied out before the next.
    """

    __slots__ = ("_buffers", "_view")

    def __init__(self, size: int = 256 * 1024) -> None:
        buffer = bytearray(size)
        self._buffers, self._view = (buffer,), memoryview(buffer)

    def read(self, sock: socket.socket) -> tuple[bytes, float, float | None]:
        """One read: (data, perf_counter time of the read, arrival from the kernel stamp or None).

        b"" at end of stream; raises what recvmsg_into raises (BlockingIOError when nothing waits).
        """
        size, ancillary, _, _ = sock.recvmsg_into(self._buffers, ANCILLARY_SPACE)
        now = time.perf_counter()
        if not ancillary:
            return self._view[:size].tobytes(), now, None
        level, kind, data = ancillary[0]
        if level == _SOL_SOCKET and kind == SO_TIMESTAMPNS and len(ancillary) == 1 and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)  # arrival_time's arithmetic, inline: every read
            age = time.time() - (seconds + nanoseconds * 1e-9)
            return (
                self._view[:size].tobytes(),
                now,
                (now - max(age, 0.0) if -0.001 <= age <= _MAX_PLAUSIBLE_AGE_S else None),
            )
        return self._view[:size].tobytes(), now, arrival_time(ancillary, now)
