"""One colour per candidate (issue 19): the comparison's charts, the record's, the capacity page's
and the run page's give a candidate the colour of its position in the selection, whichever
candidates a chart holds and in whatever order (the comparison's columns are by rank)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from benchmarks.charts import style as chart_style
from selection.candidates.services import add_candidate
from selection.records.services import create_draft, start_review
from tests.support.builders import chat_selection, rescored, stress_run
from tests.support.svg import legend_colours

pytestmark = pytest.mark.django_db

BLUE, ORANGE = (colour.lower() for colour in chart_style.PALETTE[:2])


@pytest.fixture
def ranked_against_order(architect, team, enrolled_owners, engines):
    """vLLM added first (blue), SGLang second (orange); SGLang is faster, so it ranks first. The owners
    are enrolled: a record goes to review only then."""
    selection = chat_selection(architect, team, enrolled_owners)
    candidates = {}
    for slug, label, ttft in (("vllm", "vLLM", 700.0), ("sglang", "SGLang", 250.0)):
        candidates[label] = add_candidate(
            selection=selection,
            user=architect,
            data={"engine": engines[slug], "engine_version": engines[slug].versions[0], "label": label},
        )
        stress_run(candidates[label], (ttft / 2, ttft))
    return rescored(selection), candidates


def inline_svgs(html: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", html, flags=re.S)


def candidate_colours_in(svgs: list[str]) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for svg in svgs:
        for label, colour in legend_colours(svg).items():
            if label in ("vLLM", "SGLang"):
                seen.setdefault(label, set()).add(colour)
    return seen


def test_the_comparison_gives_each_candidate_one_colour_in_every_chart(client, architect, ranked_against_order):
    selection, _candidates = ranked_against_order
    client.force_login(architect)
    body = client.get(reverse("selection:comparison", args=[selection.pk])).content.decode()
    svgs = inline_svgs(body)
    assert len(svgs) >= 2  # the dimension bars and the latency chart
    assert body.index("SGLang") < body.rindex("vLLM")  # SGLang leads the columns
    assert candidate_colours_in(svgs) == {"vLLM": {BLUE}, "SGLang": {ORANGE}}


def test_the_record_the_capacity_page_and_the_run_page_keep_the_candidates_colour(
    client, architect, ranked_against_order
):
    selection, candidates = ranked_against_order
    record = start_review(record=create_draft(selection=selection, user=architect), user=architect)
    record_svgs = [chart["svg"] for entry in record.snapshot["validation"] for chart in entry["charts"]]
    assert len(record_svgs) == 2  # one latency chart per candidate's run, each holding one candidate
    assert candidate_colours_in(record_svgs) == {"vLLM": {BLUE}, "SGLang": {ORANGE}}

    sglang = candidates["SGLang"]
    client.force_login(architect)
    run = sglang.runs.get()
    run_page = client.get(reverse("selection:run", args=[selection.pk, run.pk])).content.decode()
    assert candidate_colours_in(inline_svgs(run_page)) == {"SGLang": {ORANGE}}
    capacity = client.get(reverse("selection:capacity", args=[selection.pk, sglang.pk])).content.decode()
    lines = {
        colour
        for svg in inline_svgs(capacity)
        for label, colour in legend_colours(svg).items()
        if label.startswith("weights + KV")
    }
    assert lines == {ORANGE}
