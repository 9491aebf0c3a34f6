"""Every way a validation run fails stores its reason twice: the English `error` the API, the CLI and the
logs read (the sentence it always was) and `error_message`, the same reason as a message the run page
renders in its language, identifiers and quoted text as code (issue 37 item 2)."""

from __future__ import annotations

import re
import sys
from datetime import timedelta

import pytest
from django.utils import timezone, translation

from benchmarks import tasks
from benchmarks.models import BenchmarkRun
from benchmarks.validation import loadtest, worker
from benchmarks.validation.dispatch import start_validation
from benchmarks.validation.engine import EngineUnavailable, LaunchedEngine
from benchmarks.validation.worker import claim, execute
from selection.candidates import probing
from selection.i18n import message_html
from tests.e2e.pagechecks import english_words, punctuation
from tests.support.builders import SHORT_STRESS as SHORT
from tests.support.builders import mock_engine_candidate

CODE = re.compile(r"<code>.*?</code>", re.S)
TAG = re.compile(r"<[^>]+>")


@pytest.fixture
def candidate(selection_with_constraints, architect, engines, mock_engine):
    return mock_engine_candidate(
        selection_with_constraints, architect, engines["vllm"], mock_engine.url, api_key="sk-test"
    )


def shown(run: BenchmarkRun, language: str = "zh-hans") -> str:
    """The run page's reason (`message_html`, as run.html renders it) without its code spans and tags."""
    assert run.error_message, run.error
    with translation.override(language):
        html = str(message_html(run.error_message))
    return TAG.sub(" ", CODE.sub(" ", html))


def assert_chinese(run: BenchmarkRun) -> str:
    text = shown(run)
    assert english_words(text) == [], text
    assert punctuation(text) == [], text
    assert re.search(r"[\u4e00-\u9fff]", text), text
    return text


def queued(candidate, user) -> BenchmarkRun:
    return start_validation(candidate=candidate, test="concurrency_stress", user=user, params=SHORT)


def started(candidate, user) -> BenchmarkRun:
    return claim(queued(candidate, user).pk, "w1")


def test_an_unreachable_engine_reads_in_chinese(candidate, architect):
    run = queued(candidate, architect)
    type(candidate).objects.filter(pk=candidate.pk).update(endpoint_url="http://127.0.0.1:9")
    assert tasks.run_validation.apply(args=(run.pk,), retries=3).get() == "failed"
    run.refresh_from_db()
    assert run.error == "engine unreachable: http://127.0.0.1:9 did not answer /health or /v1/models"
    assert "引擎" in assert_chinese(run)
    assert TAG.sub("", str(message_html(run.error_message))) == run.error.replace(
        "engine unreachable", "the engine could not be reached"
    )


@pytest.mark.parametrize(
    "raised",
    [
        EngineUnavailable("plain"),  # a reason without a message: a translated lead-in, the text as code
        EngineUnavailable(
            "prefix_off_endpoint_url: http://10.0.0.2 did not answer /health or /v1/models",
            worker.Join(
                [worker.Code("prefix_off_endpoint_url"), worker.no_answer("http://10.0.0.2")], worker.LABEL_SEPARATOR
            ),
        ),
    ],
)
def test_every_engine_unavailable_reads_in_chinese(candidate, architect, monkeypatch, raised):
    run = queued(candidate, architect)

    def unavailable(run, reporter):
        raise raised

    monkeypatch.setattr(worker, "_execute", unavailable)
    assert tasks.run_validation.apply(args=(run.pk,), retries=3).get() == "failed"
    run.refresh_from_db()
    assert run.error == f"engine unreachable: {raised}"
    assert_chinese(run)


def test_a_launch_recipe_that_fails_reads_in_chinese(tmp_path):
    engine = LaunchedEngine(
        f"{sys.executable} -c \"print('boom'); raise SystemExit(3)\"", "http://127.0.0.1:9", startup_timeout_s=10
    )
    with pytest.raises(EngineUnavailable) as failed:
        engine.__enter__()
    assert str(failed.value) == (
        "launch_recipe: the engine exited with status 3 before it was healthy; last log lines: boom"
    )
    assert str(failed.value.message) == str(failed.value)
    with translation.override("zh-hans"):
        html = str(message_html(failed.value.message))
    text = TAG.sub(" ", CODE.sub(" ", html))
    assert english_words(text) == [] and "退出" in text, text
    missing = LaunchedEngine("/no/such/engine --port 9", "http://127.0.0.1:9")
    with pytest.raises(EngineUnavailable) as failed:
        missing.__enter__()
    assert str(failed.value) == "launch_recipe: could not start '/no/such/engine': No such file or directory"
    with translation.override("zh-hans"):
        text = TAG.sub(" ", CODE.sub(" ", str(message_html(failed.value.message))))
    assert english_words(text) == [] and "无法启动" in text, text


def test_a_refused_model_reads_in_chinese(candidate, architect, monkeypatch):
    run = started(candidate, architect)
    mismatch = {"served": "kvsim-llama-3.1-8b", "target": "Llama-3.1-70B"}
    refusal = probing.refusal(mismatch)
    assert refusal == (
        "the endpoint serves kvsim-llama-3.1-8b, not the selection's model Llama-3.1-70B: evidence about another "
        "model is not evidence about this one (point the candidate at an endpoint serving Llama-3.1-70B, or keep "
        "it with a justification)"
    )
    provenance = {"refusal": refusal, "refusal_message": probing.refusal_message(mismatch)}
    monkeypatch.setattr(worker, "probe_before_run", lambda candidate, launched: provenance)
    run = execute(run)
    assert run.status == "failed" and run.error == f"model_name: {refusal}"
    assert "模型" in assert_chinese(run)


@pytest.mark.parametrize(
    "raised, english",
    [
        (loadtest.PlanError("concurrency: must be at least 1"), "params: concurrency: must be at least 1"),
        (ValueError("duration_s: not a number"), "params: duration_s: not a number"),
        (RuntimeError("connection reset by peer"), "RuntimeError: connection reset by peer"),
    ],
)
def test_a_test_that_fails_reads_in_chinese(candidate, architect, monkeypatch, raised, english):
    run = started(candidate, architect)

    def fails(*args, **kwargs):
        raise raised

    monkeypatch.setattr(loadtest, "run_test", fails)
    run = execute(run)
    assert run.status == "failed" and run.error == english
    assert_chinese(run)
    with translation.override("en"):
        assert TAG.sub("", str(message_html(run.error_message))).endswith(str(raised))


@pytest.mark.django_db(transaction=True)
def test_a_load_stopped_early_keeps_its_partial_data_and_reads_in_chinese(candidate, architect, monkeypatch):
    real = loadtest.run_test

    def stops(*args, **kwargs):
        result = real(*args, **kwargs)
        result.points[0].extra["stopped_early"] = "the error rate passed 50%"
        return result

    monkeypatch.setattr(loadtest, "run_test", stops)
    run = execute(started(candidate, architect))
    assert run.status == "failed" and run.partial
    assert run.error == "stopped early: the error rate passed 50% (partial data kept)"
    assert "负载提前停止" in assert_chinese(run)


@pytest.mark.django_db(transaction=True)
def test_an_engine_gone_during_the_test_reads_in_chinese(candidate, architect, monkeypatch):
    answers = iter([True])
    monkeypatch.setattr(worker, "healthy", lambda url: next(answers, False))
    run = execute(started(candidate, architect))
    assert run.status == "failed" and run.partial
    assert run.error == "engine stopped answering during the test (partial data kept)"
    assert_chinese(run)


def test_a_lost_worker_reads_in_chinese(candidate, architect):
    run = started(candidate, architect)
    BenchmarkRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert tasks.reap_stale_runs() == [run.pk]
    run.refresh_from_db()
    seconds = int(worker.stale_after().total_seconds())
    assert run.error == (
        f"worker lost: no heartbeat for more than {seconds} s (killed or crashed); "
        "no result was stored, so the run has no data"
    )
    assert "心跳" in assert_chinese(run)
