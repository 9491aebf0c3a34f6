"""Benchmark: the offline simulator must run 100,000 requests in under 20 s on one core.

    python -m benchmarks.perf.simulator [--requests 100000] [--profile paged-prefix] [--rate 12]

The trace is synthetic and deterministic: Poisson arrivals, prompts of 128-2048 tokens (half of
them behind one of 8 shared 512-token system prompts, a quarter in multi-turn sessions), 16-512
output tokens, on the default model (Llama-3.1-8B-like) and GPU (H100). Prints one line with
the CPU time of the simulation (process time: the figure that does not depend on how busy a
shared machine is), the wall time and the simulated figures; exits 1 when over the budget.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from benchmarks.simulator.config import STRATEGIES, SimConfig
from benchmarks.simulator.offline import TraceRecord, simulate

BUDGET_S = 20.0


def synthetic_trace(requests: int, rate: float, seed: int = 7) -> list[TraceRecord]:
    rng = random.Random(seed)
    records = []
    t = 0.0
    session_len: dict[int, tuple[int, int]] = {}
    for i in range(requests):
        t += rng.expovariate(rate)
        output = rng.randint(16, 512)
        kind = rng.random()
        if kind < 0.5:
            prefix = rng.randrange(8)
            records.append(TraceRecord(t, 512 + rng.randint(16, 1536), output, None, f"sys{prefix}", 512, i))
        elif kind < 0.75:
            sid = rng.randrange(2000)
            history, generation = session_len.get(sid, (0, 0))
            prompt = history + rng.randint(32, 256)
            records.append(TraceRecord(t, prompt, output, f"s{sid}.{generation}", None, 0, i))
            # the next turn extends this one; past 4096 tokens a new conversation (new session id) starts
            session_len[sid] = (prompt + output, generation) if prompt + output < 4096 else (0, generation + 1)
        else:
            records.append(TraceRecord(t, rng.randint(128, 2048), output, None, None, 0, i))
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=12.0, help="arrivals per simulated second")
    parser.add_argument("--profile", default="paged-prefix", choices=sorted(STRATEGIES))
    args = parser.parse_args(argv)
    trace = synthetic_trace(args.requests, args.rate)
    config = SimConfig(profile=args.profile)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = simulate(trace, config)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    point = result.points[0]
    extra = point.extra
    print(
        f"kvsim offline: {args.requests} requests ({args.profile}, {config.gpu}) in {cpu:.2f} s CPU "
        f"({wall:.2f} s wall) [budget {BUDGET_S:.0f} s CPU on one core] | simulated {point.duration_s:.0f} s, "
        f"{extra['engine_steps']} engine steps, "
        f"completed {point.requests_completed}, failed {point.requests_failed}, "
        f"TTFT p50 {point.ttft_ms.p50:.1f} ms, TPOT p50 {point.tpot_ms.p50:.2f} ms, "
        f"peak KV {extra['peak_kv_cache_usage']:.2f}, prefix hit rate {extra['prefix_cache_hit_rate']:.2f}, "
        f"preemptions {extra['preemptions']}"
    )
    return 0 if cpu < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
