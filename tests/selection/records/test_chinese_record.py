"""The record written in 简体中文 (issue 37, walk M5/p8): its own sentences, labels and joins in Chinese with
Chinese punctuation, read back from the PDF with pdftotext as a reader sees it. What people typed and
product, engine, metric and flag names stay as they are."""

from __future__ import annotations

import re
import subprocess

import pytest
from django.utils import translation

from selection.i18n import clauses, labelled, names, sentences
from selection.records.pdf import render_record
from selection.records.services import create_draft, start_review
from selection.setup.services import set_gates

CJK = "\u3400-\u4dbf\u4e00-\u9fff"
# ASCII punctuation right after Chinese text (what tests/e2e/pagechecks.punctuation finds on a page)
ASCII_AFTER_CHINESE = re.compile(rf"[{CJK}][,;:!?]|[{CJK}]\.(?!\w)")
# the record's own English that the Chinese record used to print (walk M5 and the crawler's baseline)
ENGLISH = (
    "default flags",
    "95% interval",
    "H100 with 80 GiB",
    "passes the gates",
    "Digitally signed",
    "concurrency_stress",
    "audit_trail",
    "Observed:",
)


@pytest.fixture
def chinese_pdf_text(demo_like, architect, tmp_path):
    set_gates(selection=demo_like, user=architect, gates={"memory": 0.4})
    with translation.override("zh-hans"):
        record = start_review(record=create_draft(selection=demo_like, user=architect), user=architect)
    path = tmp_path / "record.pdf"
    path.write_bytes(render_record(record.snapshot).pdf)
    return subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, timeout=120, check=True
    ).stdout


def test_the_chinese_record_writes_its_own_words_and_joins_in_chinese(chinese_pdf_text):
    """One rendering, read twice: no ASCII punctuation after Chinese text, and none of the English the
    Chinese record used to print (the joins, labels, items and names are its own, not user data)."""
    found = [
        chinese_pdf_text[max(0, m.start() - 8) : m.end() + 8] for m in ASCII_AFTER_CHINESE.finditer(chinese_pdf_text)
    ]
    assert not found, found
    assert "：" in chinese_pdf_text and "；" in chinese_pdf_text
    text = " ".join(chinese_pdf_text.split())
    assert [phrase for phrase in ENGLISH if phrase in text] == []
    assert "默认启动参数" in text and "95% 区间" in text and "H100（80 GiB）" in text
    assert "回滚" in text and "审计记录" in text  # the project checks' items by name, never their keys
    assert "并发压力 (vLLM" in text  # the manifest names a run's test by its title


def test_the_joins_follow_the_active_language():
    with translation.override("en"):
        assert labelled("TTFT p95", "pass") == "TTFT p95: pass"
        assert clauses(["a", "", "b"]) == "a; b" and names(["a", "b"]) == "a, b"
        assert sentences(["One.", "Two."]) == "One. Two."
    with translation.override("zh-hans"):
        assert labelled("观测", "通过") == "观测：通过"
        assert clauses(["甲", "乙"]) == "甲；乙" and names(["甲", "乙"]) == "甲、乙"
        assert sentences(["第一句。", "第二句。"]) == "第一句。第二句。"
        assert sentences(["see run-3", "第二句。"]) == "see run-3 第二句。"  # Latin text keeps its space


def test_launch_flags_in_record_text_are_set_as_code_and_the_rest_escaped():
    from selection.templatetags.kvselect import flags_as_code

    assert flags_as_code("--kv-offloading-size 8 --scheduling-policy priority；TP=1, <b>") == (
        "<code>--kv-offloading-size 8</code> <code>--scheduling-policy priority</code>；TP=1, &lt;b&gt;"
    )
    assert (
        flags_as_code("8.0 GiB 主机内存（--hicache-ratio 2）") == "8.0 GiB 主机内存（<code>--hicache-ratio 2</code>）"
    )
