"""The SSE events of a streamed completion, byte for byte as the engines write them.

Why: a load client is only as fast and as right as its parsing of what real engines send, and a
mock that streams a tidier shape hides the cost (kvselect's own mocks never sent vLLM's opening
role chunk, so the client's cheap path was never measured on it). Every mock and the simulator
write their streams through this module. Shapes, as served in these versions:

- `vllm` (0.33, `chat_completion/serving.py`, pydantic `exclude_unset`): chat opens with
  `{"role":"assistant","content":""}`; one event per token with `"logprobs":null,
  "finish_reason":null,"token_ids":null` and `"kv_transfer_params":null`; the last token carries
  `"finish_reason":"length","stop_reason":null`; with `stream_options.include_usage` a chunk with
  `"choices":[]` and the usage; `data: [DONE]`.
- `sglang` (msgspec `StreamChunk`, `sse_utils.py`): chat opens with the same role chunk; token
  events `{"content":"..."}` with `"matched_stop":null`; the finish reason in a chunk of its own
  with an empty delta; then usage and `[DONE]`.
- `tgi` (3.x `router/src/chat.rs`, axum's `json_data`): `data:` without a space; no opening
  chunk, every delta carries `"role":"assistant"`; `"usage":null` on every chunk; the last token
  carries the finish reason; then a usage chunk with `"choices":[]`; `data: [DONE]`.

The completions API (`/v1/completions`) has no role chunk in any of them; its events carry `text`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

Shape = Literal["vllm", "sglang", "tgi"]
SHAPES: tuple[Shape, ...] = ("vllm", "sglang", "tgi")
TGI_FINGERPRINT = "3.3.6-native"


def _json(value: Any) -> bytes:
    """Compact JSON as the engines write it (no spaces, UTF-8 kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class EngineStream:
    """One response's events in an engine's shape; each method returns the bytes to write.

    Token events are assembled from precomputed prefix and suffix bytes around the JSON-escaped
    text, so a mock spends its CPU on serving rather than on building chunks.
    """

    __slots__ = (
        "shape",
        "chat",
        "head",
        "prefix",
        "suffix",
        "last_suffix",
        "finish_event",
        "usage_head",
        "data",
        "opening_event",
    )

    def __init__(self, shape: Shape, chat: bool, request_id: str, model: str, created: int) -> None:
        if shape not in SHAPES:
            raise ValueError(f"EngineStream.shape: must be one of {', '.join(SHAPES)}, got {shape!r}")
        self.shape, self.chat = shape, chat
        kind = b'"chat.completion.chunk"' if chat else b'"text_completion"'
        ident, name = _json(request_id), _json(model)
        self.data = b"data:" if shape == "tgi" else b"data: "
        if shape == "tgi":
            self.head = (
                b'{"object":'
                + kind
                + b',"id":'
                + ident
                + b',"created":'
                + str(created).encode()
                + b',"model":'
                + name
                + b',"system_fingerprint":'
                + _json(TGI_FINGERPRINT)
                + b',"choices":'
            )
        else:
            self.head = (
                b'{"id":'
                + ident
                + b',"object":'
                + kind
                + b',"created":'
                + str(created).encode()
                + b',"model":'
                + name
                + b',"choices":'
            )
        key = b'"content":' if chat else b'"text":'
        open_delta = b'[{"index":0,"delta":{' if chat else b'[{"index":0,'
        close_delta = b"}" if chat else b""
        if shape == "vllm":
            self.prefix = self.data + self.head + open_delta + key
            self.suffix = close_delta + (
                b',"logprobs":null,"finish_reason":null,"token_ids":null}],"kv_transfer_params":null}\n\n'
                if chat
                else b',"logprobs":null,"finish_reason":null,"stop_reason":null,'
                b'"prompt_token_ids":null,"token_ids":null}],"kv_transfer_params":null}\n\n'
            )
            self.last_suffix = close_delta + (
                b',"logprobs":null,"finish_reason":%s,"stop_reason":null,"token_ids":null,'
                b'"weight_versions":null}],"kv_transfer_params":null}\n\n'
            )
            self.finish_event = b""
        elif shape == "sglang":
            self.prefix = self.data + self.head + open_delta + key
            self.suffix = close_delta + b',"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
            self.last_suffix = self.suffix
            finish_delta = b'[{"index":0,"delta":{}' if chat else b'[{"index":0,"text":""'
            self.finish_event = (
                self.data + self.head + finish_delta + b',"logprobs":null,"finish_reason":%s,"matched_stop":null}]}\n\n'
            )
        else:
            tgi_open = b'[{"index":0,"delta":{"role":"assistant",' if chat else open_delta
            self.prefix = self.data + self.head + tgi_open + key
            self.suffix = close_delta + b',"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
            self.last_suffix = close_delta + b',"logprobs":null,"finish_reason":%s}],"usage":null}\n\n'
            self.finish_event = b""
        self.usage_head = self.data + self.head + b'[],"usage":'
        self.opening_event = b""
        if chat and shape != "tgi":
            self.opening_event = (
                self.data
                + self.head
                + b'[{"index":0,"delta":{"role":"assistant","content":""}'
                + (
                    b',"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
                    if shape == "vllm"
                    else b',"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
                )
            )

    def opening(self) -> bytes:
        """The chunk an engine sends before the first token (vLLM's and SGLang's role chunk), or b""."""
        return self.opening_event

    def token(self, text: str, finish_reason: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
        """One token's event; with `finish_reason` the stream's last (SGLang: plus its finish chunk).

        `usage`: continuous usage stats (vLLM's `stream_options.continuous_usage_stats`) on the event.
        """
        if finish_reason is None or self.shape == "sglang":
            suffix = self.suffix
        else:
            suffix = self.last_suffix % _json(finish_reason)
        if usage is not None:  # after the text, so never inside the escaped string
            suffix = (
                suffix.replace(b"}]", b'}],"usage":' + _json(usage), 1)
                if self.shape != "tgi"
                else suffix.replace(b'"usage":null', b'"usage":' + _json(usage), 1)
            )
        event = self.prefix + _json(text) + suffix
        if finish_reason is not None and self.finish_event:
            event += self.finish_event % _json(finish_reason)
        return event

    def usage(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> bytes:
        """The usage chunk (`stream_options.include_usage`); `extra` adds top-level keys (a mock's truth)."""
        total = prompt_tokens + completion_tokens
        if self.shape == "tgi":
            usage: dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": total,
            }
        else:
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": total, "completion_tokens": completion_tokens}
        if cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
        tail = b"}\n\n"
        if extra:
            tail = b"," + _json(extra)[1:] + b"\n\n"
        return self.usage_head + _json(usage) + tail

    def done(self) -> bytes:
        return b"data: [DONE]\n\n"
