"""Traces in: import on a selection (command and page), review the proposal, accept it into the one-pager."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from benchmarks.traces.formats import read_trace
from benchmarks.traces.proposal import proposal_values, propose_constraints
from benchmarks.traces.stats import ServiceModel, trace_statistics
from benchmarks.traces.synthetic import synthetic_requests, write_trace
from selection.candidates.services import add_candidate
from selection.models import AuditEntry, Constraints, Membership, TraceImport
from selection.traces.services import accept_trace_proposal, import_trace

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def frame():
    return synthetic_requests(800, rate=5.0, seed=21, idle_mean_s=20.0)


@pytest.fixture
def trace_file(tmp_path, frame):
    return write_trace(tmp_path / "production.csv", frame, "kvselect-csv")


def test_import_stores_the_file_its_sha256_statistics_and_proposal(selection_with_constraints, architect, trace_file):
    trace, created = import_trace(selection=selection_with_constraints, user=architect, path=trace_file)
    assert created and trace.format == "kvselect" and trace.rows == 800
    assert len(trace.sha256) == 64 and trace.file.read() == trace_file.read_bytes()
    budget = ServiceModel(ttft_ms=800.0, tpot_ms=60.0)  # the selection's latency budget
    expected = propose_constraints(trace_statistics(read_trace(trace_file), service=budget))
    assert proposal_values(trace.proposal) == proposal_values(expected)
    again, created_again = import_trace(selection=selection_with_constraints, user=architect, path=trace_file)
    assert again.pk == trace.pk and not created_again
    entry = AuditEntry.objects.get(action="trace.imported")
    assert entry.new["sha256"] == trace.sha256 and entry.new["rows"] == 800


def test_accepting_writes_the_proposal_and_audits_from_trace_sha256(selection_with_constraints, architect, trace_file):
    trace, _ = import_trace(selection=selection_with_constraints, user=architect, path=trace_file)
    constraints = accept_trace_proposal(trace=trace, user=architect)
    values = proposal_values(trace.proposal)
    for field, value in values.items():
        assert getattr(constraints, field) == pytest.approx(value) if isinstance(value, float) else value, field
    assert constraints.gpu_model == "H100" and constraints.ttft_p95_ms == 800.0  # untouched by the trace
    changed = AuditEntry.objects.filter(action="constraints.changed", justification=f"from trace {trace.sha256}")
    assert {e.field for e in changed} >= {"peak_concurrency", "request_rate", "multi_turn"}
    trace.refresh_from_db()
    assert trace.status == TraceImport.Status.ACCEPTED and trace.accepted_by == architect
    selection_with_constraints.refresh_from_db()
    assert selection_with_constraints.scenario == "C"  # the trace's sessions make it multi-turn


def test_accepting_needs_a_one_pager_and_an_architect(selection, architect, reviewer, trace_file):
    trace, _ = import_trace(selection=selection, user=architect, path=trace_file)
    with pytest.raises(ValidationError, match="fill in the one-pager first"):
        accept_trace_proposal(trace=trace, user=architect)
    with pytest.raises(PermissionDenied):
        import_trace(selection=selection, user=reviewer, path=trace_file)


def test_a_broken_trace_stores_nothing_and_names_the_line(selection_with_constraints, architect, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,input_tokens,output_tokens\n1,10,2\n2,-4,2\n")
    with pytest.raises(ValidationError) as error:
        import_trace(selection=selection_with_constraints, user=architect, path=bad)
    assert "line 3: input_tokens" in error.value.message_dict["file"][0]
    assert not TraceImport.objects.exists() and not AuditEntry.objects.filter(action="trace.imported").exists()


def test_import_trace_command_prints_the_proposal_and_json(selection_with_constraints, trace_file):
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command(
        "import-trace", str(trace_file), "--selection", str(selection_with_constraints.pk), stdout=stdout, stderr=stderr
    )
    text = stdout.getvalue()
    assert "imported: trace #" in text and "peak_concurrency" in text and "replayed from the arrival times" in text
    assert "100.0%" in stderr.getvalue()  # the progress bar reached the end
    stdout = io.StringIO()
    call_command(
        "import-trace", str(trace_file), "--selection", str(selection_with_constraints.pk), "--json", stdout=stdout
    )
    document = json.loads(stdout.getvalue())
    assert document["created"] is False and document["statistics"]["rows"] == 800
    assert {item["field"] for item in document["proposal"]} >= {"peak_concurrency", "prefix_sharing_ratio", "tenants"}


def test_import_trace_command_names_the_bad_option(selection_with_constraints, tmp_path, trace_file):
    with pytest.raises(CommandError, match="--selection: no selection 999"):
        call_command("import-trace", str(trace_file), "--selection", "999")
    with pytest.raises(CommandError, match="FILE: .*none.csv"):
        call_command("import-trace", str(tmp_path / "none.csv"), "--selection", str(selection_with_constraints.pk))
    with pytest.raises(CommandError, match="is not a mooncake trace"):
        call_command(
            "import-trace", str(trace_file), "--selection", str(selection_with_constraints.pk), "--format", "mooncake"
        )


def test_the_pages_import_review_with_charts_and_accept(client, selection_with_constraints, architect, tmp_path, frame):
    client.force_login(architect)
    pk = selection_with_constraints.pk
    path = write_trace(tmp_path / "azure.csv", frame, "azure")
    response = client.post(
        reverse("selection:traces", args=[pk]),
        {"file": SimpleUploadedFile("azure.csv", path.read_bytes()), "format": ""},
    )
    trace = TraceImport.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("selection:trace", args=[pk, trace.pk])
    page = client.get(response["Location"]).content.decode()
    assert trace.sha256 in page and "<svg" in page and page.count("<figure") == 2
    assert "Peak concurrent requests" in page and "Accept into the one-pager" in page
    response = client.post(reverse("selection:trace-accept", args=[pk, trace.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("selection:constraints", args=[pk])
    assert Constraints.objects.get(selection=selection_with_constraints).peak_concurrency == trace.proposal[0]["value"]
    assert "Propose the traffic fields from a production trace" in client.get(response["Location"]).content.decode()


def test_a_refused_upload_says_why_and_reviewers_only_read(client, selection_with_constraints, architect, reviewer):
    client.force_login(architect)
    pk = selection_with_constraints.pk
    response = client.post(
        reverse("selection:traces", args=[pk]), {"file": SimpleUploadedFile("x.csv", b"when,what\n1,2\n")}
    )
    assert response.status_code == 400 and "not a trace kvselect reads" in response.content.decode()
    client.force_login(reviewer)
    assert client.get(reverse("selection:traces", args=[pk])).status_code == 200
    response = client.post(
        reverse("selection:traces", args=[pk]),
        {"file": SimpleUploadedFile("x.csv", b"timestamp,input_tokens,output_tokens\n0,1,1\n")},
    )
    assert response.status_code == 403


def test_another_teams_trace_is_a_404(client, selection_with_constraints, architect, outsider, trace_file):
    trace, _ = import_trace(selection=selection_with_constraints, user=architect, path=trace_file)
    client.force_login(outsider)
    assert client.get(reverse("selection:trace", args=[selection_with_constraints.pk, trace.pk])).status_code == 404
    assert Membership.objects.filter(user=outsider, team=selection_with_constraints.team).count() == 0


def test_a_gzipped_upload_is_read_as_it_streams_whatever_its_name(
    client, selection_with_constraints, architect, tmp_path
):
    client.force_login(architect)
    body = b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,API log\n"
    response = client.post(
        reverse("selection:traces", args=[selection_with_constraints.pk]),
        {"file": SimpleUploadedFile("../../etc/burst.csv.gz", gzip.compress(body))},
    )
    trace = TraceImport.objects.get()
    assert response.status_code == 302 and trace.format == "burstgpt" and trace.rows == 1
    assert trace.file.name.endswith(".csv.gz") and ".." not in trace.file.name


# --- issue 29: logs out of order or ragged, proposals that state their assumptions ---------------------


def test_a_log_in_completion_order_imports_with_the_statistics_of_the_ordered_log(
    selection_with_constraints, architect, tmp_path, frame
):
    ordered = write_trace(tmp_path / "ordered.csv", frame, "kvselect-csv")
    ends = (frame["timestamp"] + frame["e2e_ms"] / 1000).to_numpy()
    lines = ordered.read_text().splitlines(keepends=True)
    shuffled = tmp_path / "completion.csv"
    shuffled.write_text(lines[0] + "".join(lines[1 + i] for i in sorted(range(len(frame)), key=lambda i: ends[i])))
    trace, _ = import_trace(selection=selection_with_constraints, user=architect, path=shuffled)
    reference, _ = import_trace(selection=selection_with_constraints, user=architect, path=ordered)
    assert trace.statistics["out_of_order_rows"] > 0 and reference.statistics["out_of_order_rows"] == 0
    assert proposal_values(trace.proposal) == proposal_values(reference.proposal)


@pytest.mark.parametrize("where", [3, 30_000])
def test_a_ragged_row_is_a_clear_error_on_the_command_and_the_page(
    client, selection_with_constraints, architect, tmp_path, where
):
    rows = "".join(f"{i},{10 + i % 5},3\n" for i in range(where - 2))
    bad = tmp_path / "ragged.csv"
    bad.write_text("timestamp,input_tokens,output_tokens\n" + rows + "9,10\n" + "10,10,3\n" * 5)
    expected = f"line {where}: column 3 ('output_tokens'): missing"
    with pytest.raises(CommandError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        call_command("import-trace", str(bad), "--selection", str(selection_with_constraints.pk))
    client.force_login(architect)
    response = client.post(
        reverse("selection:traces", args=[selection_with_constraints.pk]),
        {"file": SimpleUploadedFile("ragged.csv", bad.read_bytes())},
    )
    assert response.status_code == 400 and expected in response.content.decode().replace("&#x27;", "'")
    assert not TraceImport.objects.exists()


def test_the_proposal_states_how_concurrency_rate_and_prefix_sharing_were_taken(
    client, selection_with_constraints, architect, engines, tmp_path, frame
):
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "model_name": "meta-llama/Llama-3.1-8B"},
    )
    candidate.measured_capacity = {"token_capacity": 4096, "source": "engine log of run 1"}
    candidate.save(update_fields=["measured_capacity"])
    observed = write_trace(tmp_path / "observed.csv", frame, "kvselect-csv")
    trace, _ = import_trace(selection=selection_with_constraints, user=architect, path=observed)
    basis = {item["field"]: item["basis"] for item in trace.proposal}
    assert "its own end-to-end latency in the trace" in basis["peak_concurrency"]["message"]
    budget_peak = trace.statistics["concurrency"]["at_service_model"]["peak"]
    assert basis["peak_concurrency"]["params"]["peak"] == budget_peak != trace.statistics["concurrency"]["peak"]
    assert "busiest minute" in basis["request_rate"]["message"]
    assert basis["request_rate"]["params"]["minute"] == f"{trace.statistics['rate']['peak_minute_rps']:.3g}"
    pool = trace.statistics["prefix"]["pools"][str(candidate)]
    assert pool["capacity_tokens"] == 4096 and pool["source"] == "measured"
    assert pool["sharing_ratio"] < trace.statistics["prefix"]["sharing_ratio"]  # 8 blocks hold little
    assert "an unbounded cache" in basis["prefix_sharing_ratio"]["message"]
    assert f"{str(candidate)} (4,096): {pool['sharing_ratio']:.1%}" in basis["prefix_sharing_ratio"]["params"]["pools"]
    azure = write_trace(tmp_path / "azure.csv", frame, "azure")
    trace, _ = import_trace(selection=selection_with_constraints, user=architect, path=azure)
    basis = {item["field"]: item["basis"] for item in trace.proposal}
    assert basis["peak_concurrency"]["message"].startswith("assumed: the trace records no latency")
    assert basis["peak_concurrency"]["params"] == {"ttft": "800", "tpot": "60"}  # the selection's budget
    client.force_login(architect)
    page = client.get(reverse("selection:trace", args=[selection_with_constraints.pk, trace.pk])).content.decode()
    assert "another budget gives another figure" in page and "busiest minute" in page
