"""The capacity, validation, uploads and run pages in Chinese without English or code in their prose
(issue 37 item 2): identifiers, metric names, JSON keys and model ids stand in <code> beside words,
engine ids read as product names, and what the tests write (a soak's note, the engine host) is
rendered from a message in the page's language. The English pages show the same identifiers as code."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.urls import reverse

from benchmarks.harness.workloads.stability import short_soak_message
from benchmarks.models import BenchmarkRun
from selection.models import Team
from selection.setup.services import accept_scenario
from tests.e2e import pagechecks
from tests.support.builders import make_candidate, make_engine, make_selection, make_user, with_constraints

pytestmark = pytest.mark.django_db

CODE = re.compile(r"<(code|pre|script|style)\b[^>]*>.*?</\1>", re.S)
# what people typed or named in these pages' data: the candidate's label and model
TYPED = ("vLLM prefix on", "Llama-3.1-8B", "llama.cpp off", "SG", "Support bot", "Platform")


def prose(html: str) -> str:
    """The text a reader reads in an HTML fragment: code blocks out, tags as spaces."""
    return re.sub(r"<[^>]+>", " ", CODE.sub(" ", html))


def findings(html: str, chinese: bool = True) -> list[str]:
    text = prose(html)
    found = pagechecks.identifiers(text, TYPED)
    return found + (pagechecks.english_words(text, TYPED) + pagechecks.punctuation(text) if chinese else [])


def between(html: str, start: str, end: str) -> str:
    """The fragment from the first `start` to the next `end` (both must be there)."""
    assert start in html, start
    rest = html.split(start, 1)[1]
    assert end in rest, end
    return rest.split(end, 1)[0]


@pytest.fixture
def team():
    return Team.objects.create(name="Platform")


@pytest.fixture
def architect(team):
    return make_user("alice", team)


@pytest.fixture
def selection(architect, team):
    selection = with_constraints(make_selection(architect, team), architect)
    accept_scenario(selection=selection, user=architect)
    return selection


def candidate_of(selection, architect, engine="vllm", version="0.8.5", label="vLLM prefix on"):
    engine_row = make_engine(engine, versions=(version,))
    return make_candidate(selection, architect, engine=engine_row, engine_version=version, label=label)


def page(client, language: str, name: str, *args) -> str:
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = language
    return client.get(reverse(name, args=args)).content.decode()


def test_the_capacity_page_names_the_attention_and_sets_engine_keys_as_code(client, architect, selection):
    vllm, sglang = candidate_of(selection, architect), candidate_of(selection, architect, "sglang", "0.5.5", "SG")
    client.force_login(architect)
    zh = page(client, "zh-hans", "selection:capacity", selection.pk, vllm.pk)
    assert 'Llama-3.1-8B <span class="muted">(标准注意力)</span>' in zh
    assert findings(between(zh, 'id="figures-title">', "</section>")) == []
    for candidate in (vllm, sglang):  # the estimates' sources and the notes, in both languages
        zh = page(client, "zh-hans", "selection:capacity", selection.pk, candidate.pk)
        assert findings(between(zh, 'id="est-title">', "</section>")) == []
        en = page(client, "en", "selection:capacity", selection.pk, candidate.pk)
        assert findings(between(en, 'id="est-title">', "</section>"), chinese=False) == []
    assert "<code>--enforce-eager</code>" in page(client, "en", "selection:capacity", selection.pk, vllm.pk)
    assert "<code>--mem-fraction-static</code>" in page(client, "en", "selection:capacity", selection.pk, sglang.pk)


def test_the_validation_page_sets_fields_and_flags_as_code(client, architect, selection):
    vllm = candidate_of(selection, architect)
    llama = candidate_of(selection, architect, "llama-cpp", "master", "llama.cpp off")
    client.force_login(architect)
    for candidate in (vllm, llama):
        for language in ("zh-hans", "en"):
            html = page(client, language, "selection:validation", selection.pk, candidate.pk)
            plan = between(html, '<div class="plan">', "</main>")
            assert findings(plan, chinese=language == "zh-hans") == [], (candidate, language)
    zh = page(client, "zh-hans", "selection:validation", selection.pk, vllm.pk)
    assert "<code>user</code>" in zh and "`" not in prose(zh)  # the translation's backticks become code
    assert "发送 <code>priority</code> 字段" in zh and "<code>mean</code>、<code>p95</code>、<code>max</code>" in zh
    llama_zh = page(client, "zh-hans", "selection:validation", selection.pk, llama.pk)
    assert "<code>cache_prompt: false</code>" in llama_zh and "<code>cache_prompt false</code>" in llama_zh


def test_the_uploads_page_gives_a_chinese_example(client, architect, selection):
    client.force_login(architect)
    zh = page(client, "zh-hans", "selection:uploads", selection.pk)
    assert findings(between(zh, 'id="id_name_helptext">', "</p>")) == []


def soak_run(candidate) -> BenchmarkRun:
    """A finished soak on the simulator as the harness stores it: the engine host its probe read, a
    queue-wait verdict naming the engine's histogram, prefix reuse's pace-independent figure and the
    short soak's note (English, with its message beside it)."""
    note = short_soak_message({"soak_label": "demo", "session_turns": 5, "recommended_duration_s": 14400}, 8.0)
    notes, note_messages = [str(note)], {"0": note.to_dict()}  # as NormalizedResult.add_note stores it
    return BenchmarkRun.objects.create(
        candidate=candidate,
        test="stability",
        origin=BenchmarkRun.Origin.HARNESS,
        status=BenchmarkRun.Status.SUCCEEDED,
        evidence="SIMULATED",
        notes=notes,
        verdicts=[
            {
                "name": "queue_wait_p95_within_budget",
                "passed": True,
                "detail": "queue wait p95 285.0 ms, n=104 requests (vllm:request_queue_time_seconds) vs <= 750 ms",
            }
        ],
        metadata={
            "engine": "vllm",
            "pace_independent": ["prefix_saving_ratio"],
            "note_messages": note_messages,
            "engine_host": {
                "identity": {
                    "served_models": ["kvsim-llama-3.1-8b"],
                    "model_paths": ["llama-3.1-8b"],
                    "engine_version": "0.11.0",
                    "version_source": "GET /version",
                    "gpu": {
                        "model": "H100",
                        "count": 1,
                        "memory_gib": 80.0,
                        "driver": "simulated",
                        "source": "engine_metrics",
                    },
                }
            },
        },
    )


def test_the_run_page_says_in_words_what_the_engine_ran_on_and_what_the_soak_noted(client, architect, selection):
    run = soak_run(candidate_of(selection, architect))
    client.force_login(architect)
    zh = page(client, "zh-hans", "selection:run", selection.pk, run.pk)
    host = between(zh, "data-engine-host>", "</p>")
    assert host == (
        "<strong>运行于：</strong>模型 <code>kvsim-llama-3.1-8b</code>、<code>llama-3.1-8b</code>；"
        "版本 <code>0.11.0</code>（<code>GET /version</code>）；1× H100 80 GiB，模拟驱动，来自引擎指标"
    )
    assert '<dt data-key="engine">引擎</dt><dd>vLLM</dd>' in zh
    assert "前缀复用节省 <code>prefix_saving_ratio</code>" in zh
    notes = between(zh, 'id="notes-title"', "</ul>")
    assert "演示用的短长稳测试" in notes
    for fragment in (
        host,
        notes,
        between(zh, 'data-key="engine">', "</dd>"),
        between(zh, 'data-key="pace_independent">', "</dd>"),
    ):
        assert findings(fragment) == [], fragment
    en = page(client, "en", "selection:run", selection.pk, run.pk)
    assert "short demo soak of 8 s" in en and "(<code>vllm:request_queue_time_seconds</code>)" in en
    for fragment in (between(en, 'class="verdicts"', "</ul>"), between(en, 'data-key="pace_independent">', "</dd>")):
        assert findings(fragment, chinese=False) == [], fragment
    assert run.notes == [  # the API and the CLI keep the English
        "short demo soak of 8 s: not the 4 h the plan asks for; multi-turn sessions (the articles soak for hours)"
    ]


def test_literals_set_backticked_spans_flag_values_and_engine_metrics_as_code():
    from selection.templatetags.kvselect import literals

    shown = str(
        literals("带上 `priority` 字段（llama.cpp：cache_prompt false），指标 vllm:request_queue_time_seconds。")
    )
    assert "<code>priority</code>" in shown and "`" not in shown
    assert "<code>cache_prompt false</code>" in shown
    assert "<code>vllm:request_queue_time_seconds</code>" in shown
    assert str(literals("`<b>`")) == "<code>&lt;b&gt;</code>"  # escaped inside code too
    assert not pagechecks.english_words(prose(shown)) and not pagechecks.identifiers(prose(shown))
