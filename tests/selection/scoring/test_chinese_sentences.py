"""The scoring's sentences in Chinese, whatever the outcomes (issue 37 item 2): earlier crawls found
some of them in English on the Chinese comparison page and record, depending on what the simulated
runs happened to do. Each situation is built here from the domain's own functions (a candidate
screened out on one criterion of its gate, a recommendation that misses the throughput target, a
single candidate through the gates, figures held out of a client-bound run or scored with the
client's lateness), stored in the selection's score as the scoring stores its sentences, and
rendered on the comparison page and in a record's language: no English prose, identifiers in code."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest
from django.conf import settings
from django.urls import reverse

from selection.domain.messages import Message, to_json
from selection.domain.scoring.gates import gate_outcomes
from selection.domain.scoring.inputs import ScoringOptions
from selection.domain.scoring.noise import measurement_noise
from selection.domain.scoring.results import CriterionScore, DimensionScore
from selection.domain.scoring.sensitivity import analyse_sensitivity
from selection.domain.scoring.sentences import headline_sentences, held_out_sentences
from selection.i18n import message_text
from selection.models import Score
from selection.scoring.evidence import CLIENT_BOUND_RUN_BECAUSE
from tests.e2e import pagechecks

pytestmark = pytest.mark.django_db

LEADER, OTHER = "vLLM (simulated paged-offload)", "SGLang (simulated radix-offload)"


def _criterion(criterion: str, dimension: str, score: float) -> CriterionScore:
    return CriterionScore(criterion, dimension, 0.1, score, score, 1.0, "complete", True, [], "")


def _client_bound() -> Message:
    """A client-bound run's reason as `evidence.client_bound_reason` writes it."""
    return Message(
        CLIENT_BOUND_RUN_BECAUSE,
        {
            "test": Message("Concurrency stress"),
            "run": "4",
            "points": "c=64",
            "reasons": Message("event-loop lag p99 %(lag)s ms: client timings are unreliable", {"lag": "41"}),
        },
    )


def situations() -> list[Message]:
    """The sentences of the outcomes the crawls met in English, each from the function that writes it."""
    gates = gate_outcomes(
        {"memory": 0.6},
        {"memory": DimensionScore("memory", 0.72, 0.72, 1.0)},
        {
            "memory_allocation": _criterion("memory_allocation", "memory", 0.9),
            "cache_reuse": _criterion("cache_reuse", "memory", 0.31),
        },
    )
    leader = SimpleNamespace(
        candidate="a", label=LEADER, total=0.61, total_upper=0.61, coverage=0.8, screened_out=False
    )
    screened = SimpleNamespace(label=OTHER, screened_out=True, screen_reasons=[g.reason for g in gates])
    fit = {
        "a": [
            {
                "key": "throughput",
                "status": "fail",
                "observed": 812.0,
                "required": 2400.0,
                "unit": "tokens/s/GPU",
                "comparison": "at_least",
            }
        ]
    }
    headline = headline_sentences([leader], {}, {}, [leader, screened], winner="a", fit=fit)
    evidence = SimpleNamespace(
        candidate="a",
        held_out={"soak_drift_p99_ratio": _client_bound()},
        metrics={
            "ttft_p95_ms": SimpleNamespace(client_bound=_client_bound()),
            "sustainable_concurrency_per_gpu": SimpleNamespace(client_bound=_client_bound()),
        },
    )
    held_out = held_out_sentences([evidence], {"a": LEADER})
    options = ScoringOptions()
    noise = measurement_noise([leader], [leader], {}, ["cache_reuse"], np.ones(1), options, {})["sentence"]
    sensitivity = analyse_sensitivity(np.zeros((1, 1)), np.ones(1), ["a"], ["cache_reuse"], options)["sentences"]
    return [*headline, *held_out, noise, *sensitivity]


class VisibleText(HTMLParser):
    """A page's text as the crawler reads it: code, scripts and SVG left out, a line per block."""

    SKIP = {"script", "style", "code", "pre", "kbd", "samp", "textarea", "noscript", "template", "svg"}
    BLOCK = {"p", "div", "li", "tr", "td", "th", "h2", "h3", "section", "ul", "br", "summary", "figcaption"}

    def __init__(self):
        super().__init__()
        self.skipping, self.lines = 0, [[]]

    def handle_starttag(self, tag, attrs):
        self.skipping += tag in self.SKIP
        if tag in self.BLOCK:
            self.lines.append([])

    def handle_endtag(self, tag):
        self.skipping -= tag in self.SKIP
        if tag in self.BLOCK:
            self.lines.append([])

    def handle_data(self, data):
        if not self.skipping:
            self.lines[-1].append(data)

    @classmethod
    def of(cls, html: str) -> str:
        parser = cls()
        parser.feed(html)
        return "\n".join(line for line in ("".join(parts).strip() for parts in parser.lines) if line)


def english_in(text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """The lines of `text` a Chinese reader would read as English (the crawler's own rule); run
    references ("run-2") are names."""
    return pagechecks.english_phrases(re.sub(r"\brun-\d+\b", " ", text), [LEADER, OTHER, *allowed])


def test_every_situation_is_one_of_the_sentences_the_crawls_met():
    english = " ".join(str(s) for s in situations())
    for met in (
        "is screened out: Memory allocation and reuse 0.72, but cache reuse 0.31 < gate 0.60",
        "is recommended by the gates with a weighted total of 0.610",
        "output tokens/s per GPU within the budget",
        "held out of the scoring: client-bound (Concurrency stress run 4",
        "scored with the client's lateness in their interval",
        "Robustness to measurement noise needs a second candidate that passes the gates.",
        "Sensitivity needs at least two candidates that pass the gates.",
    ):
        assert met in english


def test_the_scoring_sentences_read_in_chinese_in_a_records_language():
    for sentence in situations():
        text = message_text(Message.from_dict(to_json(sentence)), "zh-hans")
        assert not english_in(text), text


def test_the_comparison_page_shows_every_scoring_sentence_and_rule_in_chinese(client, architect, decided):
    """The decided selection's own scoring (its leader's fit not validated: the inconclusive sentence)
    with the other situations' sentences added as the scoring stores them."""
    score = Score.objects.filter(selection=decided).latest("pk")
    assert score.result["sentences"][0]["msgid"].startswith("Inconclusive: %(name)s leads")
    score.result["sentences"] += [to_json(s) for s in situations()]
    score.save()
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    client.force_login(architect)
    html = client.get(reverse("selection:comparison", args=[decided.pk])).content.decode()
    start = html.rindex("<section", 0, html.index('class="decision decision--'))
    text = VisibleText.of(html[start : html.index('id="charts-title"')] + html[html.index('id="rules-title"') :])
    labels = tuple(c.display_name for c in decided.candidates.all())
    assert "无定论" in text and "筛除" in text
    assert not english_in(text, labels)
    assert not pagechecks.identifiers(text, labels)
    # the rules id and the inputs hash are identifiers: set as code
    assert re.search(r"规则 <code>kvselect-scoring/\d+</code> · 输入 <code>[0-9a-f]{10}", html)


def test_the_comparison_names_metrics_and_features_in_words_in_english(client, architect, decided):
    client.force_login(architect)
    html = client.get(reverse("selection:comparison", args=[decided.pk])).content.decode()
    text = VisibleText.of(html[html.rindex("<section", 0, html.index('class="decision decision--')) :])
    labels = tuple(c.display_name for c in decided.candidates.all())
    assert not pagechecks.identifiers(text, labels)
    assert "share of {KV usage, prefix hit rate, preemptions, queue depth} metrics exported" in text
