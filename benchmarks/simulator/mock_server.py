"""A small OpenAI-compatible mock engine with exact timing, for the harness tests and benchmark.

Why: timing fidelity can only be measured against a server whose true TTFT and ITL are known, and
the harness's edge cases (no `[DONE]`, usage only at the end, HTTP errors, OOM text, broken
streams, deliberate aborts) need a server that produces them on demand. Tokens are whitespace
words; the continuation is a pure function of the prompt (greedy decoding is deterministic). Streams are
written in a real engine's exact shape (`shape`: vLLM by default, SGLang or TGI). The usage
chunk carries `mock.ttft_ms`, the server-side time from reading the request to writing the
first token, so a client's TTFT error can be measured without the sleep overshoot of the mock.

It also serves `/tokenize` (llama.cpp and vLLM request shapes), `/health` and `/metrics` in the
llama.cpp or vLLM naming, with a KV usage that rises with active tokens and falls when a request
ends or its client disconnects. Not a simulator of any engine's performance.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from benchmarks.simulator.engine_streams import EngineStream, Shape

VOCAB = [f"w{i}" for i in range(512)]


def mock_tokenize(text: str) -> list[int]:
    """The mock's tokenizer: one token per whitespace-separated word (ids from a hash, stable)."""
    return [int.from_bytes(hashlib.blake2b(w.encode(), digest_size=2).digest(), "big") for w in text.split()]


def continuation(prompt_key: str, count: int) -> list[str]:
    """Greedy continuation of a prompt: deterministic words, a pure function of the prompt."""
    seed = hashlib.blake2b(prompt_key.encode(), digest_size=8).digest()
    state = int.from_bytes(seed, "big")
    words = []
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        words.append(VOCAB[state >> 55])
    return words


@dataclass
class MockConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    prefill_s_per_token: float = 0.0  # extra TTFT per uncached prompt token
    send_done: bool = True
    fail_status: int | None = None  # every request answered with this HTTP status
    fail_body: str = "internal error"
    oom_in_stream_after: int | None = None  # emit an in-stream OOM error after N tokens
    drop_after: int | None = None  # close the connection without finishing after N tokens
    metrics_style: str | None = "llamacpp"  # "llamacpp", "vllm" or None (404)
    kv_capacity_tokens: int = 65536
    prefix_caching: bool = True
    chunk_tokens: int = 1  # tokens per SSE chunk
    usage_in_chunks: bool = False  # continuous usage stats in every chunk
    tokenize_endpoint: bool = True
    shape: Shape = "vllm"  # whose stream to write, byte for byte (see engine_streams)
    write_mode: str = "per_token"  # or "batched" (zero-delay streams only)
    # keep only the last N prompt tokens, as llama.cpp's context shift does (None: keep all)
    truncate_prompt_to: int | None = None
    keep_finished_kv: bool = False  # a finished request's KV stays counted, as llama.cpp's slots keep their prompts
    # tokens a chat template adds to every chat request (role markers, a system preamble): the engine's
    # usage counts them, a plan built from the message text alone does not
    template_tokens: int = 0
    # answer as llama.cpp does: no cached tokens in the usage, a `timings` object whose `prompt_n` is the
    # prompt tokens processed, `cache_prompt: false` honoured per request, `llamacpp:prompt_tokens_total`
    llamacpp_timings: bool = False
    report_cached: bool = True  # False: the usage states no cached tokens (an engine that reports none)


@dataclass
class MockState:
    active_tokens: dict[int, int] = field(default_factory=dict)
    running: int = 0
    requests_total: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    seen_prefixes: set[str] = field(default_factory=set)
    aborted: int = 0
    prompt_processed: int = 0  # prompt tokens computed (not taken from the cache)
    true_ttft_ms: dict[str, float] = field(default_factory=dict)  # by body["kvselect_request_id"]
    # (handler start, first token written), perf_counter seconds: CLOCK_MONOTONIC, comparable
    # with a client's timestamps on the same host, so a TTFT error can be split into its legs
    true_times: dict[str, tuple[float, float]] = field(default_factory=dict)


def _split_prompt(body: dict[str, Any], chat: bool) -> str:
    if chat:
        parts = []
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(str(content or ""))
        return " ".join(parts)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        return " ".join(f"t{t}" for t in prompt)
    return str(prompt)


CONFIG_KEY = web.AppKey("config", MockConfig)
STATE_KEY = web.AppKey("state", MockState)


def build_app(config: MockConfig | None = None) -> web.Application:
    app = web.Application()
    app[CONFIG_KEY], app[STATE_KEY] = config or MockConfig(), MockState()
    app.router.add_get("/mock/true_ttft", true_ttfts)
    app.router.add_get("/mock/true_times", true_times)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/chat/completions", chat_handler)
    app.router.add_post("/v1/completions", completions_handler)
    return app


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def tokenize(request: web.Request) -> web.Response:
    if not request.app[CONFIG_KEY].tokenize_endpoint:
        raise web.HTTPNotFound()
    body = await request.json()
    text = body.get("content", body.get("prompt", ""))
    tokens = mock_tokenize(text)
    return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": 131072})


def llamacpp_metrics(state: MockState, usage: float) -> str:
    return (
        "# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE llamacpp:kv_cache_usage_ratio gauge\n"
        f"llamacpp:kv_cache_usage_ratio {usage}\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        f"llamacpp:requests_processing {state.running}\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        "llamacpp:requests_deferred 0\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        f"llamacpp:prompt_tokens_total {state.prompt_processed}\n"
    )


def vllm_metrics(state: MockState, usage: float) -> str:
    labels = '{engine="0",model_name="mock"}'
    return (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{labels} {usage}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{labels} {state.running}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{labels} 0\n"
        "# TYPE vllm:prefix_cache_queries counter\n"
        f"vllm:prefix_cache_queries_total{labels} {state.prefix_queries}\n"
        "# TYPE vllm:prefix_cache_hits counter\n"
        f"vllm:prefix_cache_hits_total{labels} {state.prefix_hits}\n"
        "# TYPE vllm:num_preemptions counter\n"
        f"vllm:num_preemptions_total{labels} 0\n"
    )


METRICS_STYLES = {"llamacpp": llamacpp_metrics, "vllm": vllm_metrics}


async def metrics(request: web.Request) -> web.Response:
    config, state = request.app[CONFIG_KEY], request.app[STATE_KEY]
    usage = min(sum(state.active_tokens.values()) / config.kv_capacity_tokens, 1.0)
    render = METRICS_STYLES.get(config.metrics_style or "")
    if render is None:
        raise web.HTTPNotFound()
    return web.Response(text=render(state, usage), content_type="text/plain")


async def chat_handler(request: web.Request) -> web.StreamResponse:
    return await complete(request, chat=True)


async def completions_handler(request: web.Request) -> web.StreamResponse:
    return await complete(request, chat=False)


async def true_ttfts(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].true_ttft_ms)


async def true_times(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].true_times)


def prefix_cached(config: MockConfig, state: MockState, words: list[str]) -> int:
    """Prefix cache at 16-word blocks: a block is a hit if an identical prefix was seen before.
    Returns the cached prompt tokens."""
    cached = 0
    for end in range(16, len(words) + 1, 16):
        key = " ".join(words[:end])
        state.prefix_queries += 16
        if config.prefix_caching and key in state.seen_prefixes:
            cached = end
            state.prefix_hits += 16
        state.seen_prefixes.add(key)
    return cached


@dataclass
class Completion:
    """One request being served: what it asked for and when it arrived."""

    request: web.Request
    body: dict[str, Any]
    chat: bool
    rid: int
    prompt_tokens: int
    cached: int
    output: list[str]
    max_tokens: int
    include_usage: bool
    created: int
    ttft: float
    start: float  # loop time
    start_wall: float  # perf_counter


async def complete(request: web.Request, chat: bool) -> web.StreamResponse:
    config, state = request.app[CONFIG_KEY], request.app[STATE_KEY]
    loop = asyncio.get_running_loop()
    start = loop.time()
    start_wall = time.perf_counter()
    body = await request.json()
    if config.fail_status:
        return web.Response(status=config.fail_status, text=config.fail_body)
    prompt = _split_prompt(body, chat)
    words = ([f"tpl{i}" for i in range(config.template_tokens)] if chat else []) + prompt.split()
    if config.truncate_prompt_to is not None:
        words = words[-config.truncate_prompt_to :]
    prompt_tokens = len(words)
    max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
    stream = bool(body.get("stream"))
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    cached = prefix_cached(config, state, words)
    if config.llamacpp_timings and body.get("cache_prompt") is False:
        cached = 0
    cached = min(cached, max(len(words) - 1, 0))  # at least one prompt token is always computed
    state.prompt_processed += len(words) - cached
    output = continuation(prompt, max_tokens)
    rid = id(request)
    state.requests_total += 1
    state.running += 1
    state.active_tokens[rid] = prompt_tokens
    created = int(time.time())
    ttft = config.ttft_s + config.prefill_s_per_token * (prompt_tokens - cached)
    job = Completion(
        request,
        body,
        chat,
        rid,
        prompt_tokens,
        cached,
        output,
        max_tokens,
        include_usage,
        created,
        ttft,
        start,
        start_wall,
    )
    try:
        if not stream:
            return await whole_response(job)
        return await stream_response(job, config, state)
    except (ConnectionResetError, asyncio.CancelledError):
        state.aborted += 1
        raise
    finally:
        state.running -= 1
        if not config.keep_finished_kv:
            state.active_tokens.pop(rid, None)


async def whole_response(job: Completion) -> web.Response:
    """The non-streaming answer, after the whole generation time."""
    config = job.request.app[CONFIG_KEY]
    max_tokens, chat = job.max_tokens, job.chat
    await asyncio.sleep(max(job.ttft + config.itl_s * (max_tokens - 1), 0))
    text = " ".join(job.output)
    choice = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        if chat
        else {"index": 0, "text": text, "finish_reason": "length"}
    )
    return web.json_response(
        {
            "id": "mock",
            "object": "chat.completion" if chat else "text_completion",
            "created": job.created,
            "model": job.body.get("model"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": job.prompt_tokens,
                "completion_tokens": max_tokens,
                "total_tokens": job.prompt_tokens + max_tokens,
            },
        }
    )


async def stream_response(job: Completion, config: MockConfig, state: MockState) -> web.StreamResponse:
    """The SSE stream, each chunk written when it is due (or all at once when batched); a configured
    drop or in-stream OOM ends it early."""
    request, body, chat, max_tokens = job.request, job.body, job.chat, job.max_tokens
    loop = asyncio.get_running_loop()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    events = EngineStream(
        config.shape, chat, ("chatcmpl-" if chat else "cmpl-") + str(job.rid), str(body.get("model")), job.created
    )
    first_written = None
    step = max(config.chunk_tokens, 1)
    # batched: a zero-delay stream written in one piece (the mock spends its CPU on serving,
    # not on per-token writes; the client still parses every event)
    batch: list[bytes] | None = [] if config.write_mode == "batched" and job.ttft <= 0 and config.itl_s <= 0 else None
    sent = 0
    while sent < max_tokens:
        due = job.start + job.ttft + config.itl_s * sent
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if config.drop_after is not None and sent >= config.drop_after:
            request.transport.close() if request.transport else None
            return response
        if config.oom_in_stream_after is not None and sent >= config.oom_in_stream_after:
            error = {"error": {"message": "CUDA out of memory. Tried to allocate 2.00 GiB", "code": 500}}
            await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            return response
        count = min(step, max_tokens - sent)
        piece = " ".join(job.output[sent : sent + count]) + " "
        sent += count
        last = sent >= max_tokens
        usage = {"prompt_tokens": job.prompt_tokens, "completion_tokens": sent} if config.usage_in_chunks else None
        # the engines send their opening role chunk with the first token
        data = (events.opening() if sent == count else b"") + events.token(piece, "length" if last else None, usage)
        if batch is not None:
            batch.append(data)
            continue
        if first_written is None:
            first_written = time.perf_counter()  # just before the bytes reach the socket
        await response.write(data)
        state.active_tokens[job.rid] = job.prompt_tokens + sent
    if batch:
        first_written = time.perf_counter()
        await response.write(b"".join(batch))
    await end_stream(job, response, events, first_written, config, state)
    return response


async def end_stream(
    job: Completion,
    response: web.StreamResponse,
    events: EngineStream,
    first_written: float | None,
    config: MockConfig,
    state: MockState,
) -> None:
    """The usage chunk (with the server-side TTFT, recorded by request id), `[DONE]`, end of stream."""
    body = job.body
    if job.include_usage:
        if body.get("kvselect_request_id") is not None and first_written is not None:
            state.true_ttft_ms[str(body["kvselect_request_id"])] = (first_written - job.start_wall) * 1000.0
            state.true_times[str(body["kvselect_request_id"])] = (job.start_wall, first_written)
        truth: dict[str, Any] = {
            "mock": {"ttft_ms": None if first_written is None else (first_written - job.start_wall) * 1000.0}
        }
        cached: int | None = job.cached if config.report_cached else None
        if config.llamacpp_timings:
            truth["timings"] = {"prompt_n": job.prompt_tokens - job.cached, "predicted_n": job.max_tokens}
            cached = None
        await response.write(events.usage(job.prompt_tokens, job.max_tokens, cached, truth))
    if config.send_done:
        await response.write(events.done())
    await response.write_eof()


class MockServer:
    """Run the mock on a loopback port inside the current event loop (tests)."""

    def __init__(self, config: MockConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = build_app(config)
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None

    @property
    def config(self) -> MockConfig:
        return self.app[CONFIG_KEY]

    @property
    def state(self) -> MockState:
        return self.app[STATE_KEY]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> "MockServer":
        self._runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=4096)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def serve_forever(config: MockConfig, host: str = "127.0.0.1", port: int = 8000, reuse_port: bool = False) -> None:
    """Blocking entry point for a separate mock process (the benchmark runs one or several)."""
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    web.run_app(
        build_app(config),
        host=host,
        port=port,
        access_log=None,
        print=None,
        reuse_port=reuse_port,
        backlog=4096,
        handler_cancellation=True,
    )
