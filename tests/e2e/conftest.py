"""Browser fixtures: Debian's Chromium driven by Playwright, simulator engines, users, screenshots.

Chromium is never downloaded: Playwright launches /usr/bin/chromium (scripts/install-system-deps.sh
installs it). A missing browser FAILS the run, in CI and locally, rather than skipping it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CHROMIUM = os.environ.get("KVSELECT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
PASSPHRASE = "e2e-dev-pass-123"
OWNERS = {"business": ("wei", "Wei Zhang"), "platform": ("priya", "Priya Raman"), "security": ("jonas", "Jonas Berg")}


def password_for(username: str) -> str:
    return f"pw-{username}-Long1"


@pytest.fixture(scope="package")
def browser():
    """One Chromium for the e2e package, stopped after its last test.

    Playwright's sync API keeps a running event loop in the test thread while it is started, and
    Django's ORM then refuses to run "from an async context". The e2e tests only do small setup
    reads and writes there, so they are allowed while the browser lives, and only then.
    """
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)) and not shutil.which(CHROMIUM):
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: install it with scripts/install-system-deps.sh "
            "(apt-get install -y chromium chromium-driver)"
        )
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser):
    """A fresh browser context (own cookies = own login) per call, 1280x800, closed at teardown."""
    contexts = []

    def make(locale: str = "en-US"):
        context = browser.new_context(viewport=VIEWPORT, locale=locale, accept_downloads=True)
        context.set_default_timeout(20_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory) -> Path:
    """docs/screenshots when KVSELECT_SCREENSHOT_DIR says so (to refresh the README images), else a temp dir."""
    configured = os.environ.get("KVSELECT_SCREENSHOT_DIR")
    path = Path(configured) if configured else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def shot(screenshot_dir):
    def take(page, name: str) -> Path:
        target = screenshot_dir / f"{name}.png"
        page.screenshot(path=str(target), full_page=True)
        return target

    return take


@pytest.fixture
def simulators():
    """Three simulator engines (one per candidate), time-scaled so a short test finishes in seconds."""
    from benchmarks.simulator.config import SimConfig
    from benchmarks.simulator.server import ServerThread

    servers = [
        ServerThread(SimConfig(profile=profile, time_scale=50.0)).start()
        for profile in ("paged-prefix", "radix", "static")
    ]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def people(transactional_db, django_user_model):
    """A team with an architect (alice) and the three owners as reviewers, all with full names."""
    from selection.models import Membership, Team

    team = Team.objects.create(name="platform")

    def user(username: str, full_name: str, role: str):
        first, last = full_name.split(" ", 1)
        created = django_user_model.objects.create_user(
            username=username, password=password_for(username), first_name=first, last_name=last
        )
        Membership.objects.create(team=team, user=created, role=role)
        return created

    users = {"architect": user("alice", "Alice Chen", Membership.Role.ARCHITECT)}
    for role, (username, full_name) in OWNERS.items():
        users[role] = user(username, full_name, Membership.Role.REVIEWER)
    users["procurement"] = user("paula", "Paula Novak", Membership.Role.PROCUREMENT)
    return {"team": team, **users}


def log_in(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password_for(username))
    page.click("button[type=submit].btn--primary")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


@pytest.fixture
def signed_records_cleanup(transactional_db):
    """Let the transactional flush delete the records this test signed.

    Database triggers forbid deleting a record that left draft (selection migration 0003) and the
    evidence it cites (the citations, its runs and candidates: `evidence_deletion_triggers`), and
    the SQLite flush deletes row by row. After the test: drop the triggers, delete the citations
    and the records, put the triggers back, so other tests in the session still run against them.
    """
    yield
    import importlib

    from django.db import connection

    from selection.models import DecisionRecord, OpenItem, RecordApproval, RecordCitation

    migrations = [
        importlib.import_module(f"selection.migrations.{name}")
        for name in ("0003_record_immutability_triggers", "0008_evidence_deletion_triggers")
    ]
    with connection.schema_editor() as editor:
        for migration in migrations:
            migration.backwards(None, editor)
    try:
        RecordCitation.objects.all().delete()  # PROTECT their records, runs and candidates
        RecordApproval.objects.all().delete()  # PROTECTs its record
        OpenItem.objects.all().delete()  # PROTECTs its record
        for record in DecisionRecord.objects.order_by("-version"):  # successors first: they PROTECT predecessors
            record.delete()
    finally:
        with connection.schema_editor() as editor:
            for migration in migrations:
                migration.forwards(None, editor)
