"""How long a validation test will take and how hard it will load the endpoint, from its parameters,
so the validation page can say so before Run.

The fixed phases (warm-up, measured duration, settling, idle time, a background's lead) are
known exactly; a request's own time is not known before the run, so it is taken at the latency
budget the run is judged against (TTFT + output tokens x TPOT; `ASSUMED` when the constraints set
no budget), and long prompts add their prefill at `ASSUMED["prefill_tokens_s"]`. The figure is an
order of magnitude, labelled "about" where it is shown. A test this module does not know gets an
estimate from the usual parameter names (duration_s, warmup_s, settle_s, concurrency), or none.

A test is *long* from `LONG_S` seconds and *heavy* from `HEAVY_CONCURRENCY` concurrent requests;
the page warns about both (the endpoint should not be serving production traffic meanwhile).
Pure Python, no Django.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

ASSUMED = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "prefill_tokens_s": 10_000.0}
LONG_S = 900.0  # 15 minutes
HEAVY_CONCURRENCY = 128
LONG, HEAVY = "long", "heavy"


def _number(params: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = params.get(key)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) and number >= 0 else default


def request_seconds(params: Mapping[str, Any], input_tokens: float = 0.0, output_key: str = "output_tokens") -> float:
    """One request at the latency budget: TTFT (plus the prefill of a long prompt) + output x TPOT."""
    ttft = _number(params, "ttft_p95_ms", ASSUMED["ttft_ms"]) / 1000
    tpot = _number(params, "tpot_p95_ms", ASSUMED["tpot_ms"]) / 1000
    prefill = max(input_tokens - 8192, 0) / ASSUMED["prefill_tokens_s"]
    return ttft + prefill + _number(params, output_key, 128) * tpot


def _closed_loop(concurrency: float, seconds: float, per_request: float) -> float:
    return concurrency * seconds / per_request if per_request > 0 else 0.0


def estimate(test: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """{seconds, concurrency, requests, tokens, warnings} for `test` run with `params`; None when
    nothing can be estimated. Tokens count prompt and output tokens sent through the endpoint."""
    p = params
    per_token = _number(p, "input_tokens", 512) + _number(p, "output_tokens", 128)
    if test == "concurrency_stress":
        concurrency = _number(p, "concurrency", 1)
        loaded = _number(p, "warmup_s") + _number(p, "ramp_up_s") + _number(p, "duration_s")
        seconds = loaded + _number(p, "settle_s")
        requests = _closed_loop(concurrency, loaded, request_seconds(p, _number(p, "input_tokens")))
        tokens = requests * per_token
    elif test == "long_context":
        rungs = [float(r) for r in p.get("rungs") or [] if isinstance(r, (int, float))]
        repeats = max(_number(p, "repeats", 1), 1)
        lead = _number(p, "background_lead_s") if p.get("with_background") else 0.0
        per_rung = [lead + request_seconds(p, rung) for rung in rungs]
        seconds = repeats * sum(per_rung)
        background = _number(p, "background_concurrency") if p.get("with_background") else 0.0
        concurrency = background + 1
        bg_request = _number(p, "background_input_tokens", 256) + _number(p, "background_output_tokens", 64)
        requests = repeats * len(rungs) + _closed_loop(background, seconds, request_seconds(p))
        tokens = repeats * sum(rungs) + (requests - repeats * len(rungs)) * bg_request
    elif test == "swap_recovery":
        # first turns of every session, then warm, resumed, never-swap and recomputed turns; the
        # pressure pushes pressure_factor x the KV capacity through (else runs for idle_s)
        idle = max(_number(p, "sessions", 1), 1)
        warm = _number(p, "warm_sessions", idle)
        never = _number(p, "never_swap_sessions")
        parallel = max(_number(p, "parallel", 16), 1)
        timed = max(_number(p, "resume_parallel", 1), 1)
        history = _number(p, "history_tokens", 512)
        resumed = history + _number(p, "output_tokens", 32) + _number(p, "turn_input_tokens", 256)
        first = math.ceil((idle + warm + never) / parallel) * request_seconds(p, history)
        seconds = first + math.ceil((warm + 2 * idle + never) / timed) * request_seconds(p, resumed)
        pressure = _number(p, "pressure_concurrency")
        concurrency = max(parallel, pressure + never)
        capacity = _number(p, "kv_capacity_tokens")
        p_in = _number(p, "pressure_input_tokens") or min(max(capacity // max(2 * pressure, 1), 256), 8192)
        per_pressure = p_in + _number(p, "output_tokens", 32)
        if capacity and pressure:
            pressure_requests = math.ceil(capacity * _number(p, "pressure_factor", 1.5) / per_pressure)
            seconds += max(math.ceil(pressure_requests / pressure) * request_seconds(p, p_in), _number(p, "idle_s"))
        else:
            pressure_requests = _closed_loop(pressure, _number(p, "idle_s"), request_seconds(p, p_in))
            seconds += _number(p, "idle_s")
        requests = idle + warm + never + warm + 2 * idle + never + pressure_requests
        tokens = (idle + warm + never) * history + (warm + 2 * idle + never) * resumed
        tokens += pressure_requests * per_pressure
    elif test == "prefix_reuse":
        requests = max(_number(p, "requests", 1), 1)
        concurrency = max(_number(p, "concurrency", 1), 1)
        prompt = _number(p, "prefix_tokens") + _number(p, "suffix_tokens")
        seconds = math.ceil(requests / concurrency) * request_seconds(p, prompt)
        tokens = requests * (prompt + _number(p, "output_tokens", 64))
    elif test == "stability":
        concurrency = _number(p, "concurrency", 1)
        seconds = _number(p, "warmup_s") + _number(p, "duration_s")  # the warm-up runs, then is excluded
        requests = _closed_loop(concurrency, seconds, request_seconds(p, _number(p, "input_tokens")))
        tokens = requests * per_token
    elif test == "overload":
        factors = [float(f) for f in p.get("step_factors") or [] if isinstance(f, (int, float))]
        down = [float(f) for f in p.get("down_factors") or [] if isinstance(f, (int, float))]
        step = _number(p, "step_duration_s")
        seconds = step * (len(factors) + max(len(down) - 1, 0)) + _number(p, "recovery_s")
        per_request = request_seconds(p, _number(p, "input_tokens"))
        if p.get("rate"):  # open loop: requests/s; in flight ~ rate x request time (Little's law)
            rate = float(p["rate"])
            requests = rate * (step * (sum(factors) + sum(down[:-1])) + _number(p, "recovery_s") * (down or [1])[-1])
            concurrency = rate * max(factors, default=1.0) * per_request
        else:
            base = _number(p, "target_concurrency", 1)
            concurrency = base * max(factors, default=1.0)
            loads = [base * f * step for f in factors] + [base * f * step for f in down[:-1]]
            loads.append(base * (down or [1.0])[-1] * _number(p, "recovery_s"))
            requests = sum(load / per_request for load in loads) if per_request > 0 else 0.0
        tokens = requests * per_token
    elif test == "model_switch":
        concurrency = _number(p, "concurrency", 1)
        seconds = _number(p, "before_s") + _number(p, "switched_s") + _number(p, "after_s")
        requests = _closed_loop(concurrency, seconds, request_seconds(p, _number(p, "input_tokens")))
        tokens = requests * per_token
    elif test == "isolation":
        rate = _number(p, "tenant_a_rate")
        b_concurrency = _number(p, "tenant_b_concurrency")
        b_input = _number(p, "tenant_b_input_tokens", 32768)
        flood = _number(p, "flood_lead_s") + _number(p, "flood_s")
        seconds = _number(p, "alone_s") + flood
        concurrency = b_concurrency + max(rate * request_seconds(p, output_key="tenant_a_output_tokens"), 1.0)
        a_requests = rate * (_number(p, "alone_s") + _number(p, "flood_s"))
        b_requests = _closed_loop(b_concurrency, flood, request_seconds(p, b_input, "tenant_b_output_tokens"))
        requests = a_requests + b_requests
        tokens = a_requests * (_number(p, "tenant_a_input_tokens", 512) + _number(p, "tenant_a_output_tokens", 128))
        tokens += b_requests * (b_input + _number(p, "tenant_b_output_tokens", 64))
    else:
        seconds = sum(_number(p, k) for k in ("warmup_s", "ramp_up_s", "duration_s", "settle_s", "idle_s"))
        concurrency = _number(p, "concurrency")
        if not seconds:
            return None
        requests = _closed_loop(concurrency, seconds, request_seconds(p, _number(p, "input_tokens")))
        tokens = requests * per_token
    warnings = [LONG] if seconds >= LONG_S else []
    if concurrency >= HEAVY_CONCURRENCY:
        warnings.append(HEAVY)
    return {
        "seconds": round(seconds),
        "concurrency": int(concurrency),
        "requests": int(round(requests)),
        "tokens": int(round(tokens)),
        "warnings": warnings,
    }
