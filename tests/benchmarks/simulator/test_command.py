"""`manage.py simulate --trace FILE --out FILE` writes a SIMULATED native result."""

import io
import json

from django.core.management import call_command

from benchmarks.simulator.offline import TraceRecord, write_trace


def test_simulate_command_runs_a_trace_offline(tmp_path):
    trace, out = tmp_path / "trace.csv", tmp_path / "result.json"
    write_trace(trace, [TraceRecord(i * 0.1, 300, 20, prefix_id="sys", prefix_tokens=128) for i in range(10)])
    stdout = io.StringIO()
    call_command(
        "simulate",
        "--trace",
        str(trace),
        "--out",
        str(out),
        "--profile",
        "static",
        "--gpu",
        "A100-80G",
        "--num-blocks",
        "500",
        "--max-model-len",
        "2048",
        stdout=stdout,
    )
    summary = json.loads(stdout.getvalue())
    assert summary["evidence"] == "SIMULATED" and summary["requests_completed"] == 10
    document = json.loads(out.read_text())
    assert document["evidence"] == "SIMULATED"
    assert document["metadata"]["engine"] == "kvsim/static" and document["metadata"]["hardware"] == "A100-80G"
