"""`manage.py validate`: run one validation test against an endpoint, without Django state.

Writes kvselect's native result format, which the ingest API accepts. The target must pass the
same allow-list as the Celery jobs (KVSELECT_ALLOWED_TARGETS).

`--trace FILE` alone replays a production trace (kvselect CSV/JSONL, Mooncake, Azure, BurstGPT)
open loop on its own clock and reports per traffic group; `--speedup X` scales its clock (2 = twice
the rate), `--sample N` keeps its first N requests. With `--test`, the test draws its requests'
lengths from the trace instead (concurrency_stress and stability).

`--rate R` runs the test open loop (Poisson arrivals at R requests/s): the concurrency stress at
that rate, the overload test's steps as multiples of it. `--concurrency N` is the overload test's
target (its first step) and `--duration S` the length of each of its steps.
`--test model_switch --switch-endpoint URL` moves the load from `--endpoint` to the new version
deployed at URL and back (two deployments, e.g. behind your gateway); kvselect never runs a switch
command against a real engine. Against the simulator without `--switch-endpoint` it restarts the
simulator through its POST /admin/restart instead. `--test isolation --priority` sends each
tenant's `priority` field (for engines launched with priority scheduling, e.g. vLLM
`--scheduling-policy priority`). `--receive-clock user` times responses when the client reads them
(less client CPU per token) instead of by the kernel's receive stamps (exact: the default).
Which of these shared flags a test takes, and the parameter each sets, is its `cli` in its
`benchmarks.suite` module; a flag the test does not take is refused.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from benchmarks.harness import safety, workloads
from benchmarks.harness.client_timing import RECEIVE_CLOCKS
from benchmarks.suite import BY_ID, RUNNABLE_TEST_IDS, TESTS
from benchmarks.suite.trace_replay import TEST as TRACE_REPLAY
from benchmarks.traces.formats import FORMATS as TRACE_FORMATS
from benchmarks.validation.target import CATALOG_SLUGS, documented_cache_model


class Command(BaseCommand):
    help = (
        "Run one of the validation tests (or replay a trace) against an OpenAI-compatible endpoint and write "
        "the native result."
    )

    def add_arguments(self, parser):
        parser.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000")
        parser.add_argument("--model", required=True, help="served model name")
        parser.add_argument("--test", choices=RUNNABLE_TEST_IDS, help="default with --trace: replay the trace")
        parser.add_argument("--trace", help="a production trace: replay it, or with --test take its lengths")
        parser.add_argument("--format", dest="trace_format", choices=sorted(TRACE_FORMATS), help="the trace's format")
        parser.add_argument("--speedup", type=float, default=1.0, help="trace clock speed-up (2: twice the rate)")
        parser.add_argument("--sample", type=int, help="replay only the first N requests of the trace")
        load = parser.add_mutually_exclusive_group()
        load.add_argument("--concurrency", type=int, help="closed loop: requests kept in flight")
        load.add_argument("--rate", type=float, help="open loop: requests per second (Poisson)")
        parser.add_argument("--duration", type=float, help="seconds of measured load")
        parser.add_argument(
            "--kv-capacity-tokens",
            type=int,
            help="the engine's KV capacity in tokens: swap_recovery sizes its pressure from it, prefix_reuse and "
            "long_context turn KV usage ratios into tokens with it (default: what the engine's metrics state)",
        )
        parser.add_argument("--metrics-url", help="Prometheus /metrics URL (default: <endpoint>/metrics)")
        parser.add_argument(
            "--switch-endpoint", help="model_switch: base URL of the new version to move the load to and back"
        )
        parser.add_argument("--switch-model", help="model_switch: served model name there (default: --model)")
        parser.add_argument(
            "--priority",
            action="store_true",
            help="isolation: send each tenant's priority field (engines with priority scheduling)",
        )
        parser.add_argument("--engine", default="auto", help="vllm, sglang, lmdeploy, tgi, trtllm, llamacpp or auto")
        parser.add_argument(
            "--prefix-off-endpoint",
            help="prefix_reuse: the same engine started with prefix caching off (vLLM --no-enable-prefix-caching, "
            "SGLang --disable-radix-cache), run with the same load to compare; llama.cpp without it: the same "
            "endpoint with cache_prompt: false",
        )
        parser.add_argument(
            "--prefix-off-metrics-url", help="the caching-off engine's /metrics (default: <off endpoint>/metrics)"
        )
        parser.add_argument(
            "--api-key-env",
            default="KVSELECT_ENDPOINT_API_KEY",
            help="environment variable holding the endpoint's API key (never a flag: flags leak)",
        )
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override a planned parameter (JSON value), repeatable",
        )
        parser.add_argument(
            "--max-context",
            type=int,
            help="long_context: the ladder's last rung (tokens), in place of the required context",
        )
        parser.add_argument(
            "--receive-clock",
            choices=RECEIVE_CLOCKS,
            default=None,
            help="when response bytes count as received: kernel (the kernel's receive stamps, exact) or user "
            "(read time in uvloop's transport, less client CPU; default: KVSELECT_RECEIVE_CLOCK, kernel)",
        )
        parser.add_argument(
            "--launch-flags",
            default="",
            help="the flags the engine was started with: an offload tier of the engine's documented cache model "
            "counts only when they enable it (e.g. --kv-offloading-size 8)",
        )
        parser.add_argument("--out", help="write the native JSON here (default: stdout)")

    def handle(self, *args, **opts):
        check_targets(opts)
        check_options(opts)
        test, params = plan_params(opts)
        apply_overrides(opts, test, params)
        target = workloads.Target(
            endpoint_url=opts["endpoint"].rstrip("/"),
            model=opts["model"],
            api_key=os.environ.get(opts["api_key_env"]) or None,
            metrics_url=opts["metrics_url"] or opts["endpoint"].rstrip("/") + "/metrics",
            engine=opts["engine"],
            allowed_hosts=list(settings.KVSELECT_ALLOWED_TARGETS),
            receive_clock=opts["receive_clock"] or settings.KVSELECT_RECEIVE_CLOCK,
            cache_model=documented_cache_model(CATALOG_SLUGS.get(opts["engine"], ""), None, opts["launch_flags"]),
        )
        extra = {}
        if BY_ID[test].off_variant:
            extra["off_target"] = workloads.prefix_off_target(
                target, opts.get("prefix_off_endpoint"), opts.get("prefix_off_metrics_url")
            )
        try:
            result = workloads.run_test_sync(test, target, params, progress=progress_writer(opts), **extra)
        except (workloads.PlanError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        sys.stderr.write("\n")
        self.report(result, test, opts["out"])

    def report(self, result, test: str, out: str | None) -> None:
        """The replay summary and observed line on stderr; the native JSON to `out` or stdout."""
        if test == TRACE_REPLAY.id:
            self.stderr.write(replay_summary(result))
        observed = (result.metadata.get("observed") or {}).get("line")
        if observed:
            self.stderr.write(f"observed: {observed}")
        document = json.dumps(result.to_native(), indent=2, default=str)
        if out:
            Path(out).write_text(document)
            self.stderr.write(f"wrote {out} ({result.evidence}, {len(result.points)} load point(s))")
        else:
            self.stdout.write(document)


def check_targets(opts: dict) -> None:
    """Every URL the run will reach must pass the allow-list."""
    try:
        safety.check_target(opts["endpoint"], settings.KVSELECT_ALLOWED_TARGETS)
        if opts["metrics_url"]:
            safety.check_target(opts["metrics_url"], settings.KVSELECT_ALLOWED_TARGETS)
        if opts["switch_endpoint"]:
            safety.check_target(opts["switch_endpoint"], settings.KVSELECT_ALLOWED_TARGETS)
    except safety.TargetRefused as exc:
        raise CommandError(
            f"--endpoint: {exc} (allowed: {', '.join(settings.KVSELECT_ALLOWED_TARGETS)}; set KVSELECT_ALLOWED_TARGETS)"
        ) from exc
    for flag in ("prefix_off_endpoint", "prefix_off_metrics_url"):
        if opts.get(flag):
            try:
                safety.check_target(opts[flag], settings.KVSELECT_ALLOWED_TARGETS)
            except safety.TargetRefused as exc:
                raise CommandError(
                    f"--{flag.replace('_', '-')}: {exc} (allowed: {', '.join(settings.KVSELECT_ALLOWED_TARGETS)})"
                ) from exc


def check_options(opts: dict) -> None:
    """The flags' values and the combinations that make sense (before the test is planned)."""
    test = opts["test"]
    if test is None and not opts["trace"]:
        raise CommandError("--test: required (or give --trace FILE to replay a trace)")
    if opts["trace"] and not Path(opts["trace"]).is_file():
        raise CommandError(f"--trace: {opts['trace']}: no such file")
    if opts["sample"] is not None and opts["sample"] < 1:
        raise CommandError(f"--sample: must be a positive number of requests, got {opts['sample']}")
    if not opts["speedup"] > 0:
        raise CommandError(f"--speedup: must be positive, got {opts['speedup']}")
    row = BY_ID.get(test or TRACE_REPLAY.id)
    if (opts.get("prefix_off_endpoint") or opts.get("prefix_off_metrics_url")) and not row.off_variant:
        taking = " or ".join(other.id for other in TESTS if other.off_variant)
        raise CommandError(f"--prefix-off-endpoint: only the {taking} test runs a caching-off variant")
    if opts.get("prefix_off_metrics_url") and not opts.get("prefix_off_endpoint"):
        raise CommandError("--prefix-off-metrics-url: give --prefix-off-endpoint too")
    if opts["max_context"] is not None:
        if "max_context" not in row.plan_flags:
            taking = ", ".join(other.id for other in TESTS if "max_context" in other.plan_flags)
            raise CommandError(f"--max-context: applies to --test {taking} only")
        if opts["max_context"] < 1:
            raise CommandError(f"--max-context: must be a positive number of tokens, got {opts['max_context']}")
    if opts["kv_capacity_tokens"] is not None and opts["kv_capacity_tokens"] < 1:
        raise CommandError(
            f"--kv-capacity-tokens: must be a positive number of tokens, got {opts['kv_capacity_tokens']}"
        )


def plan_params(opts: dict) -> tuple[str, dict]:
    """The test to run (a trace replay without --test) and its planned parameters."""
    test = opts["test"]
    if test is None:
        test = TRACE_REPLAY.id
        params = workloads.plan(test)
        params.update(trace=opts["trace"], format=opts["trace_format"], speedup=opts["speedup"], sample=opts["sample"])
    else:
        flags = BY_ID[test].plan_flags
        params = workloads.plan(test, **{keyword: opts[flag] for flag, keyword in flags.items() if opts.get(flag)})
        if opts["trace"]:
            if "trace" not in BY_ID[test].cli:
                taking = [row.id for row in TESTS if "trace" in row.cli]
                raise CommandError(
                    f"--trace: {test} keeps its own request shapes; the trace's lengths apply to "
                    f"{', '.join(taking)} (or leave out --test to replay the trace)"
                )
            params.update(
                {BY_ID[test].cli["trace"]: opts["trace"]},
                length_trace_format=opts["trace_format"],
                length_trace_sample=opts["sample"] or 10_000,
            )
    return test, params


# the shared flags a test may take (its suite module's `TEST.cli`: flag -> the parameter it sets), and
# what each one is, in the refusal of a test that takes no such setting
TEST_FLAGS = {
    "concurrency": "concurrency setting",
    "rate": "open-loop mode",
    "duration": "duration setting",
    "priority": "priority field",
    "switch_endpoint": "second endpoint to switch to",
    "switch_model": "second endpoint to switch to",
    "kv_capacity_tokens": "KV capacity setting",
}


def apply_overrides(opts: dict, test: str, params: dict) -> None:
    """The flags and `--param KEY=VALUE` that override planned parameters, checked against the test:
    a shared flag sets the parameter its test's `cli` names, and a test without it refuses it."""
    takes = BY_ID[test].cli
    for flag, what in TEST_FLAGS.items():
        value = opts.get(flag)
        if value is None or value is False or value == "":
            continue
        if flag not in takes:
            others = ", ".join(f"--{name.replace('_', '-')}" for name in takes if name in TEST_FLAGS) or "none"
            raise CommandError(f"--{flag.replace('_', '-')}: {test} has no {what} (its flags: {others})")
        if flag == "rate" and not value > 0:
            raise CommandError(f"--rate: must be a positive number of requests/s, got {value}")
        params[takes[flag]] = value.rstrip("/") if flag == "switch_endpoint" else value
    for item in opts["param"]:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--param: expected KEY=VALUE, got {item!r}")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value


def progress_writer(opts: dict):
    """The progress callback: a one-line bar on stderr (silent at verbosity 0)."""

    def progress(payload):
        if opts["verbosity"] >= 1:
            late = payload.get("send_lateness_ms_p99")
            sys.stderr.write(
                f"\r{payload.get('phase', ''):<24} {progress_bar(payload.get('percent') or 0)} "
                f"{payload.get('percent') or 0:5.1f}%  {payload.get('requests_done') or 0} requests"
                + (f"  send lateness p99 {late:.1f} ms" if late is not None else "")
            )
            sys.stderr.flush()

    return progress


def progress_bar(percent: float, width: int = 24) -> str:
    filled = int(round(width * min(max(percent, 0.0), 100.0) / 100.0))
    return "[" + "#" * filled + " " * (width - filled) + "]"


def replay_summary(result) -> str:
    """One line per traffic group: requests, TTFT and TPOT p95, errors; then the send lateness."""
    lines = [f"trace replay ({result.evidence}): {result.metadata.get('replay', {}).get('file', '')}"]
    for point in result.points:
        ttft = "n/a" if point.ttft_ms.p95 is None else f"{point.ttft_ms.p95:.1f} ms"
        tpot = "n/a" if point.tpot_ms.p95 is None else f"{point.tpot_ms.p95:.2f} ms"
        lines.append(
            f"  {point.label:<10} {point.requests_completed or 0:>7} ok {point.requests_failed or 0:>5} failed  "
            f"TTFT p95 {ttft}  TPOT p95 {tpot}"
        )
    late = result.metadata.get("send_lateness_ms_p99")
    lines.append(f"  send lateness p99: {'n/a' if late is None else f'{late:.2f} ms'}")
    return "\n".join(lines)
