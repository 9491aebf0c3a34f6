"""`manage.py validate`: run one validation test against an endpoint, without Django state.

Writes kvselect's native result format, which the ingest API accepts. The target must pass the
same allow-list as the Celery jobs (KVSELECT_ALLOWED_TARGETS).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from benchmarks.harness import safety, workloads
from benchmarks.suite import RUNNABLE_TEST_IDS


class Command(BaseCommand):
    help = "Run one of the five validation tests against an OpenAI-compatible endpoint and write the native result."

    def add_arguments(self, parser):
        parser.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000")
        parser.add_argument("--model", required=True, help="served model name")
        parser.add_argument("--test", required=True, choices=RUNNABLE_TEST_IDS)
        load = parser.add_mutually_exclusive_group()
        load.add_argument("--concurrency", type=int, help="closed loop: requests kept in flight")
        load.add_argument("--rate", type=float, help="open loop: requests per second (Poisson)")
        parser.add_argument("--duration", type=float, help="seconds of measured load")
        parser.add_argument("--metrics-url", help="Prometheus /metrics URL (default: <endpoint>/metrics)")
        parser.add_argument("--engine", default="auto", help="vllm, sglang, lmdeploy, tgi, trtllm, llamacpp or auto")
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
        parser.add_argument("--out", help="write the native JSON here (default: stdout)")

    def handle(self, *args, **opts):
        try:
            safety.check_target(opts["endpoint"], settings.KVSELECT_ALLOWED_TARGETS)
            if opts["metrics_url"]:
                safety.check_target(opts["metrics_url"], settings.KVSELECT_ALLOWED_TARGETS)
        except safety.TargetRefused as exc:
            raise CommandError(
                f"--endpoint: {exc} (allowed: {', '.join(settings.KVSELECT_ALLOWED_TARGETS)}; "
                "set KVSELECT_ALLOWED_TARGETS)"
            ) from exc
        params = workloads.plan(opts["test"])
        if opts["concurrency"] is not None:
            params["concurrency"] = opts["concurrency"]
        if opts["rate"] is not None:
            params["rate"] = opts["rate"]
        if opts["duration"] is not None:
            params["duration_s"] = opts["duration"]
        for item in opts["param"]:
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--param: expected KEY=VALUE, got {item!r}")
            try:
                params[key] = json.loads(value)
            except json.JSONDecodeError:
                params[key] = value
        target = workloads.Target(
            endpoint_url=opts["endpoint"].rstrip("/"),
            model=opts["model"],
            api_key=os.environ.get(opts["api_key_env"]) or None,
            metrics_url=opts["metrics_url"] or opts["endpoint"].rstrip("/") + "/metrics",
            engine=opts["engine"],
            allowed_hosts=list(settings.KVSELECT_ALLOWED_TARGETS),
        )

        def progress(payload):
            if opts["verbosity"] >= 1:
                sys.stderr.write(
                    f"\r{payload.get('phase', ''):<24} {payload.get('percent') or 0:5.1f}%  "
                    f"{payload.get('requests_done') or 0} requests"
                )
                sys.stderr.flush()

        try:
            result = workloads.run_test_sync(opts["test"], target, params, progress=progress)
        except (workloads.PlanError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        sys.stderr.write("\n")
        document = json.dumps(result.to_native(), indent=2, default=str)
        if opts["out"]:
            Path(opts["out"]).write_text(document)
            self.stderr.write(f"wrote {opts['out']} ({result.evidence}, {len(result.points)} load point(s))")
        else:
            self.stdout.write(document)
