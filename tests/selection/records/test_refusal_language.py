"""The record services' refusals are message ids (issue 39): a Chinese page shows them in Chinese, and
every one of them has its translation."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import translation

from selection.models import DecisionRecord
from selection.records.services import create_draft, start_review

pytestmark = pytest.mark.django_db

SERVICES = Path(__file__).resolve().parents[3] / "selection" / "records" / "services.py"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def decided(decided, enrolled_owners):
    """The shared decided selection, its owners enrolled (a record goes to review only then)."""
    return decided


def test_a_refusal_reaches_a_chinese_page_in_chinese(client, architect, decided):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    DecisionRecord.objects.filter(pk=record.pk).update(status=DecisionRecord.Status.SIGNED)
    client.force_login(architect)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    response = client.post(
        reverse("selection:record-action", args=[decided.pk, record.pk]), {"action": "archive"}, follow=True
    )
    page = response.content.decode()
    assert f"记录 v{record.version} 状态为已签名：只有草稿才能归档。" in page
    assert "only a draft can be archived" not in page


def test_a_refused_draft_says_why_in_the_active_language(architect, decided):
    record = create_draft(selection=decided, user=architect)
    with translation.override("zh-hans"), pytest.raises(Exception) as refused:
        create_draft(selection=decided, user=architect, supersedes=record)
    assert refused.value.message_dict["supersedes"] == ["只有已签名的记录才能被取代。"]


def refusal_msgids() -> list[str]:
    """Every message id the record services write (`_("...")` and the owners' names)."""
    tree = ast.parse(SERVICES.read_text(encoding="utf-8"))
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) in ("_", "gettext_lazy")
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


def test_every_refusal_of_the_record_services_is_translated():
    msgids = refusal_msgids()
    assert len(msgids) >= 40
    with translation.override("zh-hans"):
        untranslated = [m for m in msgids if not CJK.search(translation.gettext(m))]
    assert untranslated == []
