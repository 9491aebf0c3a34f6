"""The weights table: current and normalised columns agree and add up to 100 %, and only the rows
the architect changed say "Edited"."""

from __future__ import annotations

import re

from selection.domain.criteria import percentages
from selection.models import AuditEntry
from selection.setup.services import update_weights


def test_percentages_add_up_to_exactly_100():
    shown = percentages({"a": 1, "b": 1, "c": 1})
    assert round(sum(shown.values()), 6) == 100.0 and sorted(shown.values()) == [33.3, 33.3, 33.4]
    assert percentages({"a": 0.2, "b": 0.5}) == {"a": 28.6, "b": 71.4}  # shares of the sum, as scoring uses them
    assert percentages({"a": 0.0}) == {"a": 0.0} and percentages({}) == {}


def test_changing_one_row_marks_only_that_row_edited(selection_with_constraints, architect):
    selection = selection_with_constraints
    before = {w.criterion: w for w in selection.weights.all()}
    shown = percentages({c: w.weight for c, w in before.items()})
    submitted = dict(shown, cache_persistence=shown["cache_persistence"] + 20)  # what the page posts
    update_weights(selection=selection, user=architect, weights=submitted, justification="sessions matter")
    after = {w.criterion: w for w in selection.weights.all()}
    assert [c for c, w in after.items() if w.source == "edited"] == ["cache_persistence"]
    assert sum(w.weight for w in after.values()) == pytest_approx_one()
    others = [c for c in after if c != "cache_persistence"]
    ratio = after[others[0]].weight / before[others[0]].weight
    assert all(abs(after[c].weight / before[c].weight - ratio) < 1e-4 for c in others)  # proportions kept
    actions = set(AuditEntry.objects.filter(selection=selection).values_list("action", flat=True))
    assert {"weight.changed", "weight.renormalised"} <= actions


def test_saving_the_page_unchanged_changes_nothing(selection_with_constraints, architect):
    selection = selection_with_constraints
    before = {w.criterion: w.weight for w in selection.weights.all()}
    update_weights(selection=selection, user=architect, weights=percentages(before), justification="looked at it")
    assert {w.criterion: w.weight for w in selection.weights.all()} == before
    assert not selection.weights.filter(source="edited").exists()


def test_the_page_shows_current_and_normalised_alike(client, architect, selection_with_constraints):
    client.force_login(architect)
    body = client.get(f"/selections/{selection_with_constraints.pk}/scenario/").content.decode()
    current = [float(v) for v in re.findall(r'data-weight-current="[a-z_]+">([\d.]+)%', body)]
    inputs = [
        float(v)
        for v in re.findall(r'data-weight-input="[a-z_]+"[^>]*value="([\d.]+)"', body)
        + re.findall(r'value="([\d.]+)"[^>]*data-weight-input=', body)
    ]
    assert current and round(sum(current), 6) == 100.0
    assert sorted(current) == sorted(inputs)  # the inputs start at the current percentages: normalised == current
    assert "100.0%" in body


def pytest_approx_one():
    import pytest

    return pytest.approx(1.0, abs=1e-5)
