"""Server time of every workspace page with 20 candidates and 100 runs (issue 9: none over 300 ms).

Seeds a throwaway SQLite database, then requests each page through Django's test client several
times and prints the median and the worst warm time per page. The first request of each page
(template compilation, matplotlib warm-up) is reported separately, as "cold".

    python -m benchmarks.perf.pages [--candidates 20] [--runs 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

TARGET_MS = 300.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    set_up_django("kvselect-pages-")
    from django.test import Client
    from django.urls import reverse

    selection, candidate, run = seed(args.candidates, args.runs)
    client = Client()
    client.force_login(selection.created_by)
    pages = {
        "dashboard": reverse("selection:dashboard"),
        "overview": reverse("selection:detail", args=[selection.pk]),
        "constraints": reverse("selection:constraints", args=[selection.pk]),
        "scenario & weights": reverse("selection:scenario", args=[selection.pk]),
        "gates": reverse("selection:gates", args=[selection.pk]),
        "candidates": reverse("selection:candidates", args=[selection.pk]),
        "evidence": reverse("selection:evidence", args=[selection.pk]),
        "capacity": reverse("selection:capacity", args=[selection.pk, candidate.pk]),
        "validation": reverse("selection:validation", args=[selection.pk, candidate.pk]),
        "run": reverse("selection:run", args=[selection.pk, run.pk]),
        "uploads": reverse("selection:uploads", args=[selection.pk]),
        "comparison": reverse("selection:comparison", args=[selection.pk]),
        "records": reverse("selection:records", args=[selection.pk]),
        "verify": reverse("selection:record-verify"),
    }
    print(f"{args.candidates} candidates, {args.runs} runs; target: every page under {TARGET_MS:.0f} ms (warm)")
    print(f"{'page':<20} {'cold ms':>9} {'median ms':>10} {'worst ms':>9}  verdict")
    failures = 0
    for name, url in pages.items():
        start = time.perf_counter()
        response = client.get(url)
        cold = (time.perf_counter() - start) * 1000
        if response.status_code != 200:
            print(f"{name:<20} HTTP {response.status_code}")
            failures += 1
            continue
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - start) * 1000)
        median, worst = statistics.median(times), max(times)
        ok = median <= TARGET_MS
        failures += not ok
        print(f"{name:<20} {cold:9.1f} {median:10.1f} {worst:9.1f}  {'ok' if ok else 'OVER'}")
    print(f"pages over target: {failures}")
    return 1 if failures else 0


def set_up_django(prefix: str, **environ: str) -> str:
    """Django on a fresh SQLite database in a throwaway directory (no broker: nothing is queued), migrated;
    the directory's path. A page benchmark times the pages, not a shared database's state."""
    var = tempfile.mkdtemp(prefix=prefix)
    os.environ.update(
        {
            "KVSELECT_VAR_DIR": var,
            "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only"),
            "DATABASE_URL": f"sqlite:///{var}/bench.sqlite3",
            "CELERY_TASK_ALWAYS_EAGER": "0",
            **environ,
        }
    )
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return var


def seed(n_candidates: int, n_runs: int):
    from django.contrib.auth import get_user_model

    from benchmarks.models import BenchmarkRun, RunPoint
    from selection.candidates.services import add_candidate, load_engine_catalog
    from selection.models import Engine, Membership, Team
    from selection.setup.services import create_selection, save_constraints

    load_engine_catalog()
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    team = Team.objects.create(name="bench")
    Membership.objects.create(team=team, user=user, role=Membership.Role.ARCHITECT)
    owners = {}
    for role in ("business", "platform", "security"):  # three different people (separation of duties)
        owners[role] = get_user_model().objects.create_user(f"bench-{role}", password="bench-password-1")
        Membership.objects.create(team=team, user=owners[role], role=Membership.Role.REVIEWER)
    selection = create_selection(
        user=user,
        team=team,
        name="Bench",
        business_owner=owners["business"],
        platform_owner=owners["platform"],
        security_owner=owners["security"],
    )
    save_constraints(
        selection=selection,
        user=user,
        data={
            "peak_concurrency": 64,
            "avg_input_tokens": 1000,
            "max_input_tokens": 8000,
            "avg_output_tokens": 200,
            "max_output_tokens": 1000,
            "ttft_p95_ms": 800.0,
            "tpot_p95_ms": 50.0,
            "gpu_model": "H100",
            "gpu_memory_gib": 80,
            "gpu_count_budget": 4,
            "cost_per_gpu_hour": "2.00",
            "ops_team_size": 3,
            "target_model": "Llama-3.1-8B",
            "kv_precisions_allowed": ["bf16"],
        },
    )
    engines = list(Engine.objects.all())
    candidates = [
        add_candidate(
            selection=selection,
            user=user,
            data={
                "engine": engines[i % len(engines)],
                "engine_version": engines[i % len(engines)].versions[0],
                "label": f"candidate {i}",
                "endpoint_url": "http://127.0.0.1:9",
            },
        )
        for i in range(n_candidates)
    ]
    tests = ("concurrency_stress", "long_context", "swap_recovery", "prefix_reuse", "stability")
    last = None
    for i in range(n_runs):
        candidate = candidates[i % n_candidates]
        last = BenchmarkRun.objects.create(
            candidate=candidate,
            test=tests[i % len(tests)],
            origin="upload",
            status="succeeded",
            tool="bench",
            evidence="MEASURED",
            timeseries={"kv_usage_ratio": [[t, 0.3 + t / 200] for t in range(60)]},
        )
        for j, concurrency in enumerate((8, 32, 64)):
            RunPoint.objects.create(
                run=last,
                index=j,
                concurrency=concurrency,
                achieved_concurrency=concurrency,
                ttft_ms={"p50": 100 + i, "p95": 200 + i + j * 50, "p99": 300 + i},
                tpot_ms={"p50": 20, "p95": 30 + j, "p99": 40},
                error_rate=0.0,
                output_token_throughput=1000.0 * (j + 1),
                request_throughput=5.0 * (j + 1),
            )
    return selection, candidates[0], last


if __name__ == "__main__":
    sys.exit(main())
