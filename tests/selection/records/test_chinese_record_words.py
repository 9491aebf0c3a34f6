"""The Chinese record (the HTML its PDF is rendered from) holds no English words of its own (issue 37 item 2,
the crawler's findings "on the Chinese record"): the engine-stated capacity's source, the licence's note,
the exports' sentence, the evidence manifest's kinds, the hardware the runs ran on (the simulator's
"driver simulated"), the re-evaluation triggers, the risk boundary's claims, the observer's watch and the
runs' observed lines, each read as pagechecks reads a page. What people typed, product names, run
references and what the record sets as code stay as they are."""

from __future__ import annotations

import pytest
from django.utils import translation

from benchmarks import presentation
from benchmarks.harness.workloads import stress, swap_recovery
from benchmarks.models import BenchmarkRun
from selection.domain.messages import Message
from selection.management.commands.demo import DEMO_PROJECT_CHECKS
from selection.records.open_items import with_item_states
from selection.records.pdf import render_record_html
from selection.records.services import create_draft, start_review
from tests.e2e import pagechecks
from tests.support.record_text import visible_lines

pytestmark = pytest.mark.django_db

SIMULATED_GPU = {"count": 1, "model": "H100", "driver": "simulated", "source": "engine_metrics", "memory_gib": 80.0}
KV_CAPACITY = {"source": "vllm:cache_config_info num_gpu_blocks 27809 x block_size 16", "tokens": 444944}
# the record's own English the Chinese record printed (the crawler's findings and baseline)
ENGLISH = (
    "engine metrics of run",
    "wheel metadata",
    "exported from this record",
    "driver simulated",
    "engine major version change",
    "capacity, cost and stability",
    "not validated",
    "held 32.0 of 32",
    "offloaded the",
)


def observed(line: Message) -> dict:
    return {"line": str(line), "line_message": line.to_dict()}


def simulated_demo_runs(selection) -> None:
    """The demo's runs as the simulator leaves them: SIMULATED, on a simulated H100 whose engine states its
    KV pool, with observed lines written as messages beside their English; no long-context run (a claim the
    record says is not validated)."""
    BenchmarkRun.objects.filter(candidate__selection=selection, test="long_context").delete()  # as the demo's
    for run in BenchmarkRun.objects.filter(candidate__selection=selection):
        metadata = {
            **run.metadata,
            "engine_host": {"identity": {"gpu": SIMULATED_GPU}},
            "engine_metrics": {"kv_capacity": KV_CAPACITY},
        }
        if run.test == "concurrency_stress":
            held = Message(stress.OBSERVED_HELD, {"held": "32.0", "concurrency": 32})
            metadata["observed"] = observed(Message(stress.OBSERVED_LINE, {"parts": held, "n": 68}))
        elif run.test == "swap_recovery":
            metadata["observed"] = observed(Message(swap_recovery.OBSERVED_OFFLOADED, {"sessions": 20}))
        # the verdicts the suite names (the shared fixture's extra names and English details are its own)
        verdicts = [{**v, "detail": ""} for v in run.verdicts if presentation.criterion_title(v["name"])]
        run.metadata, run.evidence, run.verdicts = metadata, "SIMULATED", verdicts
        run.save(update_fields=["metadata", "evidence", "verdicts"])


def typed_texts(selection) -> set[str]:
    """What people typed or are called (the crawler's user_texts, for this selection)."""
    texts = {selection.name, selection.team.name, selection.licence_terms, selection.vendor_support}
    texts |= {selection.delivery_owner}
    for candidate in selection.candidates.all():
        texts |= {candidate.label, candidate.display_name, candidate.model_name, candidate.launch_flags}
    for section in DEMO_PROJECT_CHECKS.values():
        for value in section.values():
            values = value if isinstance(value, list) else [value]
            texts |= {v.get("note", "") if isinstance(v, dict) else v for v in values}
    people = [selection.business_owner, selection.platform_owner, selection.security_owner, selection.observer]
    texts |= {f"{p.first_name} {p.last_name}".strip() for p in people if p} | {p.username for p in people if p}
    texts |= {"演示：所有数据均来自模拟器。"}
    return {text for text in texts if text}


@pytest.fixture
def chinese_record_text(demo_like, architect):
    simulated_demo_runs(demo_like)
    with translation.override("zh-hans"):
        record = create_draft(
            selection=demo_like,
            user=architect,
            include_simulated=True,
            rationale="演示：所有数据均来自模拟器。",
            project_checks=DEMO_PROJECT_CHECKS,
        )
        record = start_review(record=record, user=architect)
    html = render_record_html(with_item_states(record.snapshot, record))
    return html, "\n".join(visible_lines(html)), typed_texts(demo_like)


def test_the_chinese_record_has_no_english_words_of_its_own(chinese_record_text):
    _html, text, typed = chinese_record_text
    assert pagechecks.english_phrases(text, typed) == []
    assert [phrase for phrase in ENGLISH if phrase in pagechecks.without(text, typed)] == []
    assert pagechecks.identifiers(text, typed) == []  # the metric expression is set as code


def test_the_chinese_record_words_the_capacity_source_licence_hardware_and_exports(chinese_record_text):
    html, text, _typed = chinese_record_text
    assert "引擎自述：运行" in text and "的引擎指标" in text
    assert '<code class="mono">vllm:cache_config_info num_gpu_blocks 27809 x block_size 16</code>' in html
    assert '<code class="mono">License-Expression: Apache-2.0</code> 读自 0.11.0 版 Python 安装包的元数据' in html
    assert "1× H100（80 GiB、驱动：模拟）（" in text  # full-width after Chinese words
    assert '<code class="mono">record=&quot;DR-' in html and "对应抓取任务" in text
    assert "引擎主版本变更" in text and "上线后的容量、成本与稳定性" in text
    assert "最长输入未经验证（所选引擎没有运行长上下文）" in text
    assert "保持住 32 个并发中的 32.0 个" in text and "卸载了 20 个空闲会话的 KV" in text
