"""Server-Sent Events as the load client reads them: an incremental parser (bytes in, the `data`
payloads of complete events out) and the whole-stream helper tests and tools use."""

from __future__ import annotations


class SSEParser:
    """Incremental Server-Sent-Events parser: feed raw bytes, get the `data` payloads of complete events.

    Handles LF, CRLF and CR line endings (also split across reads), comment lines, multi-line data
    fields and fields other than `data` (ignored). `flush()` returns an event left without its
    terminating blank line when the stream ends.
    """

    __slots__ = ("buffer",)  # bytes of an event not yet complete (StreamRecorder reads it per token)

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self.buffer + data if self.buffer else data
        if b"\r" in buffer:
            held = b""
            if buffer.endswith(b"\r"):  # may be the first half of a CRLF split across reads
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            blocks = buffer.split(b"\n\n")
            self.buffer = blocks.pop() + held
        else:
            blocks = buffer.split(b"\n\n")
            self.buffer = blocks.pop()
        payloads = []
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:  # the common case, inline for speed
                payloads.append(block[6:])
                continue
            payload = event_data(block)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def take_complete(self, data: bytes) -> bytes:
        """Feed bytes; return the region of complete events (LF-normalised), keep the rest buffered."""
        if not self.buffer and data[-2:] == b"\n\n" and b"\r" not in data:  # whole events, the usual read
            return data
        buffer = self.buffer + data if self.buffer else data
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            self.buffer = buffer + held
            return b""
        self.buffer = buffer[cut + 2 :] + held
        return buffer[: cut + 2]

    @staticmethod
    def events_of(complete: bytes) -> list[bytes]:
        """The data payloads of a region returned by take_complete."""
        payloads = []
        for block in complete.split(b"\n\n")[:-1]:
            if block[:6] == b"data: " and b"\n" not in block:
                payloads.append(block[6:])
                continue
            payload = event_data(block)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def flush(self) -> list[bytes]:
        rest, self.buffer = self.buffer, b""
        rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        payloads = []
        for block in rest.split(b"\n\n") if rest else ():
            payload = event_data(block)
            if payload is not None:
                payloads.append(payload)
        return payloads


def event_data(block: bytes) -> bytes | None:
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
