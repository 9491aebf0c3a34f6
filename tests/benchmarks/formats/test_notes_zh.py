"""The run notes the upload parsers add ("CSV export carries no run configuration…") are messages: the run page of an
uploaded run shows them in Chinese, identifiers as code, while the English `notes` the API and the CLI read stay
the sentences they were (issue 37 item 2)."""

from __future__ import annotations

import html
import re

import pytest
from django.utils import translation

from benchmarks import presentation
from benchmarks.formats import detect_and_parse_file, vllm
from benchmarks.formats.common import keep_simulated
from benchmarks.result import MEASURED, NormalizedResult
from selection.domain.messages import Message
from selection.i18n import message_html, message_literals, message_text
from selection.templatetags.kvselect import literals
from tests.benchmarks.formats.conftest import FIXTURES
from tests.e2e.pagechecks import english_words

NAMES = ("guidellm", "aiperf")
CODE = re.compile(r"<code>.*?</code>")


def shown(value) -> tuple[str, str]:
    """A note as a Chinese page shows it: the text, and the text outside <code>."""
    with translation.override("zh-hans"):
        text = str(message_text(value))
        prose = html.unescape(CODE.sub(" ", str(message_html(value))))
    return text, prose


def assert_chinese_notes(result: NormalizedResult) -> list[str]:
    assert result.notes
    stored = result.metadata.get("note_messages") or {}
    assert sorted(stored, key=int) == [str(i) for i in range(len(result.notes))]  # every note has its message
    assert presentation.run_notes(result.notes, result.metadata) == result.notes  # English: the notes as they were
    with translation.override("zh-hans"):
        chinese = presentation.run_notes(result.notes, result.metadata, render_message=message_text)
    in_order = [stored[str(i)] for i in range(len(result.notes))]
    for note, message, text in zip(result.notes, in_order, chinese, strict=True):
        assert text != note and text == shown(message)[0]
        prose = shown(message)[1]
        assert english_words(prose, NAMES) == [], prose
        assert re.search(r"[\u4e00-\u9fff]", prose), prose
    return chinese


@pytest.mark.parametrize(
    ("name", "slo", "expected"),
    [
        ("aiperf_v0.3.0.csv", None, "运行配置"),
        ("aiperf_v0.3.0_all_errors.csv", None, "所有请求都失败了"),
        ("aiperf_v0.3.0_all_errors.json", None, "没有成功的请求"),
        ("aiperf.profile_export.jsonl", {"ttft_ms": 200, "tpot_ms": 30}, "重新计算"),
        ("llmperf_summary.json", None, "推导"),
        ("llmperf_individual_responses.json", None, "时间戳"),
        ("guidellm.json", {"ttft_ms": 200, "tpot_ms": 30}, "guidellm"),
        ("guidellm_0.7.4_c64_max10s.benchmarks.trimmed.json", {"ttft_ms": 200, "tpot_ms": 30}, "抽样"),
        ("recon_vllm_legacy_benchmark_serving.json", {"ttft_ms": 200, "tpot_ms": 30}, "负载点 0"),
        ("vllm_bench_serve.json", {"ttft_ms": 200, "tpot_ms": 30}, "负载点 0"),
    ],
)
def test_an_uploaded_runs_notes_read_in_chinese(name, slo, expected):
    result = detect_and_parse_file(str(FIXTURES / name), name.removesuffix(".gz"), slo=slo)
    chinese = assert_chinese_notes(result)
    assert any(expected in text for text in chinese), chinese


def test_the_simulated_evidence_note_reads_in_chinese():
    result = NormalizedResult(tool="vllm", format="vllm", evidence=MEASURED, metadata={"simulator": {"kvsim": True}})
    keep_simulated(result)
    assert result.notes == [
        "Stored as SIMULATED although the file says MEASURED: it comes from kvselect's simulator "
        "(metadata.simulator: kvsim; metadata.simulator.kvsim names kvsim)."
    ]
    assert "已存储为 SIMULATED" in assert_chinese_notes(result)[0]


@pytest.mark.parametrize(
    "reason",
    [
        Message(vllm.LISTS_PARTIAL),
        Message(vllm.LISTS_NO_MEAN),
        Message(vllm.LISTS_NO_TPOT),
        Message(vllm.LISTS_DIFFER, {"recomputed": "41.2", "file_mean": "40"}),
    ],
)
def test_why_the_inter_token_lists_were_not_used_reads_in_chinese(reason):
    result = NormalizedResult(tool="vllm", format="vllm")
    result.add_note(Message(vllm.NOT_FROM_LISTS, {"index": 0, "why": reason}))
    assert result.notes[0].startswith("point 0: per-request e2e, TPOT and ITL not derived from the inter-token lists: ")
    assert str(reason) in result.notes[0]
    assert_chinese_notes(result)


@pytest.mark.parametrize(
    ("name", "slo", "code"),
    [
        ("llmperf_summary.json", None, "<code>itl_ms.mean</code>"),
        ("aiperf.profile_export.jsonl", None, "<code>profile_export.jsonl</code>"),
        ("recon_vllm_legacy_benchmark_serving.json", None, "<code>num_prompts - completed</code>"),
        ("sglang_bench_serving.json", {"ttft_ms": 200, "tpot_ms": 30}, "<code>tpot_ms</code>"),
    ],
)
def test_the_run_page_sets_a_notes_identifiers_as_code(name, slo, code):
    """The run page renders notes with `message_literals` through the `literals` filter: identifiers in <code>,
    no English outside them on a Chinese page; the English page reads the notes with the same code marks."""
    result = detect_and_parse_file(str(FIXTURES / name), name, slo=slo)
    for language in ("zh-hans", "en"):
        with translation.override(language):
            notes = presentation.run_notes(result.notes, result.metadata, render_message=message_literals)
            page = [str(literals(note)) for note in notes]
        assert any(code in note for note in page), page
        if language == "en":
            assert [html.unescape(re.sub(r"</?code>", "", note)) for note in page] == result.notes
        else:
            for note in page:
                prose = html.unescape(CODE.sub(" ", note))
                assert english_words(prose, NAMES) == [] and "`" not in prose, note
