"""A malformed result file of every tool refused on a Chinese upload page: the refusal reads in Chinese and
names the field at fault as code (`benchmarks[0].metrics.request_latency`), with no English prose; the API
and the CLI keep the English sentence (the format tests hold it)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import translation

from benchmarks.formats import UnrecognisedFormat, detect
from benchmarks.models import BenchmarkRun
from benchmarks.uploads.parse import parse_stored_upload
from selection.i18n import message_text
from tests.e2e.pagechecks import english_words, punctuation

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parents[1] / "formats" / "fixtures"


def edited(name: str, *path: str | int, value) -> bytes:
    """The fixture `name` with the value at `path` replaced."""
    doc = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    where = doc
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return json.dumps(doc).encode()


def replaced(name: str, old: str, new: str) -> bytes:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new, 1).encode()


# (file name, its malformed content, the key path the refusal names, the Chinese reason it gives)
MALFORMED = [
    (
        "guidellm.json",
        lambda: edited("guidellm.json", "benchmarks", 0, "metrics", "request_latency", value="slow"),
        "benchmarks[0].metrics.request_latency",
        "应为对象，实际为字符串",
    ),
    (
        "aiperf.json",
        lambda: edited("aiperf.json", "schema_version", value="9.9"),
        "schema_version",
        "不支持的 aiperf 架构版本",
    ),
    (
        "vllm_bench_serve.json",
        lambda: edited("vllm_bench_serve.json", "ttfts", 1, value="fast"),
        "ttfts[1]",
        "应为数字，实际为字符串",
    ),
    (
        "sglang_bench_serving.json",
        lambda: replaced("sglang_bench_serving.json", '"duration": 0.1753', '"duration": [1]'),
        "duration",
        "应为数字，实际为列表",
    ),
    (
        "inference-perf_summary_lifecycle_metrics.json",
        lambda: edited("inference-perf_summary_lifecycle_metrics.json", "successes", "latency", value=[]),
        "successes.latency",
        "应为对象，实际为列表",
    ),
    (
        "llmperf_summary.json",
        lambda: edited("llmperf_summary.json", "results_ttft_s_quantiles_p50", value="n/a"),
        "results_ttft_s_quantiles_p50",
        "应为数字，实际为字符串",
    ),
    (
        "genai-perf_profile_export_genai_perf.json",
        lambda: edited("genai-perf_profile_export_genai_perf.json", "time_to_first_token", "unit", value="hours"),
        "time_to_first_token.unit",
        "未知的时间单位",
    ),
    (
        "aiperf.profile_export_aiperf.csv",
        lambda: replaced("aiperf.profile_export_aiperf.csv", "First Token (ms),26.36,", "First Token (ms),x,"),
        "avg",  # the column, as code; the line reads "CSV 表 1 第 43 行"
        "CSV 表 1 第 43 行",
    ),
]
ALERT = re.compile(r'<div class="alert alert--error" role="alert">(.*?)</div>', re.S)
CODE = re.compile(r"<code>.*?</code>", re.S)
TAG = re.compile(r"<[^>]+>")


def refusal_text(body: str) -> str:
    """The upload form's error box as a reader sees it, code blocks left out (the crawler does not read them)."""
    alert = ALERT.search(body)
    assert alert, body[:3000]
    return html.unescape(TAG.sub("", CODE.sub(" ", alert.group(1))))


@pytest.mark.parametrize("name, content, path, reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_refused_in_chinese_naming_its_field(
    client, architect, candidate, media, name, content, path, reason
):
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    data = {
        "candidate": candidate.pk,
        "test": "concurrency_stress",
        "format": "",
        "label": "",
        "file": SimpleUploadedFile(name, content()),
        "idempotency_key": f"zh-{name}",
    }
    response = client.post(reverse("selection:result-upload", args=[candidate.selection.pk]), data)
    body = response.content.decode()
    assert response.status_code == 400 and not BenchmarkRun.objects.exists()
    assert f"<code>{html.escape(path, quote=False)}</code>" in body, ALERT.search(body).group(1)
    text = refusal_text(body)
    words = re.sub(r"\s", "", text)  # "实际为 字符串": the type was a value between spaces
    assert re.sub(r"\s", "", reason) in words and "文件已识别但无法读取" in words, text
    assert english_words(text) == [] and punctuation(text) == [], text


def test_the_same_refusal_stays_english_on_an_english_page(client, architect, candidate, media):
    client.force_login(architect)
    data = {
        "candidate": candidate.pk,
        "test": "concurrency_stress",
        "file": SimpleUploadedFile("vllm.json", edited("vllm_bench_serve.json", "ttfts", 1, value="fast")),
        "idempotency_key": "en-vllm",
    }
    body = client.post(reverse("selection:result-upload", args=[candidate.selection.pk]), data).content.decode()
    assert "<code>ttfts[1]</code>: expected a number, got string" in body, refusal_text(body)


def test_a_large_malformed_file_parsed_in_the_background_fails_in_chinese(
    client, architect, candidate, media, settings, django_capture_on_commit_callbacks
):
    """Above KVSELECT_SYNC_PARSE_BYTES the file is stored and parsed later: the run keeps the English reason
    (`error`, for the API) and its message, which the run page renders in the reader's language."""
    settings.KVSELECT_SYNC_PARSE_BYTES = 10
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    content = edited("guidellm.json", "benchmarks", 0, "metrics", "request_latency", value="slow")
    data = {
        "candidate": candidate.pk,
        "test": "concurrency_stress",
        "file": SimpleUploadedFile("guidellm.json", content),
        "idempotency_key": "zh-large",
    }
    with django_capture_on_commit_callbacks():  # the parse is not queued: it runs below, as the worker would
        response = client.post(reverse("selection:result-upload", args=[candidate.selection.pk]), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    run = parse_stored_upload(BenchmarkRun.objects.get().pk)
    assert run.status == "failed"
    assert run.error == "benchmarks[0].metrics.request_latency: expected an object, got string"
    body = client.get(response["Location"]).content.decode()
    assert "<code>benchmarks[0].metrics.request_latency</code>" in body
    text = refusal_text(body)
    assert "应为对象，实际为字符串" in re.sub(r"\s", "", text), text
    assert english_words(text) == [] and punctuation(text) == [], text


def test_a_file_no_format_accepts_keeps_every_reason_as_a_message():
    with pytest.raises(UnrecognisedFormat) as refused:
        detect(b'{"a": 1}', "x.json")
    assert str(refused.value).startswith("'x.json' is not a recognised benchmark result format. Tried native: ")
    assert str(refused.value.message) == str(refused.value)
    with translation.override("zh-hans"):
        text = message_text(refused.value.message)
    assert text.startswith("'x.json' 不是可识别的基准测试结果格式。已尝试：native：没有 'schema' 键；guidellm："), text
