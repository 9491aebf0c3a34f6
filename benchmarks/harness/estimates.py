"""How long a validation test will take and how hard it will load the endpoint, from its parameters,
so the validation page can say so before Run.

Each test estimates its own run (`TestSpec.estimate` in its workload module, with the helpers here);
`benchmarks.harness.workloads.estimate` picks the test's and words the figures with `summary`.
The fixed phases (warm-up, measured duration, settling, idle time, a background's lead) are
known exactly; a request's own time is not known before the run, so it is taken at the latency
budget the run is judged against (TTFT + output tokens x TPOT; `ASSUMED` when the constraints set
no budget), and long prompts add their prefill at `ASSUMED["prefill_tokens_s"]`. The figure is an
order of magnitude, labelled "about" where it is shown. A test without a spec gets an estimate
from the usual parameter names (duration_s, warmup_s, settle_s, concurrency), or none (`generic`).

A test is *long* from `LONG_S` seconds and *heavy* from `HEAVY_CONCURRENCY` concurrent requests;
the page warns about both (the endpoint should not be serving production traffic meanwhile).
Pure Python, no Django.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

ASSUMED = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "prefill_tokens_s": 10_000.0}
LONG_S = 900.0  # 15 minutes
HEAVY_CONCURRENCY = 128
LONG, HEAVY = "long", "heavy"


class Load(NamedTuple):
    """A test's estimated run: wall seconds, requests in flight at the peak, requests and tokens sent."""

    seconds: float
    concurrency: float
    requests: float
    tokens: float


def number(params: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    """A parameter as a finite, non-negative number; `default` when it is missing or is none."""
    value = params.get(key)
    try:
        figure = float(value)
    except (TypeError, ValueError):
        return default
    return figure if math.isfinite(figure) and figure >= 0 else default


def numbers(params: Mapping[str, Any], key: str) -> list[float]:
    """A list parameter's numbers (its other items left out)."""
    return [float(item) for item in params.get(key) or [] if isinstance(item, (int, float))]


def request_seconds(params: Mapping[str, Any], input_tokens: float = 0.0, output_key: str = "output_tokens") -> float:
    """One request at the latency budget: TTFT (plus the prefill of a long prompt) + output x TPOT."""
    ttft = number(params, "ttft_p95_ms", ASSUMED["ttft_ms"]) / 1000
    tpot = number(params, "tpot_p95_ms", ASSUMED["tpot_ms"]) / 1000
    prefill = max(input_tokens - 8192, 0) / ASSUMED["prefill_tokens_s"]
    return ttft + prefill + number(params, output_key, 128) * tpot


def request_tokens(params: Mapping[str, Any]) -> float:
    """Prompt and output tokens of one request of the usual shape (input_tokens, output_tokens)."""
    return number(params, "input_tokens", 512) + number(params, "output_tokens", 128)


def closed_loop(concurrency: float, seconds: float, per_request: float) -> float:
    """Requests a closed loop of `concurrency` completes in `seconds` at `per_request` seconds each."""
    return concurrency * seconds / per_request if per_request > 0 else 0.0


def steady_load(params: Mapping[str, Any], seconds: float) -> Load:
    """`concurrency` requests of the usual shape kept in flight for `seconds`."""
    concurrency = number(params, "concurrency", 1)
    requests = closed_loop(concurrency, seconds, request_seconds(params, number(params, "input_tokens")))
    return Load(seconds, concurrency, requests, requests * request_tokens(params))


def generic(params: Mapping[str, Any]) -> Load | None:
    """A test without a spec: its usual phase names and concurrency, or None when it names no phase."""
    seconds = sum(number(params, key) for key in ("warmup_s", "ramp_up_s", "duration_s", "settle_s", "idle_s"))
    if not seconds:
        return None
    concurrency = number(params, "concurrency")
    requests = closed_loop(concurrency, seconds, request_seconds(params, number(params, "input_tokens")))
    return Load(seconds, concurrency, requests, requests * request_tokens(params))


def summary(load: Load) -> dict[str, Any]:
    """{seconds, concurrency, requests, tokens, warnings}: tokens count prompt and output tokens
    sent through the endpoint; warnings name a long or a heavy test."""
    warnings = [LONG] if load.seconds >= LONG_S else []
    if load.concurrency >= HEAVY_CONCURRENCY:
        warnings.append(HEAVY)
    return {
        "seconds": round(load.seconds),
        "concurrency": int(load.concurrency),
        "requests": int(round(load.requests)),
        "tokens": int(round(load.tokens)),
        "warnings": warnings,
    }
