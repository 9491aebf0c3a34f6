"""Benchmark: start-up (issue 39 item 4). `manage.py check` and `manage.py verify-record` on the demo's
record each finish in under 1.5 s, whole processes, on the two-core machine; Poppler's `pdfsig` on the
same file is printed beside them, with the ratios.

What start-up used to pay: the admin's services pulled in the validation dispatcher, the tasks, the
record renderer (WeasyPrint), pyHanko, the load generator's workloads and pandas, so every command
took seconds before doing anything. Now those load with the request or task that needs them
(tests/architecture/test_lean_imports.py).

    python -m benchmarks.perf.startup [--runs 5] [--record PDF] [--baseline CHECKOUT]

The record is `var/demo-decision-record.pdf` with its database (`make demo DEMO_SERVE=0` writes both),
or --record. Without one, a demo-sized record (>= 50 pages, three owners' B-LT signatures, as
`benchmarks.perf.record` builds it) is made in a throwaway var/ with a migrated database; verify-record
then verifies every signature but finds no record in that database for the file ("not a kvselect
record"), which costs the same. --baseline times the same commands in another checkout (a worktree
of an older commit) in the same run, for a before/after on the same machine and load. Each figure is
the fastest of --runs (after one unmeasured run that warms the file cache and writes the bytecode, as
an installed deployment has it: with PYTHONDONTWRITEBYTECODE set, as on the shared machine, every run
would compile the project's ~250 modules again), with the median beside it: wall seconds, and the CPU
seconds of the process (user + system, what `/usr/bin/time -f "%e %U %S"` reports). On a loaded
machine the CPU seconds are the figure to compare: the wall time waits for the other processes.
Exits 1 when the fastest wall time exceeds the budget.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 1.5
DEMO_RECORD = ROOT / "var" / "demo-decision-record.pdf"


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, exit status) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def fastest_of(argv: list[str], cwd: Path, env: dict[str, str], runs: int) -> dict:
    """The fastest and the median wall and CPU seconds of `runs` runs (the fastest: the least disturbed
    by other processes on a shared machine), after one run that warms the file cache and the bytecode."""
    timed(argv, cwd, {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"})
    samples = [timed(argv, cwd, env) for _ in range(runs)]
    return {
        "wall": min(s[0] for s in samples),
        "cpu": min(s[1] for s in samples),
        "wall_median": statistics.median(s[0] for s in samples),
        "cpu_median": statistics.median(s[1] for s in samples),
        "status": samples[-1][2],
    }


def build_record(var: Path, env: dict[str, str]) -> Path:
    """A demo-sized record signed by three owners (B-LT) in `var`, with a migrated database there."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=600)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from benchmarks.perf.record import CHARTS, DEMO_MANIFEST_ROWS, PASSPHRASE, sign_owner_side
    from selection.certificates import signing
    from selection.records.pdf import render_record
    from tests.support.record_context import sample_record_context, with_drawn_charts

    context = with_drawn_charts(sample_record_context(simulated=True, n_charts=CHARTS, n_manifest=DEMO_MANIFEST_ROWS))
    rendered = render_record(context)
    certs = signing.issue_dev_certificates(
        var / "dev-certs", {"business": "张伟", "platform": "李娜", "security": "Sam Okafor"}, PASSPHRASE
    )
    prepared = signing.prepare_signature_fields(rendered.pdf, rendered.signature_boxes)
    path = var / "startup-record.pdf"
    path.write_bytes(sign_owner_side(prepared, certs, str(var / "dev-certs")))  # the TSA is issued with the CA
    return path


def measure(checkout: Path, record: Path, env: dict[str, str], runs: int) -> dict[str, dict]:
    python = [sys.executable, "manage.py"]
    return {
        "check": fastest_of([*python, "check"], checkout, env, runs),
        "verify-record": fastest_of([*python, "verify-record", str(record)], checkout, env, runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--record", type=Path, default=None, help="the signed record PDF (default: the demo's)")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to time the same way")
    args = parser.parse_args(argv)

    env = {**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY") or "kvselect-bench-only", "PYTHONUNBUFFERED": "1"}
    record, note = args.record, ""
    with tempfile.TemporaryDirectory() as tmp:
        if record is None and DEMO_RECORD.is_file():
            record, note = DEMO_RECORD, "the demo's record, with its database"
        elif record is None:
            env["KVSELECT_VAR_DIR"] = tmp
            os.environ["KVSELECT_VAR_DIR"] = tmp
            record = build_record(Path(tmp), env)
            note = "a demo-sized record built here (no demo record: run `make demo DEMO_SERVE=0` for it)"
        pages = subprocess.run(["pdfinfo", str(record)], capture_output=True, text=True).stdout
        count = next((line.split()[-1] for line in pages.splitlines() if line.startswith("Pages:")), "?")
        after = measure(ROOT, record, env, args.runs)
        before = measure(args.baseline.resolve(), record, env, args.runs) if args.baseline else None
        pdfsig = fastest_of(["pdfsig", str(record)], ROOT, env, args.runs) if shutil.which("pdfsig") else None

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; fastest (median) of {args.runs} runs")
    print(f"record: {record} ({count} pages; {note or 'given'})")
    print(f"{'':<26}{'wall s':>15}{'cpu s':>15}")

    def row(name: str, figures: dict) -> str:
        wall = f"{figures['wall']:.2f} ({figures['wall_median']:.2f})"
        cpu = f"{figures['cpu']:.2f} ({figures['cpu_median']:.2f})"
        return f"{name:<26}{wall:>15}{cpu:>15}"

    if pdfsig:
        print(row("pdfsig", pdfsig))
    failed = False
    for name, figures in after.items():
        line = row(f"manage.py {name}", figures)
        if pdfsig:
            line += f"  {figures['wall'] / max(pdfsig['wall'], 1e-3):.0f}x pdfsig's wall"
        over = figures["wall"] > BUDGET_S
        failed = failed or over
        print(f"{line}; budget {BUDGET_S:.1f} s: {'OVER' if over else 'OK'}")
        if before:
            old = before[name]
            print(
                f"{row('  baseline', old)}  {old['wall'] / max(figures['wall'], 1e-3):.1f}x the wall, "
                f"{old['cpu'] / max(figures['cpu'], 1e-3):.1f}x the cpu"
            )
    print("FAIL" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
