"""What every validation test shares: the target, the plans' helpers, progress, the session
(client, metrics and GPU samplers on one clock), verdict helpers and the result builder.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp

from benchmarks.harness import HARNESS_VERSION
from benchmarks.harness.cache_model import SLOT_RESIDENT, CacheModel
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.client_timing import ReceiveClock, client_slack_ms, load_held
from benchmarks.harness.load_config import LoadOutcome
from benchmarks.harness.load_summary import requests_rows
from benchmarks.harness.metrics import MetricsRecording, MetricsSampler, probe_simulator
from benchmarks.harness.nvml import GpuSampler
from benchmarks.harness.prompts import PromptFactory, calibrate
from benchmarks.harness.request_record import Api, RequestRecord, RequestSpec
from benchmarks.harness.safety import check_target
from benchmarks.result import MEASURED, SIMULATED, LoadPoint, NormalizedResult
from benchmarks.suite.params import MAX_ERROR_RATE, PlanError
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_JUDGED,
    PASS,
    compare,
    judge_percentile,
    not_applicable,
    reasons_of,
    verdict,
)
from selection.domain.messages import NAME_SEPARATOR, Message, load
from selection.domain.messages import marked as _

NOT_HELD = _("the client did not hold the load")
CANCELLED = _("cancelled: partial data")  # the run note of a test cancelled midway
NO_REQUEST = _("no request completed or failed")
NO_FAILED_REQUEST = _("no failed requests of %(total)s")
FAILED_REQUESTS = _("%(failed)s of %(total)s requests failed: %(classes)s")
NOTHING_TO_MEASURE = _("no completed requests to measure the %(what)s p95")
POINT_VS_BUDGET = _("%(what)s p95 %(value)s ms (n=%(n)s) vs budget %(budget)s ms")
POINT_CLIENT_BOUND = _("%(detail)s; inconclusive (client-bound): %(reasons)s")
FAILED_DESPITE_LATENCY = _(
    "%(detail)s, but %(rate)s of requests failed (at most %(allowed)s allowed): a latency over the few that "
    "succeeded is not a pass"
)
# what the aborts left behind (`kv_verdicts`)
NO_METRICS = _("the engine exports no metrics: cannot judge")
NO_KV_METRIC = _("the engine exports no KV usage metric")
RELEASED_AFTER_LOAD = _("%(running)s running, %(waiting)s waiting %(waited)s s after the load")
KV_VS_BASELINE = _("KV usage %(kv)s vs baseline %(base)s (tolerance %(tolerance)s)")

TOOL = "kvselect-harness"


FORMAT = "kvselect-harness"


KV_BASELINE_TOLERANCE = 0.02


# prefix reuse passes when the hit ratio reaches this share of the prompt's shared part (the
# first request of each worker cannot hit, so the full shared share is out of reach)
PREFIX_REUSE_MIN_SHARE = 0.5


@dataclass
class Target:
    """The endpoint under test. The API key is never shown in repr or results."""

    endpoint_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    metrics_url: str | None = None
    engine: str = "auto"  # vllm, sglang, lmdeploy, tgi, trtllm, llamacpp, simulator, auto
    api: Api = "chat"
    evidence: str | None = None  # None: SIMULATED when engine == "simulator", else MEASURED
    max_model_len: int | None = None
    ignore_eos: bool | None = True  # None: do not send the field (engines that reject it)
    max_tokens_field: str = "max_tokens"
    allowed_hosts: list[str] | str | None = None  # when set, the endpoint and metrics URL are checked
    request_timeout_s: float = 600.0
    # llama.cpp's per-request prompt cache: None sends nothing; False asks the engine not to reuse a
    # cached prefix (llama.cpp only: the prefix test's "off" run on the same endpoint)
    cache_prompt: bool | None = None
    receive_clock: ReceiveClock = "kernel"  # kernel receive stamps, or user-space time (client_timing.ReceiveClock)
    # the engine's documented cache model (the catalog's, as the launch flags deploy it): behaviour it
    # rules out is judged "not applicable" with its source; None: every behaviour is judged as observed
    cache_model: CacheModel | None = None

    @property
    def evidence_label(self) -> str:
        if self.evidence in (MEASURED, SIMULATED):
            return self.evidence
        return SIMULATED if self.engine == "simulator" else MEASURED

    def describe(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint_url,
            "model": self.model,
            "metrics_url": self.metrics_url,
            "engine": self.engine,
            "api": self.api,
            "api_key_set": bool(self.api_key),
            **({"cache_prompt": self.cache_prompt} if self.cache_prompt is not None else {}),
            "receive_clock": self.receive_clock,
            **({"cache_model": self.cache_model.describe()} if self.cache_model is not None else {}),
        }

    def client(
        self, endpoint_url: str | None = None, model: str | None = None, keep_text: bool = False
    ) -> OpenAIClient:
        """A client for this target (or another endpoint of the same deployment, as the model switch's
        second version): its key, timeout and receive clock; no keep-alive on llama.cpp (it closes a
        connection after every streamed response)."""
        return OpenAIClient(
            endpoint_url or self.endpoint_url,
            model or self.model,
            api_key=self.api_key,
            request_timeout_s=self.request_timeout_s,
            keep_text=keep_text,
            keep_alive=self.engine != "llamacpp",
            kernel_timestamps=self.receive_clock == "kernel",
            allowed_hosts=self.allowed_hosts,
        )


TRUNCATION_TOLERANCE = 0.9  # an engine reporting fewer prompt tokens than this share of the rung truncated it


class Reporter:
    """Maps each phase's progress onto the whole test and checks the cancel hook."""

    def __init__(self, progress: Callable[[dict[str, Any]], Any] | None, cancel: Any) -> None:
        self.progress = progress
        self.cancel = cancel
        self.done = 0
        self.ttft_p50: float | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvselect-report")

    def cancelled(self) -> bool:
        if self.cancel is None:
            return False
        return bool(self.cancel.is_set() if hasattr(self.cancel, "is_set") else self.cancel())

    def phase(self, name: str, start: float, end: float, base_done: int = 0) -> Callable[[dict[str, Any]], None]:
        def report(payload: dict[str, Any]) -> None:
            self.done = base_done + int(payload.get("requests_done") or 0)
            if payload.get("ttft_p50_ms") is not None:
                self.ttft_p50 = payload["ttft_p50_ms"]
            if self.progress is not None:
                self.progress(
                    payload
                    | {
                        "phase": name,
                        "percent": round(start + (end - start) * float(payload.get("percent") or 0) / 100.0, 1),
                        "requests_done": self.done,
                    }
                )

        return report

    async def emit(self, name: str, percent: float) -> None:
        if self.progress is not None:
            payload = {
                "phase": name,
                "percent": round(percent, 1),
                "requests_done": self.done,
                "ttft_p50_ms": self.ttft_p50,
            }
            await asyncio.get_running_loop().run_in_executor(self._executor, self.progress, payload)

    async def ticking(self, name: str, start: float, end: float, awaitable: Any, expected_s: float) -> Any:
        """Await `awaitable` while reporting progress every second (phases not driven by run_load)."""
        task = asyncio.ensure_future(awaitable)
        begin = time.perf_counter()
        while True:
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if done:
                return task.result()
            if self.cancelled():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                raise Cancelled()
            fraction = min((time.perf_counter() - begin) / max(expected_s, 1e-3), 0.99)
            await self.emit(name, start + (end - start) * fraction)

    def close(self) -> None:
        self._executor.shutdown(wait=False)


class Cancelled(Exception):
    pass


class Session:
    """A test's client, metrics sampler and GPU sampler, sharing one time zero."""

    def __init__(self, target: Target, keep_text: bool = False, metrics_interval_s: float = 1.0) -> None:
        if target.allowed_hosts is not None:
            check_target(target.endpoint_url, target.allowed_hosts)
            if target.metrics_url:
                check_target(target.metrics_url, target.allowed_hosts)
        self.target = target
        self.time_zero = time.perf_counter()
        self.client = target.client(keep_text=keep_text)
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
        self.metrics = MetricsSampler(
            target.metrics_url,
            target.engine if target.engine != "simulator" else "auto",
            interval_s=metrics_interval_s,
            time_zero=self.time_zero,
            headers=headers,
            allowed_hosts=target.allowed_hosts,
        )
        self.gpu = GpuSampler(interval_s=max(metrics_interval_s, 0.2), time_zero=self.time_zero)
        self.prompts: PromptFactory | None = None
        self.endpoint_simulated = False  # the endpoint answered as kvselect's simulator (probe_simulator)

    async def __aenter__(self) -> "Session":
        headers = {"Authorization": f"Bearer {self.target.api_key}"} if self.target.api_key else None
        self.endpoint_simulated = await probe_simulator(
            self.target.endpoint_url, headers, allowed_hosts=self.target.allowed_hosts
        )
        await self.client.open()
        self.prompts = await calibrate(self.client, api=self.target.api)
        await self.metrics.start()
        await self.gpu.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.metrics.stop()
            await self.gpu.__aexit__(*exc)
        finally:
            await self.client.close()

    def spec(self, prompt: str | None = None, max_tokens: int = 64, **kwargs: Any) -> RequestSpec:
        target = self.target
        if target.cache_prompt is not None:
            kwargs["extra_body"] = {"cache_prompt": target.cache_prompt, **(kwargs.get("extra_body") or {})}
        return RequestSpec(
            api=target.api,
            prompt=prompt,
            max_tokens=max_tokens,
            ignore_eos=target.ignore_eos,
            max_tokens_field=target.max_tokens_field,
            **kwargs,
        )  # type: ignore[arg-type]

    def now(self) -> float:
        return time.perf_counter() - self.time_zero

    @property
    def simulated(self) -> bool:
        """The simulator served this session: declared (the target), answered as it (the endpoint's
        evidence header) or marked its metrics (kvsim_info). Any one makes the evidence SIMULATED."""
        return self.target.evidence_label == SIMULATED or self.endpoint_simulated or self.metrics.recording.simulated

    @property
    def evidence(self) -> str:
        return SIMULATED if self.simulated else MEASURED

    async def kv_now(self) -> dict[str, float] | None:
        return await self.metrics.sample_once()


def client_bound_reasons(point: LoadPoint) -> list[Any]:
    """Why a client-bound point's figures are partly the client's, as messages where the load client
    wrote them (its English text otherwise); empty for a point the client held."""
    if not point.client_bound:
        return []
    extra = point.extra or {}
    stored = extra.get("client_bound_reason_messages")
    return [load(m) for m in stored] if stored else list(extra.get("client_bound_reasons") or [Message(NOT_HELD)])


def detail_message_of(judged: dict[str, Any]) -> Any:
    """A verdict's detail as a Message (or Join) again, to extend it; its text when written as text."""
    return load(judged.get("detail_message")) or judged["detail"]


def make_verdict(
    name: str,
    passed: bool | None,
    detail: str | Message,
    value: Any = None,
    threshold: Any = None,
    n: int | None = None,
    status: str | None = None,
    interval: Any = None,
) -> dict[str, Any]:
    if status is None:
        status = PASS if passed is True else FAIL if passed is False else NOT_JUDGED
    return verdict(name, status, detail, value, threshold, n, interval)


def budget_verdicts(
    point: LoadPoint, params: dict[str, Any], label: str = "", records: list[RequestRecord] | None = None
) -> list[dict[str, Any]]:
    """Latency p95 of the successful `records` against its budget, with sample size and bootstrap
    interval (benchmarks.verdicts). A point whose error rate exceeds `max_error_rate`
    (default MAX_ERROR_RATE, as scoring's) fails whatever its p95; a client-bound point's failure is
    inconclusive. Without `records` (a point read back from a file) the point's own p95 is judged."""
    verdicts = []
    reasons = client_bound_reasons(point)
    max_errors = float(params.get("max_error_rate", MAX_ERROR_RATE))
    too_many_errors = point.error_rate is not None and point.error_rate > max_errors
    ok = [r for r in records or [] if r.ok and not r.aborted]  # as summarize counts completed requests
    for key, stats, attr in (
        ("ttft_p95_ms", point.ttft_ms, "ttft_ms"),
        ("tpot_p95_ms", point.tpot_ms, "tpot_ms"),
        ("e2e_p95_ms", point.e2e_ms, "e2e_ms"),
    ):
        budget = params.get(key)
        if budget is None:
            continue
        name = f"{key.replace('_p95_ms', '')}_p95_within_budget" + (f"[{label}]" if label else "")
        what = attr.replace("_ms", "").upper()
        if records is not None:
            judged = judge_percentile(
                name,
                [getattr(r, attr) for r in ok],
                95,
                float(budget),
                what,
                client_bound_reasons=reasons,
                client_slack_ms=client_slack_ms(point) if attr != "tpot_ms" else None,
                load_held=load_held(point),
            )
        elif stats.p95 is None:
            judged = make_verdict(
                name, None, Message(NOTHING_TO_MEASURE, {"what": what}), None, budget, status=INSUFFICIENT_DATA
            )
        else:
            n = point.requests_completed
            status = INSUFFICIENT_DATA if (n or 0) < MIN_SAMPLES else compare(stats.p95, None, float(budget))
            figures = {"what": what, "value": f"{stats.p95:.1f}", "n": n, "budget": f"{budget:g}"}
            detail = Message(POINT_VS_BUDGET, figures)
            if reasons and status in (PASS, FAIL):
                status = INCONCLUSIVE
                detail = Message(POINT_CLIENT_BOUND, {"detail": detail, "reasons": reasons_of(reasons)})
            judged = make_verdict(name, None, detail, stats.p95, budget, n, status)
        if too_many_errors and judged["status"] != INSUFFICIENT_DATA:
            rates = {"rate": f"{point.error_rate:.1%}", "allowed": f"{max_errors:.1%}"}
            judged = verdict(
                name,
                FAIL,
                Message(FAILED_DESPITE_LATENCY, {"detail": detail_message_of(judged), **rates}),
                judged["value"],
                budget,
                judged["n"],
                judged["interval"],
            )
        verdicts.append(judged)
    return verdicts


def errors_verdict(points: list[LoadPoint], name: str = "zero_errors") -> dict[str, Any]:
    failed = sum(p.requests_failed or 0 for p in points)
    total = failed + sum(p.requests_completed or 0 for p in points)
    classes: dict[str, int] = {}
    for p in points:
        for k, v in (p.extra.get("errors_by_class") or {}).items():
            classes[k] = classes.get(k, 0) + v
    if total == 0:
        return make_verdict(name, None, Message(NO_REQUEST), 0, 0, 0, INSUFFICIENT_DATA)
    detail = (
        Message(NO_FAILED_REQUEST, {"total": total})
        if not failed
        else Message(
            FAILED_REQUESTS,
            {
                "failed": failed,
                "total": total,
                "classes": NAME_SEPARATOR.join(f"{k} {v}" for k, v in sorted(classes.items())),
            },
        )
    )
    return make_verdict(name, failed == 0, detail, failed, 0, total)


def series_in(recording: MetricsRecording, name: str, start: float, end: float) -> list[float]:
    return [v for t, v in recording.series.get(name, []) if start <= t <= end]


def build_result(
    test: str,
    session: Session,
    params: dict[str, Any],
    points: list[LoadPoint],
    outcomes: list[LoadOutcome],
    verdicts: list[dict[str, Any]],
    notes: list[str | Message],
    partial: bool,
    extra_meta: dict[str, Any] | None = None,
) -> NormalizedResult:
    """The test's result; `notes` written as messages keep their message beside the English text
    (NormalizedResult.add_note): add a note to the finished result with `result.add_note`."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for index, outcome in enumerate(outcomes):
        rows.extend(requests_rows(outcome, point_index=index, time_zero=session.time_zero))
    from benchmarks.result import REQUEST_COLUMNS

    frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS)) if rows else None
    timeseries: dict[str, list[list[float]]] = {}
    for name, values in session.metrics.recording.series.items():
        timeseries[name] = values
    for name, values in session.gpu.recording.series.items():
        timeseries[name] = values
    metadata = {
        "target": session.target.describe(),
        "engine": session.metrics.recording.engine or session.target.engine,
        "model": session.target.model,
        "params": params,
        "prompts": session.prompts.describe() if session.prompts else None,
        "engine_metrics": session.metrics.recording.to_dict(),
        "gpu": session.gpu.recording.to_dict(),
        "raw_metric_names": sorted(session.metrics.recording.raw)[:500],
        # where TTFT/ITL times came from: kernel receive stamps, or the client's loop (user space)
        "client_clock": session.client.timestamping(),
        # how the simulator was recognised (any one makes the result SIMULATED), for the reader of the file
        "simulator": {
            "declared": session.target.evidence_label == SIMULATED,
            "endpoint_header": session.endpoint_simulated,
            "metrics_mark": session.metrics.recording.simulated,
        },
    }
    if extra_meta:
        metadata.update(extra_meta)
    from benchmarks.result import DEFINITIONS

    result = NormalizedResult(
        tool=TOOL,
        format=FORMAT,
        tool_version=HARNESS_VERSION,
        evidence=session.evidence,  # type: ignore[arg-type]
        test=test,
        metadata=metadata,
        definitions=dict(DEFINITIONS),
        points=points,
        requests=frame,
        timeseries=timeseries,
        verdicts=verdicts,
        partial=partial,
    )
    for note in notes:
        result.add_note(note)
    return result


async def settle_after_load(
    session: Session, baseline: dict[str, float] | None, settle_s: float, reporter: Reporter, phase: str, pct: float
) -> dict[str, Any]:
    """After a load: wait until nothing runs and KV usage is back to its baseline (or time runs out)."""
    start = time.perf_counter()
    last: dict[str, float] | None = None
    while time.perf_counter() - start < settle_s and not reporter.cancelled():
        last = await session.kv_now()
        if last is None:
            break
        running = (last.get("running") or 0) + (last.get("waiting") or 0)
        kv = last.get("kv_usage_ratio")
        base = (baseline or {}).get("kv_usage_ratio")
        if running == 0 and (kv is None or base is None or kv <= base + KV_BASELINE_TOLERANCE):
            break
        await reporter.emit(phase, pct)
        await asyncio.sleep(0.5)
    return {"after": last, "waited_s": round(time.perf_counter() - start, 2)}


def kv_verdicts(
    baseline: dict[str, float] | None, settled: dict[str, Any], cache_model: CacheModel | None = None
) -> list[dict[str, Any]]:
    """Requests and KV released after the aborts. On an engine whose documented cache model keeps a
    finished request's KV resident (llama.cpp's slots), KV usage staying up is the design, not a
    leak: that verdict is not applicable (with the source); the requests must still be released."""
    after = settled.get("after")
    if after is None:
        return [make_verdict("kv_back_to_baseline_after_aborts", None, Message(NO_METRICS))]
    verdicts = []
    running = after.get("running")
    if running is not None:
        waiting = after.get("waiting") or 0
        verdicts.append(
            make_verdict(
                "requests_released_after_aborts",
                running + waiting == 0,
                Message(
                    RELEASED_AFTER_LOAD,
                    {"running": f"{running:g}", "waiting": f"{waiting:g}", "waited": f"{settled['waited_s']}"},
                ),
                running + waiting,
                0,
            )
        )
    kv, base = after.get("kv_usage_ratio"), (baseline or {}).get("kv_usage_ratio")
    figures = (
        None
        if kv is None or base is None
        else Message(
            KV_VS_BASELINE, {"kv": f"{kv:.3f}", "base": f"{base:.3f}", "tolerance": f"{KV_BASELINE_TOLERANCE}"}
        )
    )
    if cache_model is not None and cache_model.keeps_finished_kv:
        verdicts.append(
            not_applicable(
                "kv_back_to_baseline_after_aborts",
                cache_model.resident_kv_reason(),
                cache_model.source,
                observed=figures or "",
            )
        )
    elif figures is None:
        verdicts.append(make_verdict("kv_back_to_baseline_after_aborts", None, Message(NO_KV_METRIC)))
    else:
        verdicts.append(
            make_verdict("kv_back_to_baseline_after_aborts", kv <= base + KV_BASELINE_TOLERANCE, figures, kv, base)
        )
    return verdicts


CACHE_RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")  # vLLM's (dev mode in some versions), SGLang's
# how the cache was emptied, as a page shows it: each endpoint by its purpose (its path is the English text)
RESET_CONTEXT = "cache reset method"
RESET_BY_PATH = {
    "/reset_prefix_cache": Message("POST /reset_prefix_cache", context=RESET_CONTEXT),
    "/flush_cache": Message("POST /flush_cache", context=RESET_CONTEXT),
}
NO_CACHE_RESET = _("none: the engine offers no cache reset")
NO_SLOT_COUNT = _("none: the engine states no slot count (GET /props total_slots)")
SLOTS_ERASED = _("%(slots)s slots erased (POST /slots/{id}?action=erase)")
FRESH_SLOTS = _("fresh slots: each of the %(slots)s slots overwritten with an unrelated %(tokens)s-token prompt")
FILLER_TOKENS = 16  # each llama.cpp slot is overwritten with a prompt this long when its cache cannot be erased


async def reset_cache(session: Session) -> dict[str, Any]:
    """Bring the engine's prefix cache to an empty state, and say how: vLLM's `POST
    /reset_prefix_cache`, SGLang's `POST /flush_cache`; on a per-slot engine (llama.cpp) each slot's
    `POST /slots/{id}?action=erase` (served with --slot-save-path), else fresh slots: every slot
    (GET /props total_slots) overwritten by an unrelated short prompt, so none holds an earlier
    prefix. {"method": ..., "reset": bool}; `reset` False when the engine offers no way."""
    client = session.client
    for path in CACHE_RESET_PATHS:
        try:
            status, _body = await client.post_json(path, {}, timeout_s=30.0)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            continue
        if 200 <= status < 300:
            return _reset_state(RESET_BY_PATH[path], True)
    model = session.target.cache_model
    if session.target.engine != "llamacpp" and (model is None or model.kind != SLOT_RESIDENT):
        return _reset_state(Message(NO_CACHE_RESET), False)
    try:
        slots = int((await client.get_json("/props")).get("total_slots") or 0)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, AttributeError, TypeError):
        slots = 0
    if slots <= 0:
        return _reset_state(Message(NO_SLOT_COUNT), False)
    erased = 0
    for slot in range(slots):
        try:
            status, _body = await client.post_json(f"/slots/{slot}?action=erase", {}, timeout_s=10.0)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            break
        if not 200 <= status < 300:
            break
        erased += 1
    if erased == slots:
        return _reset_state(Message(SLOTS_ERASED, {"slots": slots}), True, slots)
    assert session.prompts is not None
    for index in range(slots):  # least recently used slot first: each filler takes another slot
        filler = RequestSpec(
            api=session.target.api,
            prompt=session.prompts.text(FILLER_TOKENS, seed=880_000 + index),
            max_tokens=1,
            ignore_eos=session.target.ignore_eos,
            max_tokens_field=session.target.max_tokens_field,
            extra_body={"cache_prompt": True},
            request_id=f"fresh-slot-{index}",
        )
        await client.send(filler)
    return _reset_state(Message(FRESH_SLOTS, {"slots": slots, "tokens": FILLER_TOKENS}), True, slots)


def _reset_state(method: Message, reset: bool, slots: int | None = None) -> dict[str, Any]:
    """`reset_cache`'s answer: the method in English (`reset_method` reads it back as a message)."""
    state: dict[str, Any] = {"method": str(method), "reset": reset}
    if slots is not None:
        state["slots"] = slots
    return state


def reset_method(state: dict[str, Any] | None) -> Any:
    """How the cache was emptied (`reset_cache`'s state) as a message where kvselect wrote the method,
    else its text as stored; "" without a state."""
    return reset_method_message((state or {}).get("method"))


_SLOTS_ERASED = re.compile(r"(\d+) slots erased \(POST /slots/\{id\}\?action=erase\)")
_FRESH_SLOTS = re.compile(r"fresh slots: each of the (\d+) slots overwritten with an unrelated (\d+)-token prompt")


def reset_method_message(method: str | None) -> Any:
    """A cache-reset method's English text (`reset_cache`'s, or "POST <path>") as its message, so a
    page shows it in its language; a text kvselect did not write passes unchanged."""
    if not method:
        return ""
    if method.startswith("POST ") and method[5:] in RESET_BY_PATH:
        return RESET_BY_PATH[method[5:]]
    if method in (NO_CACHE_RESET, NO_SLOT_COUNT):
        return Message(method)
    if found := _SLOTS_ERASED.fullmatch(method):
        return Message(SLOTS_ERASED, {"slots": int(found[1])})
    if found := _FRESH_SLOTS.fullmatch(method):
        return Message(FRESH_SLOTS, {"slots": int(found[1]), "tokens": int(found[2])})
    return method


def require_param(params: dict[str, Any], key: str, kind: type, minimum: float = 0) -> Any:
    value = params.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < minimum:
        raise PlanError(f"params.{key}: must be a number >= {minimum}, got {value!r}")
    return kind(value)


def format_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


NOT_AVAILABLE = _("n/a")


def figure_or_na(value: Any, spec: str) -> str | Message:
    """A figure formatted by `spec` ("{:,.0f}", "{:.0%}"), or "n/a" (translated where shown) when missing."""
    return Message(NOT_AVAILABLE) if value is None else spec.format(value)


def ms_or_na(value: float | None) -> str | Message:
    """`format_ms` inside a message: "n/a" is a word, translated where shown."""
    return figure_or_na(value, "{:.0f} ms")
