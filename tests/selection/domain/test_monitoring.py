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
    dcgm = {monitoring.DCGM_GPU_UTIL, monitoring.DCGM_FB_USED, monitoring.DCGM_FB_FREE}
    for group in monitoring.alert_rules(operations)["groups"]:
        for rule in group["rules"]:
            used = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{job=", rule["expr"]))
            used = {re.sub(r"_(bucket|sum)$", "", name) for name in used} - {"up"} - dcgm
            assert used <= names, (rule["alert"], used - names)
            assert rule["labels"]["record"] == "DR-2026-0007-v2" and rule["labels"]["engine"] == slug


def test_thresholds_come_from_the_record():
    rules = {
        r["alert"]: r
        for r in monitoring.alert_rules(operations_for("vllm", ttft_p95_ms=800.0, tpot_p95_ms=60.0))["groups"][0][
            "rules"
        ]
    }
    assert rules["KVCacheHeadroomUsed"]["expr"].endswith("> 0.8")  # the record's 20 % headroom
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
    assert rules["ErrorRateHigh"]["expr"].endswith("> 0.01")  # the staged rollout's 1 % gate
    assert 'http_requests_total{job="vllm", status="5xx"}' in rules["ErrorRateHigh"]["expr"]
    assert rules["ThroughputLow"]["expr"].startswith("(sum by (instance) (rate(vllm:generation_tokens_total")
    assert "DCGM_FI_DEV_GPU_UTIL" in rules["GPUIdleWhileQueueing"]["expr"]
    assert "vllm:kv_offload_cpu_cache_usage_perc" in rules["KVOffloadTierHeadroomUsed"]["expr"]


def test_a_length_no_long_context_run_served_is_called_planned_not_validated():
    rows = {row["signal"]: row for row in monitoring.plan_signals(operations_for("vllm", max_input_validated=False))}
    rule = rows["request_length"]["rules"][0]
    assert rule["alert"] == "RequestsBeyondPlannedLength" and rule["expr"].endswith("> 4096")
    said = monitoring.render(rows["request_length"]["threshold"])
    assert "planned maximum input of 4,096 tokens" in said and "not validated" in said
    assert "validated 4,096" not in said


def test_every_alert_names_the_records_watcher_for_its_area():
    operations = operations_for("vllm")
    operations["watchers"] = {"capacity": "王芳", "cost": "Finance: 陈静", "stability": "Ana Silva"}
    rules = monitoring.alert_rules(operations)["groups"][0]["rules"]
    by_alert = {rule["alert"]: rule for rule in rules}
    assert by_alert["KVCacheHeadroomUsed"]["annotations"]["description"].endswith("Watcher: 王芳.")
    assert by_alert["GPUIdleWhileQueueing"]["annotations"]["description"].endswith("Watcher: Finance: 陈静.")
    assert by_alert["TTFTOverBudget"]["annotations"]["description"].endswith("Watcher: Ana Silva.")
    for rule in rules:
        area = monitoring.SIGNAL_WATCH[rule["labels"]["signal"]]
        assert rule["labels"]["watch"] == area
        assert rule["annotations"]["action"] == monitoring.SIGNAL_ACTIONS[rule["labels"]["signal"]]
        assert ("runbook" in rule["annotations"]) == (rule["labels"]["severity"] == "critical")


def test_a_signal_without_a_metric_or_a_threshold_has_a_row_but_no_rule():
    rows = {row["signal"]: row for row in monitoring.plan_signals(operations_for("llama-cpp"))}
    assert set(rows) == {signal for signal, _ in monitoring.SIGNALS}
    assert rows["memory"]["metric"] is None and rows["memory"]["rules"] == []
    assert "watch its logs" in monitoring.render(rows["ttft"]["threshold"])
    assert rows["oom_errors"]["rules"] == [] and "counts no failed requests" in monitoring.render(
        rows["oom_errors"]["threshold"]
    )
    assert [r["alert"] for r in rows["engine_up"]["rules"]] == ["EngineDown"]
    assert rows["error_rate"]["rules"] == [] and rows["swap"]["rules"] == []
    unbudgeted = operations_for("vllm", ttft_p95_ms=None, prefix_hit_ratio_validated=None)
    rows = {row["signal"]: row for row in monitoring.plan_signals(unbudgeted)}
    assert rows["ttft"]["rules"] == [] and rows["ttft"]["panels"]
    assert rows["cache_hit_rate"]["rules"] == [] and "no hit rate was validated" in monitoring.render(
        rows["cache_hit_rate"]["threshold"]
    )


def test_fragmentation_alerts_on_the_engines_own_gauge_where_it_exports_one():
    operations = operations_for("vllm")
    operations["metrics"] = dict(
        operations["metrics"], fragmentation={"metric": "kvsim:fragmentation_ratio", "type": "gauge"}
    )
    row = next(r for r in monitoring.plan_signals(operations) if r["signal"] == "fragmentation")
    assert row["metric"] == "kvsim:fragmentation_ratio" and row["rules"][0]["expr"].endswith("> 0.2")
    planned = operations_for("vllm", validated_concurrency=None, planned_concurrency=64)
    row = next(r for r in monitoring.plan_signals(planned) if r["signal"] == "fragmentation")
    assert row["rules"] and "half the planned 64, not validated" in monitoring.render(row["threshold"])


@pytest.mark.parametrize("slug, version", ENGINES)
def test_promtool_accepts_the_rules(slug, version, tmp_path):
    need_promtool()
    path = tmp_path / "alerts.yml"
    path.write_text(yaml.safe_dump(monitoring.alert_rules(operations_for(slug, version)), sort_keys=False))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# ------------------------------------------------------------------ every rule fires, and holds, under promtool

SERIES = {"job": None, "instance": "a"}  # the engine's job is filled in per engine


def _labels(job: str, extra: dict | None = None) -> str:
    pairs = {"job": job, "instance": "a", **(extra or {})}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _counter(per_minute: float) -> str:
    return f"0+{per_minute:g}x60"


def _gauge(value: float) -> str:
    return f"{value:g}x60"


def _histogram(metric: str, job: str, where_s: float) -> list[dict]:
    """A histogram whose every observation (10 a minute) falls just under `where_s`."""
    series = []
    for le in (0.01, 0.1, 0.4, 1.0, 2.0, 10.0, 1000.0, 2000.0, 5000.0, 8192.0, 100000.0, "+Inf"):
        inside = le == "+Inf" or float(le) >= where_s
        series.append(
            {"series": f"{metric}_bucket{_labels(job, {'le': str(le)})}", "values": _counter(10 if inside else 0)}
        )
    return series


def _role(operations: dict, role: str) -> dict:
    return operations["metrics"][role]


def _role_series(operations: dict, role: str, values: str, extra: dict | None = None) -> dict:
    entry = _role(operations, role)
    name = entry["metric"] + ("_sum" if entry["type"] == "histogram" else "")
    return {"series": name + _labels(operations["job"], {**entry.get("labels", {}), **(extra or {})}), "values": values}


def _dcgm(util: float) -> dict:
    return {"series": f'{monitoring.DCGM_GPU_UTIL}{{job="{monitoring.DCGM_JOB}", gpu="0"}}', "values": _gauge(util)}


def scenarios(operations: dict) -> dict:
    """Per alert: (input series that fire it, input series that do not) at the sample record's thresholds."""
    job, m = operations["job"], operations["metrics"]
    kind = {role: entry["type"] for role, entry in m.items()}
    out = {
        "KVCacheHeadroomUsed": lambda bad: [_role_series(operations, "kv_usage", _gauge(0.9 if bad else 0.5))],
        "KVCacheNearlyFull": lambda bad: [_role_series(operations, "kv_usage", _gauge(0.97 if bad else 0.9))],
        "KVOffloadTierHeadroomUsed": lambda bad: [
            _role_series(operations, "offload_usage", _gauge(0.9 if bad else 0.3))
        ],
        "KVCachePreemptions": lambda bad: [
            _role_series(
                operations,
                "preemptions",
                (_counter(5 if bad else 0)) if kind.get("preemptions") == "counter" else _gauge(2 if bad else 0),
            )
        ],
        "KVCacheFragmented": lambda bad: [
            _role_series(operations, "kv_usage", _gauge(0.9)),
            _role_series(operations, "running", _gauge(1 if bad else 150)),
        ],
        "QueueWaitHigh": lambda bad: _histogram(m["queue_wait"]["metric"], job, 1.0 if bad else 0.01),
        "RequestsQueueing": lambda bad: [_role_series(operations, "queue_length", _gauge(3 if bad else 0))],
        "TTFTOverBudget": lambda bad: _histogram(m["ttft"]["metric"], job, 2.0 if bad else 0.1),
        "TPOTOverBudget": lambda bad: _histogram(m["tpot"]["metric"], job, 1.0 if bad else 0.01),
        "RequestsBeyondValidatedLength": lambda bad: _histogram(
            m["request_length"]["metric"], job, 8192 if bad else 1000
        ),
        "RequestsBeyondPlannedLength": lambda bad: _histogram(
            m["request_length"]["metric"], job, 8192 if bad else 1000
        ),
        "ThroughputLow": lambda bad: [
            _role_series(operations, "generation_tokens", _counter(6000 if bad else 600000)),
            _role_series(operations, "queue_length", _gauge(3)),
        ],
        "GPUIdleWhileQueueing": lambda bad: [
            _dcgm(10 if bad else 90),
            _role_series(operations, "queue_length", _gauge(3)),
        ],
        "EngineDown": lambda bad: [{"series": f"up{_labels(job)}", "values": _gauge(0 if bad else 1)}],
    }
    if "cache_hits" in m:
        out["PrefixCacheHitRateLow"] = lambda bad: [
            _role_series(operations, "cache_hits", _counter(10 if bad else 90)),
            _role_series(operations, "cache_queries", _counter(100)),
        ]
    elif "cache_hit_rate" in m:
        out["PrefixCacheHitRateLow"] = lambda bad: [
            _role_series(operations, "cache_hit_rate", _gauge(0.1 if bad else 0.9))
        ]
    if "errors" in m:
        failing = _counter(1) if kind["errors"] in ("counter", "histogram") else "0+1x60"
        out["RequestsFailing"] = lambda bad: [_role_series(operations, "errors", failing if bad else _gauge(0))]
    if "errors" in m and "requests" in m:
        same = m["errors"]["metric"] == m["requests"]["metric"]

        def error_rate(bad: bool) -> list[dict]:
            failed = _role_series(operations, "errors", _counter(10 if bad else 0))
            if same:  # one metric, the failures picked by their labels: the rest answered fine
                ok = {key: "2xx" for key in m["errors"].get("labels", {})}
                return [failed, {"series": m["requests"]["metric"] + _labels(job, ok), "values": _counter(100)}]
            return [failed, _role_series(operations, "requests", _counter(110))]

        out["ErrorRateHigh"] = error_rate
    return out


def expected_labels(rule: dict, job: str) -> dict:
    """The labels a firing alert carries: the rule's, and those its expression keeps."""
    labels = dict(rule["labels"])
    if rule["expr"].startswith("up{"):
        labels.update(job=job, instance="a")
    elif rule["expr"].startswith("(sum by (instance)"):
        labels["instance"] = "a"
    return labels


@pytest.mark.parametrize("slug, version", ENGINES)
def test_every_rule_fires_past_its_threshold_and_holds_inside_it(slug, version, tmp_path):
    """Each exported rule, under `promtool test rules`: one case that fires it at the record's threshold
    and one that does not, with the engine's own metric names (and DCGM's)."""
    need_promtool()
    operations = operations_for(slug, version, validated_output_tokens_per_s=1000.0)
    rules = monitoring.alert_rules(operations)["groups"][0]["rules"]
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(monitoring.alert_rules(operations), sort_keys=False))
    cases = scenarios(operations)
    tests = []
    for rule in rules:
        assert rule["alert"] in cases, f"{slug}: no promtool case for {rule['alert']}"
        for bad in (True, False):
            exp = [{"exp_labels": expected_labels(rule, operations["job"]), "exp_annotations": rule["annotations"]}]
            tests.append(
                {
                    "interval": "1m",
                    "input_series": cases[rule["alert"]](bad),
                    "alert_rule_test": [
                        {"eval_time": "45m", "alertname": rule["alert"], "exp_alerts": exp if bad else []}
                    ],
                }
            )
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert len(tests) == 2 * len(rules) and len(rules) >= 2


@pytest.mark.parametrize("slug, version", ENGINES)
def test_the_dashboard_follows_grafanas_dashboard_json_model(slug, version):
    board = monitoring.dashboard(operations_for(slug, version))
    jsonschema.validate(board, SCHEMA)
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert 'job="$job"' in target["expr"] or 'job="$dcgm_job"' in target["expr"]


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
