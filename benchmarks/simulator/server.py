"""OpenAI-compatible HTTP surface of the simulator (aiohttp, one asyncio loop).

Endpoints: POST /v1/chat/completions, POST /v1/completions (SSE streaming with
`stream_options.include_usage`, written in a real engine's exact shape, `stream_shape`: vLLM's
by default, or one JSON response), GET /v1/models, GET /health, GET /version (vLLM's),
POST /tokenize, GET /metrics (Prometheus, vLLM names + `kvsim:` series + `kvsim_info`),
POST /reset_prefix_cache (vLLM's) and POST /flush_cache (SGLang's): drop the unreferenced cache; the
`slots` profile speaks llama-server instead (its metric names, `timings` in each response, GET /props,
POST /slots/{id} refused as without --slot-save-path, no cache reset),
and POST /admin/restart (the model_switch test's hook: restart with other settings, e.g. a new model
version's KV size; the cache starts empty, counters from zero; `{"config": {}}` rolls back).

A request's `priority` field orders scheduling under `scheduling_policy="priority"` (lower first,
as vLLM); under "fcfs" a non-zero priority is refused with 400, as vLLM refuses it.
Every response carries the header `X-Kvsim-Evidence: SIMULATED`, and `X-Kvsim-Device` naming the
simulated GPU the engine is (`SimConfig.device`, also the `device` label of `kvsim_build_info`):
kvselect keys a run's hardware by it (`benchmarks.validation.hardware`).

`max_tokens` defaults: 16 for completions (OpenAI's default), 128 for chat. Generation never
stops early (no EOS): finish_reason is always "length".

In-process use (tests): `server = await start_server(config)` → `server.port`, `server.url`,
`await server.stop()`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, Callable

from aiohttp import web

from benchmarks.simulator.config import SimConfig, SimConfigError
from benchmarks.simulator.engine_streams import EngineStream
from benchmarks.simulator.errors import EngineCrashed, EngineError
from benchmarks.simulator.live import LiveEngine, LiveRequest
from benchmarks.simulator.metrics import SimMetrics
from benchmarks.simulator.tokens import detokenize, render_chat, tokenize

EVIDENCE_HEADER = {"X-Kvsim-Evidence": "SIMULATED"}
DEVICE_HEADER = "X-Kvsim-Device"
STATE_KEY = web.AppKey("kvsim_state", object)


class BadRequest(ValueError):
    """The request body is invalid; the message names the field."""


def _error(status: int, message: str, kind: str | None = None) -> web.Response:
    kind = kind or {400: "BadRequestError", 429: "RateLimitError", 500: "InternalServerError"}.get(status, "Error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status, headers=EVIDENCE_HEADER)


@dataclass
class _State:
    config: SimConfig
    live: LiveEngine
    metrics: SimMetrics
    on_crash: Callable[[], None]
    requests_seen: int = 0
    crashed: bool = False
    original: SimConfig | None = None  # the config it was started with: what a rollback restores
    down: bool = False  # restarting (POST /admin/restart)
    graceful: bool = True  # the running restart holds new requests instead of refusing them
    up: asyncio.Event | None = None  # set while the engine serves
    restarts: int = 0
    restart_task: asyncio.Task | None = None  # kept: the loop holds tasks only weakly


def _state(request: web.Request) -> _State:
    return request.app[STATE_KEY]  # type: ignore[return-value]


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("body: must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("body: must be a JSON object")
    return body


def _max_tokens(body: dict[str, Any], default: int) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadRequest(f"max_tokens: must be a positive integer, got {value!r}")
    return value


def _priority(body: dict[str, Any], config: SimConfig) -> int:
    value = body.get("priority", 0)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"priority: must be an integer, got {value!r}")
    if value != 0 and config.scheduling_policy != "priority":
        raise BadRequest(f"priority: got {value} but priority scheduling is not enabled (scheduling_policy fcfs)")
    return value


def _prompt_ids(body: dict[str, Any], chat: bool) -> list[int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages: must be a non-empty list of message objects")
        return tokenize(render_chat(messages))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenize(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        return list(prompt)
    raise BadRequest("prompt: must be a string or a list of token ids")


async def handle_generate(request: web.Request, chat: bool) -> web.StreamResponse:
    state = _state(request)
    if state.crashed:
        return _error(503, "engine crashed (simulated fault)")
    if state.down:
        if not state.graceful:
            return _error(503, "engine restarting (simulated switch)")
        assert state.up is not None
        await state.up.wait()  # a graceful switch: the request waits for the new engine
    try:
        body = await _body(request)
        prompt_ids = _prompt_ids(body, chat)
        max_tokens = _max_tokens(body, 128 if chat else 16)
        stream = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        priority = _priority(body, state.config)
    except BadRequest as exc:
        return _error(400, str(exc))
    state.requests_seen += 1
    crash_after = state.config.fault_crash_after_requests
    if crash_after is not None and state.requests_seen > crash_after:
        state.crashed = True
        state.on_crash()
        return _error(503, "engine crashed (simulated fault)")
    try:
        handle = state.live.submit(
            prompt_ids, max_tokens, cache_prompt=body.get("cache_prompt") is not False, priority=priority
        )
    except EngineCrashed as exc:
        state.crashed = True
        state.on_crash()
        return _error(exc.status, str(exc))
    except EngineError as exc:
        return _error(exc.status, str(exc))
    model = body.get("model") or state.config.served_model_name
    request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    if stream:
        return await _stream(request, state, handle, chat, model, request_id, created, include_usage, max_tokens)
    try:
        tokens: list[int] = []
        async for new in handle.tokens():
            tokens.extend(new)
    except asyncio.CancelledError:
        state.live.abort(handle)
        raise
    if handle.killed:
        return _error(503, "engine restarted while the request ran (simulated switch)")
    text = detokenize(tokens)
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "length",
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
    payload = {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": _usage(handle, len(tokens), state.live.engine.slots_mode),
        "kvsim": {"evidence": "SIMULATED", "token_ids": tokens},
    }
    if state.live.engine.slots_mode:
        payload["timings"] = _timings(handle, len(tokens))
    return web.json_response(payload, headers=EVIDENCE_HEADER)


def _usage(handle: LiveRequest, completion_tokens: int, slots: bool = False) -> dict[str, Any]:
    seq = handle.seq
    usage: dict[str, Any] = {
        "prompt_tokens": seq.prompt_len,
        "completion_tokens": completion_tokens,
        "total_tokens": seq.prompt_len + completion_tokens,
    }
    if not slots:  # llama.cpp states no cached tokens in its usage: its `timings` say what it processed
        usage["prompt_tokens_details"] = {"cached_tokens": seq.hit_tokens}
    return usage


def _timings(handle: LiveRequest, completion_tokens: int) -> dict[str, Any]:
    """llama.cpp's per-response `timings` (the `slots` strategy): `prompt_n` is the prompt tokens it
    processed, the rest came from the slot's cache."""
    seq = handle.seq
    return {"prompt_n": max(seq.prompt_len - seq.hit_tokens, 0), "predicted_n": completion_tokens}


async def _stream(
    request: web.Request,
    state: _State,
    handle: LiveRequest,
    chat: bool,
    model: str,
    request_id: str,
    created: int,
    include_usage: bool,
    max_tokens: int,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **EVIDENCE_HEADER}
    )
    drop_after = state.config.fault_drop_after_tokens
    events = EngineStream(state.config.stream_shape, chat, request_id, model, created)  # type: ignore[arg-type]
    sent = 0
    try:
        await response.prepare(request)
        async for new in handle.tokens():
            text = detokenize(new)
            first = sent == 0
            sent += len(new)
            # generation never stops early: the chunk that reaches max_tokens is the last
            finish = "length" if sent >= max_tokens else None
            await response.write(
                (events.opening() if first else b"") + events.token(text if first else " " + text, finish)
            )
            if drop_after is not None and sent >= drop_after:
                state.live.abort(handle)
                if request.transport is not None:
                    request.transport.abort()  # the fault: the connection dies mid-stream
                return response
        if handle.killed:  # an abrupt restart: the old engine's connections die
            if request.transport is not None:
                request.transport.abort()
            return response
        if include_usage:
            if state.live.engine.slots_mode:
                timings = {"timings": _timings(handle, sent)}
                await response.write(events.usage(handle.seq.prompt_len, sent, None, timings))
            else:
                await response.write(events.usage(handle.seq.prompt_len, sent, handle.seq.hit_tokens))
        await response.write(events.done())
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        state.live.abort(handle)
        raise
    return response


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, chat=True)


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await handle_generate(request, chat=False)


async def handle_models(request: web.Request) -> web.Response:
    config = _state(request).config
    model = {
        "id": config.served_model_name,
        "object": "model",
        "created": 0,
        "owned_by": "kvsim",
        "root": config.model,
        "parent": None,
        "max_model_len": config.max_model_len,
    }
    return web.json_response({"object": "list", "data": [model]}, headers=EVIDENCE_HEADER)


async def handle_version(request: web.Request) -> web.Response:
    """vLLM's `GET /version`: the engine version this simulator stands in for."""
    config = _state(request).config
    return web.json_response({"version": config.engine_version, "simulator": "kvsim"}, headers=EVIDENCE_HEADER)


async def handle_health(request: web.Request) -> web.Response:
    state = _state(request)
    if state.crashed or state.down:
        return web.Response(status=503, headers=EVIDENCE_HEADER)
    return web.Response(status=200, headers=EVIDENCE_HEADER)


async def handle_tokenize(request: web.Request) -> web.Response:
    state = _state(request)
    try:
        body = await _body(request)
        prompt_ids = _prompt_ids(body, chat="messages" in body)
    except BadRequest as exc:
        return _error(400, str(exc))
    return web.json_response(
        {"count": len(prompt_ids), "max_model_len": state.config.max_model_len, "tokens": prompt_ids},
        headers=EVIDENCE_HEADER,
    )


async def handle_reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's `POST /reset_prefix_cache` and SGLang's `POST /flush_cache`: forget every cached block
    no request holds, so the swap test can time a recompute of the same history. llama.cpp (the
    `slots` strategy) has neither: 404, as llama-server answers."""
    if _state(request).live.engine.slots_mode:
        return _error(404, "File Not Found")
    dropped = _state(request).live.engine.reset_prefix_cache()
    return web.json_response({"reset": True, "dropped_blocks": dropped}, headers=EVIDENCE_HEADER)


async def handle_props(request: web.Request) -> web.Response:
    """llama-server's `GET /props` (the `slots` strategy): how many slots it runs."""
    engine = _state(request).live.engine
    if not engine.slots_mode:
        return _error(404, "File Not Found")
    return web.json_response({"total_slots": len(engine.slot_table)}, headers=EVIDENCE_HEADER)


async def handle_slot_action(request: web.Request) -> web.Response:
    """llama-server's `POST /slots/{id}?action=...`: refused as llama-server refuses it when started
    without --slot-save-path (the harness then overwrites each slot instead)."""
    if not _state(request).live.engine.slots_mode:
        return _error(404, "File Not Found")
    return _error(501, "This server does not support slots action. Start it with `--slot-save-path`")


async def handle_metrics(request: web.Request) -> web.Response:
    state = _state(request)
    if state.down:
        return _error(503, "engine restarting (simulated switch)")
    payload, content_type = state.metrics.render()
    response = web.Response(body=payload, headers=EVIDENCE_HEADER)
    response.headers["Content-Type"] = content_type
    return response


async def handle_admin_restart(request: web.Request) -> web.Response:
    """Restart the engine with the original settings plus `config` (a new model or engine version:
    e.g. another kv_bytes_per_token); `{"config": {}}` rolls back to the original. The engine is down
    `downtime_s` wall seconds (default `restart_downtime_s`); `graceful` (default `restart_graceful`)
    lets in-flight requests finish first and holds new ones, else they are cut and refused (503).
    Answers 202 at once; the restart runs in the background."""
    state = _state(request)
    try:
        body = await _body(request)
        overrides = body.get("config") or {}
        if not isinstance(overrides, dict):
            raise BadRequest("config: must be an object of simulator settings")
        original = state.original or state.config
        # one clock and one simulated GPU for the server
        settable = {item.name for item in dataclass_fields(SimConfig)} - {"time_scale", "device"}
        unknown = sorted(key for key in overrides if key not in settable)
        if unknown:
            raise BadRequest(f"config: cannot change {', '.join(unknown)} on restart")
        try:
            new = original.with_(**overrides)
        except (SimConfigError, TypeError) as exc:
            raise BadRequest(f"config.{exc}") from exc
        downtime = body.get("downtime_s", new.restart_downtime_s)
        if not isinstance(downtime, (int, float)) or isinstance(downtime, bool) or not 0 <= downtime <= 600:
            raise BadRequest(f"downtime_s: must be a number of seconds in [0, 600], got {downtime!r}")
        graceful = body.get("graceful", new.restart_graceful)
        if not isinstance(graceful, bool):
            raise BadRequest(f"graceful: must be true or false, got {graceful!r}")
    except BadRequest as exc:
        return _error(400, str(exc))
    if state.down:
        return _error(409, "a restart is already running", "ConflictError")
    state.original = original
    state.down, state.graceful = True, graceful
    if state.up is None:
        state.up = asyncio.Event()
    state.up.clear()
    state.restart_task = asyncio.get_running_loop().create_task(_restart(state, new, float(downtime), graceful))
    return web.json_response(
        {"restarting": True, "downtime_s": downtime, "graceful": graceful, "changed": sorted(overrides)},
        status=202,
        headers=EVIDENCE_HEADER,
    )


async def _restart(state: _State, config: SimConfig, downtime_s: float, graceful: bool) -> None:
    old = state.live
    if graceful:  # in-flight requests finish on the old engine
        while old.in_flight:
            await asyncio.sleep(0.01)
    await old.close()  # abrupt: whatever still runs is cut
    await asyncio.sleep(downtime_s)
    live = LiveEngine(config)
    metrics = SimMetrics(live.engine, config.served_model_name, clock=live.now)
    live.observer = metrics
    state.config, state.live, state.metrics = config, live, metrics
    state.restarts += 1
    state.down = False
    assert state.up is not None
    state.up.set()


def new_device() -> str:
    """A fresh simulated GPU's id (unique across machines, as a GPU UUID is)."""
    return f"kvsim-{uuid.uuid4()}"


def create_app(config: SimConfig, on_crash: Callable[[], None] | None = None) -> web.Application:
    """The aiohttp application; the engine starts with the app (needs a running loop)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    if not config.device:
        config = config.with_(device=new_device())

    async def name_device(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[DEVICE_HEADER] = config.device

    app.on_response_prepare.append(name_device)

    async def startup(app: web.Application) -> None:
        live = LiveEngine(config)
        metrics = SimMetrics(live.engine, config.served_model_name, clock=live.now)
        live.observer = metrics
        app[STATE_KEY] = _State(config, live, metrics, on_crash or (lambda: None))

    async def cleanup(app: web.Application) -> None:
        state = app[STATE_KEY]
        restart = state.restart_task  # type: ignore[attr-defined]
        if restart is not None and not restart.done():
            restart.cancel()
        await state.live.close()  # type: ignore[attr-defined]

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/version", handle_version)
    app.router.add_post("/tokenize", handle_tokenize)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_post("/reset_prefix_cache", handle_reset_prefix_cache)
    app.router.add_post("/flush_cache", handle_reset_prefix_cache)
    app.router.add_get("/props", handle_props)
    app.router.add_post("/slots/{slot}", handle_slot_action)
    app.router.add_post("/admin/restart", handle_admin_restart)
    return app


class SimServer:
    """A running simulator server (in-process)."""

    def __init__(self, runner: web.AppRunner, port: int, host: str) -> None:
        self.runner, self.port, self.host = runner, port, host

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> _State:
        return self.runner.app[STATE_KEY]  # type: ignore[return-value]

    @property
    def engine(self):
        return self.state.live.engine

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_server(
    config: SimConfig, host: str = "127.0.0.1", port: int = 0, hard_crash: bool = False
) -> SimServer:
    """Start serving on `port` (0: a free port); returns the handle with the bound port."""
    holder: dict[str, SimServer] = {}

    def on_crash() -> None:
        if hard_crash:
            os._exit(70)
        server = holder.get("server")
        if server is not None:  # stop listening, drop every connection
            asyncio.get_running_loop().create_task(server.runner.shutdown())

    app = create_app(config, on_crash)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = runner.addresses[0][1]
    server = SimServer(runner, bound, host)
    holder["server"] = server
    return server


async def serve_forever(config: SimConfig, host: str, port: int) -> None:
    server = await start_server(config, host, port, hard_crash=True)
    print(
        f"kvsim serving {config.served_model_name} (profile {config.profile}, {config.gpu}, "
        f"{config.total_blocks} KV blocks of {config.effective_block_size} tokens, time scale {config.time_scale}) "
        f"on {server.url} — all output is SIMULATED",
        flush=True,
    )
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


class ServerThread:
    """The simulator on its own event loop in a background thread, for synchronous callers.

    with ServerThread(SimConfig(time_scale=50)) as server:
        requests.post(server.url + "/v1/completions", ...)
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config, self.host, self.requested_port = config, host, port
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: SimServer | None = None
        self._thread = None

    def start(self) -> "ServerThread":
        import threading

        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            try:
                self.server = self.loop.run_until_complete(start_server(self.config, self.host, self.requested_port))
            except BaseException as exc:  # reported to the caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.server.stop())
            self.loop.close()

        self._thread = threading.Thread(target=main, name="kvsim-server", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    @property
    def port(self) -> int:
        assert self.server is not None, "server not started"
        return self.server.port

    @property
    def url(self) -> str:
        assert self.server is not None, "server not started"
        return self.server.url

    def stop(self) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
            self._thread = None

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
