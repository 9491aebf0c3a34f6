"""The comparison's headline on the page (issue 19): the decision first, with its margin and
measurement interval, coverage, robustness and verdict; a measured-only view with no
recommendation says the SIMULATED runs exist and links the view that includes them."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import translation

from benchmarks.models import BenchmarkRun
from selection.domain import headline
from selection.models import Gate
from selection.scoring.services import compute_scores
from tests.support.builders import rescored

pytestmark = pytest.mark.django_db


def comparison(client, user, selection, **params) -> str:
    client.force_login(user)
    return client.get(reverse("selection:comparison", args=[selection.pk]), params).content.decode()


def test_the_decision_is_the_headline_with_margin_coverage_robustness_and_verdict(client, architect, decided):
    body = comparison(client, architect, decided)
    start = body.index('class="decision decision--')
    block = body[start : body.index("</section>", start)]
    assert 'data-verdict="' in block
    # the margin, signed (the isolation indicator of concurrency control has no run here: coverage 45 %)
    assert "leads vLLM 0.11.0 by +0.026" in block
    assert "Evidence coverage: SGLang 0.5.5 45%, vLLM 0.11.0 45%" in block and "could reach" in block
    assert "Robustness: SGLang 0.5.5 is first in 100% of 10,000 weight vectors" in block
    assert "robustness to measurement noise is unknown" in block
    verdict = block.split('data-verdict="')[1].split('"')[0]
    assert verdict in ("clear", "close", "inconclusive")
    assert ">Inconclusive<" in block  # half the weight is evidenced: the page says so in words
    assert "Recommended: SGLang" in block  # the weighted sum's choice: it leads on the core dimensions too
    # what the choice rests on, and why it is not clear: the fit to two constraints is not validated
    assert "The choice rests on" in block and "leads vLLM 0.11.0 on the core dimensions" in block
    assert "is not validated" in block and "Longest input served" in block


def test_the_comparison_shows_each_candidates_fit_with_a_figure_outside_its_limit_as_fail(client, architect, decided):
    """Issue 33 item 1: one rule everywhere; the comparison prints every candidate's fit as the record does."""
    run = BenchmarkRun.objects.get(candidate__selection=decided, candidate__engine__slug="sglang")
    point = run.points.order_by("-concurrency").first()
    point.ttft_ms = {"p95": 51329.0}
    point.save()
    decided = rescored(decided)
    body = comparison(client, architect, decided)
    row = body[body.index('data-fit="ttft"') : body.index("</tr>", body.index('data-fit="ttft"'))]
    assert '51,329 ms · <span class="fail">fail</span>' in row
    assert body.index('class="decision decision--') < body.index("Totals and rank")  # before the tables
    caveat = body.index("robustness-caveat")
    assert body.index('id="sens-title"') < caveat  # the robustness section opens with coverage and upper bounds
    assert "These figures hold for the evidence so far" in body


def test_the_headline_carries_the_measurement_interval_from_scoring(client, architect, decided):
    """Issue 15 puts each total's range with the measurements at their 95 % interval ends on the
    stored result (`total_interval`); the headline shows the margin's interval from them."""
    score = compute_scores(decided)
    result = score.result
    for candidate in result["candidates"]:
        total = candidate["total"]
        candidate["total_interval"] = [total - 0.01, total + 0.01]
    score.result = result
    score.save(update_fields=["result"])
    body = comparison(client, architect, decided)
    out = headline.decision_headline(result)
    low, high = out["margin_interval"]
    assert "with the measurements at the ends of their 95% intervals" in body
    assert f"{low:+.3f}".replace("-", "−") in body and f"{high:+.3f}".replace("-", "−") in body


def test_a_measured_view_without_a_recommendation_points_to_the_simulated_runs(client, architect, decided):
    """The issue's case: a gate only the simulated runs evidence screens every candidate out of the
    measured-only view; the page says the runs exist and are SIMULATED, and links the view with them."""
    BenchmarkRun.objects.filter(candidate__selection=decided).update(evidence="SIMULATED")
    Gate.objects.create(selection=decided, dimension="scheduling", threshold=0.5)
    body = comparison(client, architect, rescored(decided))
    assert 'data-verdict="none"' in body
    assert "This selection has 2 finished runs, and they are SIMULATED" in body
    assert 'href="?simulated=1" data-simulated-view' in body
    simulated = comparison(client, architect, decided, simulated="1")
    assert 'data-verdict="none"' not in simulated and "Recommended: " in simulated
    assert "badge--simulated" in simulated.split('class="decision decision--')[1].split("</section>")[0]
    assert "data-simulated-view" not in simulated


def test_a_measured_recommendation_still_says_simulated_runs_were_left_out(client, architect, decided):
    run = BenchmarkRun.objects.filter(candidate__selection=decided).first()
    BenchmarkRun.objects.filter(pk=run.pk).update(evidence="SIMULATED")
    body = comparison(client, architect, rescored(decided))
    assert 'data-verdict="none"' not in body
    assert "1 SIMULATED run is left out of this view." in body and "data-simulated-view" in body


def test_a_selection_without_simulated_runs_does_not_offer_them(client, architect, decided):
    BenchmarkRun.objects.filter(candidate__selection=decided).delete()
    Gate.objects.create(selection=decided, dimension="scheduling", threshold=0.5)
    body = comparison(client, architect, rescored(decided))
    assert 'data-verdict="none"' in body and "data-simulated-view" not in body
    assert "Run the validation tests, then recompute." in body


def test_the_headline_reads_in_chinese(client, architect, decided):
    client.force_login(architect)
    client.cookies["django_language"] = "zh-hans"
    body = client.get(reverse("selection:comparison", args=[decided.pk])).content.decode()
    with translation.override("zh-hans"):
        recommended = translation.gettext("Recommended: %(name)s") % {"name": "SGLang 0.5.5"}
        verdict = translation.pgettext("decision verdict", "Inconclusive")
        robust = translation.gettext(
            "Robustness: %(name)s is first in %(share)s of %(draws)s weight vectors within ±%(spread)s; %(noise)s."
        ) % {"name": "SGLang 0.5.5", "share": "100%", "draws": "10,000", "spread": "30%", "noise": "x"}
    assert recommended != "Recommended: SGLang 0.5.5" and recommended in body
    assert verdict != "Inconclusive" and f">{verdict}<" in body
    assert robust.startswith("稳健性") and robust.split("x")[0] in body
    assert "weight vectors" not in body
