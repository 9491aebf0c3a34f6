"""`make demo`: the whole pipeline on the embedded default, then the UI.

Migrate, load the catalog, create a sample selection, start three simulated engines (one per
allocation strategy) and a real Celery worker, run the validation tests of the gates' priority
dimensions per candidate (all eight with --all-tests) through the `gpu` queue, score, draft a
decision record, have the three owners approve and sign it with development certificates (each
owner enrols theirs first; three different people, the architect drafts), write the PDF under var/,
then serve http://127.0.0.1:8000. Every result is SIMULATED and labelled so, and every signature is
flagged as a development certificate: the record is never "ready for procurement". With
KVSELECT_TSA_URL=dev (scripts/demo.sh sets it) signatures are timestamped by the development TSA
and carry their validation data (PAdES B-LT). Mail (owners told of a decision due for
re-evaluation) goes to the console.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from benchmarks.models import BenchmarkRun
from benchmarks.suite import demo_params
from benchmarks.validation.dispatch import start_validation
from benchmarks.validation.plan import priority_order
from config.celery import QUEUES
from config.outage import retry_database
from selection.candidates.screening import documentation_screen
from selection.candidates.services import add_candidate, load_engine_catalog, update_candidate
from selection.certificates.services import enrol_certificate
from selection.certificates.signing import (
    DEV_CA_CRL,
    DEV_CA_KEY,
    DEV_TSA_CERT,
    DEV_TSA_KEY,
    issue_dev_certificates,
    pkcs12_certificate,
)
from selection.domain import launch_flags, tie_ground
from selection.domain.messages import render
from selection.domain.records import OWNER_ROLES
from selection.management.demo_processes import (
    follow_moved_simulators,
    free_port,
    load_started,
    save_started,
    silent_local_endpoints,
    simulator_command,
    start_child,
    stop_children,
    stop_on_signals,
)
from selection.models import Candidate, DecisionRecord, Engine, Membership, Selection, Team
from selection.records.services import approve, create_draft, start_review
from selection.records.verification import verify_document
from selection.scoring.services import latest_score, refresh_scores
from selection.setup.services import accept_scenario, create_selection, save_constraints, set_gates

DEMO_TEAM = "Demo platform team"
DEMO_SELECTION = "Customer-support assistant (demo)"
# what the record's first page states for procurement (a demo's made-up business facts, never evidence)
DEMO_PROCUREMENT = {
    "monthly_budget": Decimal("12000"),
    "budget_currency": "EUR",
    "licence_terms": "Open-source engine used as published; no commercial licence is bought (demo).",
    "vendor_support": "Community support only; the platform team runs it, with a 4-hour response during business "
    "hours (demo).",
    "delivery_owner": "Platform team, inference group (demo)",
}
DEMO_CONSTRAINTS = {
    "peak_concurrency": 32,
    "request_rate": 8.0,
    "avg_input_tokens": 1024,
    "p95_input_tokens": 4096,
    "max_input_tokens": 32768,
    "avg_output_tokens": 128,
    "max_output_tokens": 1024,
    "multi_turn": True,
    "average_turns": 5,
    "idle_seconds_between_turns": 6,
    "concurrent_sessions": 8,
    "never_swap_sessions": 2,
    "ttft_p95_ms": 1500.0,
    "tpot_p95_ms": 60.0,
    "e2e_p95_ms": 20000.0,
    "throughput_target_tokens_s": 1500,
    "gpu_model": "H100",
    "gpu_memory_gib": 80.0,
    "gpu_count_budget": 2,
    "cost_per_gpu_hour": "2.50",
    # an offload tier's host memory is costed too (the demo's vLLM and SGLang both buy one)
    "host_memory_cost_per_gib_month": "3.00",
    "growth_factor": 1.5,  # the traffic expected in a year
    "growth_horizon_months": 12,
    "ops_team_size": 3,
    "target_model": "Llama-3.1-8B",
    "kv_precisions_allowed": ["bf16", "fp8"],
    "notes": "Demo data: every result in this selection comes from the kvselect simulator (SIMULATED).",
}
COST_AND_GROWTH = ("host_memory_cost_per_gib_month", "growth_factor", "growth_horizon_months")
# (catalog engine, simulator allocation strategy, extra simulator flags). A close decision: two
# candidates offload idle sessions to host memory and can pass the persistence gate. vLLM runs with
# priority scheduling (its launch flags say so, and the isolation test sends each tenant's priority)
# and a CPU offload tier (--kv-offloading-size); SGLang with its hierarchical cache
# (--enable-hierarchical-cache: the radix tree backed up to host memory, --hicache-ratio 2 by
# default). The llama.cpp server pre-allocates its slots and has no offload tier or graceful reload:
# its simulated restart cuts requests (model_switch), and the gates screen it out.
DEMO_CANDIDATES = (
    ("vllm", "paged-offload", ["--scheduling-policy", "priority"]),
    ("sglang", "radix-offload", []),
    ("llama-cpp", "static", ["--max-model-len", "40960", "--abrupt-restart"]),
)
# Launch flags of the demo candidates: documented features count only when the flags enable them
# (selection.domain.launch_flags), and the simulators export metrics, as SGLang and llama.cpp do only
# when started with these.
DEMO_LAUNCH_FLAGS = {
    "vllm": "--kv-offloading-size 8",
    "sglang": "--enable-metrics --enable-hierarchical-cache",
    "llama-cpp": "--metrics",
}
# the candidates' launch flags that are the engine's own (what the isolation plan reads)
ENGINE_FLAGS = ("--scheduling-policy",)
# The three project checks, the security checklist and who watches after launch (demo statements).
DEMO_PROJECT_CHECKS = {
    "affected": {
        "applications": ["support assistant (web chat)", "agent hand-over"],
        "teams": ["Customer support", "Platform SRE"],
        "data": ["chat transcripts (30 days)"],
    },
    "readiness": {
        "permissions": {"status": "ready", "note": "gateway API keys per application"},
        "monitoring": {"status": "ready", "note": "alerts.yml and dashboard.json exported from this record"},
        "logs": {"status": "not_ready", "note": "error logs not yet queryable per tenant"},
        "capacity": {"status": "ready", "note": "2 x H100 booked with 25 % headroom"},
        "rollback": {"status": "ready", "note": "previous deployment kept warm for one release"},
    },
    "acceptance": {"pilot_result": "Demo: answers fit the support scenario (SIMULATED, not a real pilot)."},
    "security": {
        "permissions": {"status": "ready", "note": "engine reachable from the gateway only"},
        "logs": {"status": "ready", "note": "request logs kept 90 days"},
        "audit_trail": {"status": "ready", "note": "kvselect's audit trail and git for launch flags"},
    },
    "watch": {"capacity": "Ana Silva", "cost": "Priya Raman", "stability": "Ana Silva"},
}
# Each step waits this long for a database that restarts under it (a step is safe to run again: it
# gets or creates, and every service call is one transaction).
DEMO_DATABASE_WAIT_S = 300.0
PERSONS = {
    "business": ("business", "伟", "张"),
    "platform": ("platform", "Priya", "Raman"),
    "security": ("security", "Jonas", "Berg"),
    "observer": ("observer", "Ana", "Silva"),
}


def simulator_plan(versions: dict[str, str]) -> list[tuple[str, str, int, str, list[str]]]:
    """(engine, key, preferred port, profile, flags) of every simulator the demo starts, from
    `DEMO_CANDIDATES` and each candidate's engine version: what `start_simulators` runs and what the
    README's hand-start block shows (tests/test_readme.py compares them)."""
    plan = []
    for index, (slug, profile, extra) in enumerate(DEMO_CANDIDATES):
        flags = [*extra, "--engine-version", versions[slug]]
        plan.append((slug, slug, 8101 + index, profile, flags))
        if slug in launch_flags.PREFIX_OFF_FLAGS:
            plan.append((slug, f"{slug}-off", 8111 + index, profile, [*flags, "--no-prefix-caching"]))
    return plan


# The demo's ground when its simulated scores tie: a ground a reader can weigh, saying what it is.
DEMO_TIE_GROUND = (
    "Demonstration only: the simulated candidates tie on this machine's evidence; the demo records the first "
    "tied candidate to show the review and signing path. Not a procurement ground."
)
SIMULATOR_URL_FIELDS = ["endpoint_url", "metrics_url", "prefix_off_endpoint_url", "prefix_off_metrics_url"]


def demo_candidate(selection: Selection, slug: str, profile: str) -> Candidate:
    """The demo's own candidate of an engine (its label names the simulator's profile), else the oldest
    compared one of that engine: a second candidate of the engine added by a user is not the demo's."""
    candidates = selection.candidates.filter(engine__slug=slug).select_related("engine").order_by("pk")
    compared = [c for c in candidates if c.archived_at is None]
    labelled = [c for c in compared if c.label.endswith(f"(simulated {profile})")]
    return (labelled or compared or list(candidates))[0]


class Command(BaseCommand):
    help = "Run the sample selection end to end on the simulator, write a signed PDF under var/, then serve the UI."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="Stop after the pipeline (same as DEMO_SERVE=0)")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--fresh", action="store_true", help="Run the pipeline again even if a signed record exists"
        )
        parser.add_argument(
            "--all-tests",
            action="store_true",
            help="Run the optional tests too (default: only the tests of the gates' priority dimensions, as the plan "
            "proposes; the others stay one click away on each candidate's validation page)",
        )

    def step(self, message: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {message}"))

    def with_database(self, what: str, operation):
        """Run a step's database work, again with back-off while the database restarts (before, the
        demo died on a PostgreSQL restart at its scoring step)."""
        return retry_database(operation, f"demo: {what}", budget_s=DEMO_DATABASE_WAIT_S)

    def handle(self, *args, **options):
        self.children: list[subprocess.Popen] = []
        stop_on_signals()  # SIGTERM and SIGHUP stop the children as Ctrl+C does
        serve = not options["no_serve"] and os.environ.get("DEMO_SERVE", "1") != "0"
        if serve:
            self.check_port(options["port"])
            # the server's own URL in what it writes (emails, the owners' signing command), not :8000
            os.environ.setdefault("KVSELECT_BASE_URL", f"http://127.0.0.1:{options['port']}")
            settings.KVSELECT_BASE_URL = os.environ["KVSELECT_BASE_URL"].rstrip("/")
        try:
            self.run_pipeline(options)
            if serve:
                self.serve(options["port"])
        finally:
            self.stop_children()

    # ------------------------------------------------------------------ pipeline

    def run_pipeline(self, options) -> None:
        self.step("Migrating the database")
        self.with_database("migrate", lambda: call_command("migrate", interactive=False, verbosity=0))
        self.step("Loading the engine catalog")
        self.stdout.write(f"    {self.with_database('catalog', load_engine_catalog)} engines")
        self.step("Creating the demo users, team and sample selection")
        self.password = self.with_database("users", self.ensure_users)
        selection = self.with_database("selection", self.ensure_selection)
        self.stdout.write(f"    selection #{selection.pk}: {selection.name} -> scenario {selection.scenario}")
        for reason in selection.scenario_reasons:
            self.stdout.write(f"      - {render(reason)}")
        self.step("Documentation screen of the candidates (decision step 3, before any test)")
        screens = self.with_database(
            "screen", lambda: [(c, documentation_screen(c)) for c in selection.candidates.select_related("engine")]
        )
        for candidate, screen in screens:
            reasons = "; ".join(render(r) for r in screen["reasons"])
            line = f"    {candidate.display_name}: {screen['status']}"
            self.stdout.write(line + (f" ({reasons})" if reasons else ""))
        self.step("Issuing development signing certificates (DEVELOPMENT CA, not for production)")
        certs, passphrase = self.with_database("certificates", self.ensure_certs)
        self.step("Starting the simulated engines (SIMULATED) and a Celery worker")
        self.start_simulators(selection)
        self.start_worker()
        signed = self.with_database(
            "records", lambda: selection.records.filter(status=DecisionRecord.Status.SIGNED).first()
        )
        if signed is None or options["fresh"]:
            self.step(
                "Running the validation tests on the gpu queue: "
                + (
                    "all eight per candidate"
                    if options["all_tests"]
                    else "the priority dimensions' tests per candidate"
                )
                + ", the candidates at once (each simulator is its own simulated GPU)"
            )
            self.run_validations(selection, all_tests=options["all_tests"])
            self.step("Scoring (SIMULATED evidence included: the result is not signable for procurement)")
            # both views now (the worker's rescoring after each run may still be queued): the pages
            # open on current snapshots
            error = self.with_database("scoring", lambda: refresh_scores(selection.pk, force=True))
            if error:
                raise CommandError(f"scoring failed: {error}")
            score = self.with_database("scores", lambda: latest_score(selection, include_simulated=True))
            for sentence in score.result.get("sentences", [])[:4]:
                self.stdout.write(f"    {render(sentence)}")
            self.step("Decision record: review, approvals and three PAdES signatures")
            signed = self.sign_record(selection, certs, passphrase)
        out = Path(settings.VAR_DIR) / "demo-decision-record.pdf"
        with signed.signed_pdf.open("rb") as handle:
            out.write_bytes(handle.read())
        self.stdout.write(self.style.SUCCESS(f"    signed PDF (marked SIMULATED): {out}"))
        self.with_database("verification", lambda: self.report_verification(out))
        self.check_pdfsig(out)
        self.with_database("monitoring export", lambda: self.export_monitoring(signed))
        self.stdout.write(self.style.SUCCESS("Demo pipeline complete."))
        self.stdout.write(
            f"    Log in as architect / {self.password}  (owners: business, platform, security; the post-launch "
            "observer: observer — same password)"
        )

    def ensure_users(self) -> str:
        User = get_user_model()
        password_file = Path(settings.VAR_DIR) / "demo-password"
        if not password_file.exists():
            password_file.write_text(secrets.token_urlsafe(12))
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        for username, first, last in [("architect", "Demo", "Architect"), *PERSONS.values()]:
            user, _ = User.objects.get_or_create(
                username=username,
                defaults={"first_name": first, "last_name": last, "email": f"{username}@kvselect.invalid"},
            )
            if not user.check_password(password):
                user.set_password(password)
                user.save()
        return password

    @transaction.atomic
    def ensure_selection(self) -> Selection:
        User = get_user_model()
        architect = User.objects.get(username="architect")
        team, _ = Team.objects.get_or_create(name=DEMO_TEAM)
        Membership.objects.get_or_create(team=team, user=architect, defaults={"role": Membership.Role.ARCHITECT})
        owners = {}
        for role, (username, _, _) in PERSONS.items():
            user = User.objects.get(username=username)
            Membership.objects.get_or_create(team=team, user=user, defaults={"role": Membership.Role.REVIEWER})
            owners[role if role == "observer" else f"{role}_owner"] = user
        selection = Selection.objects.filter(team=team, name=DEMO_SELECTION).first()
        if selection is None:
            selection = create_selection(
                user=architect,
                team=team,
                name=DEMO_SELECTION,
                description="A support assistant with multi-turn sessions.",
                **owners,
                **DEMO_PROCUREMENT,
            )
            save_constraints(selection=selection, user=architect, data=dict(DEMO_CONSTRAINTS))
            set_gates(selection=selection, user=architect, gates={"memory": 0.4, "persistence": 0.3})
            selection.refresh_from_db()
            accept_scenario(selection=selection, user=architect)
        else:  # a database from an earlier demo: the cost and growth fields it did not have yet (audited)
            missing = {k: DEMO_CONSTRAINTS[k] for k in COST_AND_GROWTH if getattr(selection.constraints, k) is None}
            if missing:
                save_constraints(selection=selection, user=architect, data=missing)
        self.sync_candidates(selection, architect)
        return Selection.objects.get(pk=selection.pk)

    def sync_candidates(self, selection: Selection, architect) -> None:
        """The demo's candidates as `DEMO_CANDIDATES` defines them: added when missing, their profile
        label and launch flags brought up to date (audited) in a database from an earlier demo."""
        for slug, profile, extra in DEMO_CANDIDATES:
            engine = Engine.objects.get(slug=slug)
            flags = [f"{flag} {extra[i + 1]}" for i, flag in enumerate(extra) if flag in ENGINE_FLAGS]
            data = {
                "label": f"{engine.name} (simulated {profile})",
                "launch_flags": " ".join(filter(None, [DEMO_LAUNCH_FLAGS.get(slug, ""), *flags])),
            }
            existing = selection.candidates.filter(engine=engine, archived_at__isnull=True).first()
            if existing is None:
                add_candidate(
                    selection=selection,
                    user=architect,
                    data={
                        **data,
                        "engine": engine,
                        "engine_version": engine.versions[0],
                        "model_name": "kvsim-llama-3.1-8b",
                        "gpu_model": "H100",
                        "gpu_count": 1,
                    },
                )
            elif any(getattr(existing, field) != value for field, value in data.items()):
                update_candidate(candidate=existing, user=architect, data=data)

    def ensure_certs(self):
        out = Path(settings.KVSELECT_DEV_CA_DIR)
        passphrase_file = out / "passphrase.txt"
        names = {
            role: f"{first} {last}" if role != "business" else f"{last}{first}"
            for role, (_, first, last) in PERSONS.items()
            if role != "observer"
        }
        if not passphrase_file.exists() or not (out / "dev-ca.pem").exists():
            out.mkdir(parents=True, exist_ok=True)
            passphrase_file.write_text(secrets.token_urlsafe(16))
            passphrase_file.chmod(0o600)
            issue_dev_certificates(out, names, passphrase_file.read_text().strip())
        paths = {role: out / f"{role}.p12" for role in names}
        authority = [out / name for name in (DEV_CA_KEY, DEV_CA_CRL, DEV_TSA_CERT, DEV_TSA_KEY)]
        missing = [str(p) for p in [*paths.values(), *authority] if not p.exists()]
        if missing:  # a CA from before it kept its key, CRL and TSA: issue a complete one
            issue_dev_certificates(out, names, passphrase_file.read_text().strip())
        passphrase = passphrase_file.read_text().strip()
        User = get_user_model()
        for role, path in paths.items():
            certificate = pkcs12_certificate(path.read_bytes(), passphrase)
            enrol_certificate(user=User.objects.get(username=role), certificate=certificate.pem.encode())
        self.stdout.write(f"    {out} (CA: dev-ca.pem); each owner enrolled their certificate")
        return paths, passphrase

    def start_simulators(self, selection: Selection) -> None:
        """The simulators of `simulator_plan`: one per candidate, and for engines with a prefix-caching-off
        flag (vLLM, SGLang) a twin started with caching off, the prefix-reuse test's "off" endpoint
        (llama.cpp's off run is its own endpoint with cache_prompt: false, as with the real server). Each
        reports the engine version it stands in for (GET /version, kvsim_build_info). Candidates that
        used the previous start's simulators follow them to their new ports; silent local endpoints are
        named."""
        candidates = self.with_database(
            "candidates",
            lambda: {slug: demo_candidate(selection, slug, profile) for slug, profile, _extra in DEMO_CANDIDATES},
        )
        started: dict[str, str] = {}
        for _slug, key, port, profile, flags in simulator_plan({s: c.engine_version for s, c in candidates.items()}):
            started[key] = self.start_simulator(port, profile, flags)
        for slug, profile, _extra in DEMO_CANDIDATES:
            candidate, url, off_url = candidates[slug], started[slug], started.get(f"{slug}-off", "")
            candidate.endpoint_url, candidate.metrics_url = url, f"{url}/metrics"
            candidate.prefix_off_endpoint_url = off_url
            candidate.prefix_off_metrics_url = f"{off_url}/metrics" if off_url else ""
            self.with_database(
                f"{slug} endpoints", lambda candidate=candidate: candidate.save(update_fields=SIMULATOR_URL_FIELDS)
            )
            off = f", prefix caching off at {off_url}" if off_url else ", prefix caching off: cache_prompt false"
            self.stdout.write(f"    {candidate.display_name}: {url} (profile {profile}{off})")
        self.follow_simulators(started)

    def follow_simulators(self, started: dict[str, str]) -> None:
        """After a restart on other ports: the candidates of any selection that pointed at the previous
        simulators follow them (audited); local endpoints that answer nothing are named."""
        state = Path(settings.VAR_DIR) / "demo-simulators.json"
        previous = load_started(state)

        def follow() -> list[Candidate]:
            with transaction.atomic():  # all candidates moved, or none (then moved again whole)
                return follow_moved_simulators(previous, started)

        for candidate in self.with_database("simulators moved", follow):
            self.stdout.write(
                f"    moved with its simulator: {candidate.display_name} (selection #{candidate.selection_id}) "
                f"-> {candidate.endpoint_url}"
            )
        save_started(state, started)
        for candidate in self.with_database("silent endpoints", silent_local_endpoints):
            self.stdout.write(
                self.style.WARNING(
                    f"    nothing answers at {candidate.endpoint_url}: {candidate.display_name} "
                    f"(selection #{candidate.selection_id}) cannot be tested until it does (edit its endpoint)"
                )
            )

    def start_simulator(self, preferred_port: int, profile: str, extra: list[str]) -> str:
        port = free_port(preferred_port)
        start_child(
            simulator_command(port, profile, extra), self.children, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.wait_for_port(port, f"simulator {profile}")
        return f"http://127.0.0.1:{port}"

    def wait_for_port(self, port: int, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise CommandError(f"{what} did not start on port {port}")

    def start_worker(self) -> None:
        start_child(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-B",
                "-Q",
                ",".join(QUEUES),
                "--pool",
                "threads",
                "-c",
                "6",
                "--loglevel",
                "WARNING",
                "-s",
                str(Path(settings.VAR_DIR) / "celerybeat-schedule"),
            ],
            self.children,
            stdout=subprocess.DEVNULL,
            stderr=open(Path(settings.VAR_DIR) / "demo-worker.log", "ab"),
        )

    def run_validations(self, selection: Selection, all_tests: bool = False) -> None:
        """The tests the plan proposes first (those feeding the gates' dimensions); the optional ones
        only with --all-tests. A candidate the documentation screen rules out is not tested."""
        architect = self.with_database("architect", lambda: get_user_model().objects.get(username="architect"))
        plans = self.with_database(
            "test plan", lambda: [(c, priority_order(c)) for c in selection.candidates.select_related("engine")]
        )
        runs = []
        for candidate, order in plans:
            optional = [test for test, priority in order if not priority]
            if optional and not all_tests:
                self.stdout.write(f"    {candidate.display_name}: optional, not run: {', '.join(optional)}")
            for test, priority in order:
                if not (priority or all_tests):
                    continue
                runs.append(
                    self.with_database(
                        f"starting {test}",
                        lambda candidate=candidate, test=test: start_validation(
                            candidate=candidate, test=test, user=architect, params=demo_params(test), label="demo"
                        ),
                    )
                )
        # each simulator is its own simulated GPU (benchmarks.validation.hardware): the candidates' runs
        # go at once, each candidate's tests one after another; the load client they share is checked
        # in every run (client-bound figures are held out, never scored)
        began = time.monotonic()
        deadline = began + 1800
        last = ""
        while time.monotonic() < deadline:
            states = self.with_database(
                "progress",
                lambda: list(
                    BenchmarkRun.objects.filter(pk__in=[r.pk for r in runs]).select_related("candidate__engine")
                ),
            )
            done = [r for r in states if r.is_terminal]
            percent = sum(100 if r.is_terminal else (r.progress or {}).get("percent") or 0 for r in states) / len(
                states
            )
            bar = "#" * int(percent / 4)
            line = f"    [{bar:<25}] {percent:5.1f}%  {len(done)}/{len(states)} runs done"
            if line != last:
                self.stdout.write(line)
                last = line
            if len(done) == len(states):
                break
            time.sleep(2)
        else:
            raise CommandError("validation runs did not finish within 30 minutes; see var/demo-worker.log")
        finished = self.with_database(
            "results",
            lambda: list(BenchmarkRun.objects.filter(pk__in=[r.pk for r in runs]).select_related("candidate__engine")),
        )
        width = max((len(run.candidate.engine.name) for run in finished), default=0)  # one column for the results
        for run in finished:
            mark = self.style.SUCCESS("ok") if run.status == "succeeded" else self.style.ERROR(run.status)
            self.stdout.write(
                f"    {run.candidate.engine.name:<{width}} {run.test:<20} {mark} {run.evidence} {run.error[:80]}"
            )
        minutes, seconds = divmod(round(time.monotonic() - began), 60)
        load = f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"
        self.stdout.write(
            f"    {len(finished)} runs in {minutes} min {seconds:02d} s (1-minute load average {load} on "
            f"{os.cpu_count() or 1} CPUs: a busier machine holds more figures out as client-bound)"
        )

    def sign_record(self, selection: Selection, certs, passphrase: str) -> DecisionRecord:
        architect = self.with_database("architect", lambda: get_user_model().objects.get(username="architect"))
        tie = self.with_database("tie", lambda: self.tie_choice(selection))
        record = self.with_database(
            "draft",
            lambda: create_draft(
                selection=selection,
                user=architect,
                include_simulated=True,
                rationale="Demonstration only: every figure comes from the simulator.",
                project_checks=DEMO_PROJECT_CHECKS,
                **tie,
            ),
        )
        record = self.with_database("review", lambda: start_review(record=record, user=architect))
        for role in OWNER_ROLES:
            record = self.with_database(
                f"{role} approval", lambda role=role, record=record: approve_once(record, role, confirm=bool(tie))
            )
        # owner-side, as an owner with kvselect-sign would: kvselect prepares the revision, the key here
        # signs its attributes, kvselect checks and embeds the CMS (the PKCS#12 never goes to the server)
        passphrase_file = Path(settings.KVSELECT_DEV_CA_DIR) / "passphrase.txt"
        for role in OWNER_ROLES:
            self.with_database(
                f"{role} signature", lambda role=role: self.sign_as(record, role, certs, passphrase_file)
            )
            self.stdout.write(f"    signed by the {role} owner (owner-side: prepared, signed locally, CMS embedded)")
        return self.with_database("signed record", lambda: DecisionRecord.objects.get(pk=record.pk))

    def tie_choice(self, selection: Selection) -> dict:
        """When the scores tie (close simulated figures; on a busy machine more of them are held out as
        client-bound, and the intervals widen), the draft names the first tied candidate on the demo's
        stated ground, as an architect must (domain/tie_ground.py), and says so; {} when there is a winner."""
        score = latest_score(selection, include_simulated=True)
        tied = tie_ground.tied((score.result or {}) if score is not None else {})
        if not tied:
            return {}
        names = {c.pk: c.display_name for c in selection.candidates.filter(pk__in=tied).select_related("engine")}
        self.stdout.write(
            f"    the scores tie ({', '.join(names.get(int(pk), pk) for pk in tied)}): the draft chooses "
            f"{names.get(int(tied[0]), tied[0])} on a stated ground, which the business owner confirms"
        )
        return {"tie_choice": int(tied[0]), "tie_ground": DEMO_TIE_GROUND}

    def sign_as(self, record: DecisionRecord, role: str, certs, passphrase_file: Path) -> None:
        """One owner signs owner-side (`sign-record`); a signature stored before the database went away
        is not made again."""
        if record.approvals.filter(role=role, signed_at__isnull=False).exists():
            return
        call_command(
            "sign-record",
            str(record.pk),
            "--user",
            role,
            "--role",
            role,
            "--pkcs12",
            str(certs[role]),
            "--passphrase-file",
            str(passphrase_file),
            stdout=io.StringIO(),
        )

    def export_monitoring(self, record: DecisionRecord) -> None:
        """The signed record's alert rules and dashboard under var/, checked by promtool when installed."""
        out = Path(settings.VAR_DIR) / "demo-monitoring"
        call_command("export-monitoring", str(record.pk), "--out", str(out), stdout=io.StringIO())
        self.stdout.write(f"    alert rules and dashboard: {out}/alerts.yml, {out}/dashboard.json")
        if not shutil.which("promtool"):
            self.stdout.write("    (promtool not installed: skipped the rules check)")
            return
        result = subprocess.run(["promtool", "check", "rules", str(out / "alerts.yml")], capture_output=True, text=True)
        if result.returncode != 0:
            raise CommandError(f"promtool refused the exported rules:\n{result.stdout}{result.stderr}")
        self.stdout.write("    promtool: " + (result.stdout.strip().splitlines() or ["SUCCESS"])[-1].strip())

    def report_verification(self, path: Path) -> None:
        verification = verify_document(path.read_bytes())
        report = verification.report
        levels = ", ".join(sorted({s.level or "none" for s in report.signatures}))
        owners = all(s.signed_by_owner for s in report.signatures)
        self.stdout.write(
            f"    verified: {len(report.signatures)} signatures, "
            f"{'each by its named owner' if owners else 'NOT all by their named owners'}, PAdES {levels}"
        )
        if verification.simulated:
            self.stdout.write(self.style.ERROR("    SIMULATED evidence - not for procurement"))
        if report.development_certificates:
            self.stdout.write(self.style.ERROR("    DEVELOPMENT CERTIFICATE (development CA) - not for procurement"))
        if not report.all_ok:
            raise CommandError(f"the demo record does not verify:\n{report.as_text()}")

    def check_pdfsig(self, path: Path) -> None:
        if not shutil.which("pdfsig"):
            self.stdout.write("    (pdfsig not installed: skipped the Poppler cross-check)")
            return
        result = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True)
        valid = result.stdout.count("Signature is Valid")
        self.stdout.write(f"    pdfsig: {valid} signatures valid")
        if valid < 3:
            raise CommandError(f"pdfsig did not validate the three signatures:\n{result.stdout}")

    # ------------------------------------------------------------------ serving

    def check_port(self, port: int) -> None:
        """Fail before the pipeline, not after it, when the web port is taken."""
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise CommandError(
                    f"port {port} is already in use (another demo or server?): stop it, or serve elsewhere "
                    f"with `make demo PORT={port + 1}`"
                )

    def serve(self, port: int) -> None:
        self.stdout.write(
            self.style.SUCCESS(f"Serving on http://127.0.0.1:{port}/  (log in as architect / {self.password})")
        )
        self.stdout.write(
            "    Ctrl+C stops the web server, the simulators and the worker together; `make demo` starts "
            "them again (the data stays in var/)."
        )
        call_command("runserver", f"127.0.0.1:{port}", use_reloader=False)

    def stop_children(self) -> None:
        stop_children(self.children)


def approve_once(record: DecisionRecord, role: str, confirm: bool = False) -> DecisionRecord:
    """The owner of `role` approves, unless the approval was stored before the database went away;
    `confirm`: the business owner confirms a tie's stated ground."""
    if record.approvals.filter(role=role).exists():
        return DecisionRecord.objects.get(pk=record.pk)
    owner = get_user_model().objects.get(username=role)
    return approve(
        record=record, user=owner, role=role, comment_text="Approved for the demo.", confirm_tie_ground=confirm
    )
