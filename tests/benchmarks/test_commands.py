import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks.models import BenchmarkRun
from selection.candidates.services import add_candidate

FIXTURES = Path(__file__).parent / "formats" / "fixtures"


def test_validate_writes_the_native_format_that_ingest_accepts(
    mock_engine, tmp_path, selection_with_constraints, architect, engines
):
    out = tmp_path / "result.json"
    call_command(
        "validate",
        "--endpoint",
        mock_engine.url,
        "--model",
        "mock",
        "--test",
        "concurrency_stress",
        "--concurrency",
        "4",
        "--duration",
        "1",
        "--param",
        "settle_s=0.2",
        "--param",
        "warmup_s=0",
        "--out",
        str(out),
        verbosity=0,
    )
    document = json.loads(out.read_text())
    assert document["schema"] == "kvselect.result/1" and document["evidence"] == "MEASURED"
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    call_command("ingest", str(out), "--candidate", str(candidate.pk), "--test", "concurrency_stress")
    run = BenchmarkRun.objects.get()
    assert run.format == "native" and run.points.get().requests_completed > 0


@pytest.mark.reliability
def test_validate_refuses_targets_outside_the_allow_list():
    with pytest.raises(CommandError, match="--endpoint"):
        call_command("validate", "--endpoint", "http://169.254.169.254", "--model", "m", "--test", "stability")


def test_ingest_names_the_bad_option(selection_with_constraints, architect, engines, tmp_path):
    with pytest.raises(CommandError, match="FILE: .* does not exist"):
        call_command("ingest", str(tmp_path / "x.json"), "--candidate", "999", "--test", "custom")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(CommandError, match="--candidate"):
        call_command("ingest", str(tmp_path / "x.json"), "--candidate", "999", "--test", "custom")
