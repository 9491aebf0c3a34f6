"""Freshness as a stamp (issue 39 item 3): the comparison GET and its 2-second poll, before and after.

Before, every comparison GET and every poll rebuilt all scoring inputs (each candidate's runs, points,
catalog facts, constraints) and hashed them, only to say whether the latest snapshot was current.
Now the page compares the selection's "inputs changed at" with the snapshot's: two reads. "before"
below is that old comparison, put back in place for the measurement (same data, same process).

    python -m benchmarks.perf.freshness [--candidates 20] [--runs 100] [--repeat 15]

Seeds a throwaway SQLite database like `benchmarks.perf.pages`, scores it once, then times each page
(median and worst of --repeat warm requests) and counts its SQL queries.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def old_scores_state(selection, include_simulated: bool = False):
    """The comparison as it was: today's inputs rebuilt and hashed on every read."""
    from selection.models import Selection
    from selection.scoring import services

    fresh = Selection.objects.filter(pk=selection.pk).values("scores_requested_at", "scoring_error").get()
    score = services.latest_score(selection, include_simulated)
    current = False
    if score is not None:
        try:
            current = score.inputs_hash == services.scoring_inputs(selection, include_simulated).inputs_hash
        except ValueError:
            current = False
    return services.ScoresState(
        score=score, current=current, pending=fresh["scores_requested_at"] is not None, error=fresh["scoring_error"]
    )


def measure(client, url: str, repeat: int) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)  # warm: templates compiled, caches filled
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    return statistics.median(times), max(times), len(queries.captured_queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)

    from benchmarks.perf.pages import seed, set_up_django

    set_up_django("kvselect-freshness-", LOG_LEVEL="ERROR")
    from django.test import Client
    from django.urls import reverse

    from selection.scoring import services, views
    from selection.scoring.services import refresh_scores, scores_state

    selection, _candidate, _run = seed(args.candidates, args.runs)
    assert refresh_scores(selection.pk) == "", "the seeded selection must score"
    client = Client()
    client.force_login(selection.created_by)
    urls = {
        "comparison GET": reverse("selection:comparison", args=[selection.pk]),
        "status poll": reverse("selection:comparison-status", args=[selection.pk]),
    }
    assert scores_state(selection).current and old_scores_state(selection).current  # both say "current"
    print(f"{args.candidates} candidates, {args.runs} runs; {args.repeat} warm requests each (Django test client)")
    print(f"{'page':<16} {'':>7} {'median ms':>10} {'worst ms':>9} {'queries':>8}")
    results = {}
    for label, state in (("before", old_scores_state), ("after", services.scores_state)):
        views.scores_state = state  # the page's freshness check, as it was and as it is
        for name, url in urls.items():
            results[(name, label)] = measure(client, url, args.repeat)
            median, worst, queries = results[(name, label)]
            print(f"{name:<16} {label:>7} {median:10.1f} {worst:9.1f} {queries:8d}")
    views.scores_state = services.scores_state
    for name in urls:
        before, after = results[(name, "before")][0], results[(name, "after")][0]
        print(f"{name}: {before / after:.1f}x faster ({before:.1f} -> {after:.1f} ms median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
