"""Anything produced against the simulator is SIMULATED end to end: `manage.py validate` against a
simulator process (declared as nothing in particular), the upload of its file through the API,
and a file that claims MEASURED but shows the simulator."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun
from benchmarks.uploads.tokens import create_upload_token
from selection.candidates.services import add_candidate
from tests.support.servers import port_open, stop_process, wait_until_ready

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def simulator_process():
    """`python -m benchmarks.simulator` in its own process, as the demo and a user start it."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.simulator", "--port", str(port), "--time-scale", "8"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_ready(process, lambda: port_open(port), what="simulator")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


@pytest.fixture
def simulated_file(simulator_process, tmp_path, settings):
    """The native result `validate` writes against the simulator with the default `--engine auto`."""
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1"]
    out = tmp_path / "simulated.json"
    call_command(
        "validate",
        *("--endpoint", simulator_process, "--model", "kvsim-llama-3.1-8b", "--test", "concurrency_stress"),
        *("--concurrency", "2", "--duration", "1", "--param", "settle_s=0.2", "--param", "warmup_s=0"),
        *("--out", str(out)),
        verbosity=0,
    )
    return out


def test_validate_against_a_simulator_process_writes_simulated(simulated_file):
    document = json.loads(simulated_file.read_text())
    assert document["evidence"] == "SIMULATED"
    recognised = document["metadata"]["simulator"]
    assert recognised == {"declared": False, "endpoint_header": True, "metrics_mark": True}
    assert document["metadata"]["engine_metrics"]["simulated"] is True


@pytest.fixture
def token_client(selection_with_constraints, architect, engines):
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    _, raw = create_upload_token(selection=candidate.selection, user=architect, name="ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client, candidate


def _upload(client, candidate, content: bytes):
    return client.post(
        f"/api/v1/candidates/{candidate.pk}/results/",
        {"file": SimpleUploadedFile("result.json", content), "test": "concurrency_stress"},
    )


def test_the_upload_of_a_simulated_validate_file_stays_simulated(simulated_file, token_client):
    client, candidate = token_client
    response = _upload(client, candidate, simulated_file.read_bytes())
    assert response.status_code == 201, response.json()
    assert response.json()["evidence"] == "SIMULATED"
    assert BenchmarkRun.objects.get(pk=response.json()["id"]).is_simulated


def test_a_simulator_file_that_claims_measured_is_stored_simulated_with_the_reason(simulated_file, token_client):
    client, candidate = token_client
    document = json.loads(simulated_file.read_text())
    document["evidence"] = "MEASURED"  # edited by hand, or written by an older kvselect
    response = _upload(client, candidate, json.dumps(document).encode())
    assert response.status_code == 201, response.json()
    run = BenchmarkRun.objects.get(pk=response.json()["id"])
    assert run.evidence == "SIMULATED"
    assert any("Stored as SIMULATED although the file says MEASURED" in note for note in run.notes)
