"""`make demo`: set up the embedded default, run a sample selection end to end, then serve the UI."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from selection import services
from selection.models import Membership, Selection, Team

DEMO_TEAM = "Demo platform team"
DEMO_SELECTION = "Customer-support assistant (demo)"
DEMO_CONSTRAINTS = {
    "peak_concurrency": 256, "request_rate": 30.0, "avg_input_tokens": 1200, "p95_input_tokens": 3000,
    "max_input_tokens": 8192, "avg_output_tokens": 250, "max_output_tokens": 1024, "multi_turn": True,
    "average_turns": 5, "idle_seconds_between_turns": 40, "concurrent_sessions": 400, "never_swap_sessions": 20,
    "ttft_p95_ms": 800.0, "tpot_p95_ms": 50.0, "e2e_p95_ms": 15000.0, "throughput_target_tokens_s": 6000,
    "gpu_model": "H100", "gpu_memory_gib": 80.0, "gpu_count_budget": 4, "cost_per_gpu_hour": "2.50",
    "ops_team_size": 3, "target_model": "Llama-3.1-8B", "kv_precisions_allowed": ["bf16", "fp8"],
    "notes": "Demo data: every result in this selection comes from the kvselect simulator (SIMULATED).",
}


class Command(BaseCommand):
    help = "Set up kvselect on the embedded default, run the sample selection end to end, then serve the UI."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="Stop after the pipeline (same as DEMO_SERVE=0)")
        parser.add_argument("--port", type=int, default=8000)

    def step(self, message: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {message}"))

    def handle(self, *args, **options):
        serve = not options["no_serve"] and os.environ.get("DEMO_SERVE", "1") != "0"
        self.step("Migrating the database")
        call_command("migrate", interactive=False, verbosity=0)
        self.step("Loading the engine catalog")
        count = services.load_engine_catalog()
        self.stdout.write(f"    {count} engines")
        self.step("Creating the demo users, team and sample selection")
        username, password = self.ensure_demo_user()
        selection = self.ensure_sample_selection(username)
        self.stdout.write(f"    selection #{selection.pk}: {selection.name} -> scenario {selection.scenario}")
        for reason in selection.scenario_reasons:
            self.stdout.write(f"      - {reason}")
        self.stdout.write(self.style.SUCCESS("Demo ready."))
        self.stdout.write(f"    Log in as {username} / {password}")
        if serve:
            self.serve(options["port"], username, password)

    def ensure_demo_user(self) -> tuple[str, str]:
        User = get_user_model()
        username = "architect"
        password_file = Path(settings.VAR_DIR) / "demo-password"
        user = User.objects.filter(username=username).first()
        if user is None or not password_file.exists():
            password = secrets.token_urlsafe(12)
            user = user or User(username=username, first_name="Demo", last_name="Architect")
            user.set_password(password)
            user.save()
            password_file.write_text(password)
            password_file.chmod(0o600)
        return username, password_file.read_text().strip()

    @transaction.atomic
    def ensure_sample_selection(self, username: str) -> Selection:
        User = get_user_model()
        architect = User.objects.get(username=username)
        team, _ = Team.objects.get_or_create(name=DEMO_TEAM)
        Membership.objects.get_or_create(team=team, user=architect, defaults={"role": Membership.Role.ARCHITECT})
        owners = {}
        for role, (login, first, last) in {
            "business_owner": ("business", "Wei", "Zhang"), "platform_owner": ("platform", "Priya", "Raman"),
            "security_owner": ("security", "Jonas", "Berg"), "observer": ("observer", "Ana", "Silva"),
        }.items():
            user, created = User.objects.get_or_create(username=login, defaults={"first_name": first, "last_name": last})
            if created:
                user.set_unusable_password()
                user.save()
            Membership.objects.get_or_create(team=team, user=user, defaults={"role": Membership.Role.REVIEWER})
            owners[role] = user
        selection = Selection.objects.filter(team=team, name=DEMO_SELECTION).first()
        if selection is None:
            selection = services.create_selection(user=architect, team=team, name=DEMO_SELECTION,
                                                  description="A support assistant with multi-turn sessions.",
                                                  **owners)
            services.save_constraints(selection=selection, user=architect, data=dict(DEMO_CONSTRAINTS))
            services.set_gates(selection=selection, user=architect, gates={"memory": 0.5, "persistence": 0.5})
            selection.refresh_from_db()
            services.accept_scenario(selection=selection, user=architect)
        return selection

    def serve(self, port: int, username: str, password: str) -> None:
        """A real Celery worker next to the web server, so jobs run off the request path."""
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "default,gpu,render",
                                   "--pool", "threads", "-c", "4", "--loglevel", "WARNING"])
        self.stdout.write(self.style.SUCCESS(f"Serving on http://127.0.0.1:{port}/  (log in as {username} / {password})"))
        try:
            call_command("runserver", f"127.0.0.1:{port}", use_reloader=False)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
            time.sleep(0)
