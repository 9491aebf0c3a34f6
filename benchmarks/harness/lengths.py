"""Request lengths drawn from the constraints' distribution (average, p95, max), so a workload sees
the mix of short and long requests that production has: uniform requests cannot fragment a KV
pool, and a p95 computed over identical requests says nothing of the tail (docs/domain.md).

A distribution is a plain dict {"mean", "p95", "max"} (p95 and max optional) that plans store in
their params; `draw(distribution, n, seed)` gives n integer lengths; `length_sampler(params, ...)`
gives the `index -> (input, output)` function the workloads call per request.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from benchmarks.suite.params import distribution as distribution  # where the plans state one

Z95 = 1.6448536269514722  # the standard normal's 95th percentile
DEFAULT_P95_OVER_MEAN = 2.0  # when the constraints give no p95: a typical long-tailed chat mix
SAMPLE_SEED = 7


def draw(dist: dict[str, Any], n: int, seed: int = SAMPLE_SEED) -> list[int]:
    """n lengths from a log-normal with the given mean and p95, clipped to [1, max].

    A log-normal is the usual fit for prompt and output lengths (long right tail, never
    negative). With p95 <= mean (or none given) p95 = 2 x mean is assumed, unless max caps it. A
    p95 above ~3.9 x mean has no log-normal fit; the widest one is used (its p95 falls short)."""
    mean = float(dist["mean"])
    maximum = dist.get("max")
    p95 = dist.get("p95")
    if not p95 or p95 <= mean:
        p95 = mean * DEFAULT_P95_OVER_MEAN
        if maximum:
            p95 = min(p95, float(maximum))
    if p95 <= mean:  # max equal to the mean: every request has that length
        return [max(int(round(mean)), 1)] * n
    # mean = exp(mu + s^2/2), p95 = exp(mu + Z95 s) -> s^2/2 - Z95 s + ln(p95/mean) = 0
    ratio = math.log(p95 / mean)
    disc = Z95 * Z95 - 2.0 * ratio
    sigma = Z95 - math.sqrt(disc) if disc > 0 else Z95
    mu = math.log(mean) - sigma * sigma / 2.0
    rng = np.random.default_rng(seed)
    values = np.exp(rng.normal(mu, sigma, size=n))
    upper = float(maximum) if maximum else float("inf")
    return [int(v) for v in np.clip(np.rint(values), 1, upper)]


def length_sampler(
    params: dict[str, Any], input_tokens: int, output_tokens: int, size: int = 10_000
) -> Callable[[int], tuple[int, int]]:
    """`index -> (input, output)`: from params["input_distribution"] / ["output_distribution"]
    when the plan set them, else the fixed lengths. The sample repeats after `size` requests."""
    inputs = params.get("input_distribution")
    outputs = params.get("output_distribution")
    drawn_in = draw(inputs, size, SAMPLE_SEED) if inputs else None
    drawn_out = draw(outputs, size, SAMPLE_SEED + 1) if outputs else None

    def lengths(index: int) -> tuple[int, int]:
        return (
            drawn_in[index % size] if drawn_in else input_tokens,
            drawn_out[index % size] if drawn_out else output_tokens,
        )

    if inputs or outputs:
        lengths.source = {  # type: ignore[attr-defined]
            "kind": "constraints distribution (log-normal fit to mean and p95, clipped to max)",
            "input": inputs,
            "output": outputs,
        }
    return lengths
