"""Operations out, pure: alert rules and a dashboard from the record's `operations`, for every engine of the
catalog. `promtool check rules` accepts the rules and `promtool test rules` shows they fire at the
record's thresholds; the dashboard validates against Grafana's dashboard JSON model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from selection.domain import catalog, monitoring
from selection.domain.catalog import CatalogError, parse_catalog
from tests.support.record_context import sample_operations

SCHEMA = json.loads((Path(__file__).parents[2] / "support" / "grafana_dashboard.schema.json").read_text())
PROMTOOL = shutil.which("promtool")
IN_CI = os.environ.get("CI", "").lower() == "true"


def need_promtool():
    if PROMTOOL is None:
        if IN_CI:
            pytest.fail("promtool is missing: scripts/install-system-deps.sh installs Debian's prometheus package")
        pytest.skip("promtool not installed (Debian package prometheus; scripts/install-system-deps.sh)")


def operations_for(slug: str, version: str | None = None, **thresholds) -> dict:
    caps = catalog.capabilities(slug, version)
    operations = sample_operations(simulated=False)
    operations["engine"] = {"slug": slug, "version": caps["version"], "name": f"{slug} {caps['version']}"}
    operations["job"] = slug
    operations["metrics"] = caps["monitoring_metrics"] or {}
    operations["thresholds"].update(thresholds)
    return operations


ENGINES = [(e.slug, v.version) for e in catalog.default_catalog().engines for v in e.versions]


@pytest.mark.parametrize("slug, version", ENGINES)
def test_every_rule_reads_only_the_engines_catalog_metrics(slug, version):
    operations = operations_for(slug, version)
    names = {entry["metric"] for entry in operations["metrics"].values()}
    for group in monitoring.alert_rules(operations)["groups"]:
        for rule in group["rules"]:
            used = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{job=", rule["expr"]))
            used = {re.sub(r"_bucket$", "", name) for name in used} - {"up"}
            assert used <= names, (rule["alert"], used - names)
            assert rule["labels"]["record"] == "DR-2026-0007-v2" and rule["labels"]["engine"] == slug


def test_thresholds_come_from_the_record():
    rules = {
        r["alert"]: r
        for r in monitoring.alert_rules(operations_for("vllm", ttft_p95_ms=800.0, tpot_p95_ms=60.0))["groups"][0][
            "rules"
        ]
    }
    assert rules["KVCacheHeadroomUsed"]["expr"].endswith("> 0.75")  # 25 % headroom
    assert (
        rules["TTFTOverBudget"]["expr"].endswith("> 0.8")
        and "vllm:time_to_first_token_seconds_bucket" in (rules["TTFTOverBudget"]["expr"])
    )
    assert rules["TPOTOverBudget"]["expr"].endswith("> 0.06")
    assert rules["QueueWaitHigh"]["expr"].endswith("> 0.4")  # half the TTFT budget
    assert rules["PrefixCacheHitRateLow"]["expr"].endswith("< 0.31")  # half the validated 0.62
    assert rules["RequestsBeyondValidatedLength"]["expr"].endswith("> 4096")
    assert "vllm:prefix_cache_hits_total" in rules["PrefixCacheHitRateLow"]["expr"]
    assert rules["EngineDown"]["expr"] == 'up{job="vllm"} == 0'


def test_a_signal_without_a_metric_or_a_threshold_has_a_row_but_no_rule():
    rows = {row["signal"]: row for row in monitoring.plan_signals(operations_for("llama-cpp"))}
    assert set(rows) == {signal for signal, _ in monitoring.SIGNALS}
    assert rows["memory"]["metric"] is None and rows["memory"]["rules"] == []
    assert "watch its logs" in monitoring.render(rows["ttft"]["threshold"])
    assert [r["alert"] for r in rows["oom_errors"]["rules"]] == ["EngineDown"]
    unbudgeted = operations_for("vllm", ttft_p95_ms=None, prefix_hit_ratio_validated=None)
    rows = {row["signal"]: row for row in monitoring.plan_signals(unbudgeted)}
    assert rows["ttft"]["rules"] == [] and rows["ttft"]["panels"]
    assert rows["cache_hit_rate"]["rules"] == [] and "no hit rate was validated" in monitoring.render(
        rows["cache_hit_rate"]["threshold"]
    )


@pytest.mark.parametrize("slug, version", ENGINES)
def test_promtool_accepts_the_rules(slug, version, tmp_path):
    need_promtool()
    path = tmp_path / "alerts.yml"
    path.write_text(yaml.safe_dump(monitoring.alert_rules(operations_for(slug, version)), sort_keys=False))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rule_tests_fire_at_the_records_thresholds(tmp_path):
    need_promtool()
    rules = monitoring.alert_rules(operations_for("vllm"))
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    expected = {rule["alert"]: rule["annotations"] for rule in rules["groups"][0]["rules"]}
    labels = '{job="vllm", instance="a"}'
    tests = {
        "rule_files": ["alerts.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"vllm:kv_cache_usage_perc{labels}", "values": "0.70x6 0.80x10"},
                    {"series": f"up{labels}", "values": "1x5 0x5"},
                ],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "KVCacheHeadroomUsed", "exp_alerts": []},
                    {
                        "eval_time": "14m",
                        "alertname": "KVCacheHeadroomUsed",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "signal": "memory",
                                    "engine": "vllm",
                                    "record": "DR-2026-0007-v2",
                                    "evidence": "MEASURED",
                                },
                                "exp_annotations": expected["KVCacheHeadroomUsed"],
                            }
                        ],
                    },
                    {"eval_time": "14m", "alertname": "KVCacheNearlyFull", "exp_alerts": []},
                    {"eval_time": "4m", "alertname": "EngineDown", "exp_alerts": []},
                    {
                        "eval_time": "8m",
                        "alertname": "EngineDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "signal": "oom_errors",
                                    "engine": "vllm",
                                    "record": "DR-2026-0007-v2",
                                    "evidence": "MEASURED",
                                    "job": "vllm",
                                    "instance": "a",
                                },
                                "exp_annotations": expected["EngineDown"],
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("slug, version", ENGINES)
def test_the_dashboard_follows_grafanas_dashboard_json_model(slug, version):
    board = monitoring.dashboard(operations_for(slug, version))
    jsonschema.validate(board, SCHEMA)
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert 'job="$job"' in target["expr"]


def test_a_simulated_record_says_so_in_the_dashboard_and_the_labels():
    operations = operations_for("vllm")
    operations["evidence"] = "SIMULATED"
    board = monitoring.dashboard(operations)
    assert board["title"].endswith("(SIMULATED)") and "SIMULATED" in board["tags"]
    assert board["panels"][0]["options"]["content"].startswith("SIMULATED evidence")
    rules = monitoring.alert_rules(operations)["groups"][0]["rules"]
    assert {rule["labels"]["evidence"] for rule in rules} == {"SIMULATED"}


def test_the_schema_refuses_what_grafana_refuses():
    board = monitoring.dashboard(operations_for("vllm"))
    board["panels"][1]["gridPos"]["w"] = 30
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(board, SCHEMA)


def test_the_catalog_refuses_a_monitoring_metric_of_the_wrong_type():
    raw = json.loads(catalog.DEFAULT_CATALOG_PATH.read_text())
    raw["engines"][0]["versions"][0]["features"]["monitoring_metrics"]["value"]["ttft"]["type"] = "gauge"
    with pytest.raises(CatalogError, match="monitoring_metrics.value: ttft.type: must be histogram"):
        parse_catalog(raw)


def test_every_signal_has_its_plan():
    assert set(monitoring.SIGNAL_PLANS) == {signal for signal, _title in monitoring.SIGNALS}
