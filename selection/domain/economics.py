"""Cost against the budget and long-term growth (decision step 5: "budget and long-term growth").

What a procurement officer asks of the chosen configuration, and of every candidate beside it:
what does it cost per month at the target load, is that within the budget, and how far can the
traffic grow before it runs out? The rules, in one place:

* **Replicas at a load.** One replica is the candidate as configured (its GPUs). It holds, per GPU,
  the *sustainable concurrency*: the highest load a run measured within the latency budget; and it
  serves, per GPU, the *goodput* a run measured (output tokens/s of requests within the budget).
  Replicas = the larger of ceil(peak concurrency / concurrency per replica) and ceil(throughput
  target / goodput per replica). Without a measured sustainable concurrency the capacity plan
  stands in, labelled so: the sequences of average context that fit in 80 % of one replica's KV
  pool (the articles' 20 % headroom); it says nothing of the latency budget. A run that measured
  no load within the budget leaves the replicas undetermined: no count of replicas is known to
  meet it.
* **Monthly cost** = replicas x GPUs per replica x GPU price per hour x `HOURS_PER_MONTH`
  + replicas x the offload tier's host memory (GiB per replica) x its price per GiB-month. An
  offload tier is never free: without its size or a host-memory price the cost cannot be derived.
* **Against the budget**: within (and by how much), over by X (amount and share of the budget), or
  cannot be derived, with every reason (`MISSING`).
* **Growth**: the constraints' factor (e.g. x1.5 in 12 months) multiplies the peak concurrency and
  the throughput target; replicas, GPUs and monthly cost at that load are stated against the GPU
  budget and the money budget. And the deployment planned for today's target (its replicas) runs
  out at a growth of: (KV pool) replicas x sequences of average context in 80 % of the pool / peak
  concurrency, from the engine-stated pool where a run read it, else the capacity plan; (latency
  budget) replicas x sustainable concurrency per replica / peak concurrency, from the run that
  measured it, a lower bound ("at least") when the highest load tested was still within budget.

Every figure names its source (`Figure.source`, `Figure.runs`). Pure Python: no Django.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

HOURS_PER_MONTH = 730.0  # 8,760 hours a year / 12: the usual cloud billing month
KV_PLANNING_SHARE = 0.8  # plan KV with 20 % headroom (the rollout rule), never the whole pool

# where a figure comes from (`Figure.simulated` marks one the simulator produced)
MEASURED, PLAN, ENGINE_STATED = "measured", "plan", "engine_stated"

# why a cost (or a growth figure) cannot be derived
NO_PEAK = "no_peak"  # the constraints state no peak concurrency
NO_GPU_PRICE = "no_gpu_price"
NO_CAPACITY = "no_capacity"  # no measured sustainable concurrency and no capacity plan
NONE_WITHIN_BUDGET = "none_within_budget"  # a run measured no load within the latency budget
OFFLOAD_SIZE_UNKNOWN = "offload_size_unknown"
NO_HOST_PRICE = "no_host_price"
NO_BUDGET = "no_budget"
MISSING = (NO_PEAK, NO_GPU_PRICE, NO_CAPACITY, NONE_WITHIN_BUDGET, OFFLOAD_SIZE_UNKNOWN, NO_HOST_PRICE, NO_BUDGET)

WITHIN, OVER, NOT_DERIVABLE = "within", "over", "not_derivable"
CONCURRENCY, THROUGHPUT = "concurrency", "throughput"


@dataclass(frozen=True)
class Figure:
    """A number with where it comes from: `source` (MEASURED by a run, the capacity PLAN, or the
    ENGINE_STATED KV pool) and the runs behind it; `simulated`: the simulator produced it;
    `lower_bound`: the true value may be higher (the highest load tested was still within budget)."""

    value: float
    source: str
    runs: tuple[str, ...] = ()
    lower_bound: bool = False
    simulated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "source": self.source,
            "runs": list(self.runs),
            "lower_bound": self.lower_bound,
            "simulated": self.simulated,
        }

    def scaled(self, factor: float, lower_bound: bool | None = None) -> Figure:
        """The same figure times `factor` (per GPU -> per replica, per replica -> a deployment)."""
        bound = self.lower_bound if lower_bound is None else lower_bound
        return Figure(self.value * factor, self.source, self.runs, bound, self.simulated)


@dataclass(frozen=True)
class OffloadTier:
    """The host memory an offload tier buys per replica: enabled, its size in GiB (None: not stated
    in the launch flags) and how the size was read (a flag, or a ratio of the KV pool)."""

    enabled: bool = False
    gib: float | None = None
    basis: str = ""


@dataclass(frozen=True)
class CostInputs:
    """Everything the cost and growth of one candidate read (plain numbers; see the module's rules)."""

    peak_concurrency: float | None
    throughput_target: float | None  # output tokens/s of the whole deployment
    gpus_per_replica: int
    gpu_price_per_hour: float | None
    host_price_per_gib_month: float | None = None
    offload: OffloadTier = field(default_factory=OffloadTier)
    budget: float | None = None
    gpu_budget: int | None = None
    concurrency_per_gpu: Figure | None = None  # measured sustainable concurrency per GPU
    none_within_budget: tuple[str, ...] = ()  # runs that measured loads, none within the budget
    goodput_per_gpu: Figure | None = None  # measured output tokens/s per GPU within the budget
    plan_sequences_per_replica: Figure | None = None  # the capacity plan's sequences in 80 % of the pool
    kv_sequences_per_replica: Figure | None = None  # engine-stated pool's sequences (else the plan's)
    growth_factor: float | None = None
    growth_months: int | None = None


def replicas_for(load: float, per_replica: float) -> int:
    """Replicas that carry `load` when each carries `per_replica` (at least one; a rounding error of
    1e-9 never adds a replica)."""
    if per_replica <= 0:
        raise ValueError(f"per_replica: must be positive, got {per_replica!r}")
    return max(1, math.ceil(load / per_replica - 1e-9))


def concurrency_basis(inputs: CostInputs) -> tuple[Figure | None, list[str]]:
    """The concurrency one replica holds and its source, or the reasons none is known."""
    gpus = max(inputs.gpus_per_replica, 1)
    if inputs.concurrency_per_gpu is not None and inputs.concurrency_per_gpu.value > 0:
        return inputs.concurrency_per_gpu.scaled(gpus), []
    if inputs.none_within_budget:
        return None, [NONE_WITHIN_BUDGET]
    if inputs.plan_sequences_per_replica is not None and inputs.plan_sequences_per_replica.value > 0:
        return inputs.plan_sequences_per_replica, []
    return None, [NO_CAPACITY]


def throughput_basis(inputs: CostInputs) -> Figure | None:
    """The goodput one replica serves (measured only: the capacity plan knows no throughput)."""
    goodput = inputs.goodput_per_gpu
    if goodput is None or goodput.value <= 0:
        return None
    return goodput.scaled(max(inputs.gpus_per_replica, 1))


def deployment(inputs: CostInputs, factor: float = 1.0) -> dict[str, Any]:
    """Replicas, GPUs and monthly cost at the target load x `factor`, with every missing reason."""
    missing: list[str] = []
    if not inputs.peak_concurrency:
        missing.append(NO_PEAK)
    per_replica, why = concurrency_basis(inputs)
    missing += why
    serves = throughput_basis(inputs)
    replicas = by = None
    if per_replica is not None and inputs.peak_concurrency:
        replicas, by = replicas_for(inputs.peak_concurrency * factor, per_replica.value), CONCURRENCY
        if serves is not None and inputs.throughput_target:
            by_throughput = replicas_for(inputs.throughput_target * factor, serves.value)
            if by_throughput > replicas:
                replicas, by = by_throughput, THROUGHPUT
    gpus = replicas * max(inputs.gpus_per_replica, 1) if replicas is not None else None
    cost = monthly_cost(inputs, replicas)
    missing += [reason for reason in cost["missing"] if reason not in missing]
    return {
        "factor": factor,
        "replicas": replicas,
        "gpus": gpus,
        "decided_by": by,
        "per_replica": per_replica.as_dict() if per_replica is not None else None,
        "throughput_per_replica": serves.as_dict() if serves is not None else None,
        "gpu_cost": cost["gpu_cost"],
        "host_cost": cost["host_cost"],
        "host_gib": cost["host_gib"],
        "monthly": cost["monthly"],
        "missing": missing,
        "budget": against_budget(cost["monthly"], inputs.budget, missing),
        "gpu_budget": against_gpu_budget(gpus, inputs.gpu_budget),
    }


def monthly_cost(inputs: CostInputs, replicas: int | None) -> dict[str, Any]:
    """GPU cost, host-memory cost and their sum per month for `replicas` (None where not derivable)."""
    missing = []
    if inputs.gpu_price_per_hour is None:
        missing.append(NO_GPU_PRICE)
    tier = inputs.offload
    if tier.enabled and tier.gib is None:
        missing.append(OFFLOAD_SIZE_UNKNOWN)
    if tier.enabled and inputs.host_price_per_gib_month is None:
        missing.append(NO_HOST_PRICE)
    gpu_cost = host_cost = host_gib = None
    if replicas is not None and inputs.gpu_price_per_hour is not None:
        gpu_cost = replicas * max(inputs.gpus_per_replica, 1) * inputs.gpu_price_per_hour * HOURS_PER_MONTH
    if replicas is not None and not tier.enabled:
        host_gib, host_cost = 0.0, 0.0
    elif replicas is not None and tier.gib is not None:
        host_gib = replicas * tier.gib
        if inputs.host_price_per_gib_month is not None:
            host_cost = host_gib * inputs.host_price_per_gib_month
    monthly = gpu_cost + host_cost if gpu_cost is not None and host_cost is not None else None
    return {"gpu_cost": gpu_cost, "host_cost": host_cost, "host_gib": host_gib, "monthly": monthly, "missing": missing}


def against_budget(monthly: float | None, budget: float | None, missing: list[str]) -> dict[str, Any]:
    """Within (margin), over (by how much, and as a share of the budget) or not derivable (why)."""
    if budget is None or budget <= 0:
        return {"status": NOT_DERIVABLE, "missing": [*missing, NO_BUDGET], "difference": None, "share": None}
    if monthly is None:
        return {"status": NOT_DERIVABLE, "missing": list(missing), "difference": None, "share": None}
    difference = monthly - budget
    return {
        "status": OVER if difference > 0 else WITHIN,
        "missing": [],
        "difference": abs(difference),
        "share": abs(difference) / budget,
    }


def against_gpu_budget(gpus: int | None, gpu_budget: int | None) -> dict[str, Any] | None:
    """The GPUs a deployment needs against the constraints' GPU budget (None when either is unknown)."""
    if gpus is None or not gpu_budget:
        return None
    return {"status": OVER if gpus > gpu_budget else WITHIN, "budget": gpu_budget, "difference": abs(gpus - gpu_budget)}


def growth_limits(inputs: CostInputs, replicas: int | None) -> dict[str, Any]:
    """The traffic growth at which the deployment planned for today's target runs out: its KV pool
    and its latency budget, each with its source (None when not derivable)."""
    peak = inputs.peak_concurrency
    if not peak or replicas is None:
        return {"kv": None, "latency": None}
    kv = inputs.kv_sequences_per_replica or inputs.plan_sequences_per_replica
    kv_limit = kv.scaled(replicas / peak).as_dict() if kv is not None and kv.value > 0 else None
    measured = inputs.concurrency_per_gpu
    latency_limit = None
    if measured is not None and measured.value > 0:
        latency_limit = measured.scaled(replicas * max(inputs.gpus_per_replica, 1) / peak).as_dict()
    return {"kv": kv_limit, "latency": latency_limit}


def economics(inputs: CostInputs) -> dict[str, Any]:
    """The candidate's cost at the target load against the budget, and at the expected growth."""
    today = deployment(inputs)
    growth = None
    if inputs.growth_factor:
        grown = deployment(inputs, inputs.growth_factor)
        growth = {**grown, "months": inputs.growth_months}
    return {
        "hours_per_month": HOURS_PER_MONTH,
        "gpu_price_per_hour": inputs.gpu_price_per_hour,
        "host_price_per_gib_month": inputs.host_price_per_gib_month,
        "offload": {"enabled": inputs.offload.enabled, "gib": inputs.offload.gib, "basis": inputs.offload.basis},
        "target": today,
        "growth": growth,
        "limits": growth_limits(inputs, today["replicas"]),
    }


def kv_sequences(pool_tokens: float, avg_context: float, slots: int | None = None) -> float:
    """Sequences of average context that fit in `KV_PLANNING_SHARE` of a pool of `pool_tokens`
    (llama.cpp: never more than its slots)."""
    if pool_tokens <= 0 or avg_context <= 0:
        return 0.0
    sequences = math.floor(KV_PLANNING_SHARE * pool_tokens / avg_context)
    return float(min(sequences, slots) if slots else sequences)
