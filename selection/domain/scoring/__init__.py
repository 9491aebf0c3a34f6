"""Scoring: from evidence to an explainable, bounded recommendation (docs/domain.md, step 5).

Pure Python + numpy; no Django, no MCDA library. The rules, in one place:

* **Indicators.** Each criterion is scored from one or more indicators. An indicator turns one
  piece of evidence (a measured metric, or a documented feature from the engine catalog) into a
  score in [0, 1] with a small named mapping whose bounds live in ONE table, `MAPPINGS`
  (scenario overrides in `SCENARIO_BOUNDS`). Bounds are fixed per scenario, or relative to the
  selection's constraints (e.g. TTFT p95 / budget); they are never min-max over the candidate
  set, so adding or removing a weak candidate can never flip the winner. A documented feature
  that a test observed overrides the documentation: the overload test confirms an admission limit
  (rejection or queueing past the sustainable load) or refutes it (OOM or a crash), see
  `ADMISSION_HELD`.
* **Missing evidence** is reported as missing, never as 0 or 1. A criterion's `score` is the
  conservative lower bound (missing indicators contribute nothing; measured indicators weigh 2,
  documented ones 1) and `score_upper` the value if every missing indicator came in at full
  marks; `score` is None when no indicator of the criterion has evidence. The total is **not**
  renormalised over the criteria present: it is sum(w_c * lower_c) with weights summing to 1 over
  all weighted criteria, so missing evidence can never reward a candidate; `total_upper` shows
  how far the missing evidence could lift it and `coverage` how much of the weight was evidenced.
* **SIMULATED** evidence is excluded (reported as missing, reason given) from a final scoring
  unless `include_simulated=True`; then it is used, marked, and the result is not signable.
* **Gates** (dimension -> minimum score, on the lower bound): the dimension's score and each of its
  own criteria (`GATE_CRITERIA`: the article's, not the scenario C/D additions) must reach it, so
  another criterion's credit never carries a gate (a session-recovery credit cannot pass a
  persistence gate whose cache persistence scores 0); an own criterion without evidence fails the
  gate. A failing candidate is screened out with the reason and still appears in the comparison
  with all its scores.
* **Ranking** among candidates that pass the gates: weighted sum (the decision), TOPSIS over the
  passing candidates as a second opinion (shown beside it; a distance, it favours even profiles,
  which is why it does not decide).
  Tie-break (the article's rule): candidates within `tie_margin` of the weighted-sum leader are
  compared on the observability dimension score, then on lower operating complexity, then on
  total, then by id. `method` says so in a sentence, and when TOPSIS ranks another candidate
  first it says which, by how much, and on which criteria its distance favours it (the criteria
  where that candidate's weighted lead is largest). TOPSIS measures the distance to full marks and
  to zero on the same fixed [0, 1] scale, not to the set's best and worst (with two candidates that
  reads any lead as 1.000 against 0.000).
* **Sensitivity** is analysed on the weighted-sum ranking of the passing candidates (screening
  held fixed, tie-break not applied), with weights normalised to sum to 1:
  (a) per criterion k: weight w_k moves to t in [0, 1] and the other weights are rescaled
      proportionally to keep the sum 1 (w_j -> w_j (1 - t) / (1 - w_k)); every total is then
      linear in t and the flip point against each challenger has a closed form. Reported: the
      smallest rise and the smallest fall of w_k beyond which another candidate leads, or none.
  (b) per challenger: the smallest L2 (Euclidean) change of the normalised weight vector, staying
      on the simplex (weights >= 0, summing to 1), that makes the challenger tie the leader.
      Closed form d~ = d - mean(d), |delta| = gap / |d~| when that stays non-negative; otherwise
      an active-set projection pins weights at 0.
  (c) rank acceptability: N draws (default 10,000, fixed seed) of weights perturbed
      multiplicatively by a uniform factor in [1 - spread, 1 + spread] and renormalised; the share
      of draws in which each candidate ranks first.
* **Sentences** for people (the headline, tie-break explanation, notes, gate and screening
  reasons, sensitivity sentences) are `messages.Message`s: ``str()`` is the English text, the
  shell renders them in the reader's language.

One module per concern, imported from where the name lives (this file re-exports nothing):

* `base`: the rules version, evidence kinds, scenarios, dimensions and criteria (labels, gate criteria),
  documented-feature vocabularies, `ScoringInputError`, `json_safe`.
* `inputs`: `Metric`, `DocumentedFeatures`, `CandidateEvidence`, `ScoringConstraints`, `ScoringOptions`;
  cost per million tokens, sustainable concurrency, `evidence_from_dict`.
* `mappings`: the criteria maps, `MAPPINGS` and `SCENARIO_BOUNDS`, as rows for the pages (`mapping_table`).
* `indicators`: `score_indicator`, one indicator from its evidence, with its interval.
* `results`: `CriterionScore`, `DimensionScore`, `GateOutcome`, `CandidateScore`, `ScoringResult`.
* `gates`: gate outcomes on a dimension and its own criteria; gate validation.
* `aggregation`: weights normalised; criterion, dimension and candidate scores; the score matrix.
* `ranking`: TOPSIS, and the sentence on which ranking decides.
* `ties`: the tie rule's inputs (core dimensions, contenders), a noise tie, what would separate a tie.
* `sensitivity`: flip points, nearest ties, rank acceptability (`analyse_sensitivity`).
* `noise`: robustness to measurement noise (`measurement_noise`, over `domain.noise`).
* `sentences`: the headline, notes, held-out figures, each candidate's fit to the constraints.
* `pipeline`: `score_candidates`, the steps in order, and `inputs_hash`.
"""
