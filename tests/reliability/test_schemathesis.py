"""Schemathesis against the OpenAPI schema, served by a live test server, as an authenticated architect with data.

Every operation gets a bounded number of generated requests (path ids drawn partly from real
objects so that the happy paths are reached): no 5xx, and responses match the schema.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate
from selection.models import DecisionRecord, OpenItem

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

EXAMPLES_PER_OPERATION = 8


@pytest.fixture
def records_removable_at_teardown(django_db_blocker):
    """Generated requests may send a record to review; the immutability triggers then (rightly) block
    the flush after this transactional test. Remove such records with the triggers briefly off."""
    yield
    import importlib

    from django.db import connection

    guard = importlib.import_module("selection.migrations.0003_record_immutability_triggers")
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE selection_decisionrecord DISABLE TRIGGER kvselect_record_guard")
            cursor.execute("DELETE FROM selection_recordapproval")
            cursor.execute("DELETE FROM selection_recordcomment")
            cursor.execute("DELETE FROM selection_openitem")
            cursor.execute("DELETE FROM selection_decisionrecord")
            cursor.execute("ALTER TABLE selection_decisionrecord ENABLE TRIGGER kvselect_record_guard")
        else:
            for sql in guard.SQLITE_REVERSE:
                cursor.execute(sql)
            cursor.execute("DELETE FROM selection_recordapproval")
            cursor.execute("DELETE FROM selection_recordcomment")
            cursor.execute("DELETE FROM selection_openitem")
            cursor.execute("DELETE FROM selection_decisionrecord")
            for sql in guard.SQLITE:
                cursor.execute(sql)


@pytest.fixture
def populated(records_removable_at_teardown, selection_with_constraints, architect, engines):
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={
            "engine": engines["vllm"],
            "engine_version": "0.11.0",
            "endpoint_url": "http://127.0.0.1:9/",
            "model_name": "m",
        },
    )
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="upload",
        status="succeeded",
        evidence="MEASURED",
        tool="vllm-bench",
    )
    RunPoint.objects.create(run=run, index=0, concurrency=8, ttft_ms={"p50": 10.0, "p95": 20.0})
    record = DecisionRecord.objects.create(
        selection=selection_with_constraints, version=1, decision="vLLM", created_by=architect
    )
    item = OpenItem.objects.create(record=record, key="readiness.logs", section="readiness", item="logs")
    return {
        "selection_id": selection_with_constraints.pk,
        "candidate_id": candidate.pk,
        "run_id": run.pk,
        "record_id": record.pk,
        "item_id": item.pk,
        "pk": selection_with_constraints.pk,
        "slug": "vllm",
    }


@pytest.mark.django_db(transaction=True)
def test_api_conforms_to_its_schema_and_never_answers_5xx(populated, architect, live_server):
    client = APIClient()
    client.force_authenticate(architect)
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document = response.json() if response["Content-Type"].endswith("json") else None
    if document is None:
        import yaml

        document = yaml.safe_load(response.content)
    schema = schemathesis.openapi.from_dict(document)
    headers = {"Authorization": f"Token {Token.objects.create(user=architect).key}"}
    ids = [v for v in populated.values() if isinstance(v, int)]

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    failures = []
    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy(), data=st.data())
        def check(case, data):
            for name in list(case.path_parameters or {}):
                if name in populated and data.draw(st.booleans()):
                    case.path_parameters[name] = populated[name]
                elif isinstance(case.path_parameters[name], int) and data.draw(st.booleans()):
                    case.path_parameters[name] = data.draw(st.sampled_from(ids))
            case.call_and_validate(
                base_url=live_server.url,
                headers=headers,
                checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
            )

        try:
            check()
        except Exception as exc:  # collect all operations' failures, then report them together
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:3000]}")
    assert not failures, "\n\n".join(failures)
