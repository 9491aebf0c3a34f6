"""A soak shorter than the plan asks for its traffic (and than the articles' hours) says so in the record,
in the record's language; a soak of the planned length says nothing."""

from __future__ import annotations

import pytest
from django.utils import translation

from benchmarks.models import BenchmarkRun
from selection.records.services import create_draft, start_review
from selection.setup.services import set_gates

pytestmark = pytest.mark.django_db


def soak_entries(selection, architect, duration_s: float, language: str = "en") -> list[str]:
    for run in BenchmarkRun.objects.filter(candidate__selection=selection, test="stability"):
        length = {
            "duration_s": duration_s,
            "planned_s": 4 * 3600.0,
            "articles_s": 2 * 3600.0,
            "shorter_than_planned": duration_s < 4 * 3600,
            "shorter_than_articles": duration_s < 2 * 3600,
            "session_turns": 4,
        }
        run.metadata = {**run.metadata, "observed": {"line": "soak", "soak_length": length}}
        run.save(update_fields=["metadata"])
    set_gates(selection=selection, user=architect, gates={"memory": 0.4})
    with translation.override(language):
        record = start_review(record=create_draft(selection=selection, user=architect), user=architect)
    return [entry["soak_length"] for entry in record.snapshot["validation"] if "soak_length" in entry]


def test_a_short_soak_says_it_is_shorter_than_planned_and_than_the_articles_hours(demo_like, architect):
    sentences = [s for s in soak_entries(demo_like, architect, 16.0) if s]
    assert sentences and sentences[0].startswith("This soak ran 16 s, shorter than the 4 h the plan asks for")
    assert "the articles soak for hours" in sentences[0]


def test_a_soak_of_the_planned_length_says_nothing(demo_like, architect):
    entries = soak_entries(demo_like, architect, 4 * 3600.0)
    assert entries and not any(entries)
