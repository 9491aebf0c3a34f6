"""Operations out, through the record: the three project checks the owners confirm, and a signed record's
alert rules (accepted by promtool) and Grafana dashboard, from the command and the record page."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import CommandError, call_command
from django.urls import reverse

from selection.i18n import person_name
from selection.models import DecisionRecord
from selection.records.pdf import render_record_html
from selection.records.services import start_review
from tests.support import lifecycle

SCHEMA = json.loads((Path(__file__).parents[2] / "support" / "grafana_dashboard.schema.json").read_text())
CHECKS = {
    "decision": "",
    "rationale": "Lowest TTFT at target load.",
    "applies_to": "",
    "does_not_apply_to": "",
    "review_by": "",
    "affected_applications": "support chat\nticket triage",
    "affected_teams": "Customer service",
    "affected_data": "",
    "readiness_permissions": "ready",
    "readiness_permissions_note": "gateway keys per application",
    "readiness_monitoring": "ready",
    "readiness_monitoring_note": "",
    "readiness_logs": "not_ready",
    "readiness_logs_note": "not per tenant yet",
    "readiness_capacity": "not_stated",
    "readiness_capacity_note": "",
    "readiness_rollback": "ready",
    "readiness_rollback_note": "previous pool kept warm",
    "pilot_result": "The pilot's answers fit the support desk.",
    "rollout_stages": "pilot | 5 % | TTFT p95 within 800 ms for 7 days | business owner\n"
    "half | 50 | error rate below 1 % | business owner\nfull | 100 % | no page in 14 days | business owner",
    "security_permissions": "ready",
    "security_permissions_note": "",
    "security_logs": "ready",
    "security_logs_note": "90 days",
    "security_audit_trail": "not_stated",
    "security_audit_trail_note": "",
    "watch_capacity": "Priya",
    "watch_cost": "Finance desk",
    "watch_stability": "",
}


@pytest.fixture
def drafted(client, decided, architect):
    """A draft created on the records page with its project checks, then sent to review."""
    client.force_login(architect)
    response = client.post(reverse("selection:records", args=[decided.pk]), CHECKS)
    assert response.status_code == 302, response.content.decode()[:2000]
    record = DecisionRecord.objects.get(selection=decided)
    return start_review(record=record, user=architect)


@pytest.fixture
def signed(drafted, owners, dev_certs):
    return lifecycle.sign_all(lifecycle.approve_all(drafted, owners), owners, dev_certs)


def test_the_record_carries_the_three_project_checks_for_the_owners_to_confirm(drafted, client):
    checks = drafted.snapshot["project_checks"]
    assert checks["affected"]["applications"] == ["support chat", "ticket triage"]
    assert checks["affected"]["confirmed_by"] == ["business", "platform"]
    readiness = {item["item"]: item["status"] for item in checks["readiness"]["items"]}
    assert readiness == {
        "permissions": "ready",
        "monitoring": "ready",
        "logs": "not_ready",
        "capacity": "not_stated",
        "rollback": "ready",
    }
    stages = checks["acceptance"]["stages"]
    assert [(s["stage"], s["traffic_percent"]) for s in stages] == [("pilot", 5.0), ("half", 50.0), ("full", 100.0)]
    assert checks["security"]["confirmed_by"] == ["security"]
    default = person_name(drafted.selection.observer) or person_name(drafted.selection.platform_owner)
    assert checks["watch"] == {"capacity": "Priya", "cost": "Finance desk", "stability": default}
    assert set(checks["open_items"]) == {"affected.data", "readiness.capacity", "security.audit_trail"}
    html = render_record_html(drafted.snapshot)
    for heading in (
        "Project checks the owners confirm",
        "1. Affected applications, teams and data",
        "2. Platform readiness",
        "3. Business acceptance and the pace of expansion",
        "Security owner's checklist",
        "Who watches after launch",
        "Staged rollout",
    ):
        assert heading in html, heading
    page = client.get(reverse("selection:record", args=[drafted.selection_id, drafted.pk])).content.decode()
    assert "confirms:" in page and "platform readiness" in page and "Open project checks" in page


def test_a_record_without_project_checks_derives_the_stages_and_lists_every_gap(client, decided, architect):
    client.force_login(architect)
    client.post(reverse("selection:records", args=[decided.pk]), {"rationale": "x"})
    record = start_review(record=DecisionRecord.objects.get(selection=decided), user=architect)
    checks = record.snapshot["project_checks"]
    assert checks["acceptance"]["stages_derived"] and checks["acceptance"]["stages"][-1]["traffic_percent"] == 100
    assert "TTFT p95 within 800 ms" in checks["acceptance"]["stages"][0]["gate"]
    assert "readiness.monitoring" in checks["open_items"] and all(checks["watch"].values())


def test_bad_rollout_stages_name_the_line(client, decided, architect):
    client.force_login(architect)
    data = dict(CHECKS, rollout_stages="pilot | 5 % | TTFT | business\nfull | lots | errors | business")
    response = client.post(reverse("selection:records", args=[decided.pk]), data)
    assert response.status_code == 200 and not DecisionRecord.objects.exists()
    assert "line 2: traffic share: not a number, got &#x27;lots&#x27;" in response.content.decode()


def test_a_signed_record_exports_rules_promtool_accepts_and_a_grafana_dashboard(signed, tmp_path):
    assert signed.status == DecisionRecord.Status.SIGNED
    stdout = io.StringIO()
    call_command(
        "export-monitoring", f"DR-{signed.selection_id}-v{signed.version}", "--out", str(tmp_path), stdout=stdout
    )
    alerts, board = tmp_path / "alerts.yml", tmp_path / "dashboard.json"
    assert stdout.getvalue().split() == [str(alerts), str(board)]
    text = alerts.read_text()
    operations = signed.snapshot["operations"]  # the comparison's winner, with its catalog metrics
    assert text.startswith(f"# Prometheus alerting rules for {operations['engine']['name']}")
    assert signed.signed_sha256 in text
    rules = {r["alert"]: r for r in yaml.safe_load(text)["groups"][0]["rules"]}
    assert rules["TTFTOverBudget"]["expr"].endswith("> 0.8")  # the selection's 800 ms budget
    assert operations["metrics"]["kv_usage"]["metric"] in rules["KVCacheHeadroomUsed"]["expr"]
    if shutil.which("promtool"):
        result = subprocess.run(["promtool", "check", "rules", str(alerts)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    jsonschema.validate(json.loads(board.read_text()), SCHEMA)
    call_command("export-monitoring", str(signed.pk), "--out", str(tmp_path / "by-id"), "--job", "llm-prod")
    assert 'job="llm-prod"' in (tmp_path / "by-id" / "alerts.yml").read_text()


def test_the_record_page_offers_both_downloads_once_signed(signed, client):
    client.force_login(signed.created_by)
    page = client.get(reverse("selection:record", args=[signed.selection_id, signed.pk])).content.decode()
    assert "Alert rules (Prometheus)" in page and "Dashboard (Grafana)" in page
    response = client.get(reverse("selection:record-alerts", args=[signed.selection_id, signed.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/yaml"
    assert "alerts.yml" in response["Content-Disposition"]
    response = client.get(reverse("selection:record-dashboard", args=[signed.selection_id, signed.pk]))
    assert response.status_code == 200 and json.loads(response.content)["uid"].startswith("kvselect-dr-")


def test_an_unsigned_record_exports_nothing(drafted, client, tmp_path):
    with pytest.raises(CommandError, match="is in review: alerts and the dashboard are exported from a signed record"):
        call_command("export-monitoring", str(drafted.pk), "--out", str(tmp_path))
    with pytest.raises(CommandError, match="RECORD_ID: no decision record DR-999-v1"):
        call_command("export-monitoring", "DR-999-v1", "--out", str(tmp_path))
    client.force_login(drafted.created_by)
    assert client.get(reverse("selection:record-alerts", args=[drafted.selection_id, drafted.pk])).status_code == 404
    page = client.get(reverse("selection:record", args=[drafted.selection_id, drafted.pk])).content.decode()
    assert "Alert rules (Prometheus)" not in page


def test_the_exports_say_what_the_record_says(signed, tmp_path):
    """Issue 33: alerts.yml and the dashboard carry the record's own headroom (page 1's requirement), its
    validation status for the longest input and, on every alert, the watcher the record names for that
    signal's area (the draft's: capacity Priya, cost the finance desk, stability the observer)."""
    call_command("export-monitoring", str(signed.pk), "--out", str(tmp_path))
    snapshot = signed.snapshot
    rules = yaml.safe_load((tmp_path / "alerts.yml").read_text())["groups"][0]["rules"]
    table = {row["signal"]: row for row in snapshot["rollout"]["monitoring"]}
    headroom = snapshot["rollout"]["headroom"]["percent"]
    fit = next(row for row in snapshot["summary"]["fit"] if row.get("key") == "memory_headroom")
    assert headroom == 20 and "20" in str(fit["required"])
    assert f"the record's {headroom:g} % KV headroom" in (tmp_path / "alerts.yml").read_text()
    watch = snapshot["project_checks"]["watch"]
    assert watch["capacity"] == "Priya" and watch["cost"] == "Finance desk"
    for rule in rules:
        signal = rule["labels"]["signal"]
        owner = table[signal]["owner"]
        assert owner == watch[rule["labels"]["watch"]]
        assert rule["annotations"]["description"].endswith(f"Watcher: {owner}.")
        assert table[signal]["threshold"] in rule["annotations"]["summary"]
        if signal == "memory" and rule["alert"] == "KVCacheHeadroomUsed":
            assert rule["expr"].endswith(f"> {1 - headroom / 100:g}")
    lengths = [rule for rule in rules if rule["labels"]["signal"] == "request_length"]
    validated = snapshot["operations"]["thresholds"]["max_input_validated"]
    for rule in lengths:  # no long-context run in this record: the length is planned, never "validated"
        assert rule["alert"] == ("RequestsBeyondValidatedLength" if validated else "RequestsBeyondPlannedLength")
        assert ("validated" in rule["annotations"]["summary"].split("(")[0]) == validated
    board = json.loads((tmp_path / "dashboard.json").read_text())
    assert f"headroom {headroom:g} %" in board["description"]
