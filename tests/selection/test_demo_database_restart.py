"""`manage.py demo` across a database restart (issue 38 item 3): each step's database work runs again
with back-off instead of the demo dying (it died at its scoring step when PostgreSQL restarted), and
running a step again never makes a second selection, candidate, approval or signature."""

from __future__ import annotations

import io
from pathlib import Path
from unittest import mock

import pytest
from django.db import OperationalError

from config import outage
from selection.management.commands import demo
from selection.management.commands.demo import Command
from selection.models import Candidate, Selection

pytestmark = pytest.mark.django_db(transaction=True)  # a restart ends the connection: no test transaction


class RestartsOnce:
    """Calls through to `real`, except call number `at`, which fails as a restarting database does."""

    def __init__(self, real, at: int) -> None:
        self.real, self.at, self.calls = real, at, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise OperationalError("terminating connection due to administrator command")
        return self.real(*args, **kwargs)


@pytest.fixture
def command(settings, tmp_path, engines, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(outage, "BACKOFF_FIRST_S", 0.01)
    command = Command(stdout=io.StringIO())
    command.children = []
    return command


def test_the_selection_step_runs_again_whole_after_a_restart_mid_step(command, monkeypatch):
    command.with_database("users", command.ensure_users)
    flaky = RestartsOnce(demo.add_candidate, at=2)  # the second candidate's insert meets the restart
    monkeypatch.setattr(demo, "add_candidate", flaky)
    selection = command.with_database("selection", command.ensure_selection)
    assert flaky.calls == 5  # two in the failed attempt (rolled back whole), then the three candidates
    assert Selection.objects.filter(name=demo.DEMO_SELECTION).count() == 1
    assert Candidate.objects.filter(selection=selection).count() == len(demo.DEMO_CANDIDATES)


def test_the_scoring_step_waits_for_the_database_instead_of_dying(command, monkeypatch, caplog):
    command.with_database("users", command.ensure_users)
    selection = command.with_database("selection", command.ensure_selection)
    flaky = RestartsOnce(demo.refresh_scores, at=1)
    monkeypatch.setattr(demo, "refresh_scores", flaky)
    assert command.with_database("scoring", lambda: demo.refresh_scores(selection.pk, force=True)) == ""
    assert flaky.calls == 2
    assert "database unavailable (first seen by demo: scoring" in caplog.text and "database back after" in caplog.text


def test_an_approval_or_a_signature_stored_before_the_restart_is_not_made_again(command, monkeypatch):
    command.with_database("users", command.ensure_users)
    record = mock.Mock(pk=7)
    stored = record.approvals.filter.return_value.exists
    approve, sign = mock.Mock(return_value=record), mock.Mock()
    monkeypatch.setattr(demo, "approve", approve)
    monkeypatch.setattr(demo, "call_command", sign)
    monkeypatch.setattr(demo.DecisionRecord, "objects", mock.Mock())
    stored.return_value = True  # the first attempt's transaction committed before the connection dropped
    demo.approve_once(record, "business")
    command.sign_as(record, "business", {"business": Path("business.p12")}, Path("passphrase.txt"))
    assert not approve.called and not sign.called
    stored.return_value = False
    assert demo.approve_once(record, "business") is record
    command.sign_as(record, "business", {"business": Path("business.p12")}, Path("passphrase.txt"))
    assert approve.call_args.kwargs["role"] == "business" and approve.call_args.kwargs["user"].username == "business"
    assert sign.call_args.args[:2] == ("sign-record", "7")


def test_pointing_the_candidates_at_their_simulators_waits_out_a_restart(command, monkeypatch):
    """A real PostgreSQL restart while the simulators started killed the demo at the candidates' save."""
    command.with_database("users", command.ensure_users)
    selection = command.with_database("selection", command.ensure_selection)
    monkeypatch.setattr(Command, "start_simulator", lambda self, port, profile, extra: f"http://127.0.0.1:{port}")
    saves = []
    real_save = Candidate.save

    def save(self, *args, **kwargs):
        saves.append(self.pk)
        if len(saves) == 1:
            raise OperationalError("terminating connection due to administrator command")
        return real_save(self, *args, **kwargs)

    monkeypatch.setattr(Candidate, "save", save)
    silent = RestartsOnce(demo.silent_local_endpoints, at=1)
    monkeypatch.setattr(demo, "silent_local_endpoints", silent)
    command.start_simulators(selection)
    assert len(saves) == len(demo.DEMO_CANDIDATES) + 1 and silent.calls == 2  # the failed ones ran again
    urls = Candidate.objects.filter(selection=selection).values_list("endpoint_url", flat=True)
    assert len(urls) == len(demo.DEMO_CANDIDATES) and all(url.startswith("http://127.0.0.1:") for url in urls)


def test_scores_that_tie_are_drafted_on_the_demos_stated_ground_not_a_dead_end(command):
    """On a busy machine the simulated scores tie (more figures held out as client-bound, wider intervals):
    the demo died at the review ("no winner to record"); it now drafts the first tied candidate on its
    stated ground, says so, and the business owner confirms the ground."""
    from selection.domain import tie_ground
    from selection.models import Score

    command.with_database("users", command.ensure_users)
    selection = command.with_database("selection", command.ensure_selection)
    ids = [str(c.pk) for c in selection.candidates.order_by("pk")[:2]]
    Score.objects.create(selection=selection, include_simulated=True, rules_version="x", inputs_hash="x", result={})
    assert command.tie_choice(selection) == {}  # a winner (or nothing tied): the ordinary draft
    Score.objects.create(
        selection=selection,
        include_simulated=True,
        rules_version="x",
        inputs_hash="y",
        result={"winner": None, "tie": {"candidates": ids}},
    )
    choice = command.tie_choice(selection)
    assert choice == {"tie_choice": int(ids[0]), "tie_ground": demo.DEMO_TIE_GROUND}
    labels = {str(c.pk): c.display_name for c in selection.candidates.all()}
    assert tie_ground.problems(ids, labels, ids[0], choice["tie_ground"]) == {}  # a ground that stands
    assert "the scores tie" in command.stdout.getvalue() and "business owner confirms" in command.stdout.getvalue()
