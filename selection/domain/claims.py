"""The decision record's behaviour claims, each with the test and the verdicts that must show it.

A sentence of the record that says how the chosen engine behaves (it holds the target
concurrency, serves the longest input, swaps idle sessions out and resumes them for less than a
recompute, continues a resumed session correctly, keeps the never-swap sessions warm, reuses the
shared prefix) is only as strong as the validation test that observed it. Each test's module
under `benchmarks.suite` states the claims its verdicts support (`TEST.claims`: per claim, the
test and the verdicts that must all have passed; `benchmarks.suite.CLAIMS` lists them all). A verdict
names its load point in brackets (`ttft_p95_within_budget[resume]`): every verdict of that name
must pass. `judge` decides:

* **claimed**: the chosen engine's run of the test has every verdict and each one passed;
* **not validated**: the run exists but a verdict failed, was inconclusive, not exercised,
  short of data or not judged, or the run has no such verdict;
* **not run**: no run of the test on the chosen engine.

`sentence` writes the claim as a message whose `evidence` names the test, its run and each verdict
it rests on with its outcome (the shell writes that clause in the record's language). A claim the
record can leave out (a monitoring threshold "validated" by a test) is absent unless claimed.
Scoring's credits use the same rule (the swap test's `SWAP_IN`: a session counts as swapped in only when the
eviction was seen and resuming cost less than recomputing). No Django here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from selection.domain.messages import Message

CLAIMED = "claimed"
NOT_VALIDATED = "not_validated"
NOT_RUN = "not_run"
MISSING = "missing"  # a verdict the claim needs that the run does not have
PASS = "pass"  # benchmarks.verdicts.PASS: the only status that supports a claim


@dataclass(frozen=True)
class Claim:
    id: str
    test: str  # the benchmarks.suite test that observes it
    verdicts: tuple[str, ...]  # verdict names (without a [load point]) that must all pass
    claimed: str  # the sentence when claimed: a message template with %(evidence)s
    not_validated: str  # the sentence otherwise (not validated or not run), with %(evidence)s


@dataclass(frozen=True)
class Outcome:
    """How far the chosen engine's run supports a claim, and the verdicts it rests on."""

    claim: Claim
    status: str  # CLAIMED, NOT_VALIDATED or NOT_RUN
    run: str | None  # the run's id; None when the test did not run
    verdicts: tuple[tuple[str, str], ...]  # (verdict name as the run wrote it, its status or MISSING)

    @property
    def claimed(self) -> bool:
        return self.status == CLAIMED


def _base(name: str) -> str:
    return name.partition("[")[0]


def judge(claim: Claim, run: str | None, statuses: Mapping[str, str] | None) -> Outcome:
    """`claim` against the chosen engine's run of its test: `statuses` maps each verdict name the run
    wrote to its status (None: the test did not run). Every verdict of a needed name must pass."""
    if statuses is None:
        return Outcome(claim, NOT_RUN, None, ())
    seen: list[tuple[str, str]] = []
    for needed in claim.verdicts:
        matching = [(name, status) for name, status in statuses.items() if _base(name) == needed]
        seen.extend(matching or [(needed, MISSING)])
    status = CLAIMED if all(status == PASS for _name, status in seen) else NOT_VALIDATED
    return Outcome(claim, status, run, tuple(seen))


def judge_verdicts(claim: Claim, run: str | None, verdicts: list[Mapping[str, Any]] | None, status_of) -> Outcome:
    """`judge` from a run's stored verdicts; `status_of` reads a verdict's status (older verdicts
    carry `passed` only: benchmarks.verdicts.status_of)."""
    if verdicts is None:
        return judge(claim, run, None)
    return judge(claim, run, {str(v.get("name") or ""): status_of(v) for v in verdicts})


def sentence(outcome: Outcome, evidence: Any, **params: Any) -> Message:
    """The record's sentence for `outcome`: the claim when claimed, else its "not validated" form;
    `evidence` is the clause naming the test, the run and each verdict with its outcome."""
    template = outcome.claim.claimed if outcome.claimed else outcome.claim.not_validated
    return Message(template, {**params, "evidence": evidence})
