"""Sentences for people, written by the domain as translatable messages.

The domain never writes finished prose that a shell would have to take apart again. It returns a
`Message`: an English template with ``%(name)s`` placeholders, which is also the gettext msgid,
and the values that fill it. A value is plain text or a number (already formatted as the sentence
shows it: ``"0.457"``, ``"47%"``, ``"128K"``), another Message (a dimension's name, a clause), or
a `Join`: values with a separator that is itself a Message, so a list reads "a、b" in Chinese.

* ``str(message)`` is the English sentence (the CLI, logs, tests, the REST API).
* ``render(message, translate)`` applies ``translate(msgid, context)`` to every template, nested
  ones and separators included, then fills them; the Django shell passes gettext
  (`selection.i18n.message_text`). A translation that does not fit its values falls back to the
  English template rather than breaking a page.
* ``to_dict()`` / ``from_dict()``: the JSON form stored in the database,
  ``{"msgid": "...", "params": {...}}`` plus ``"context"`` for the few templates (list
  separators) whose msgid alone is ambiguous; a Join is ``{"items": [...], "separator": {...}}``.
* Anything that is not a message passes through `render` unchanged: rows stored before messages
  existed hold plain English strings.

Templates are marked for ``makemessages`` where they are written: each domain module has a no-op
``_`` (as ``benchmarks/harness/load_judging.py`` does), and `pgettext` here marks a template with its context.
No Django here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

Translate = Callable[[str, str | None], str]  # (msgid, context) -> the template in some language


def marked(text: str) -> str:
    """Marks a message template where it is defined (import it as `_`, so `makemessages` collects it); the
    template stays English here and is translated where it is shown."""
    return text


def english(msgid: str, context: str | None = None) -> str:
    """The translate function for English: a msgid is its own English template."""
    return msgid


class Message:
    """An English template (the msgid) and its parameters; treat it as immutable."""

    __slots__ = ("msgid", "params", "context")

    def __init__(self, msgid: str, params: Mapping[str, Any] | None = None, context: str | None = None):
        if not isinstance(msgid, str):
            raise TypeError(f"msgid: must be a string, got {type(msgid).__name__}")
        checked = {}
        for name, value in (params or {}).items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"params: {name!r} is not a placeholder name")
            checked[name] = _checked(value, f"params.{name}")
        self.msgid, self.params, self.context = msgid, checked, context
        try:
            str(self)
        except (KeyError, ValueError, TypeError) as error:
            raise ValueError(f"msgid {msgid!r} does not fit its params {sorted(checked)}: {error}") from None

    def render(self, translate: Translate = english) -> str:
        values = {name: render(value, translate) for name, value in self.params.items()}
        template = translate(self.msgid, self.context)
        try:
            return template % values
        except (KeyError, ValueError, TypeError):  # a translation that lost or mistyped a placeholder
            return self.msgid % values

    def join(self, items: Iterable[Any]) -> Join:
        """`items` with this message between them, as ``str.join`` does."""
        return Join(items, self)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"msgid": self.msgid, "params": {name: to_json(v) for name, v in self.params.items()}}
        if self.context is not None:
            data["context"] = self.context
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        if not is_message_dict(data):
            raise ValueError(f"not a stored message: {data!r}")
        params = data.get("params") or {}
        if not isinstance(params, Mapping):
            raise ValueError(f"params: must be a mapping, got {params!r}")
        return cls(data["msgid"], {name: load(value) for name, value in params.items()}, data.get("context"))

    def __str__(self) -> str:
        return self.render(english)

    def __repr__(self) -> str:
        context = f", context={self.context!r}" if self.context is not None else ""
        return f"Message({self.msgid!r}, {self.params!r}{context})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.msgid, self.context, self.params) == (other.msgid, other.context, other.params)

    def __hash__(self) -> int:
        return hash((self.msgid, self.context, tuple(sorted(self.params.items()))))


class Join:
    """Values with a separator Message between them (a list inside a sentence)."""

    __slots__ = ("items", "separator")

    def __init__(self, items: Iterable[Any], separator: Message):
        if not isinstance(separator, Message):
            raise TypeError(f"separator: must be a Message, got {type(separator).__name__}")
        self.items = tuple(_checked(item, f"items[{i}]") for i, item in enumerate(items))
        self.separator = separator

    def render(self, translate: Translate = english) -> str:
        return self.separator.render(translate).join(str(render(item, translate)) for item in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {"items": [to_json(item) for item in self.items], "separator": self.separator.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Join:
        return cls([load(item) for item in data["items"]], Message.from_dict(data["separator"]))

    def __str__(self) -> str:
        return self.render(english)

    def __repr__(self) -> str:
        return f"Join({list(self.items)!r}, {self.separator!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Join):
            return NotImplemented
        return (self.items, self.separator) == (other.items, other.separator)

    def __hash__(self) -> int:
        return hash((self.items, self.separator))


class Code(str):
    """A value a page shows as code (`<code>`): a key path, a column name, a value quoted from a file. It is
    plain text in the sentence (English or translated); stored, it is ``{"code": "..."}``; a page's
    `selection.i18n.message_html` sets it as code."""

    __slots__ = ()


def _checked(value: Any, where: str) -> Any:
    if isinstance(value, (Message, Join, str, int, float)) or value is None:
        return value
    raise TypeError(f"{where}: a message value is text, a number, a Message or a Join, got {type(value).__name__}")


def pgettext(context: str, msgid: str) -> Message:
    """A template whose msgid needs a context to be translated right (named so that
    ``makemessages`` collects it with its context)."""
    return Message(msgid, context=context)


# The separators every sentence shares: between names, between clauses, and between a label and its
# value ("TTFT p95: pass"; Chinese "TTFT p95：通过").
NAME_SEPARATOR = pgettext("list separator between names", ", ")
CLAUSE_SEPARATOR = pgettext("list separator between clauses", "; ")
LABEL_SEPARATOR = pgettext("separator between a label and its value", ": ")


def is_message_dict(value: Any) -> bool:
    """Whether `value` is a stored message (the dict `Message.to_dict` writes)."""
    return isinstance(value, Mapping) and isinstance(value.get("msgid"), str)


def load(value: Any) -> Any:
    """A stored message, join or code value back as a Message, Join or Code; anything else (plain text, a number)
    unchanged."""
    if is_message_dict(value):
        return Message.from_dict(value)
    if isinstance(value, Mapping) and set(value) == {"code"} and isinstance(value["code"], str):
        return Code(value["code"])
    if isinstance(value, Mapping) and "items" in value and "separator" in value:
        return Join.from_dict(value)
    return value


def render(value: Any, translate: Translate = english) -> Any:
    """A Message, Join or stored message as text, with `translate` applied to every template;
    anything else (a legacy plain string, a number, None) unchanged."""
    value = load(value)
    if isinstance(value, (Message, Join)):
        return value.render(translate)
    return value


def to_json(value: Any) -> Any:
    """`value` with every Message and Join replaced by its stored dict (dicts, lists and tuples
    walked), ready for a JSON field."""
    if isinstance(value, (Message, Join)):
        return value.to_dict()
    if isinstance(value, Code):
        return {"code": str(value)}
    if isinstance(value, Mapping):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def plain(value: Any) -> Any:
    """`value` with every Message, Join and stored message replaced by its English text (dicts,
    lists and tuples walked): what the REST API and the CLI show."""
    if isinstance(value, (Message, Join)) or is_message_dict(value):
        return render(value)
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
