"""Verdicts that say how much was observed: sample size, a bootstrap interval, and a status that is
never "pass" unless the behaviour was seen with enough data to decide (docs/domain.md, "verdicts").

A verdict is a plain dict so it travels unchanged through the native format, the database and the
record: {name, status, passed, detail, value, threshold, n, interval}, plus `source` (the evidence
that judged it: an engine counter, the responses' usage, timing) and `reference` (the documentation
a "not applicable" rests on) when they are known. `detail` is English text (the API, the CLI, logs);
a detail written as a `Message` also keeps its stored form in `detail_message`, which pages and
records render in their language. `passed` is True only for PASS and False only for FAIL; every
other status leaves it None, so older readers that only know `passed` treat those as "not judged",
never as a pass.

NOT_APPLICABLE is for behaviour the engine's documented cache model rules out or makes by design
(llama.cpp's slots keep their last prompt's KV resident; an engine without an offload tier drops
evicted KV and recomputes it): the verdict says why, with the source, and is neither a pass nor a
failure, nor a gap of the test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from selection.domain.messages import CLAUSE_SEPARATOR, Join, Message, to_json
from selection.domain.messages import marked as _

if TYPE_CHECKING:  # numpy is imported by the functions that judge samples, not by every page (issue 39)
    import numpy as np

PASS = "pass"
FAIL = "fail"
INCONCLUSIVE = "inconclusive"  # judged, but the interval straddles the threshold or the client was the limit
INSUFFICIENT_DATA = "insufficient_data"  # too few samples to judge
NOT_EXERCISED = "not_exercised"  # the behaviour the test is about never happened (no eviction, ...)
NOT_JUDGED = "not_judged"  # the engine exports nothing to judge it by
NOT_APPLICABLE = "not_applicable"  # the engine's documented cache model rules the behaviour out (why, source)
STATUSES = (PASS, FAIL, INCONCLUSIVE, INSUFFICIENT_DATA, NOT_EXERCISED, NOT_JUDGED, NOT_APPLICABLE)
# A status in words (pages, and sentences that name one: `status_word`).
STATUS_LABELS = {
    PASS: _("pass"),
    FAIL: _("fail"),
    INCONCLUSIVE: _("inconclusive"),
    INSUFFICIENT_DATA: _("insufficient data"),
    NOT_EXERCISED: _("not exercised"),
    NOT_JUDGED: _("not judged"),
    NOT_APPLICABLE: _("not applicable"),
}

MIN_SAMPLES = 20  # below it a percentile is "insufficient data", never a pass
# the share of the TTFT budget a request may spend waiting in the engine's queue: the harness's queue-wait
# verdict (`harness.queueing`) and the exported queue-wait alert (`selection.domain.monitoring`) read it
QUEUE_WAIT_SHARE_OF_TTFT = 0.5
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 20261201  # fixed: the same requests give the same interval on every run
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_WORK = 20_000_000  # resamples x samples kept under this (large runs get fewer resamples)


# What a judged percentile says (`judge_percentile`), as message templates.
FEW_SAMPLES = _(
    "%(what)s p%(q)s from %(n)s requests: at least %(min)s are needed to judge it (threshold %(sign)s "
    "%(threshold)s %(unit)s)"
)
JUDGED_WITH_INTERVAL = _(
    "%(what)s p%(q)s %(value)s %(unit)s (95%% CI %(low)s–%(high)s, n=%(n)s) vs %(sign)s %(threshold)s %(unit)s"
)
JUDGED = _("%(what)s p%(q)s %(value)s %(unit)s (n=%(n)s) vs %(sign)s %(threshold)s %(unit)s")
STRADDLES = _("%(detail)s: the interval straddles the threshold")
HELD_DESPITE_CLIENT = _("%(detail)s; the load was held and the client's lateness only adds latency (%(reasons)s)")
FAILS_BEYOND_CLIENT = _(
    "%(detail)s; fails even allowing the client's %(slack)s %(unit)s of lateness (client-bound: %(reasons)s)"
)
CLIENT_BOUND = _("%(detail)s; inconclusive (client-bound): %(reasons)s")
# What a verdict the engine's cache model makes moot says (`not_applicable`).
NOT_APPLICABLE_WHY = _("not applicable: %(why)s")
NOT_APPLICABLE_WHY_SOURCE = _("not applicable: %(why)s (%(source)s)")
NOT_APPLICABLE_OBSERVED = _("%(detail)s; observed: %(observed)s")


def verdict(
    name: str,
    status: str,
    detail: str | Message | Join,
    value: Any = None,
    threshold: Any = None,
    n: int | None = None,
    interval: Sequence[float] | None = None,
    source: str | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """A verdict dict; a `Message` detail is kept as English text and as its stored message."""
    if status not in STATUSES:
        raise ValueError(f"status: must be one of {', '.join(STATUSES)}, got {status!r}")
    result = {
        "name": name,
        "status": status,
        "passed": True if status == PASS else False if status == FAIL else None,
        "detail": str(detail),
        "value": value,
        "threshold": threshold,
        "n": n,
        "interval": None if interval is None else [float(interval[0]), float(interval[1])],
    }
    if isinstance(detail, (Message, Join)):
        result["detail_message"] = to_json(detail)
    if source:
        result["source"] = source
    if reference:
        result["reference"] = reference
    return result


def status_word(status: str) -> Message | str:
    """A status inside a sentence, as a message ("insufficient data"); an unknown one as its text."""
    return Message(STATUS_LABELS[status]) if status in STATUS_LABELS else str(status).replace("_", " ")


def detail_of(item: dict[str, Any]) -> Any:
    """A verdict's detail as a message when it was written as one, else its text."""
    return item.get("detail_message") or item.get("detail") or ""


def reasons_of(reasons: Sequence[Any]) -> Join:
    """Client-bound reasons (text or messages) as one clause list."""
    return Join(reasons, CLAUSE_SEPARATOR)


def not_applicable(
    name: str,
    why: str | Message,
    reference: str | None,
    observed: str | Message | Join = "",
    threshold: Any = None,
) -> dict[str, Any]:
    """A verdict the engine's documented cache model makes moot: "not applicable: <why> (<source>)",
    then what was observed anyway (figures for the reader, judged by nothing). `why` and `observed`
    may be messages: the detail is then a message too, shown in the page's language."""
    detail: Message = (
        Message(NOT_APPLICABLE_WHY_SOURCE, {"why": why, "source": reference})
        if reference
        else Message(NOT_APPLICABLE_WHY, {"why": why})
    )
    if observed:
        detail = Message(NOT_APPLICABLE_OBSERVED, {"detail": detail, "observed": observed})
    return verdict(name, NOT_APPLICABLE, detail, None, threshold, None, reference=reference)


def applicable(verdicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdicts that judge something on this engine (not_applicable ones left out)."""
    return [v for v in verdicts if status_of(v) != NOT_APPLICABLE]


def status_of(item: dict[str, Any]) -> str:
    """The status of a verdict, also of one written before statuses existed (`passed` only)."""
    status = item.get("status")
    if status in STATUSES:
        return status
    passed = item.get("passed")
    return PASS if passed is True else FAIL if passed is False else NOT_JUDGED


def bootstrap_interval(
    values: Sequence[float],
    statistic: Callable[[np.ndarray], np.ndarray],
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `statistic` (vectorised: it maps a (resamples, n) array to
    (resamples,)). None under two samples."""
    import numpy as np

    data = np.asarray([v for v in values if v is not None], dtype=float)
    data = data[np.isfinite(data)]
    if data.size < 2:
        return None
    resamples = int(max(200, min(BOOTSTRAP_RESAMPLES, BOOTSTRAP_WORK // data.size)))
    rng = np.random.default_rng(seed)
    estimates = statistic(data[rng.integers(0, data.size, size=(resamples, data.size))])
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    return float(low), float(high)


def percentile_interval(values: Sequence[float], q: float) -> tuple[float, float] | None:
    import numpy as np

    return bootstrap_interval(values, lambda sample: np.percentile(sample, q, axis=1))


def two_sample_interval(
    first: Sequence[float],
    second: Sequence[float],
    statistic: Callable[[np.ndarray], np.ndarray],
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of combine(statistic(first), statistic(second)), each sample
    resampled on its own (first, then second, from the one fixed seed). None under two samples on
    either side, or when no resample gives a finite figure."""
    import numpy as np

    a = np.asarray([v for v in first if v is not None], dtype=float)
    b = np.asarray([v for v in second if v is not None], dtype=float)
    if a.size < 2 or b.size < 2:
        return None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    a_estimates = statistic(a[rng.integers(0, a.size, size=(BOOTSTRAP_RESAMPLES, a.size))])
    b_estimates = statistic(b[rng.integers(0, b.size, size=(BOOTSTRAP_RESAMPLES, b.size))])
    with np.errstate(divide="ignore", invalid="ignore"):
        combined = combine(a_estimates, b_estimates)
    combined = combined[np.isfinite(combined)]
    if combined.size == 0:
        return None
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    low, high = np.percentile(combined, [tail, 100.0 - tail])
    return float(low), float(high)


def ratio_interval(
    numerators: Sequence[float], denominators: Sequence[float], q: float = 50.0
) -> tuple[float, float] | None:
    """Interval of percentile(numerators) / percentile(denominators), both resampled independently."""
    import numpy as np

    return two_sample_interval(numerators, denominators, lambda sample: np.percentile(sample, q, axis=1), np.divide)


def compare(value: float, interval: Sequence[float] | None, threshold: float, at_most: bool = True) -> str:
    """PASS/FAIL when the whole interval is on one side of the threshold, else INCONCLUSIVE."""
    low, high = (value, value) if interval is None else (interval[0], interval[1])
    if at_most:
        if high <= threshold:
            return PASS
        if low > threshold:
            return FAIL
    else:
        if low >= threshold:
            return PASS
        if high < threshold:
            return FAIL
    return INCONCLUSIVE


def judge_percentile(
    name: str,
    values: Sequence[float],
    q: float,
    threshold: float,
    what: str,
    unit: str = "ms",
    at_most: bool = True,
    client_bound_reasons: Sequence[str | Message] = (),
    min_samples: int = MIN_SAMPLES,
    client_slack_ms: float | None = None,
    load_held: bool = False,
) -> dict[str, Any]:
    """p`q` of `values` against `threshold`, with its sample size and bootstrap interval.

    Fewer than `min_samples` values: INSUFFICIENT_DATA. An interval across the threshold:
    INCONCLUSIVE. A value measured by a client that could not keep the load is INCONCLUSIVE
    (client-bound): the lateness may be the client's, and an under-held load proves nothing for a
    pass. A failure stays a failure only when it exceeds the threshold by more than the client could
    have added (`client_slack_ms`: its measured send lateness, loop lag and late reads), and a pass
    stays a pass only when the load was held (`load_held`): then the client's lateness can only
    have added latency, and the engine met the threshold in spite of it."""
    import numpy as np

    data = [float(v) for v in values if v is not None and np.isfinite(v)]
    n = len(data)
    figures = {"what": what, "q": f"{q:g}", "n": n, "sign": "<=" if at_most else ">=", "unit": unit}
    figures["threshold"] = f"{threshold:g}"
    if n < min_samples:
        return verdict(
            name,
            INSUFFICIENT_DATA,
            Message(FEW_SAMPLES, {**figures, "min": min_samples}),
            float(np.percentile(data, q)) if data else None,
            threshold,
            n,
        )
    value = float(np.percentile(data, q))
    interval = percentile_interval(data, q)
    status = compare(value, interval, threshold, at_most)
    figures["value"] = f"{value:.1f}"
    detail = (
        Message(JUDGED_WITH_INTERVAL, {**figures, "low": f"{interval[0]:.1f}", "high": f"{interval[1]:.1f}"})
        if interval
        else Message(JUDGED, figures)
    )
    if status == INCONCLUSIVE:
        detail = Message(STRADDLES, {"detail": detail})
    if client_bound_reasons and status in (PASS, FAIL):
        # late sends or reads inflate latencies; a load not held leaves the engine under-loaded:
        # the figure is partly the client's, so neither a pass nor, within the client's lateness,
        # an engine failure
        low = interval[0] if interval else value
        beyond = client_slack_ms is not None and (
            low - client_slack_ms > threshold if at_most else low + client_slack_ms < threshold
        )
        reasons = reasons_of(client_bound_reasons)
        if status == PASS and load_held:
            detail = Message(HELD_DESPITE_CLIENT, {"detail": detail, "reasons": reasons})
        elif status == FAIL and beyond:
            slack = f"{client_slack_ms:.1f}"
            detail = Message(FAILS_BEYOND_CLIENT, {"detail": detail, "slack": slack, "unit": unit, "reasons": reasons})
        else:
            status = INCONCLUSIVE
            detail = Message(CLIENT_BOUND, {"detail": detail, "reasons": reasons})
    return verdict(name, status, detail, value, threshold, n, interval)
