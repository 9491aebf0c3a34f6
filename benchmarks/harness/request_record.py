"""One request the load client sends (`RequestSpec`) and what happened to it (`RequestRecord`): the
times and token counts kvselect's definitions (TTFT, TPOT, ITL, E2E) are computed from.

A leaf with no HTTP client: the workloads, the judging rules and the metrics build and read these
without loading aiohttp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Api = Literal["chat", "completions"]

ERROR_CLASSES = ("http", "timeout", "disconnect", "connect", "oom", "stream_error", "cancelled", "client")


@dataclass
class RequestSpec:
    """One request to send. `prompt` is a string or token ids (completions); `messages` for chat."""

    api: Api = "chat"
    prompt: str | list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int = 128
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    stream: bool = True
    include_usage: bool = True
    ignore_eos: bool | None = True  # None: not sent (engines that reject unknown fields)
    temperature: float | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    abort_after_tokens: int | None = None  # close the stream deliberately after this many tokens
    request_id: str = ""
    tag: str = ""  # free label (test phase, session id, ...)

    def body(self, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "stream": self.stream, self.max_tokens_field: self.max_tokens}
        if self.api == "chat":
            messages = self.messages
            if messages is None:
                if not isinstance(self.prompt, str):
                    raise ValueError("RequestSpec.messages: chat requests need messages or a string prompt")
                messages = [{"role": "user", "content": self.prompt}]
            body["messages"] = messages
        else:
            if self.prompt is None:
                raise ValueError("RequestSpec.prompt: completions requests need a prompt")
            body["prompt"] = self.prompt
        if self.stream and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos is not None:
            body["ignore_eos"] = self.ignore_eos
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.seed is not None:
            body["seed"] = self.seed
        body.update(self.extra_body)
        return body


@dataclass
class RequestRecord:
    """What happened to one request. Times are perf_counter seconds; latencies derived in ms."""

    request_id: str = ""
    tag: str = ""
    send_time: float = 0.0
    first_token_time: float | None = None
    end_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # each content chunk's arrival
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in that chunk
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    usage_reported: bool = False
    cached_tokens: int | None = None  # prompt tokens the engine took from its cache (see cached_source)
    # where cached_tokens came from: "usage" (usage.prompt_tokens_details.cached_tokens, vLLM, SGLang),
    # "timings" (llama.cpp's timings: cache_n, or the prompt's tokens less the prompt_n it processed)
    cached_source: str | None = None
    prompt_processed: int | None = None  # prompt tokens the engine computed (llama.cpp's timings.prompt_n)
    finish_reason: str | None = None
    text: str = ""
    error_class: str | None = None  # one of ERROR_CLASSES, None when ok
    error: str | None = None
    http_status: int | None = None
    aborted: bool = False  # closed deliberately mid-stream
    done_marker: bool = False  # saw data: [DONE]
    streamed: bool = True
    retries: int = 0  # re-sends after a stale kept-alive connection (nothing had reached the engine)

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def ttft_ms(self) -> float | None:
        if not self.streamed or self.first_token_time is None:
            return None
        return (self.first_token_time - self.send_time) * 1000.0

    @property
    def e2e_ms(self) -> float | None:
        return None if self.end_time is None else (self.end_time - self.send_time) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """(e2e - TTFT) / (output tokens - 1): excludes the first token."""
        ttft, e2e, tokens = self.ttft_ms, self.e2e_ms, self.output_tokens
        if ttft is None or e2e is None or tokens is None or tokens < 2:
            return None
        return (e2e - ttft) / (tokens - 1)

    def itl_ms(self) -> list[float]:
        """Gaps between consecutive tokens; a chunk of k tokens counts k gaps of dt/k."""
        times, counts = self.chunk_times, self.chunk_tokens
        gaps: list[float] = []
        for index in range(1, len(times)):
            k = counts[index] or 1
            gap = (times[index] - times[index - 1]) * 1000.0 / k
            if k == 1:
                gaps.append(gap)
            else:
                gaps.extend([gap] * k)
        return gaps
