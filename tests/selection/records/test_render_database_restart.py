"""A decision record's PDF across a database restart (issue 38 item 3): the render takes seconds to
minutes and leaves its connection idle; a restart meanwhile used to fail the write and render the whole
record again on the retry (a demo signing step met a restart every 70 s and never finished). Now only
the write runs again."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from django.db import OperationalError, connection

from config import outage
from selection.certificates import signing
from selection.models import DecisionRecord
from selection.records import pdf, rendering

pytestmark = pytest.mark.django_db(transaction=True)  # a restart ends the connection: no test transaction


@pytest.fixture
def removable_records():
    """Let the end-of-test flush remove the approved record: PostgreSQL truncates past the row trigger
    that keeps a record out of draft forever; SQLite deletes row by row, so the trigger is lifted for
    that one delete and put back."""
    yield
    if connection.vendor != "sqlite":
        return
    triggers = importlib.import_module("selection.migrations.0003_record_immutability_triggers")
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS kvselect_record_nodelete")
        cursor.execute("DELETE FROM selection_decisionrecord")
        for statement in triggers.SQLITE:
            if "kvselect_record_nodelete" in statement:
                cursor.execute(statement)


def test_a_restart_during_the_render_retries_the_write_not_the_render(
    selection, architect, monkeypatch, settings, tmp_path, removable_records
):
    settings.MEDIA_ROOT = tmp_path
    monkeypatch.setattr(outage, "BACKOFF_FIRST_S", 0.01)
    record = DecisionRecord.objects.create(
        selection=selection, version=1, status=DecisionRecord.Status.APPROVED, created_by=architect, snapshot={}
    )
    renders = []
    monkeypatch.setattr(
        pdf,
        "render_record",
        lambda context: renders.append(1) or SimpleNamespace(pdf=b"%PDF-1.7 x", signature_boxes={}),
    )
    monkeypatch.setattr(signing, "prepare_signature_fields", lambda data, boxes: data)
    selects = []
    real = DecisionRecord.objects.select_for_update

    def select_for_update(*args, **kwargs):
        selects.append(1)
        if len(selects) == 1:
            raise OperationalError("terminating connection due to administrator command")
        return real(*args, **kwargs)

    monkeypatch.setattr(DecisionRecord.objects, "select_for_update", select_for_update)
    stored = rendering.render_pdf(record)
    assert renders == [1] and len(selects) == 2  # rendered once, written on the second try
    assert stored.pdf and DecisionRecord.objects.get(pk=record.pk).pdf_sha256 == stored.pdf_sha256 != ""
