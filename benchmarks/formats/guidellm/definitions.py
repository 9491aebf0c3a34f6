"""What guidellm's figures mean in kvselect's terms, for both the JSON report and the CSV export:
the definitions a result carries, guidellm's percentile order, and the backend a <=0.3 benchmark's
`worker` names (see the package's docstring for the mapping)."""

from __future__ import annotations

from typing import Any

from benchmarks.result import NormalizedResult

DEFINITIONS = {
    "ttft_ms": "guidellm time_to_first_token_ms: first token iteration - request start (same as kvselect)",
    "tpot_ms": "guidellm has no kvselect TPOT aggregate: its time_per_output_token_ms (kept in "
    "extra.guidellm_time_per_output_token_ms) is (last token - request start)/output tokens in 0.7-0.8, i.e. "
    "INCLUDES TTFT, and (last - first token)/output tokens in 0.3 (divides by n, not n - 1); kvselect TPOT "
    "taken from per-request inter_token_latency_ms when every request is in the file",
    "itl_ms": "guidellm inter_token_latency_ms: per request (last - first token)/(tokens - 1), distribution weighted "
    "by tokens; its mean is the per-token ITL mean (kept), its percentiles are not (dropped)",
    "e2e_ms": "guidellm request_latency (seconds, converted): request start -> request end",
    "request_throughput": "guidellm requests_per_second.successful.mean over the measurement window",
    "achieved_concurrency": "requests in flight (any status) over guidellm's measurement window, from its request "
    "records (= its request_concurrency.total.mean)",
    "output_token_throughput": "guidellm output_tokens_per_second.successful.mean (time distribution)",
    "goodput": "guidellm 0.8 request_goodput (errored requests count as non-conforming) against config.slo",
}
PERCENTILE_ORDER = ("p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999")


def worker_metadata(worker: dict[str, Any], result: NormalizedResult) -> None:
    """guidellm <=0.3 kept the backend in each benchmark's `worker`."""
    for src, dst in (
        ("backend_model", "model"),
        ("backend_target", "backend_target"),
        ("backend_type", "backend_kind"),
    ):
        if isinstance(worker.get(src), str) and worker[src]:
            result.metadata.setdefault(dst, worker[src])
