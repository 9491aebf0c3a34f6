"""Every page, in both languages, as each person meets it (issue 37 item 2).

The demo's own pipeline builds the world (its users, team, sample selection, candidates on
simulators, the priority tests run by the worker's own code, scores, a record signed by the three
owners), with shorter test parameters; a second record is written in 简体中文 (sent to review in
Chinese). The architect then creates a fresh selection in the browser. The
crawler (tests/e2e/crawler.py) opens every page reachable from both selections, as the architect,
each owner and the observer, in English and Chinese, and the test fails on any 5xx, a page wider
than the 1280 px viewport, code in visible text, and on Chinese pages English words and ASCII
punctuation after Chinese text; the Chinese record's text (the HTML its PDF is rendered from) is held to the same rules.

The owners and the observer open each kind of page once (one run page, one capacity page, ...):
what differs between people is what a page offers them, not the data; the architect opens every
page. What users typed (names, labels, notes) is allowed to stay in its own language.
"""

from __future__ import annotations

import io
import os
import re
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connections

from tests.e2e import pagechecks
from tests.e2e.crawler import VISIBLE_TEXT, Crawl, read_baseline

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

# The demo's test parameters, shorter: the same tests, the same verdicts to show, in seconds.
QUICK_PARAMS = {
    "concurrency_stress": {"duration_s": 4.0, "warmup_s": 0.5, "settle_s": 1.0},
    "swap_recovery": {"idle_s": 3.0},
    "prefix_reuse": {"requests": 32, "concurrency": 16},
    "stability": {"duration_s": 8.0, "window_s": 2.0, "warmup_s": 1.0},
}
ALL_PEOPLE = ("architect", "business", "platform", "security", "observer")
ALL_LANGUAGES = ("en-US", "zh-CN")
# A quicker crawl while fixing pages: KVSELECT_CRAWL_PEOPLE=architect KVSELECT_CRAWL_LANGUAGES=zh-CN
# (comma-separated subsets). A partial crawl cannot tell a fixed baseline entry from an unvisited one,
# so only the full crawl reports baseline lines it no longer finds.
PEOPLE = tuple(os.environ.get("KVSELECT_CRAWL_PEOPLE", ",".join(ALL_PEOPLE)).split(","))
LANGUAGES = tuple(os.environ.get("KVSELECT_CRAWL_LANGUAGES", ",".join(ALL_LANGUAGES)).split(","))
FULL_CRAWL = set(PEOPLE) == set(ALL_PEOPLE) and set(LANGUAGES) == set(ALL_LANGUAGES)
SCOPE = ("/selections/new/", "/records/verify/", "/profile/")
# Refused outright, whatever was found before.
FAILING_KINDS = ("5xx", "width", "scroll")
# Refused beyond the committed baseline (crawl_baseline.txt): code in visible text, English and ASCII
# punctuation on Chinese pages and in the Chinese record. A finding not in the baseline fails the test;
# a baseline line the full crawl no longer finds is printed (delete it: the baseline only shrinks, and
# test_pagechecks.py holds its count as a ceiling).
BASELINED_KINDS = ("identifier", "english", "punctuation")
BASELINE = Path(__file__).with_name("crawl_baseline.txt")


def kind_of_page(url: str) -> str:
    """A page's kind: its path with every number but the selection's replaced (one run page, one
    capacity page, ... of each selection)."""
    parts = urlsplit(url)
    selection, rest = re.match(r"(/selections/\d+/)?(.*)", parts.path).groups()
    query = "&".join(sorted(part.split("=")[0] for part in parts.query.split("&") if part))
    return (selection or "") + re.sub(r"\d+", "N", rest) + (f"?{query}" if query else "")


def typed_leaves(value, key: str = "") -> set[str]:
    """The texts people typed into a structure (a record's project checks): every string leaf but the
    states they picked from a list ("ready", "not_ready"), which the page shows in words."""
    if isinstance(value, dict):
        return {text for k, v in value.items() for text in typed_leaves(v, str(k))}
    if isinstance(value, list):
        return {text for v in value for text in typed_leaves(v, key)}
    return {value} if isinstance(value, str) and key != "status" else set()


def user_texts(selections) -> set[str]:
    """What people typed or are called: allowed to stay in its own language on any page."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from benchmarks.charts.style import LEGEND_WIDTH, TICK_WIDTH, wrap
    from selection.i18n import person_name

    CHART_WRAP_WIDTHS = (TICK_WIDTH, LEGEND_WIDTH, 18, 36, 40, 90)  # the widths benchmarks.charts wraps at

    texts: set[str] = set()
    for selection in selections:
        texts |= {selection.name, selection.description, selection.team.name}
        texts |= {selection.licence_terms, selection.vendor_support, selection.delivery_owner}
        texts |= {getattr(getattr(selection, "constraints", None), "notes", "")}
        for candidate in selection.candidates.all():
            texts |= {candidate.label, candidate.display_name, candidate.model_name}
            texts |= {candidate.launch_flags}  # the engine's flags as the architect typed them
            texts |= set(candidate.runs.values_list("label", flat=True))  # what a run was labelled when started
        for record in selection.records.all():
            texts |= {record.rationale}
            texts |= typed_leaves(record.project_checks)  # the draft's project checks: notes, teams, stages
            texts |= set(record.approvals.values_list("comment", flat=True))  # what an owner wrote approving
            texts |= set(record.comments.values_list("text", flat=True))
            texts |= {t for item in record.open_items.all() for t in (item.note, item.reason)}
        texts |= set(selection.audit.values_list("justification", flat=True))  # why a person changed something
    # people's names, and their login names (the user menu shows yours: you typed it to sign in)
    texts |= {person_name(user) for user in get_user_model().objects.all()}
    texts |= {user.get_username() for user in get_user_model().objects.all()}
    # the model catalog's names are product names (gpt-oss-120b, Qwen2.5-72B)
    texts |= {path.stem for path in (Path(settings.BASE_DIR) / "selection/fixtures/model_configs").glob("*.json")}
    # a chart wraps a long name onto lines ("vLLM (simulated" / "paged-offload)"): each line is the name's
    texts |= {line for text in texts if text for width in CHART_WRAP_WIDTHS for line in wrap(text, width).splitlines()}
    return {text for text in texts if text}


def build_demo(settings, tmp_path, monkeypatch):
    """The demo's selection through the demo command's own steps (shorter tests), signed.

    Its tasks (the validation runs, rescoring, the PDF) run eagerly, one after the other, in a thread
    of this process: the same code a worker runs, without a worker's start-up and queue waits (the
    browser's event loop holds the test's own thread)."""
    from config.celery import app

    built: dict[str, object] = {}

    def build() -> None:
        try:
            built["demo"] = build_demo_steps(settings, tmp_path, monkeypatch)
        except BaseException as error:  # re-raised in the test's thread
            built["error"] = error
        finally:
            connections.close_all()

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        thread = threading.Thread(target=build)
        thread.start()
        thread.join()
    finally:
        app.conf.task_always_eager = eager
    if "error" in built:
        raise built["error"]
    return built["demo"]


def build_demo_steps(settings, tmp_path, monkeypatch):
    from benchmarks.validation.plan import priority_order
    from selection.management.commands import demo as demo_command
    from selection.scoring.services import refresh_scores

    settings.KVSELECT_DEV_CA_DIR = str(tmp_path / "dev-certs")
    demo_params = demo_command.demo_params
    monkeypatch.setattr(demo_command, "demo_params", lambda test: {**demo_params(test), **QUICK_PARAMS.get(test, {})})
    # every test kind once (the first candidate's priority tests), the stress on the others: the run
    # pages, the comparison and the record show each kind of result at half the demo's runs
    first = demo_command.Engine.objects.get(slug=demo_command.DEMO_CANDIDATES[0][0])
    monkeypatch.setattr(
        demo_command,
        "priority_order",
        lambda candidate: (
            priority_order(candidate) if candidate.engine_id == first.pk else [("concurrency_stress", True)]
        ),
    )
    demo = demo_command.Command(stdout=io.StringIO(), stderr=io.StringIO())
    demo.children = []
    try:
        password = demo.ensure_users()
        selection = demo.ensure_selection()
        certs, passphrase = demo.ensure_certs()
        demo.start_simulators(selection)
        demo.run_validations(selection)
        assert not refresh_scores(selection.pk, force=True)
        record = demo.sign_record(selection, certs, passphrase)
    finally:
        demo.stop_children()
    return selection, record, password


def chinese_record(selection, signed) -> str:
    """Version 2 of the demo's record, sent to review in 简体中文 (the language it is written in),
    as the record's HTML the PDF is rendered from."""
    from django.contrib.auth import get_user_model
    from django.utils import translation

    from selection.management.commands.demo import DEMO_PROJECT_CHECKS
    from selection.records.open_items import with_item_states
    from selection.records.pdf import render_record_html
    from selection.records.services import create_draft, start_review

    architect = get_user_model().objects.get(username="architect")
    with translation.override("zh-hans"):
        record = create_draft(
            selection=selection,
            user=architect,
            supersedes=signed,
            include_simulated=True,
            rationale="演示：所有数据均来自模拟器。",
            project_checks=DEMO_PROJECT_CHECKS,
        )
        record = start_review(record=record, user=architect)
    return render_record_html(with_item_states(record.snapshot, record))


def log_in(page, base: str, username: str, password: str, language: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit].btn--primary")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    if language.startswith("zh"):
        with page.expect_navigation():
            page.select_option("#language-select", "zh-hans")


# a name as long as the form allows, one unbroken word: it must wrap in headers, flashes and tables
FRESH_NAME = ("Fresh-selection-with-a-name-that-never-breaks-" * 5)[:200]


def create_fresh_selection(page, base: str) -> int:
    """The architect's new selection, created in the browser with the demo's owners and a long name."""
    from django.contrib.auth import get_user_model

    from selection.models import Team

    users = get_user_model().objects
    page.goto(f"{base}/selections/new/")
    page.fill("#id_name", FRESH_NAME)
    page.select_option("#id_team", str(Team.objects.get(name="Demo platform team").pk))
    for role in ("business", "platform", "security"):
        page.select_option(f"#id_{role}_owner", str(users.get(username=role).pk))
    page.click("form.card button[type=submit].btn--primary")
    page.wait_for_url(re.compile(r"/selections/\d+/constraints/$"))
    return int(re.search(r"/selections/(\d+)/", page.url).group(1))


def test_every_page_in_both_languages_as_each_person(
    live_server, signed_records_cleanup, new_page, settings, tmp_path, monkeypatch
):
    from selection.candidates.services import load_engine_catalog
    from selection.models import Selection

    started = time.monotonic()
    load_engine_catalog()
    demo, signed, password = build_demo(settings, tmp_path, monkeypatch)
    built = time.monotonic()
    chinese = chinese_record(demo, signed)
    print(f"demo built in {built - started:.0f} s, Chinese record in {time.monotonic() - built:.0f} s")
    base = live_server.url

    architect = new_page()
    log_in(architect, base, "architect", password, "en-US")
    fresh = create_fresh_selection(architect, base)
    crawl = Crawl(base, allowed=user_texts(Selection.objects.filter(pk__in=[demo.pk, fresh])))
    crawl.check_current(architect, "architect", "en-US")  # the page with the creation's flash
    selections = [f"/selections/{pk}/" for pk in (demo.pk, fresh)]
    for who in PEOPLE:
        for language in LANGUAGES:
            page = architect if (who, language) == ("architect", "en-US") else new_page(language)
            if page is not architect:
                log_in(page, base, who, password, language)
            print(f"crawling as {who} in {language}", flush=True)
            crawl.crawl(
                page,
                who,
                language,
                ["/", *selections, *SCOPE],
                [*selections, *SCOPE],
                once_per_kind=None if who == "architect" else kind_of_page,
            )

    page = new_page("zh-CN")
    page.set_content(chinese)
    text = page.evaluate(VISIBLE_TEXT)
    for line in pagechecks.english_phrases(text, crawl.allowed):
        crawl.add("english", "the Chinese record", "architect", "zh-hans", line)
    for found in pagechecks.punctuation(text):
        crawl.add("punctuation", "the Chinese record", "architect", "zh-hans", found)
    for found in pagechecks.identifiers(text, crawl.allowed):
        crawl.add("identifier", "the Chinese record", "architect", "zh-hans", found)

    print(f"crawled {sum(crawl.visited.values())} pages in {crawl.seconds:.0f} s: {crawl.visited}")
    print(crawl.report())
    assert all(count >= 10 for count in crawl.visited.values()), crawl.visited
    failing = crawl.report(FAILING_KINDS)
    assert not failing, f"the crawler refused:\n{failing}"
    found, baseline = crawl.baseline_keys(BASELINED_KINDS), read_baseline(BASELINE)
    if os.environ.get("KVSELECT_CRAWL_WRITE"):  # the findings as baseline lines, to compare or to shrink it by
        Path(os.environ["KVSELECT_CRAWL_WRITE"]).write_text("".join(f"{key}\n" for key in sorted(found)))
    new = sorted(found - baseline)
    assert not new, f"{len(new)} finding(s) beyond {BASELINE.name}:\n" + "\n".join(new)
    if FULL_CRAWL and baseline - found:
        print(f"no longer found, delete from {BASELINE.name}:\n" + "\n".join(sorted(baseline - found)))
