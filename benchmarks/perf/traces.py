"""Trace import benchmark: statistics and the proposed one-pager of a 1,000,000-row trace, streamed.

    python -m benchmarks.perf.traces [--rows N] [--formats kvselect-csv,mooncake,...] [--pool TOKENS] [--keep DIR]

The traces are synthetic (benchmarks.traces.synthetic: sessions, prefix groups, tenants, long
documents, observed latencies) and written once per format; `kvselect-csv-completion` is the same
log written in completion order (arrival + e2e), which the import merge-sorts through disk.
`--pool TOKENS` adds the prefix sharing within a KV pool of that size (the LRU replay an import
runs per candidate). Each import runs in a fresh
subprocess that first imports the modules (not timed), then reads the file and computes the
statistics and the proposal: the child prints the time, its peak RSS (VmHWM) and its RSS before
reading (VmRSS), so the memory the import itself needed is their difference. Memory must
not grow with the rows: the 1M-row import is compared with a 100k-row one of the same format.
Targets (issue 18): 1M rows in < 60 s on one core, peak increase < 1 GiB, and the 1M-row
increase < 2x the 100k-row one (streamed, not loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.traces.synthetic import synthetic_requests, write_trace

SUFFIX = {
    "kvselect-csv": ".csv",
    "kvselect-csv-completion": ".csv",
    "kvselect-jsonl": ".jsonl",
    "mooncake": ".jsonl",
    "azure": ".csv",
    "burstgpt": ".csv",
}
TIME_BUDGET_S = 60.0
MEMORY_BUDGET_MIB = 1024.0

CHILD = r"""
import json, resource, sys, time
from benchmarks.traces.formats import read_trace
from benchmarks.traces.proposal import proposal_values, propose_constraints
from benchmarks.traces.stats import trace_statistics

def status(field):
    # VmHWM/VmRSS of this address space (ru_maxrss would carry the parent's peak across fork+exec)
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

before = status("VmRSS")
start, cpu = time.perf_counter(), time.process_time()
pool = int(sys.argv[2])
stats = trace_statistics(lambda: read_trace(sys.argv[1]), kv_pools={"pool": pool} if pool else None)
proposal = proposal_values(propose_constraints(stats))
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = status("VmHWM")
print(json.dumps({"seconds": elapsed, "cpu": cpu, "peak_mib": peak, "before_mib": before,
                  "rows": stats["rows"], "out_of_order_rows": stats["out_of_order_rows"],
                  "pools": stats["prefix"]["pools"], "proposal": proposal}))
"""


def measure(path: str, pool: int = 0) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    output = subprocess.run(
        [sys.executable, "-c", CHILD, path, str(pool)], capture_output=True, text=True, cwd=root, check=True, env=env
    )
    return json.loads(output.stdout)


def _written_as(fmt: str) -> str:
    return "kvselect-csv" if fmt == "kvselect-csv-completion" else fmt


def _ordered_as(frame, fmt: str):
    """The frame in completion order for `kvselect-csv-completion`, else as drawn (arrival order)."""
    if fmt != "kvselect-csv-completion":
        return frame
    ends = frame["timestamp"] + frame["e2e_ms"] / 1000.0
    return frame.iloc[ends.argsort(kind="stable").to_numpy()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--formats", default="kvselect-csv,mooncake", help=f"comma-separated: {', '.join(SUFFIX)}")
    parser.add_argument("--pool", type=int, default=0, help="KV pool tokens for the LRU prefix sharing (0: none)")
    parser.add_argument("--keep", help="directory to write the generated traces to (kept)")
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    directory = args.keep or tempfile.mkdtemp(prefix="kvselect-traces-")
    os.makedirs(directory, exist_ok=True)
    small_rows = max(args.rows // 10, 1000)
    ok = True
    print(
        f"{'format':15} {'rows':>9} {'MiB':>6} {'wall s':>7} {'cpu s':>6} {'rows/s':>9} "
        f"{'peak MiB':>9} {'import MiB':>10} {'10x fewer rows':>15}"
    )
    try:
        big = synthetic_requests(args.rows, rate=200.0)
        small = big.iloc[:small_rows].copy()
        for fmt in formats:
            path = os.path.join(directory, f"trace-{args.rows}{SUFFIX[fmt]}")
            small_path = os.path.join(directory, f"trace-{small_rows}{SUFFIX[fmt]}")
            began = time.perf_counter()
            write_trace(path, _ordered_as(big, fmt), _written_as(fmt))
            write_trace(small_path, _ordered_as(small, fmt), _written_as(fmt))
            generated = time.perf_counter() - began
            size = os.path.getsize(path) / 2**20
            result, reference = measure(path, args.pool), measure(small_path, args.pool)
            grown = result["peak_mib"] - result["before_mib"]
            small_grown = reference["peak_mib"] - reference["before_mib"]
            print(
                f"{fmt:15} {result['rows']:>9} {size:>6.0f} {result['seconds']:>7.2f} {result['cpu']:>6.2f} "
                f"{result['rows'] / result['seconds']:>9,.0f} {result['peak_mib']:>9.0f} {grown:>10.0f} "
                f"{small_grown:>10.0f} MiB  (generated in {generated:.0f} s)"
            )
            print(f"    proposed: {json.dumps(result['proposal'])}")
            if result["out_of_order_rows"] or result["pools"]:
                print(f"    out of order: {result['out_of_order_rows']:,} rows; pools: {json.dumps(result['pools'])}")
            within = result["cpu"] < TIME_BUDGET_S and grown < MEMORY_BUDGET_MIB and grown < 2 * max(small_grown, 64.0)
            ok &= within
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print(
        f"budget: < {TIME_BUDGET_S:.0f} s CPU, < {MEMORY_BUDGET_MIB:.0f} MiB import increase, "
        f"and less than twice the 10x-smaller trace's: {'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
