"""The overload test's verdicts and observed line, every note the harness and the worker attach to a
run, and the outbound allow-list's refusals are messages: a Chinese page renders them in Chinese (no
English words beyond units, metric and product names), while the English text the API, the CLI and
the logs read stays the sentence it was (issue 37 item 2)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.utils import translation

from benchmarks import presentation
from benchmarks.harness import overload as o
from benchmarks.harness import safety
from benchmarks.harness.stopping import EarlyStop
from benchmarks.harness.workloads import long_context, model_switch, prefix_reuse, replay, swap_recovery
from benchmarks.harness.workloads import overload_test as t
from benchmarks.harness.workloads.common import CANCELLED, NO_CACHE_RESET, NOT_HELD
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.validation import worker
from benchmarks.verdicts import FAIL, INCONCLUSIVE, INSUFFICIENT_DATA, NOT_EXERCISED, PASS, detail_of, verdict
from selection.domain.messages import Message
from selection.i18n import message_text
from tests.e2e.pagechecks import english_words

# names a sentence quotes as they are spelled: the client's error class, protocols, engine names
NAMES = ("connect", "http", "https", "vllm", "llama-server")


def chinese(value) -> str:
    with translation.override("zh-hans"):
        return str(message_text(value))


def assert_chinese(value, english: str | None = None, names: tuple[str, ...] = ()) -> str:
    """`value` (a message, or a verdict's detail) in Chinese, checked to hold no English words beyond `names`."""
    shown = chinese(value)
    assert shown != (english if english is not None else str(value)), shown
    assert english_words(shown, NAMES + names) == [], shown
    return shown


def step(level, status, direction="up", **figures) -> o.Step:
    return o.Step(level=level, direction=direction, status=status, requests=40, **figures)


def point(level, direction="up", budget=None, **extra) -> LoadPoint:
    arrow = "↑" if direction == "up" else "↓"
    made = LoadPoint(label=f"{arrow} c={level:g}", concurrency=level, requests_completed=40, requests_failed=0)
    made.extra = {"budget": budget or [], "load_end_s": 10.0 * level, **extra}
    return made


def judge(steps, points, params=None, series=None, records=None):
    """`_overload_verdicts` on figures made here: a session and outcomes with only what it reads."""
    session = SimpleNamespace(time_zero=0.0, metrics=SimpleNamespace(recording=SimpleNamespace(series=series or {})))
    outcomes = [SimpleNamespace(records=records or [], measure_end=100.0) for _ in steps]
    params = {"ttft_p95_ms": 100.0, **(params or {})}
    return t._overload_verdicts(steps, points, outcomes, params, session, 8.0, "concurrent", 5.0)


TTFT_BUDGET = verdict(
    "ttft_p95_within_budget",
    PASS,
    Message(
        "%(what)s p95 %(value)s ms (n=%(n)s) vs budget %(budget)s ms",
        {"what": "TTFT", "value": "80.0", "n": 40, "budget": "100"},
    ),
)


def test_a_sustained_target_reads_in_chinese_with_the_budget_detail_and_keeps_its_english():
    steps = [step(8, PASS, ttft_p95_ms=80.0), step(16, FAIL, failures={"rejected": 5}), step(8, PASS, "down")]
    points = [point(8, budget=[TTFT_BUDGET], waiting_max=0.0), point(16), point(8, "down")]
    verdicts, figures = judge(steps, points)
    sustained, graceful, recovered = verdicts
    assert sustained["detail"] == (
        "sustainable 8 concurrent (highest step within the latency budget with at most 1% errors) vs target 8; "
        "at the target: TTFT p95 80.0 ms (n=40) vs budget 100 ms"
    )
    assert "可持续 8 个并发请求" in assert_chinese(detail_of(sustained), sustained["detail"])
    assert graceful["detail"] == (
        "past the sustainable load: rejection; 5 requests refused with HTTP 429/503, the others served in bounded time"
    )
    assert_chinese(detail_of(graceful), graceful["detail"])
    assert figures["reasons"] == [graceful["detail"].split("; ", 1)[1]]  # the stored figures stay English text
    assert recovered["status"] == FAIL  # the recovery step's requests are not made here: latency never came back
    assert_chinese(detail_of(recovered), recovered["detail"])


@pytest.mark.parametrize("status", [FAIL, INCONCLUSIVE, INSUFFICIENT_DATA])
def test_a_first_step_that_missed_the_budget_says_so_in_chinese(status):
    verdicts, figures = judge([step(8, status)], [point(8)])
    detail = verdicts[0]["detail"]
    assert detail == f"the first step (8 concurrent) did not meet the budget: {status.replace('_', ' ')}"
    assert_chinese(detail_of(verdicts[0]), detail)
    line = t._overload_line(figures, "concurrent")
    assert_chinese(line)


def test_no_step_and_no_overload_read_in_chinese():
    verdicts, figures = judge([], [])
    assert verdicts[0]["detail"] == "no step ran" and figures == {}
    assert_chinese(detail_of(verdicts[0]), "no step ran")
    assert str(t._overload_line({}, "req/s")) == "no overload step ran"
    assert_chinese(t._overload_line({}, "req/s"))
    verdicts, figures = judge([step(8, PASS), step(16, PASS)], [point(8), point(16)])
    assert verdicts[1]["status"] == NOT_EXERCISED and verdicts[2]["status"] == NOT_EXERCISED
    for judged in verdicts:
        assert_chinese(detail_of(judged), judged["detail"])
    line = t._overload_line(figures, "concurrent")
    assert str(line) == (
        "sustainable 16 concurrent of target 8; at 16 TTFT p95 n/a, 0 of 40 failed; past it: not reached "
        "(2 steps, n=80)"
    )
    assert "未达到" in assert_chinese(line)


GONE = EarlyStop(consecutive_connection_failures=2)
GONE.observe(False, "connect", None, 1.0)
GONE.observe(False, "connect", None, 1.1)


@pytest.mark.parametrize(
    "past, behaviour",
    [
        (step(16, FAIL, failures={"crash": 3}), o.CRASH),
        (step(16, FAIL, failures={"crash": 3}, stopped_early=GONE.reason_message), o.CRASH),
        (step(16, FAIL, failures={"oom": 2}), o.OOM),
        (step(16, FAIL, ttft_p95_ms=900.0, completion_ratio=0.5, throughput=1.0), o.COLLAPSE),
        (step(16, FAIL, failures={"rejected": 4}), o.REJECTION),
        (step(16, FAIL, ttft_p95_ms=300.0, waiting_max=6.0), o.QUEUEING),
        (step(16, FAIL, ttft_p95_ms=300.0), o.QUEUEING),
    ],
)
def test_every_behaviour_past_the_sustainable_load_reads_in_chinese(past, behaviour):
    steps = [step(8, PASS, ttft_p95_ms=80.0, throughput=10.0), past]
    found, reasons = o.classify(steps, 100.0)
    assert found == behaviour and reasons
    verdicts, figures = judge(steps, [point(8), point(16)])
    graceful = verdicts[1]
    assert graceful["value"] == behaviour and graceful["detail"].startswith(f"past the sustainable load: {behaviour}; ")
    assert_chinese(detail_of(graceful), graceful["detail"])
    figures["recovery_s"] = 2.5 if behaviour in o.GRACEFUL else None
    line = t._overload_line(figures, "concurrent")
    assert f"past it: {behaviour}" in str(line)
    assert_chinese(line)


def test_the_collapse_reasons_keep_their_english_and_read_in_chinese():
    steps = [
        step(8, PASS, ttft_p95_ms=80.0, throughput=10.0),
        step(16, FAIL, ttft_p95_ms=900.0, completion_ratio=0.5, throughput=1.0),
    ]
    _behaviour, reasons = o.classify(steps, 100.0)
    assert [str(r) for r in reasons] == [
        "at 16: TTFT p95 900 ms, over 5x the reference 100 ms",
        "at 16: completed 50% of the offered requests and rejected none: the queue grew without bound",
        "at 16: throughput 1.0 req/s, under half the best step's",
    ]
    for reason in reasons:
        assert_chinese(reason)


def not_recovered(parts):
    return {"recovered_s": None, "parts_s": parts, "latency_median_ms": 140.0, "baseline": {"ttft_p95_ms": 100.0}}


@pytest.mark.parametrize(
    "behaviour, recovery, n, reasons, status",
    [
        (None, None, 0, (), NOT_EXERCISED),
        (o.CRASH, None, 0, (), FAIL),
        (o.REJECTION, None, 0, (), INSUFFICIENT_DATA),
        (o.REJECTION, not_recovered({"latency": None}), 3, (), INSUFFICIENT_DATA),
        (
            o.REJECTION,
            {"recovered_s": 0.4, "parts_s": {"latency": 0.4, "waiting": 0.1, "kv_usage_ratio": 0.2}},
            40,
            (),
            PASS,
        ),
        (o.REJECTION, not_recovered({"latency": None, "waiting": 0.5, "kv_usage_ratio": None}), 40, (), FAIL),
        (o.QUEUEING, not_recovered({"latency": None, "waiting": 0.5}), 40, [Message(NOT_HELD)], INCONCLUSIVE),
    ],
)
def test_every_recovery_judgement_reads_in_chinese(behaviour, recovery, n, reasons, status):
    found, detail = o.judge_recovery(behaviour, recovery, n, 2.0, reasons)
    assert found == status
    shown = assert_chinese(detail)
    assert "kv_usage_ratio" not in shown  # the series by name, not its key


def test_the_recovery_details_english_is_the_sentence_it_was():
    back = {"recovered_s": 0.4, "parts_s": {"latency": 0.4, "waiting": 0.1}}
    assert str(o.judge_recovery(o.REJECTION, back, 40, 2.0)[1]) == (
        "back to the first step's level 0.4 s after the overload ended (latency 0.4 s, waiting 0.1 s)"
    )
    status, detail = o.judge_recovery(o.REJECTION, not_recovered({"latency": None, "waiting": 0.5}), 40, 2.0, ["slow"])
    assert str(detail) == (
        "not back to the first step's level (latency) by the end of the recovery step; lowest 5-request median "
        "TTFT 140.0 ms vs the first step's p95 100.0 ms (+20% allowed); client-bound, so the latency is not the "
        "engine's alone: slow"
    )


def test_the_observed_line_of_an_overload_that_did_not_recover_reads_in_chinese():
    figures = {
        "target": 8.0,
        "sustainable": None,
        "behaviour": o.COLLAPSE,
        "recovery_s": None,
        "steps": [
            {"direction": "up", "level": 8.0, "status": FAIL, "n": 40, "ttft_p95_ms": 300.0, "failures": {}},
            {"direction": "up", "level": 2.5, "status": FAIL, "n": 30, "ttft_p95_ms": 900.0, "failures": {"other": 2}},
        ],
    }
    line = t._overload_line(figures, "req/s")
    assert str(line) == (
        "target 8 req/s not sustained; at 2.5 TTFT p95 900 ms, 2 of 30 failed; past it: collapse; did not recover "
        "(2 steps, n=70)"
    )
    assert "未恢复" in assert_chinese(line)


# --- run notes ------------------------------------------------------------------------------

NOTES = [
    Message(CANCELLED),
    Message(t.STOPPED_CLIMBING, {"level": "24", "unit": t.unit_name("concurrent"), "share": "12.5%"}),
    Message(t.STOPPED_ANSWERING, {"level": "2.5", "unit": t.unit_name("req/s"), "why": GONE.reason_message}),
    Message(replay.NEVER_SENT, {"n": 3}),
    Message(long_context.RUNG_NOTE, {"rung": 32768}),
    Message(long_context.RUNG_NOTE_WITH_ERROR, {"rung": 32768, "error": "HTTP 400"}),
    Message(
        model_switch.HOOK_REFUSED, {"event": model_switch.EVENT_NAMES["rollback"], "status": "409", "answer": "409"}
    ),
    Message(swap_recovery.PRESSURE_CAPPED),
    Message(swap_recovery.NO_KV_CAPACITY),
    Message(swap_recovery.NO_WARM_REUSE),
    Message(swap_recovery.PRESSURE_FAILED, {"n": 4}),
    Message(prefix_reuse.NO_OFF_RUN_NOTE),
    Message(
        prefix_reuse.NOT_EMPTIED,
        {"run": prefix_reuse.RUN_NAMES["prefix_off"], "method": Message(NO_CACHE_RESET)},
    ),
    Message(worker.HOST_ACTIVITY_UNCHECKED, {"error": "OperationalError"}),
    Message(worker.STOPPED_EARLY, {"why": GONE.reason_message}),
    Message(worker.ENGINE_GONE),
    Message(
        worker.STORED_BY_REAPER,
        {"written": "2026-12-07T09:00:00+00:00", "cause": Message(worker.WRITE_REFUSED, {"error": "OperationalError"})},
    ),
    Message(worker.STORED_BY_REAPER, {"written": "2026-12-07T09:00:00+00:00", "cause": Message(worker.WORKER_STOPPED)}),
]


@pytest.mark.parametrize("note", NOTES, ids=lambda note: note.msgid[:40])
def test_every_run_note_is_english_in_the_notes_and_chinese_on_the_page(note):
    result = NormalizedResult(tool="kvselect-harness", format="kvselect-harness")
    result.add_note("an uploaded file's own note")
    result.add_note(note)
    assert result.notes == ["an uploaded file's own note", str(note)]
    with translation.override("zh-hans"):
        shown = presentation.run_notes(result.notes, result.metadata, message_text)
    assert shown[0] == "an uploaded file's own note"  # a note written as text stays as it was
    assert shown[1] != str(note) and english_words(shown[1], NAMES + ("OperationalError",)) == [], shown[1]


def test_the_notes_english_is_the_sentence_it_was():
    assert str(NOTES[0]) == "cancelled: partial data"
    assert str(NOTES[1]) == "stopped climbing at 24 concurrent: 12.5% of requests failed"
    assert str(NOTES[2]) == (
        "the engine stopped answering at 2.5 req/s: 2 consecutive requests could not connect or lost their "
        "connection (last: connect); the engine is not answering"
    )
    assert GONE.reason == str(GONE.reason_message)


def test_a_stopped_loads_reason_travels_with_its_point_to_the_workers_note():
    from benchmarks.harness.load_config import LoadConfig, LoadOutcome
    from benchmarks.harness.load_summary import summarize

    outcome = LoadOutcome(config=LoadConfig(concurrency=1), stopped_early=GONE.reason)
    outcome.stopped_early_message = GONE.reason_message
    extra = summarize(outcome, label="c=1").extra
    assert extra["stopped_early"] == GONE.reason
    assert Message.from_dict(extra["stopped_early_message"]) == GONE.reason_message


def test_the_harness_writes_its_notes_as_messages():
    """Every note a workload appends is a message (a plain string would reach the page in English)."""
    import ast
    from pathlib import Path

    import benchmarks.harness.workloads as package

    plain = []
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "add_note")
                and isinstance(node.func.value, (ast.Name, ast.Attribute))
                and (node.func.value.id if isinstance(node.func.value, ast.Name) else node.func.value.attr) == "notes"
                and node.args
                and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
            ):
                plain.append(f"{path.name}:{node.lineno}")
    assert plain == []


# --- the outbound allow-list ----------------------------------------------------------------

HOSTS = ("engine.internal", "metadata", "ftp", "not-an-ip")  # host names and a scheme, as the URL spells them


@pytest.mark.parametrize(
    "url, allowed, resolved, english, shown",
    [
        ("ftp://10.0.0.1/", "*", [], "scheme must be http or https, got 'ftp'", "协议必须是 http 或 https，实际为 ftp"),
        ("http://user:pw@10.0.0.1/", "*", [], "credentials in the URL are not accepted; use the API key field", None),
        (
            "http://10.0.0.1:99999/",
            "*",
            [],
            "invalid port in 'http://10.0.0.1:99999/': it must be a number from 0 to 65535",
            "中的端口无效",
        ),
        ("http://metadata/", "*", [], "'metadata' is a cloud metadata host and is always refused", None),
        (
            "http://169.254.169.254/",
            "*",
            [],
            "169.254.169.254 is a cloud metadata address and is always refused",
            "169.254.169.254 是云元数据地址，始终拒绝",
        ),
        (
            "http://169.254.1.1/",
            "*",
            [],
            "169.254.1.1 is link-local (169.254.0.0/16 or fe80::/10) and is always refused",
            None,
        ),
        ("http://224.0.0.1/", "*", [], "224.0.0.1 is multicast or unspecified and is always refused", None),
        (
            "http://10.9.8.7:8000/v1",
            ["127.0.0.1"],
            [],
            "host '10.9.8.7' is not in KVSELECT_ALLOWED_TARGETS (allowed: 127.0.0.1)",
            "主机 10.9.8.7 不在 KVSELECT_ALLOWED_TARGETS 中（允许：127.0.0.1）",
        ),
        (
            "http://10.9.8.7/",
            "",
            [],
            "host '10.9.8.7' is not in KVSELECT_ALLOWED_TARGETS (allowed: empty)",
            "（允许：空）",
        ),
        (
            "http://engine.internal/",
            "*",
            ["169.254.169.254"],
            "'engine.internal' resolves to 169.254.169.254, a cloud metadata address; refused",
            "engine.internal 解析为 169.254.169.254，属于云元数据地址；已拒绝",
        ),
    ],
)
def test_an_allow_list_refusal_reads_in_the_pages_language(url, allowed, resolved, english, shown):
    with pytest.raises(safety.TargetRefused) as refused:
        safety.check_target(url, allowed, resolver=lambda host, port: resolved)
    reason = refused.value.reason
    assert str(refused.value) == f"target.endpoint_url: {reason}"  # the worker's log and the CLI: English
    if english is not None:
        assert str(reason) == english
    with translation.override("en"):
        assert message_text(reason) == str(reason)
    text = assert_chinese(reason, names=HOSTS)
    if shown is not None:
        assert shown in text, text


def test_a_refusal_of_an_address_the_name_resolves_to_reads_in_chinese():
    for answer, english in (
        ([], "'engine.internal' resolves to no address"),
        (["not-an-ip"], "'engine.internal' resolves to 'not-an-ip', not an address; refused"),
        (["fe80::1"], "'engine.internal' resolves to fe80::1, link-local (169.254.0.0/16 or fe80::/10); refused"),
    ):
        with pytest.raises(safety.TargetRefused) as refused:
            safety.checked_addresses("engine.internal", 80, "*", resolver=lambda host, port, answer=answer: answer)
        assert str(refused.value.reason) == english
        assert "engine.internal" in assert_chinese(refused.value.reason, names=HOSTS)

    def unresolvable(host, port):
        raise OSError("lookup failed")

    with pytest.raises(safety.TargetRefused) as refused:
        safety.checked_addresses("engine.internal", 80, "*", resolver=unresolvable)
    assert str(refused.value) == "target.endpoint_url: cannot resolve 'engine.internal': lookup failed"
    assert chinese(refused.value.reason).startswith("无法解析 engine.internal：")


def test_a_refusal_survives_pickling_with_its_message():
    import pickle

    refused = safety.TargetRefused(Message(safety.CREDENTIALS))
    again = pickle.loads(pickle.dumps(refused))
    assert again.reason == refused.reason and str(again) == str(refused)


def test_the_records_result_table_names_the_overload_behaviour_and_its_limit_in_the_records_language():
    """The overload verdict stores its behaviour ("queueing") and limit ("rejection or bounded queueing")
    in English words; the record's table shows them in its language, as it shows a number formatted."""
    from django.utils.translation import gettext

    from benchmarks import presentation
    from benchmarks.harness.workloads.overload_test import GRACEFUL_LIMIT

    stored = {
        "name": "overload_handled_gracefully",
        "status": PASS,
        "value": "queueing",
        "threshold": GRACEFUL_LIMIT,
        "n": 96,
        "interval": None,
        "detail": "",
    }
    with translation.override("zh-hans"):
        (row,) = presentation.judged_rows([stored], gettext, message_text)
    assert (row["value"], row["threshold"]) == ("排队", "拒绝请求或有界排队")
    with translation.override("en"):
        (row,) = presentation.judged_rows([stored], gettext, message_text)
    assert (row["value"], row["threshold"]) == ("queueing", "rejection or bounded queueing")
