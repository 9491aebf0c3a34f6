"""The KV capacity an engine really allocated, beside the capacity model's prediction.

Two sources, the most direct first: the engine's start-up log (kvselect launched the engine, so
the worker recorded it on the candidate; or the architect pasted it from an engine kvselect does not
launch, audited), else the engine's own metrics sampled during a run (the
harness keeps `metadata.engine_metrics.kv_capacity` when they state it: vLLM's cache_config_info,
SGLang's max_total_num_tokens, TensorRT-LLM's max blocks). The page shows it as soon as a run has it.
Either way it is the capacity the engine states it allocated ("engine-stated", `stated_by` says
where), not one kvselect computed; beside it the capacity model's prediction for the same candidate.
Read here; stated (and stamped as a scoring input) in `selection.capacity.stating`.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from benchmarks.models import BenchmarkRun
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity.base import CapacityError
from selection.domain.messages import Message
from selection.i18n import message_text
from selection.models import Candidate

# where an engine-stated capacity read from a run's metrics comes from, as the page shows it in its
# language (the metric expression itself is shown apart, as code)
ENGINE_METRICS_OF_RUN = gettext_noop("engine metrics of run %(run)s")
# and from an engine's start-up log (the worker's, after a run it launched; or one an architect pasted)
ENGINE_LOG_OF_RUN = gettext_noop("engine log of run %(run)s")
ENGINE_LOG_PASTED = gettext_noop("engine log pasted by %(user)s on %(date)s")


def measured_capacity(candidate: Candidate) -> dict[str, Any]:
    """The engine-stated capacity of a candidate: the engine log's, else the newest run whose engine
    metrics stated the KV capacity, with the prediction beside it; {} when the engine stated none."""
    if (candidate.measured_capacity or {}).get("token_capacity"):
        return {"stated_by": "engine log", **candidate.measured_capacity}
    # with its candidate_id: the related manager reads it on every row (a deferred field would cost a query each)
    runs = candidate.runs.filter(status=BenchmarkRun.Status.SUCCEEDED)
    runs = runs.only("pk", "candidate_id", "evidence", "metadata")
    for run in runs:  # newest first
        found = ((run.metadata or {}).get("engine_metrics") or {}).get("kv_capacity")
        if isinstance(found, dict) and isinstance(found.get("tokens"), int) and found["tokens"] > 0:
            measured: dict[str, Any] = {
                "token_capacity": found["tokens"],
                "stated_by": "engine metrics",
                "source": f"engine metrics of run {run.pk} ({found.get('source') or 'KV capacity'})",
                "source_message": Message(ENGINE_METRICS_OF_RUN, {"run": run.pk}).to_dict(),
                "metric_source": found.get("source") or "",
                "run_ids": [run.pk],
                "evidence": run.evidence,
            }
            try:
                measured["predicted_token_capacity"] = plan_for_candidate(candidate)["token_capacity"]
            except CapacityError as exc:
                measured["prediction_error"] = str(exc)
            return measured
    return {}


def stated_label(measured: dict[str, Any]) -> dict[str, Any]:
    """How an engine-stated capacity reads in the record, in the active language: the label in words
    ("engine-stated: engine metrics of run 4"), the metric expression it was read from apart (the record
    sets it as code: "vllm:cache_config_info num_gpu_blocks 27809 x block_size 16") and whether the run
    was SIMULATED; {} when the engine stated none. A capacity stored before its source was a message
    reads as stored."""
    if not measured.get("token_capacity"):
        return {}
    if measured.get("source_message"):
        source, metric = message_text(measured["source_message"]), measured.get("metric_source") or ""
    else:
        source, metric = measured.get("source") or measured.get("stated_by", ""), ""
    return {
        "source": _("engine-stated: %(source)s") % {"source": source},
        "metric": metric,
        "simulated": measured.get("evidence") == "SIMULATED",
    }
