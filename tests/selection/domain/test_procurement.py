"""The procurement summary's rules: fit per constraint, budget, test gaps, open items, readiness."""

import pytest

from selection.domain import procurement
from selection.domain.records import RecordContextError, build_record_context
from tests.support.record_context import sample_project_checks, sample_record_context, sample_summary

CONSTRAINTS = {
    "peak_concurrency": 200,
    "gpu_count_budget": 4,
    "ttft_p95_ms": 800.0,
    "tpot_p95_ms": 60.0,
    "max_input_tokens": 4096,
    "throughput_target_tokens_s": None,
}


def metric(value, *runs, evidence="MEASURED"):
    return {"value": value, "run_ids": list(runs), "evidence": evidence}


def by_key(rows):
    return {row["key"]: row for row in rows}


def test_each_constraint_passes_or_fails_on_the_measured_figure_with_its_run():
    rows = by_key(
        procurement.constraint_fit(
            CONSTRAINTS,
            {
                "sustainable_concurrency_per_gpu": metric(60.0, "12"),  # need 200 / 4 = 50 per GPU
                "ttft_p95_ms": metric(700.0, "12"),
                "tpot_p95_ms": metric(41.0, "12"),
                "kv_headroom_at_target": metric(0.14, "12"),
            },
        )
    )
    assert rows["concurrency"]["status"] == "pass" and rows["concurrency"]["required"] == 50.0
    assert rows["concurrency"]["runs"] == ["12"]
    assert rows["ttft"]["status"] == "pass" and rows["ttft"]["observed"] == 700.0
    assert rows["tpot"]["status"] == "pass"
    assert rows["memory_headroom"]["status"] == "fail"  # below the 20 % headroom rule


def test_a_figure_outside_its_limit_fails_whatever_its_verdicts_say():
    """The walk's N2: TTFT p95 51,329 ms against a 1,500 ms budget was "not validated" because the
    run's budget verdict was inconclusive. Measured and outside the limit is a fail."""
    metrics = {"ttft_p95_ms": metric(51329.0, "29"), "tpot_p95_ms": metric(59.6, "29")}
    verdicts = {"29": {"ttft_p95_within_budget": "inconclusive", "tpot_p95_within_budget": "insufficient_data"}}
    rows = by_key(
        procurement.constraint_fit({**CONSTRAINTS, "ttft_p95_ms": 1500.0, "tpot_p95_ms": 50.0}, metrics, verdicts)
    )
    assert rows["ttft"]["status"] == "fail" and rows["tpot"]["status"] == "fail"
    missed = {row["key"]: row for row in procurement.shortfalls(list(rows.values()))}
    assert round(missed["ttft"]["factor"]) == 34 and missed["tpot"]["factor"] == pytest.approx(59.6 / 50)


def test_a_compound_claim_passes_only_when_each_part_does():
    """ "Concurrency within the latency budget: pass" stood above "TTFT p95: not validated" (the demo)."""
    metrics = {"sustainable_concurrency_per_gpu": metric(60.0, "12"), "ttft_p95_ms": metric(500.0, "12")}
    verdicts = {"12": {"ttft_p95_within_budget[long]": "insufficient_data", "concurrency_held": "pass"}}
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, metrics, verdicts))
    assert rows["ttft"]["status"] == "not_validated"
    assert rows["concurrency"]["status"] == "not_validated" and rows["concurrency"]["own_status"] == "pass"
    assert ["ttft", "not_validated"] in rows["concurrency"]["parts"] and ["tpot", "not_validated"] in rows[
        "concurrency"
    ]["parts"]  # no TPOT figure at all
    metrics["ttft_p95_ms"] = metric(900.0, "12")  # over the 800 ms budget
    metrics["tpot_p95_ms"] = metric(40.0, "12")
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, metrics, {"12": {"concurrency_held": "pass"}}))
    assert rows["concurrency"]["status"] == "fail" and rows["concurrency"]["parts"] == [["ttft", "fail"]]
    missed = procurement.shortfalls(list(rows.values()))
    assert [m["key"] for m in missed] == ["concurrency", "ttft"]
    assert missed[0]["factor"] is None  # its own figure is within the limit: a part failed it
    metrics["ttft_p95_ms"] = metric(700.0, "12")
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, metrics, {"12": {"concurrency_held": "pass"}}))
    assert rows["concurrency"]["status"] == "pass" and rows["concurrency"]["parts"] == []


def test_a_constraint_without_a_measured_figure_is_not_validated_never_passed():
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, {"ttft_p95_ms": metric(None, "12")}))
    assert rows["ttft"]["status"] == "not_validated" and rows["ttft"]["runs"] == []
    assert rows["context"]["status"] == "not_validated"
    assert "throughput" not in rows  # the sheet states no throughput target: nothing to fit


def test_a_figure_beside_a_verdict_that_did_not_settle_is_not_validated_and_beside_a_failed_one_fails():
    """The demo's record once said "concurrency within budget: pass" beside "Concurrency stress:
    inconclusive": the fit row reads its run's verdicts on the same behaviour."""
    metrics = {
        "sustainable_concurrency_per_gpu": metric(60.0, "12"),
        "ttft_p95_ms": metric(500.0, "12"),
        "tpot_p95_ms": metric(40.0, "12"),
    }
    verdicts = {"12": {"concurrency_held": "inconclusive", "ttft_p95_within_budget": "pass", "zero_errors": "pass"}}
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, metrics, verdicts))
    assert rows["concurrency"]["status"] == "not_validated" and rows["concurrency"]["observed"] == 60.0
    assert rows["concurrency"]["unsettled"] == [["12", "concurrency_held", "inconclusive"]]
    assert rows["ttft"]["status"] == "pass" and rows["ttft"]["unsettled"] == []
    # every load point's verdict counts; another run's verdicts do not; a failed one fails the row
    verdicts = {"12": {"ttft_p95_within_budget[resume]": "fail"}, "13": {"concurrency_held": "fail"}}
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, metrics, verdicts))
    assert rows["ttft"]["status"] == "fail" and rows["ttft"]["unsettled"][0][1] == "ttft_p95_within_budget[resume]"
    assert rows["concurrency"]["own_status"] == "pass"  # run 12 wrote no concurrency verdict: the figure speaks
    assert rows["concurrency"]["status"] == "fail"  # but its TTFT part failed
    verdicts = {"12": {"concurrency_held": "pass"}}
    assert by_key(procurement.constraint_fit(CONSTRAINTS, metrics, verdicts))["concurrency"]["status"] == "pass"


def test_a_simulated_figure_keeps_its_provenance():
    rows = by_key(procurement.constraint_fit(CONSTRAINTS, {"tpot_p95_ms": metric(30.0, "3", evidence="SIMULATED")}))
    assert rows["tpot"]["status"] == "pass" and rows["tpot"]["simulated"] is True


def test_gpu_fit_is_the_configuration_against_the_budget():
    assert procurement.gpu_fit(CONSTRAINTS, 2)["status"] == "pass"
    assert procurement.gpu_fit(CONSTRAINTS, 8)["status"] == "fail"


def test_the_team_against_documented_complexity_is_never_more_than_not_validated():
    row = procurement.team_fit(3, "high")
    assert row["status"] == "not_validated" and row["documented"] == "high" and row["observed"] is None
    assert procurement.team_fit(None, "low") is None


def test_cost_per_million_tokens_is_missing_without_the_metric():
    assert procurement.cost_per_mtok({}) is None
    assert procurement.cost_per_mtok({"cost_per_mtok": metric(0.84, "12")}) == {
        "value": 0.84,
        "runs": ["12"],
        "simulated": False,
    }


@pytest.mark.parametrize(
    ("amount", "currency", "problems"),
    [
        (None, "", {}),
        ("48000", "USD", {}),
        (None, "USD", {"monthly_budget": procurement.BUDGET_NEEDS_AMOUNT}),
        ("48000", "", {"budget_currency": procurement.BAD_CURRENCY}),
        ("48000", "usd", {"budget_currency": procurement.BAD_CURRENCY}),
        ("0", "EUR", {"monthly_budget": procurement.BUDGET_OUT_OF_RANGE}),
        ("nan", "EUR", {"monthly_budget": procurement.BUDGET_OUT_OF_RANGE}),
        ("lots", "EUR", {"monthly_budget": procurement.BUDGET_NOT_A_NUMBER}),
    ],
)
def test_budget_and_currency_are_stated_together(amount, currency, problems):
    assert procurement.budget_problems(amount, currency) == problems


def test_test_gaps_name_failed_inconclusive_and_unrun_tests_in_order():
    gaps = procurement.test_gaps(
        ["concurrency_stress", "swap_recovery", "prefix_reuse", "isolation"],
        {"concurrency_stress": "pass", "swap_recovery": "fail", "prefix_reuse": "inconclusive"},
    )
    assert gaps == [
        {"test": "swap_recovery", "outcome": "fail"},
        {"test": "prefix_reuse", "outcome": "inconclusive"},
        {"test": "isolation", "outcome": "not_exercised"},
    ]


def test_a_test_the_engines_cache_model_rules_out_is_never_an_open_risk():
    """Issue 34 item 1: llama.cpp's resident slots make the KV-release verdicts not applicable, by design."""
    gaps = procurement.test_gaps(
        ["concurrency_stress", "swap_recovery"], {"concurrency_stress": "not_applicable", "swap_recovery": "fail"}
    )
    assert gaps == [{"test": "swap_recovery", "outcome": "fail"}]


def test_every_not_ready_becomes_an_open_item_with_its_confirming_owner():
    items = procurement.open_items_from_checks(sample_project_checks())
    assert [(i["key"], i["owner_roles"], i["note"]) for i in items] == [
        ("readiness.logs", ["platform"], "error logs not yet queryable per tenant")
    ]


@pytest.mark.parametrize(
    ("status", "reason", "field"),
    [("waived", "  ", "reason"), ("resolved", "", "reason"), ("reopened", "because", "status")],
)
def test_closing_an_item_needs_resolved_or_waived_and_a_reason(status, reason, field):
    assert field in procurement.decision_problems(status, reason)


def test_open_items_block_procurement_in_the_record_context():
    context = sample_record_context(simulated=False, n_charts=0)
    context["summary"] = sample_summary(open_items=2)
    built = build_record_context(context)
    assert built["summary"]["unresolved"] == 2 and built["summary"]["blockers"] == ["open_items"]
    for item in context["summary"]["open_items"]:
        item.update(status="waived", reason="logs per tenant arrive with the pilot's gateway", decided_by="Priya")
    built = build_record_context(context)
    assert built["summary"]["unresolved"] == 0 and built["summary"]["blockers"] == []


def test_a_waived_item_without_its_reason_is_refused():
    context = sample_record_context(simulated=False, n_charts=0)
    context["summary"] = sample_summary(open_items=1)
    context["summary"]["open_items"][0]["status"] = "waived"
    with pytest.raises(RecordContextError, match=r"summary.open_items\[0\]: a waived item needs its reason"):
        build_record_context(context)
