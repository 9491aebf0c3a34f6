"""Simplified Chinese: every page of the flow renders translated, the catalog is complete, domain
names and the domain's messages (scenario reasons, scoring sentences, capacity verdicts) are
translated at display time, and the record PDF follows ``record.language``."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from selection.candidates.services import add_candidate
from selection.domain import criteria as criteria_domain
from selection.domain.messages import CLAUSE_SEPARATOR, NAME_SEPARATOR, Join, Message
from selection.domain.scenarios import SCENARIO_NAMES, infer_scenario
from selection.i18n import criterion_name, dimension_name, domain_text, message_text, scenario_name
from selection.records.pdf import render_record, render_record_html
from selection.setup.services import create_selection, save_constraints
from tests.support.builders import SAMPLE_CONSTRAINTS
from tests.support.record_context import sample_record_context

PO_FILE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _po_entries(text: str) -> list[dict]:
    """(flags, msgid, msgstr) per entry of a .po file, continuation lines joined."""
    entries = []
    for block in text.strip().split("\n\n"):
        entry = {"flags": "", "msgctxt": "", "msgid": "", "msgstr": ""}
        current = None
        for line in block.splitlines():
            if line.startswith("#,"):
                entry["flags"] += line
            elif line.startswith("#"):
                continue
            elif line.startswith(("msgid ", "msgid_plural ")):
                current = "msgid" if line.startswith("msgid ") else None
                if current:
                    entry["msgid"] = line.split(" ", 1)[1].strip('"')
            elif line.startswith("msgstr"):
                current = "msgstr"
                entry["msgstr"] += line.split(" ", 1)[1].strip('"')
            elif line.startswith("msgctxt"):
                current = "msgctxt"
                entry["msgctxt"] = line.split(" ", 1)[1].strip('"')
            elif line.startswith('"') and current:
                entry[current] += line.strip('"')
        entries.append(entry)
    return entries


def test_the_catalog_is_complete_and_has_no_fuzzy_entries():
    entries = _po_entries(PO_FILE.read_text(encoding="utf-8"))
    header, messages = entries[0], entries[1:]
    assert header["msgid"] == "" and "fuzzy" not in header["flags"]
    assert len(messages) > 700
    assert [e["msgid"] for e in messages if not e["msgstr"]] == []
    assert [e["msgid"] for e in messages if "fuzzy" in e["flags"]] == []
    # placeholders survive translation (msgfmt --check-format checks python-format entries too)
    for e in messages:
        assert sorted(re.findall(r"%\(\w+\)[sd]", e["msgid"])) == sorted(re.findall(r"%\(\w+\)[sd]", e["msgstr"])), e


def test_the_compiled_catalog_is_committed_next_to_the_po():
    mo = PO_FILE.with_suffix(".mo")
    assert mo.exists() and mo.stat().st_mtime >= PO_FILE.stat().st_mtime - 5


def test_every_domain_name_has_a_translation():
    names = [d.name for d in criteria_domain.DIMENSIONS] + [d.question for d in criteria_domain.DIMENSIONS]
    names += [c.name for c in criteria_domain.CRITERIA] + [c.looks_at for c in criteria_domain.CRITERIA]
    names += list(SCENARIO_NAMES.values())
    with translation.override("zh-hans"):
        untranslated = [n for n in names if not CJK.search(domain_text(n))]
        assert untranslated == []
        assert domain_text("Cache reuse") == criterion_name("cache_reuse") == "缓存复用"  # as stored, or by id
        assert dimension_name("memory") == "显存分配与复用" and scenario_name("B") == domain_text("Long documents")
        assert CJK.search(scenario_name("B"))
        assert domain_text("Support bot") == "Support bot"  # user data is never touched
        assert domain_text("") == "" and criterion_name("unknown") == "unknown" and scenario_name("Z") == ""
    with translation.override("en"):
        assert domain_text("Cache reuse") == criterion_name("cache_reuse") == "Cache reuse"


@pytest.mark.parametrize(
    "constraints",
    [
        {"max_input_tokens": 131072, "p95_input_tokens": 20000},
        {"p95_input_tokens": 20000, "max_input_tokens": 30000, "ttft_p95_ms": 500},
        {"multi_turn": True, "average_turns": 6, "never_swap_sessions": 12, "ttft_p95_ms": 800},
        {"multi_turn": True, "ttft_p95_ms": 800},
        {},
        {"ttft_p95_ms": 120000},
        {"peak_concurrency": 256, "avg_input_tokens": 1024, "ttft_p95_ms": 800},
        {"peak_concurrency": 4, "avg_input_tokens": 1024, "ttft_p95_ms": 800},
        {"multi_turn": True, "average_turns": 4, "max_input_tokens": 65536, "ttft_p95_ms": 900},
    ],
)
def test_every_scenario_reason_rule_is_translated_with_its_numbers(constraints):
    _scenario, reasons, _mix = infer_scenario(constraints)
    with translation.override("zh-hans"):
        for reason in reasons:
            translated = message_text(reason)
            assert CJK.search(translated), reason
            assert "->" in translated and not re.search(r"\b(tokens|turns|sessions|also)\b", translated), translated
            assert re.findall(r"\d[\d,.]*K?", translated) == re.findall(r"\d[\d,.]*K?", str(reason))
            assert message_text(reason.to_dict()) == translated  # as stored on the selection
    with translation.override("en"):
        assert [message_text(r) for r in reasons] == [str(r) for r in reasons]


# the evidence's message templates: verdict details and why the load client set the pace
EVIDENCE_MESSAGE_MODULES = (
    "benchmarks/verdicts.py",
    "benchmarks/harness/load_judging.py",
    "benchmarks/harness/workloads/common.py",
    "benchmarks/harness/workloads/stability.py",
    "benchmarks/harness/workloads/long_context.py",
    "benchmarks/harness/workloads/model_switch.py",
    "benchmarks/harness/workloads/isolation.py",
    "benchmarks/harness/workloads/replay.py",
    "benchmarks/harness/workloads/overload_test.py",
    "benchmarks/harness/workloads/swap_recovery.py",
    "benchmarks/harness/workloads/prefix_reuse.py",
    "benchmarks/harness/overload.py",
    "benchmarks/harness/stopping.py",
    "benchmarks/harness/safety.py",
    "benchmarks/validation/worker.py",
    "selection/scoring/evidence.py",
)


def _domain_templates() -> set[tuple[str | None, str]]:
    """(context, msgid) of every template the pure cores mark for makemessages: `_("...")` and
    `pgettext("context", "...")` calls in selection/domain/ (its subpackages, such as capacity/, included: makemessages
    walks them too), the evidence's message modules and the result-file parsers."""
    found = set()
    base = Path(settings.BASE_DIR)
    for path in [
        *sorted((base / "selection" / "domain").rglob("*.py")),
        *(base / name for name in EVIDENCE_MESSAGE_MODULES),
        *sorted((base / "benchmarks" / "formats").rglob("*.py")),  # the parsers' refusals of a file
    ]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.args
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
            ):
                if node.func.id == "_" and len(node.args) == 1:
                    found.add((None, node.args[0].value))
                elif node.func.id == "pgettext" and len(node.args) == 2:
                    found.add((node.args[0].value, node.args[1].value))
    return found


def test_every_domain_template_is_in_the_catalog_in_chinese_with_its_placeholders():
    templates = _domain_templates()
    assert len(templates) > 60 and (None, "%(name)s is screened out: %(reasons)s.") in templates
    assert ("list separator between clauses", "; ") in templates
    entries = {(e["msgctxt"] or None, e["msgid"]): e for e in _po_entries(PO_FILE.read_text(encoding="utf-8"))}
    for key in templates:
        assert key in entries and entries[key]["msgstr"] and "fuzzy" not in entries[key]["flags"], key
    with translation.override("zh-hans"):
        for context, msgid in templates:
            words = re.sub(r"%\(\w+\)s|%%", "", msgid)
            if not re.search(r"[a-z]{2}", words):
                continue  # separators and "%(criterion)s %(change)s": nothing to translate
            if "%(" not in msgid:  # a label, not a template: "Largest allowed drift (%)" has a bare %
                translated = translation.pgettext(context, msgid) if context else translation.gettext(msgid)
            else:
                translated = message_text(
                    Message(msgid, {name: "1" for name in re.findall(r"%\((\w+)\)s", msgid)}, context=context)
                )
            assert CJK.search(translated), msgid


# --- pages ----------------------------------------------------------------------------------


@pytest.fixture
def zh_client(client):
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    return client


@pytest.fixture
def flow(architect, team, engines, selection_owners):
    selection = create_selection(
        user=architect,
        team=team,
        name="Chat",
        business_owner=selection_owners["business"],
        platform_owner=selection_owners["platform"],
        security_owner=selection_owners["security"],
    )
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS))
    add_candidate(
        selection=selection,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": engines["vllm"].versions[0]},
    )
    selection.refresh_from_db()
    return selection


PAGES = [
    ("selection:dashboard", False, ["选型", "新建选型", "语言"]),
    ("selection:create", False, ["新建选型", "业务负责人", "创建选型"]),
    ("selection:detail", True, ["概览", "约束概览", "审计轨迹", "高并发短文本"]),
    ("selection:constraints", True, ["峰值并发请求数", "保存约束并推断场景", "时延预算"]),
    ("selection:scenario", True, ["推断的场景", "评估标准权重", "显存分配策略", "保存权重", "-&gt;"]),
    ("selection:gates", True, ["门槛", "显存分配与复用", "保存门槛"]),
    ("selection:candidates", True, ["候选", "添加候选", "引擎版本"]),
    ("selection:evidence", True, ["来自 CI 的结果", "最近的运行", "CI 令牌与上传"]),
    ("selection:comparison", True, ["并排对比", "包含模拟（SIMULATED）证据"]),
    ("selection:records", True, ["决策记录", "起草决策记录"]),
    ("selection:record-verify", False, ["验证已签名的决策记录", "上传"]),
    ("selection:profile", False, ["您的签名证书", "登记证书", "尚未登记证书"]),
]


@pytest.mark.django_db
@pytest.mark.parametrize("name, per_selection, expected", PAGES, ids=[p[0] for p in PAGES])
def test_every_page_of_the_flow_renders_in_chinese(zh_client, architect, flow, name, per_selection, expected):
    zh_client.force_login(architect)
    response = zh_client.get(reverse(name, args=[flow.pk] if per_selection else []))
    assert response.status_code == 200
    html = response.content.decode()
    assert '<html lang="zh-hans"' in html
    missing = [text for text in expected if text not in html]
    assert missing == [], missing


@pytest.mark.django_db
def test_the_same_pages_stay_english_by_default(client, architect, flow):
    client.force_login(architect)
    html = client.get(reverse("selection:scenario", args=[flow.pk])).content.decode()
    assert (
        "Criterion weights" in html
        and "Memory allocation strategy" in html
        and not CJK.search(html.replace("简体中文", ""))
    )


@pytest.mark.django_db
def test_messages_and_form_errors_are_translated(zh_client, architect, flow):
    zh_client.force_login(architect)
    response = zh_client.post(reverse("selection:gates", args=[flow.pk]), {"use_memory": "on"}, follow=True)
    assert "门槛需要 0 到 1 之间的阈值" in response.content.decode()
    response = zh_client.post(reverse("selection:scenario-accept", args=[flow.pk]), follow=True)
    assert f"已接受场景 {flow.scenario}" in response.content.decode()


# --- the record PDF -------------------------------------------------------------------------


def _pdftotext(pdf: bytes, tmp_path) -> str:
    path = tmp_path / "r.pdf"
    path.write_bytes(pdf)
    return subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_the_record_pdf_renders_in_the_records_language(tmp_path):
    context = sample_record_context(simulated=True, n_charts=1, n_manifest=2)
    context["record"]["language"] = "zh-hans"
    with translation.override("en"):  # the request's language does not matter, the record's does
        pdf = render_record(context).pdf
        assert translation.get_language() == "en"  # and it is restored afterwards
    text = _pdftotext(pdf, tmp_path)
    for heading in ("1. 决策与理由", "2. 风险边界", "5. 门槛", "9. 评分、TOPSIS 与敏感性", "15. 签名", "显存分配策略"):
        assert heading in text, heading
    assert "SIMULATED — 模拟数据，不可用于采购" in text  # the banner keeps the English word
    assert "Decision and rationale" not in text


def test_the_record_html_stays_english_for_english_records():
    context = sample_record_context(simulated=False, n_charts=0, n_manifest=1)
    with translation.override("zh-hans"):
        html = render_record_html(context)
    assert "1. Decision and rationale" in html and "决策" not in html


@pytest.mark.django_db
def test_validation_plan_parameters_and_simulated_badges_are_translated(zh_client, architect, flow):
    from benchmarks.models import BenchmarkRun

    zh_client.force_login(architect)
    candidate = flow.candidates.first()
    html = zh_client.get(reverse("selection:validation", args=[flow.pk, candidate.pk])).content.decode()
    assert "时长（秒）" in html and "背景流量并发" in html and "duration s" not in html
    assert "运行 并发压力" in html  # the Run button names the test in Chinese
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="validation",
        status="succeeded",
        evidence="SIMULATED",
        tool="kvselect-sim",
    )
    html = zh_client.get(reverse("selection:run", args=[flow.pk, run.pk])).content.decode()
    assert "SIMULATED 模拟" in html  # the English word stays visible next to the translation
    assert "运行 #%d · 并发压力" % run.pk in html


@pytest.mark.django_db
def test_forms_accept_dot_decimals_in_chinese_and_answer_in_chinese(zh_client, architect, flow):
    from tests.support.builders import VALID_CONSTRAINTS

    zh_client.force_login(architect)
    response = zh_client.post(
        reverse("selection:constraints", args=[flow.pk]),
        {**VALID_CONSTRAINTS, "cost_per_gpu_hour": "2.75"},
        follow=True,
    )
    html = response.content.decode()
    assert "约束已保存。推断的场景：" in html
    flow.constraints.refresh_from_db()
    assert float(flow.constraints.cost_per_gpu_hour) == 2.75


@pytest.mark.django_db
def test_a_record_sent_to_review_in_chinese_is_written_in_chinese(
    zh_client, make_user, architect, engines, team, settings, tmp_path
):
    from selection.certificates.signing import issue_dev_certificates
    from selection.models import DecisionRecord, Membership
    from tests.support.builders import ROLES, decided_selection, enrol_owners

    owners = {role: make_user(role, team, Membership.Role.REVIEWER) for role in ROLES}
    enrol_owners(owners, issue_dev_certificates(tmp_path, {r: r for r in ROLES}, "pw-zh"), "pw-zh", settings)
    selection = decided_selection(architect, team, owners, engines)
    zh_client.force_login(architect)
    comparison = zh_client.get(reverse("selection:comparison", args=[selection.pk])).content.decode()
    assert "加权总分" in comparison and "保持第一" in comparison and "排名第一的比例" in comparison
    assert "stays first" not in comparison and "is recommended" not in comparison
    zh_client.post(
        reverse("selection:records", args=[selection.pk]), {"rationale": "TTFT 最低。", "review_by": "2027-06-30"}
    )
    record = DecisionRecord.objects.get(selection=selection)
    response = zh_client.post(
        reverse("selection:record-action", args=[selection.pk, record.pk]), {"action": "start_review"}, follow=True
    )
    assert "已提交评审" in response.content.decode() or "快照已冻结" in response.content.decode()
    record.refresh_from_db()
    assert record.snapshot["record"]["language"] == "zh-hans"
    with translation.override("en"):
        html = render_record_html(record.snapshot)
    assert "1. 决策与理由" in html and "15. 签名" in html
    # the domain's sentences are written into the snapshot in the record's language, too
    snapshot = record.snapshot
    sentences = (
        snapshot["scores"]["sensitivity"]
        + snapshot["scenario"]["reasons"]
        + [r["note"] for g in snapshot["gates"] for r in g["results"] if r.get("note")]
    )
    assert sentences and [s for s in sentences if not CJK.search(s)] == []
    assert "保持第一" in html and "stays first" not in html and "is recommended" not in html


def test_the_record_template_renders_stored_messages_in_the_records_language():
    context = sample_record_context(simulated=False, n_charts=0, n_manifest=1)
    context["record"]["language"] = "zh-hans"
    reason, _mix = infer_scenario({"max_input_tokens": 131072})[1:]
    sentence = SCORING_SENTENCES[4][1]
    context["scenario"]["reasons"] = [reason[0].to_dict()]
    context["decision"]["rationale"] = [sentence.to_dict(), "TTFT 最低。"]
    context["scores"]["sensitivity"] = [sentence.to_dict()]
    with translation.override("en"):
        html = render_record_html(context)
    with translation.override("zh-hans"):
        assert html.count(escape(message_text(sentence))) == 2 and escape(message_text(reason[0])) in html
    assert "stays first" not in html and "long documents" not in html and "TTFT 最低。" in html


M = Message
MEMORY, OBSERVABILITY = M("Memory allocation and reuse"), M("Observability")
PERSISTENCE, CONCURRENCY = M("cache persistence"), M("concurrency control")

# (the English sentence, as the domain wrote it before it returned messages; the message now)
SCORING_SENTENCES = [
    (
        "SGLang 0.5.5 is recommended with a weighted total of 0.457 (up to 0.982 if missing evidence came in at full "
        "marks), evidence coverage 47%.",
        M(
            "%(name)s is recommended with a weighted total of %(total)s (up to %(upper)s if missing evidence came "
            "in at full marks), evidence coverage %(coverage)s.",
            {"name": "SGLang 0.5.5", "total": "0.457", "upper": "0.982", "coverage": "47%"},
        ),
    ),
    (
        "vLLM 0.11.0 is recommended with a weighted total of 0.220, evidence coverage 25%.",
        M(
            "%(name)s is recommended with a weighted total of %(total)s, evidence coverage %(coverage)s.",
            {"name": "vLLM 0.11.0", "total": "0.220", "coverage": "25%"},
        ),
    ),
    (
        "Tie-break applied: close on the core dimensions (Memory allocation and reuse) or on the weighted total "
        "(within the tie margin 0.02): SGLang 0.5.5 0.457, vLLM 0.11.0 0.448; tie on the core dimensions (Memory "
        "allocation and reuse) between SGLang 0.5.5, vLLM 0.11.0, decided by observability (SGLang 0.5.5 0.90, "
        "vLLM 0.11.0 0.40).",
        M(
            "Tie-break applied: %(explanation)s.",
            {
                "explanation": M(
                    "close on %(core)s or on the weighted total (within the tie margin %(margin)s): %(names)s; %(how)s",
                    {
                        "core": M("the core dimensions (%(names)s)", {"names": NAME_SEPARATOR.join([MEMORY])}),
                        "margin": "0.02",
                        "names": NAME_SEPARATOR.join(["SGLang 0.5.5 0.457", "vLLM 0.11.0 0.448"]),
                        "how": M(
                            "tie on %(core)s between %(names)s, decided by observability (%(name)s %(a)s, "
                            "%(other)s %(b)s)",
                            {
                                "core": M("the core dimensions (%(names)s)", {"names": NAME_SEPARATOR.join([MEMORY])}),
                                "names": NAME_SEPARATOR.join(["SGLang 0.5.5", "vLLM 0.11.0"]),
                                "name": "SGLang 0.5.5",
                                "a": "0.90",
                                "other": "vLLM 0.11.0",
                                "b": "0.40",
                            },
                        ),
                    },
                )
            },
        ),
    ),
    (
        "SGLang 0.5.5 stays first for any cache persistence weight in [0, 1].",
        M(
            "%(leader)s stays first for any %(criterion)s weight in [0, 1].",
            {"leader": "SGLang 0.5.5", "criterion": PERSISTENCE},
        ),
    ),
    (
        "SGLang 0.5.5 stays first unless the concurrency control weight rises by more than 0.20 (above 0.38, "
        "vLLM 0.11.0 would lead) or falls by more than 0.10 (below 0.08, vLLM 0.11.0 would lead).",
        M(
            "%(leader)s stays first unless the %(criterion)s weight %(clauses)s.",
            {
                "leader": "SGLang 0.5.5",
                "criterion": CONCURRENCY,
                "clauses": M(" or ").join(
                    [
                        M(
                            "rises by more than %(by)s (above %(to)s, %(challenger)s would lead)",
                            {"by": "0.20", "to": "0.38", "challenger": "vLLM 0.11.0"},
                        ),
                        M(
                            "falls by more than %(by)s (below %(to)s, %(challenger)s would lead)",
                            {"by": "0.10", "to": "0.08", "challenger": "vLLM 0.11.0"},
                        ),
                    ]
                ),
            },
        ),
    ),
    (
        "vLLM 0.11.0 would tie SGLang 0.5.5 if the weights moved by 0.07 (L2), mainly cache persistence -0.06, "
        "concurrency control +0.03.",
        M(
            "%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2), mainly %(main)s.",
            {
                "challenger": "vLLM 0.11.0",
                "leader": "SGLang 0.5.5",
                "distance": "0.07",
                "main": NAME_SEPARATOR.join(
                    [
                        M("%(criterion)s %(change)s", {"criterion": PERSISTENCE, "change": "-0.06"}),
                        M("%(criterion)s %(change)s", {"criterion": CONCURRENCY, "change": "+0.03"}),
                    ]
                ),
            },
        ),
    ),
    (
        "No weighting makes vLLM 0.11.0 tie SGLang 0.5.5: it is nowhere better.",
        M(
            "No weighting makes %(challenger)s tie %(leader)s: it is nowhere better.",
            {"challenger": "vLLM 0.11.0", "leader": "SGLang 0.5.5"},
        ),
    ),
    (
        "Across 10,000 weight vectors within ±30% of the chosen weights, the first place goes to SGLang 0.5.5 in "
        "100.0%.",
        M(
            "Across %(draws)s weight vectors within ±%(spread)s of the chosen weights, the first place goes to "
            "%(shares)s.",
            {
                "draws": "10,000",
                "spread": "30%",
                "shares": CLAUSE_SEPARATOR.join(
                    [M("%(name)s in %(share)s", {"name": "SGLang 0.5.5", "share": "100.0%"})]
                ),
            },
        ),
    ),
    (
        "Sensitivity needs at least two candidates that pass the gates.",
        M("Sensitivity needs at least two candidates that pass the gates."),
    ),
    (
        "Some evidence is missing: totals are lower bounds (missing evidence contributes nothing); the upper "
        "bound (≤) shows the most it could add",
        M(
            "Some evidence is missing: totals are lower bounds (missing evidence contributes nothing); "
            "the upper bound (≤) shows the most it could add"
        ),
    ),
    (
        "2 SIMULATED indicator value(s) excluded from this final scoring",
        M("%(excluded)s SIMULATED indicator value(s) excluded from this final scoring", {"excluded": "2"}),
    ),
    ("1 candidate(s) screened out by the gates", M("%(count)s candidate(s) screened out by the gates", {"count": "1"})),
    (
        "LMDeploy 0.6 is screened out: Memory allocation and reuse 0.40 < gate 0.60; Observability: no evidence (gate "
        "0.50).",
        M(
            "%(name)s is screened out: %(reasons)s.",
            {
                "name": "LMDeploy 0.6",
                "reasons": CLAUSE_SEPARATOR.join(
                    [
                        M(
                            "%(dimension)s %(score)s < gate %(threshold)s",
                            {"dimension": MEMORY, "score": "0.40", "threshold": "0.60"},
                        ),
                        M(
                            "%(dimension)s: no evidence (gate %(threshold)s)",
                            {"dimension": OBSERVABILITY, "threshold": "0.50"},
                        ),
                    ]
                ),
            },
        ),
    ),
    (
        "Memory allocation and reuse 0.70 >= gate 0.60",
        M("%(dimension)s %(score)s >= gate %(threshold)s", {"dimension": MEMORY, "score": "0.70", "threshold": "0.60"}),
    ),
]


def _templates(message) -> set[str]:
    """The msgids in a message, nested ones and separators included."""
    found = {message.msgid}
    for value in message.params.values():
        for part in [value.separator, *value.items] if isinstance(value, Join) else [value]:
            if isinstance(part, Message):
                found |= _templates(part)
    return found


def test_the_sentences_below_use_the_domains_own_templates():
    marked = {msgid for _context, msgid in _domain_templates()}
    used = set().union(*(_templates(m) for _english, m in SCORING_SENTENCES + CAPACITY_SENTENCES))
    assert used - marked == set()


@pytest.mark.parametrize("sentence, message", SCORING_SENTENCES, ids=[s[:40] for s, _m in SCORING_SENTENCES])
def test_scoring_sentences_are_translated_keeping_names_and_numbers(sentence, message):
    assert str(message) == sentence
    with translation.override("zh-hans"):
        translated = message_text(message)
        assert message_text(message.to_dict()) == translated  # as stored in Score.result
    assert CJK.search(translated), translated
    numbers = r"\d+(?:[.,]\d+)*%?"
    assert sorted(re.findall(numbers, translated)) == sorted(re.findall(numbers, sentence))
    for name in ("SGLang", "vLLM", "LMDeploy"):
        assert translated.count(name) == sentence.count(name)
    assert not re.search(r"\b(weight|gate|recommended|stays|would|evidence)\b", translated), translated
    with translation.override("en"):
        assert message_text(message) == sentence


CAPACITY_SENTENCES = [
    (
        "KV pool 56.62 GiB per GPU (28987 blocks of 16 tokens); 200 concurrent sequences (one at max context 5120, the "
        "rest at avg 1000) need 25.11 GiB",
        M(
            "KV pool %(pool)s per GPU (%(blocks)s blocks of %(block)s tokens); %(peak)s concurrent sequences "
            "(one at max context %(max)s, the rest at avg %(avg)s) need %(need)s",
            {
                "pool": "56.62 GiB",
                "blocks": "28987",
                "block": "16",
                "peak": "200",
                "max": "5120",
                "avg": "1000",
                "need": "25.11 GiB",
            },
        ),
    ),
    (
        "max context 131072 exceeds the model's 8192 positions",
        M("max context %(max)s exceeds the model's %(positions)s positions", {"max": "131072", "positions": "8192"}),
    ),
    (
        "weights (140.00 GiB per GPU) leave no room for KV cache",
        M("weights (%(weights)s per GPU) leave no room for KV cache", {"weights": "140.00 GiB"}),
    ),
    (
        "the plan uses 16 GPUs, above the budget of 8",
        M("the plan uses %(gpus)s GPUs, above the budget of %(budget)s", {"gpus": "16", "budget": "8"}),
    ),
    (
        "fits with 30% headroom on 1 GPU(s) (TP=1, PP=1, bf16 KV)",
        M(
            "fits with 30%% headroom on %(gpus)s GPU(s) (TP=%(tp)s, PP=%(pp)s, %(kv)s KV)",
            {"gpus": "1", "tp": "1", "pp": "1", "kv": "bf16"},
        ),
    ),
    (
        "fits with 20% headroom only on 2 GPU(s); below the 30% comfort margin",
        M("fits with 20%% headroom only on %(gpus)s GPU(s); below the 30%% comfort margin", {"gpus": "2"}),
    ),
    (
        "at 70% of the pool only 120 sequences of avg context fit",
        M("at 70%% of the pool only %(seqs)s sequences of avg context fit", {"seqs": "120"}),
    ),
    ("does not fit", M("does not fit")),
    (
        "at 80% of the pool only 90 sequences of avg context fit (peak 200)",
        M(
            "at 80%% of the pool only %(seqs)s sequences of avg context fit (peak %(peak)s)",
            {"seqs": "90", "peak": "200"},
        ),
    ),
    (
        "does not fit as planned; fits with tp=8 (8 GPUs)",
        M("does not fit as planned; fits with %(change)s (%(gpus)s GPUs)", {"change": "tp=8", "gpus": "8"}),
    ),
]


@pytest.mark.parametrize("sentence, message", CAPACITY_SENTENCES, ids=[s[:40] for s, _m in CAPACITY_SENTENCES])
def test_capacity_verdicts_are_translated_keeping_numbers(sentence, message):
    assert str(message) == sentence
    with translation.override("zh-hans"):
        translated = message_text(message.to_dict())
    assert CJK.search(translated), translated
    numbers = r"\d+(?:[.,]\d+)*"
    assert sorted(re.findall(numbers, translated)) == sorted(re.findall(numbers, sentence))
    with translation.override("en"):
        assert message_text(message) == sentence


def test_plain_strings_stored_before_messages_are_shown_unchanged():
    with translation.override("zh-hans"):
        for sentence, _message in SCORING_SENTENCES + CAPACITY_SENTENCES:
            assert message_text(sentence) == sentence


@pytest.mark.django_db
def test_the_capacity_page_shows_the_verdict_in_chinese(zh_client, architect, flow):
    zh_client.force_login(architect)
    candidate = flow.candidates.first()
    html = zh_client.get(reverse("selection:capacity", args=[flow.pk, candidate.pk])).content.decode()
    assert "KV 池每 GPU" in html and "KV pool" not in html


def test_charts_on_a_chinese_page_have_chinese_axes():
    from django.utils import translation

    from benchmarks.charts import candidates as candidate_charts
    from selection.middleware import ChartLanguageMiddleware

    with translation.override("zh-hans"):
        svg = ChartLanguageMiddleware(
            lambda request: candidate_charts.capacity_memory_vs_context(
                [4096, 8192], {"vLLM": [1.0, 2.0]}, gpu_memory_gib=80.0
            )
        )(None)
    assert "显存（GiB）" in svg and "上下文长度（token）" in svg


def test_person_names_follow_their_script(django_user_model):
    from selection.i18n import person_name

    zhang = django_user_model(username="zw", first_name="伟", last_name="张")
    ada = django_user_model(username="ada", first_name="Ada", last_name="Lovelace")
    assert person_name(zhang) == "张伟"  # family name first, no space (Django: "伟 张")
    assert person_name(ada) == "Ada Lovelace"
    assert person_name(django_user_model(username="solo")) == "solo"
    assert person_name(django_user_model(username="k", first_name="伟")) == "伟"
    assert person_name(None) == ""


@pytest.mark.django_db
def test_issue_19_chinese_details(zh_client, architect, flow):
    """The end-to-end budget label, role names on the verify page, 采购。 and 约束概览 (issue 19)."""
    from django.utils import translation

    from selection.templatetags.kvselect import role_name

    zh_client.force_login(architect)
    candidate = flow.candidates.first()
    html = zh_client.get(reverse("selection:validation", args=[flow.pk, candidate.pk])).content.decode()
    assert "端到端 p95 预算（毫秒）" in html and "e2e p95 ms" not in html
    assert "约 2 小时 1 分钟" in html  # the soak's estimate in words: the plan's 2 h and its 1 min warm-up
    with translation.override("zh-hans"):
        assert [role_name(r) for r in ("business", "platform", "security")] == [
            "业务负责人",
            "平台负责人",
            "安全负责人",
        ]
        assert translation.gettext("SIMULATED — not for procurement.").endswith("采购。")
        assert translation.gettext("Constraints one-pager") == "约束概览"
    record_page = (Path(__file__).resolve().parents[2] / "templates/selection/decision/record.html").read_text()
    assert '{% translate "SIMULATED — not for procurement." %}</strong> ' in record_page  # the full stop is translated


def test_every_signing_role_has_one_label():
    """Owner roles and the seal are named in selection.domain.roles only: the model's choices, the
    pages (role_name) and the signed PDF (English) all read it."""
    from selection.certificates import signing
    from selection.certificates.signing import dev_ca, reports, sign
    from selection.domain.records import OWNER_ROLES
    from selection.domain.roles import ROLE_LABELS
    from selection.i18n import role_name
    from selection.models import RecordApproval

    assert set(ROLE_LABELS) == {*OWNER_ROLES, signing.SEAL_FIELD}
    assert {role: str(label) for role, label in RecordApproval.Role.choices} == {r: ROLE_LABELS[r] for r in OWNER_ROLES}
    assert sign.ROLE_LABELS is reports.ROLE_LABELS is dev_ca.ROLE_LABELS is ROLE_LABELS
    with translation.override("zh-hans"):
        assert all(CJK.search(role_name(role)) for role in ROLE_LABELS)
        assert role_name("observer") == "observer"


def test_a_certificate_subject_reads_as_the_person_it_names():
    from selection.i18n import certificate_name

    dn = "OU=Business owner (DEVELOPMENT),O=kvselect development (not for production),CN=张伟"
    assert certificate_name(dn) == "张伟"
    assert certificate_name("O=No common name") == "O=No common name" and certificate_name("") == ""


def test_test_ids_read_as_their_titles_in_both_languages():
    from benchmarks import suite
    from selection.i18n import translate_test

    assert translate_test("long_context") == suite.title_of("long_context") != "long_context"
    with translation.override("zh-hans"):
        assert CJK.search(translate_test("long_context"))


@pytest.mark.django_db
def test_people_are_offered_by_name_and_told_apart_by_login_only_when_names_clash(django_user_model):
    from selection.setup.forms import user_labeller

    priya = django_user_model.objects.create_user("priya", first_name="Priya", last_name="Raman")
    ana = django_user_model.objects.create_user("ana", first_name="Ana", last_name="Silva")
    ana2 = django_user_model.objects.create_user("ana2", first_name="Ana", last_name="Silva")
    nameless = django_user_model.objects.create_user("robot")
    label = user_labeller([priya, ana, ana2, nameless])
    labels = [label(u) for u in (priya, ana, ana2, nameless)]
    assert labels == ["Priya Raman", "Ana Silva (ana)", "Ana Silva (ana2)", "robot"]


def test_signature_modification_levels_read_as_sentences():
    from selection.templatetags.kvselect import modification

    assert modification("NONE") == "" and modification(None) == ""
    assert "FORM_FILLING" not in modification("FORM_FILLING") and "signatures" in modification("FORM_FILLING")
    with translation.override("zh-hans"):
        assert CJK.search(modification("LTA_UPDATES"))


def test_the_audit_trail_reads_in_words():
    from selection.templatetags.kvselect import audit_action, audit_field

    assert audit_action("constraints.changed") == "Constraint changed"
    assert audit_action("something.new_here") == "Something new here"  # never the code
    assert audit_field("candidate:3") == "candidate #3"
    assert audit_field("record:v1:readiness.logs").startswith("record v1 · ") and "." not in audit_field(
        "record:v1:readiness.logs"
    )
    assert audit_field("peak_concurrency") != "peak_concurrency" and "_" not in audit_field("peak_concurrency")
    with translation.override("zh-hans"):
        assert CJK.search(audit_action("scenario.inferred"))


def test_team_roles_and_criterion_ids_read_as_words():
    """The read-only notice names the reader's team role, and the record's scoring rules their
    criteria, in words in the page's language (issue 37: "您的角色：reviewer", criterion ids)."""
    from selection.templatetags.kvselect import criterion, member_role

    assert member_role("reviewer") == "reviewer" and member_role(None) == "member"
    assert criterion("cache_reuse") == "Cache reuse" == criterion("Cache reuse")
    with translation.override("zh-hans"):
        assert member_role("reviewer") == "评审人" and member_role("procurement") == "采购"
        assert member_role("") == "成员"
        assert criterion("cache_reuse") == criterion("Cache reuse") == "缓存复用"


def test_every_scoring_rule_reads_in_chinese():
    """The scoring rules table (comparison page, record): each rule's unit and formula is a msgid."""
    from selection.domain.scoring.mappings import MAPPINGS

    with translation.override("zh-hans"):
        untranslated = [t for m in MAPPINGS for t in (m.unit, m.formula) if not CJK.search(domain_text(t))]
    assert untranslated == []
