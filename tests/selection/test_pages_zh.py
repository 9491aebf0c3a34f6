"""Chinese pages without English or code (issue 37 items 1-2, the web pages): the separators
templates put between labels and values follow the page's language, audit values and fields read as
words, and the formats, metadata keys and labels pages generate have names in the page's language."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.template import Context, Template
from django.utils import translation

from tests.e2e import pagechecks

CJK = re.compile(r"[\u4e00-\u9fff]")
TEMPLATES = Path(settings.BASE_DIR) / "templates"
# A translated piece followed by ASCII punctuation typed into the template: in Chinese it lands right
# after a Chinese character (": " after {% translate "Phase" %}, ", " between looped names, ...).
TYPED_SEPARATOR = re.compile(
    r"(?:\{% (?:translate|trans) \"[^\"]*\"(?: context \"[^\"]*\")? %\}|\{% endblocktranslate %\}"
    r"|\{% if not forloop\.last %\}|\{% endif %\})(?:</strong>|</span>)?[:;,.](?:\s|<|\{|$)"
)


def render(source: str, language: str, **context) -> str:
    with translation.override(language):
        return Template("{% load i18n kvselect %}" + source).render(Context(context))


@pytest.mark.parametrize(
    "language, expected",
    [("en", "Phase: warm-up; a, b. "), ("zh-hans", "阶段：warm-up；a、b。")],
)
def test_separators_follow_the_pages_language(language, expected):
    source = (
        '{% translate "Phase" %}{% colon %}warm-up{% semicolon %}'
        "{% for n in names %}{{ n }}{% if not forloop.last %}{% comma %}{% endif %}{% endfor %}{% full_stop %} "
    )
    assert render(source, language, names=["a", "b"]).strip() == expected.strip()


def test_no_page_template_types_ascii_punctuation_after_a_translated_piece():
    """The class, not the instances: every page template (the record PDF's own templates/records/
    aside) writes its separators with the language-aware tags."""
    offenders = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        if path.relative_to(TEMPLATES).parts[0] == "records":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            offenders += [
                f"{path.relative_to(TEMPLATES)}:{number}: {m.group(0)}" for m in TYPED_SEPARATOR.finditer(line)
            ]
    assert offenders == []


def test_audit_values_and_fields_read_as_words_in_chinese():
    from selection.templatetags.kvselect import audit_field, audit_value

    assert audit_value(True) == "yes" and audit_value(False) == "no"
    with translation.override("zh-hans"):
        assert audit_value(True) == "是" and audit_value(False) == "否"  # never "— → True"
        assert audit_field("gates") == "门槛" and audit_field("scenario") == "场景"
        assert audit_field("record:v2") == "记录 v2" and audit_field("run:7") == "运行 #7"
        shown = audit_value({"gates": True, "status": "draft"})
        assert shown == "门槛：是、状态：draft"
        for field in ("gates", "scenario", "status", "upload_token", "record:v1", "candidate:3", "trace:0a1b2c3d4e5f"):
            assert not pagechecks.english_words(audit_field(field)), field


def test_result_and_trace_formats_are_offered_by_name():
    from benchmarks import formats
    from benchmarks.uploads.forms import format_choices, format_label
    from selection.traces.forms import TraceUploadForm

    with translation.override("zh-hans"):
        labels = [str(label) for _value, label in format_choices()]
        trace_labels = [str(label) for _value, label in TraceUploadForm().fields["format"].choices]
    ids = [fmt.name for fmt in formats.FORMATS]
    assert len(labels) == len(ids) + 1 and not set(labels) & set(ids)  # each by a name, never its id
    for label in labels + trace_labels:
        assert not pagechecks.english_words(label), label
        assert not pagechecks.identifiers(label), label
    assert format_label("vllm") == "vLLM benchmark result (JSON)"


def test_run_metadata_keys_have_labels_in_chinese():
    """What the tests record beside their points (swap recovery's eviction and resume, stability's
    drift, ...) is labelled in the page's language, not spelt from its key."""
    from django.utils.translation import gettext

    from benchmarks import presentation
    from benchmarks.validation.forms import param_label

    keys = ("sizing", "eviction", "resume", "continuation", "never_swap", "active_turns", "drift")
    keys += ("warmup_excluded", "off_target", "pace_independent", "host_activity")
    with translation.override("zh-hans"):
        rows = presentation.provenance_rows(dict.fromkeys(keys, 1), label=param_label, translate=gettext)
    untranslated = [row["label"] for row in rows if not CJK.search(row["label"])]
    assert untranslated == []


@pytest.mark.django_db
def test_the_traces_page_names_its_formats_in_chinese(client, architect, team, selection_owners):
    from django.urls import reverse

    from selection.setup.services import create_selection

    owners = {f"{role}_owner": user for role, user in selection_owners.items()}
    selection = create_selection(user=architect, team=team, name="Chat", **owners)
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    html = client.get(reverse("selection:traces", args=[selection.pk])).content.decode()
    assert "Mooncake 请求轨迹（JSONL）" in html and "<code>mooncake</code>" in html
    assert "Mooncake trace (JSONL)" not in html


def test_template_strings_with_a_percent_sign_are_translated():
    """A template's {% translate "95% interval" %} looks up "95%% interval": the catalogue must hold
    that msgid, or the Chinese page shows the English (the run page's figures table did)."""
    found = set()
    for path in TEMPLATES.rglob("*.html"):
        found |= set(re.findall(r'\{% translate "([^"]*%[^"]*)" %\}', path.read_text()))
    assert found
    untranslated = [text for text in sorted(found) if not CJK.search(render(f'{{% translate "{text}" %}}', "zh-hans"))]
    assert untranslated == []


def test_literals_in_form_labels_and_help_read_as_code():
    from selection.templatetags.kvselect import literals

    shown = str(
        literals("测试会向同一端点发送 cache_prompt: false（SGLang --disable-radix-cache），队列 gpu.<label>。")
    )
    assert "<code>cache_prompt: false</code>" in shown and "<code>--disable-radix-cache</code>" in shown
    assert "<code>gpu.&lt;label&gt;</code>" in shown
    assert str(literals("<b>typed</b>")) == "&lt;b&gt;typed&lt;/b&gt;"  # everything else stays escaped
    outside_code = re.sub(r"<code>.*?</code>", "", shown)
    assert not pagechecks.identifiers(outside_code) and not pagechecks.english_words(outside_code)


@pytest.mark.django_db
def test_the_candidates_page_shows_literal_flags_as_code_in_chinese(client, architect, team, selection_owners):
    from django.urls import reverse

    from selection.setup.services import create_selection

    owners = {f"{role}_owner": user for role, user in selection_owners.items()}
    selection = create_selection(user=architect, team=team, name="Chat", **owners)
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    html = client.get(reverse("selection:candidates", args=[selection.pk])).content.decode()
    assert "<code>cache_prompt: false</code>" in html
    prose = re.sub(r"<code[^>]*>.*?</code>", "", html, flags=re.S)
    assert "cache_prompt" not in prose and "gpu.&lt;label&gt;" not in prose
