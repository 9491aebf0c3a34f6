"""Start and cancel validation runs (the web page, the API and the demo call these).

A run is created `queued` with its merged parameters and audited; its task is enqueued after the
transaction commits, on the candidate's GPU pool queue.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.translation import gettext

from benchmarks.models import BenchmarkRun
from benchmarks.suite import RUNNABLE_TEST_IDS
from benchmarks.tasks import enqueue_validation
from benchmarks.validation import specs
from benchmarks.validation.plan import plan_for
from benchmarks.validation.target import ValidationError, check_candidate_target
from selection.audit import audit
from selection.candidates.screening import refusal as screen_refusal
from selection.models import Candidate, Selection
from selection.selectors import archived_refusal, require_editor


class CandidateArchived(ValidationError):
    """The candidate is archived: it takes no new evidence (the API answers 409)."""


@transaction.atomic
def start_validation(
    *, candidate: Candidate, test: str, user, params: dict[str, Any] | None = None, label: str = ""
) -> BenchmarkRun:
    require_editor(user, candidate.selection)
    if test not in RUNNABLE_TEST_IDS:
        raise ValidationError(f"test: must be one of {', '.join(RUNNABLE_TEST_IDS)}, got {test!r}")
    # read under the candidate's lock: an archive committing meanwhile cancels what it finds queued
    locked = Candidate.objects.select_for_update().filter(pk=candidate.pk)
    candidate.archived_at = locked.values_list("archived_at", flat=True).first()
    archived = archived_refusal(candidate)
    if archived:
        raise CandidateArchived(f"candidate: {archived}")
    refused = screen_refusal(candidate)  # decision step 3 comes before the tests
    if refused:
        raise ValidationError(refused)
    check_candidate_target(candidate)
    merged = plan_for(candidate, test)
    merged.update(params or {})
    spec = specs.spec(test)
    problems = spec.problems(merged) if spec else {}
    if problems:  # refused now, not failed once queued
        name, (template, values) = next(iter(problems.items()))
        raise ValidationError(f"{name}: {gettext(template) % values}")
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test=test,
        label=label[:200],
        origin=BenchmarkRun.Origin.HARNESS,
        status=BenchmarkRun.Status.QUEUED,
        params=merged,
        uploaded_by=user.get_username(),
        progress={"phase": "queued", "percent": 0},
    )
    audit(candidate.selection, user, "validation.started", field=f"run:{run.pk}", new={"test": test, "params": merged})
    Selection.objects.filter(pk=candidate.selection_id, status=Selection.Status.DRAFT).update(
        status=Selection.Status.VALIDATING
    )
    transaction.on_commit(lambda: enqueue_validation(run))
    return run


def request_cancel(run: BenchmarkRun, user) -> BenchmarkRun:
    require_editor(user, run.candidate.selection)
    if run.is_terminal:
        return run
    from benchmarks.validation import worker  # the run's machinery: not loaded by every page (issue 39)

    with transaction.atomic():
        BenchmarkRun.objects.filter(pk=run.pk).update(cancel_requested=True)
        worker.cancel_queued(run.pk)  # a run no worker has picked up yet is cancelled at once
        audit(run.candidate.selection, user, "validation.cancel_requested", field=f"run:{run.pk}")
    run.refresh_from_db()
    return run
