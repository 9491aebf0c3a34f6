"""Measurement noise: does the winner hold when every measurement moves within its interval?

Pure numpy, no Django. The sensitivity of `domain.scoring` varies the weights; this varies the
evidence. The rules, in one place:

* **What moves.** Every measured indicator that carries a 95 % interval (a bootstrap over the
  run's requests, or the spread of re-runs of the same test) is drawn uniformly between its score
  at the two ends of that interval; indicators without one, and documented features, stay at their
  score. The draws of an indicator come from a generator seeded by the seed, the candidate and the
  indicator's name, never by their position: the same evidence gives the same draws bit for bit,
  whatever order the candidates or criteria arrive in, and adding a candidate does not move the
  others' draws.
* **Who wins a draw.** The decision rule of the scoring (`domain.tiebreak`), on the drawn scores
  (weights fixed, screening held fixed): the draw's top total and the candidates within the tie
  margin of it on the total or on the core dimensions form a group; in it the best core score and
  those within the margin of it stay, then the tie-break's preference (observability, then operating
  complexity) picks, and the higher drawn total, then the lower index, breaks what is left.
* **Stable** (`scoring.measurement_noise` decides) when the winner is first in at least
  `STABLE_SHARE` of the draws, or the tie-break chose it on a documented property that no draw
  moves; otherwise the evidence does not separate the candidates and the decision is
  inconclusive. Unknown (None) when no indicator has an interval: nothing says how far the
  measurements could move.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # numpy loads with the first draw, not with every module that names DRAWS (issue 39)
    import numpy as np

STABLE_SHARE = 0.95  # the winner must hold in this share of the draws of the measurements
DRAWS = 10_000


@dataclass(frozen=True)
class Part:
    """One scored indicator of a candidate: the column of its criterion, its share of the criterion
    score (its weight / the criterion's total indicator weight), its score, and its score at the ends
    of its measured interval (None: it does not move)."""

    column: int
    share: float
    score: float
    interval: tuple[float, float] | None = None
    name: str = ""  # criterion:indicator, the seed's name for it


def _generator(seed: int, candidate: str, name: str) -> np.random.Generator:
    import numpy as np

    digest = hashlib.sha256(f"{seed}:{candidate}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def draw_scores(
    parts: Sequence[Sequence[Part]], candidates: Sequence[str], columns: int, draws: int, seed: int
) -> np.ndarray:
    """Draws x candidates x criteria: each candidate's criterion scores with every part that has an
    interval drawn uniformly within it (see the module's rules)."""
    import numpy as np

    samples = np.zeros((draws, len(candidates), columns))
    for row, (candidate, own) in enumerate(zip(candidates, parts, strict=True)):
        for part in own:
            if part.interval is not None and part.interval[1] > part.interval[0]:
                low, high = part.interval
                values = _generator(seed, candidate, part.name).uniform(low, high, draws)
            else:
                values = np.full(draws, part.score)
            samples[:, row, part.column] += part.share * values
    return samples


def winners(
    totals: np.ndarray, preference: Sequence[int], margin: float, cores: np.ndarray | None = None
) -> np.ndarray:
    """The winner (column index) of each row of `totals` (draws x candidates) under the decision
    rule: the row's top total and those within `margin` of it on the total or on the core (`cores`,
    the same shape; None: the totals), then the best core and those within `margin` of it, then the
    lowest `preference` (the tie-break's order), then the highest total, then the lowest index."""
    import numpy as np

    cores = totals if cores is None else cores
    rows = np.arange(totals.shape[0])
    top = np.argmax(totals, axis=1)
    group = (totals >= totals[rows, top][:, None] - margin - 1e-12) | (
        np.abs(cores - cores[rows, top][:, None]) <= margin + 1e-12
    )
    best = np.where(group, cores, -np.inf).max(axis=1, keepdims=True)
    level = group & (cores >= best - margin - 1e-12)
    rank = np.where(level, np.asarray(preference, dtype=float)[None, :], np.inf)
    contenders = level & (rank == rank.min(axis=1, keepdims=True))
    return np.argmax(np.where(contenders, totals, -np.inf), axis=1)


def first_shares(
    parts: Sequence[Sequence[Part]],
    candidates: Sequence[str],
    weights: np.ndarray,
    preference: Sequence[int],
    margin: float,
    draws: int = DRAWS,
    seed: int = 0,
    core_weights: np.ndarray | None = None,
) -> np.ndarray:
    """The share of the measurement draws in which each candidate wins (`core_weights`: the weights of
    the core criteria, summing to 1, the others 0; None: the core is the total)."""
    import numpy as np

    weights = np.asarray(weights, dtype=float)
    samples = draw_scores(parts, candidates, len(weights), draws, seed)
    cores = None if core_weights is None else samples @ np.asarray(core_weights, dtype=float)
    won = winners(samples @ weights, preference, margin, cores)
    return np.bincount(won, minlength=len(candidates)) / draws
