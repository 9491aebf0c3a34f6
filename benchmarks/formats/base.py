"""The registry's types: what every parser takes (`Source`), declares (`Format`) and raises.

`Source` decodes the uploaded bytes lazily and once, strictly (no NaN/Infinity unless the format
writes them, nesting capped), so that every sniffer can look at the same document cheaply.
`FileSource` is the same over a file on disk: sniffers read only its head, and a parser that
can read it in blocks (from `path`) never holds the whole file in memory.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np

from benchmarks.result import NormalizedResult
from selection.domain.messages import CLAUSE_SEPARATOR, LABEL_SEPARATOR, Code, Message, pgettext
from selection.domain.messages import marked as _

MAX_DEPTH = 64  # deeper nesting than any real result file; guards recursion in consumers
LARGE_FILE = 8 * 1024 * 1024  # above this, sniffers look only at the first 64 KiB
HEAD_BYTES = 65536  # what a sniffer of a large file (or of an upload not read yet) looks at


class FormatError(ValueError):
    """A file of a recognised format that cannot be read; the text names the key path.

    Raised with a `Message` (a template and its figures: an offset, a key path, a line), the refusal
    keeps it as `message`, so the upload page shows it in the reader's language (walk m11); the text
    (`str(error)`) stays the English sentence the API and the logs give."""

    def __init__(self, reason: str | Message = ""):
        self.message = reason if isinstance(reason, Message) else None
        super().__init__(str(reason))


def reason_of(error: BaseException) -> str | Message:
    """A refusal as a Message when it carries one, else its text."""
    return getattr(error, "message", None) or str(error)


def where_in(prefix: str | Message, reason: str | Message) -> Message:
    """`reason` under the place it refers to ("line 1: invalid JSON ..."), the separator in the reader's language;
    a key path (a string: "benchmarks[0].metrics") is shown as code."""
    where = Code(prefix) if isinstance(prefix, str) else prefix
    return Message("%(where)s%(separator)s%(reason)s", {"where": where, "separator": LABEL_SEPARATOR, "reason": reason})


class AcceptedOnHead(Exception):
    """Raised by `Source.doc_with` on a head-only source whose head holds a format's marker key:
    the head looks like that format, and only the whole file could tell more."""


# A JSON value's type as a refusal names it ("expected a list, got object"): English in the text, a word in the
# reader's language on a page.
JSON_TYPES = {
    type(None): pgettext("JSON value type", "null"),
    bool: pgettext("JSON value type", "boolean"),
    int: pgettext("JSON value type", "number"),
    float: pgettext("JSON value type", "number"),
    str: pgettext("JSON value type", "string"),
    list: pgettext("JSON value type", "list"),
    dict: pgettext("JSON value type", "object"),
}


def type_name(value: Any) -> Message | str:
    """The JSON type of `value` as a Message (`str()` is the English word); another Python type by its name."""
    for kind in (type(None), bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return JSON_TYPES[kind]
    return type(value).__name__


def reject_constant(name: str) -> float:
    raise FormatError(
        Message(_("%(name)s is not valid JSON (NaN/Infinity are not allowed in this format)"), {"name": name})
    )


def allow_constant(name: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def naive_depth(text: str) -> int:
    """Maximum bracket depth counting brackets inside strings too (an upper bound; numpy-fast)."""
    raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    delta = np.zeros(raw.size, dtype=np.int8)
    delta[(raw == 0x5B) | (raw == 0x7B)] = 1
    delta[(raw == 0x5D) | (raw == 0x7D)] = -1
    return int(np.cumsum(delta, dtype=np.int64).max()) if raw.size else 0


def value_depth(value: Any) -> int:
    """Exact nesting depth of a decoded value, iteratively (no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


def decode_json(text: str, allow_nonfinite: bool = False, where: str | Message = "") -> Any:
    """Strict JSON: NaN/Infinity only when the format writes them; depth capped."""

    def placed(reason: str | Message) -> FormatError:
        return FormatError(where_in(where, reason) if where else reason)

    too_deep = Message(_("document nested deeper than %(n)s levels"), {"n": MAX_DEPTH})
    try:
        value = json.loads(text, parse_constant=allow_constant if allow_nonfinite else reject_constant)
    except FormatError as error:
        raise placed(reason_of(error)) from None
    except json.JSONDecodeError as error:
        # json's own reason ("Expecting value") stays as Python wrote it
        invalid = _("invalid JSON at line %(line)s column %(column)s: %(reason)s")
        raise placed(Message(invalid, {"line": error.lineno, "column": error.colno, "reason": error.msg})) from None
    except RecursionError:
        raise placed(too_deep) from None
    if (text.count("[") + text.count("{")) > MAX_DEPTH and naive_depth(text) > MAX_DEPTH:
        if value_depth(value) > MAX_DEPTH:
            raise placed(too_deep)
    return value


NOT_UTF8 = _("not UTF-8 text (invalid byte at offset %(offset)s)")


@dataclass
class Source:
    """The uploaded bytes, decoded lazily and once, shared by every format's sniffer."""

    data: bytes
    filename: str | None = None
    head_only: bool = False  # `data` is only the first bytes of the upload (sniffing before storing)
    path = None  # a file on disk (FileSource): parsers that can read it in blocks do

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def head_bytes(self) -> bytes:
        return self.data[:HEAD_BYTES]

    @cached_property
    def text(self) -> str:
        if self.head_only:
            raise FormatError(Message(_("only the first bytes of the file were read")))
        try:
            text = self.data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise FormatError(Message(NOT_UTF8, {"offset": error.start})) from None
        return text[1:] if text.startswith("\ufeff") else text

    @cached_property
    def head(self) -> str:
        """The first 64 KiB as text (for sniffing large files without reading them whole)."""
        chunk = self.head_bytes
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.start >= len(chunk) - 4 and (self.head_only or self.size > len(chunk)):
                text = chunk[: error.start].decode("utf-8")
            else:
                raise FormatError(Message(NOT_UTF8, {"offset": error.start})) from None
        return text[1:] if text.startswith("\ufeff") else text

    @property
    def large(self) -> bool:
        return self.head_only or self.size > LARGE_FILE

    @property
    def head_is_partial(self) -> bool:
        """The head is not the whole file (its last line may be cut)."""
        return self.head_only or self.size > len(self.head.encode())

    def doc_with(self, *markers: str) -> Any:
        """The whole document, but for large files only when a marker key is near the start.

        Keeps sniffing cheap: a 500 MB upload is decoded once, by the format that claims it. On a
        head-only source a marker near the start is as far as sniffing can go (`AcceptedOnHead`).
        """
        if self.large and not any(marker in self.head for marker in markers):
            raise FormatError(
                Message(_("none of the keys %(keys)s near the start of a large file"), {"keys": ", ".join(markers)})
            )
        if self.head_only:
            raise AcceptedOnHead
        return self.json

    @cached_property
    def json(self) -> Any:
        """The whole document as strict JSON (no NaN/Infinity)."""
        return decode_json(self.text)

    @cached_property
    def json_lenient(self) -> Any:
        """The whole document, allowing Python's NaN/Infinity literals (SGLang writes them)."""
        return decode_json(self.text, allow_nonfinite=True)

    def first_line_json(self, allow_nonfinite: bool = False) -> Any:
        """The first non-empty line parsed as JSON (sniffing JSONL)."""
        head = self.head
        for line in head.splitlines():
            if line.strip():
                if len(line) == len(head) and self.head_is_partial:
                    raise FormatError(Message(_("first line longer than 64 KiB; not a JSONL record")))
                return decode_json(line, allow_nonfinite=allow_nonfinite, where=Message(_("line %(n)s"), {"n": 1}))
        raise FormatError(Message(_("empty file")))

    @property
    def is_jsonl(self) -> bool:
        """More than one top-level JSON value, one per line."""
        stripped = self.head.lstrip()
        if not stripped.startswith("{"):
            return False
        lines = [line for line in self.head.splitlines() if line.strip()]
        if len(lines) < 2:
            return False
        try:
            decode_json(lines[0], allow_nonfinite=True)
            return True
        except FormatError:
            return False


class FileSource(Source):
    """A result file on disk: the head for sniffing, the whole only for a parser that asks for `data`."""

    def __init__(self, path: str | os.PathLike, filename: str | None = None) -> None:
        self.path = str(path)
        self.filename = filename
        self.head_only = False

    def __repr__(self) -> str:
        return f"FileSource({self.path!r}, {self.filename!r})"

    @cached_property
    def data(self) -> bytes:  # type: ignore[override]
        with open(self.path, "rb") as handle:
            return handle.read()

    @cached_property
    def size(self) -> int:  # type: ignore[override]
        return os.path.getsize(self.path)

    @cached_property
    def head_bytes(self) -> bytes:  # type: ignore[override]
        with open(self.path, "rb") as handle:
            return handle.read(HEAD_BYTES)


@dataclass(frozen=True)
class Format:
    """One file format: `sniff` returns None to accept or a reason to refuse; `parse` reads it."""

    name: str
    tool: str
    description: str
    sniff: Callable[[Source], str | Message | None]
    parse: Callable[[Source, dict[str, Any] | None], NormalizedResult]


class UnrecognisedFormat(ValueError):
    """No format accepted the file; `refusals` maps each format tried to its reason in English, `reasons`
    to the same reason as a Message where the sniffer wrote one (the upload page renders it)."""

    def __init__(self, refusals: dict[str, str | Message], filename: str | None = None):
        self.reasons = dict(refusals)
        self.refusals = {name: str(reason) for name, reason in refusals.items()}
        label = Code(repr(filename)) if filename else Message(_("the file"))
        tried = CLAUSE_SEPARATOR.join(where_in(name, reason) for name, reason in refusals.items())
        self.message = Message(
            _("%(file)s is not a recognised benchmark result format. Tried %(reasons)s"),
            {"file": label, "reasons": tried},
        )
        super().__init__(str(self.message))
