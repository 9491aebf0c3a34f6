"""Cost against the budget and growth (issue 36 items 1-2): the chosen configuration's monthly cost at
the target load on page 1, the same figures in the record's body (section 7) and on the comparison for
every candidate, with their runs; an offload tier is costed; growth states replicas, GPUs and limits."""

from decimal import Decimal

import pytest
from django.urls import reverse

from selection.records.context import build_context
from selection.records.services import create_draft
from selection.scoring.economics import economics_headline, economics_table
from selection.scoring.services import compute_scores
from selection.selectors import compared_candidates
from selection.setup.services import save_constraints
from tests.support.records import demo_like_selection

pytestmark = pytest.mark.django_db


@pytest.fixture
def priced(architect, team, owners, engines, settings, tmp_path):
    """The demo-like selection with a 12,000 EUR budget, a host-memory price, growth x1.5 in 12 months
    and vLLM started with an 8 GiB CPU offload tier."""
    selection = demo_like_selection(architect, team, owners, engines, settings, tmp_path)
    selection.monthly_budget, selection.budget_currency = Decimal("12000"), "EUR"
    selection.save()
    save_constraints(
        selection=selection,
        user=architect,
        data={"host_memory_cost_per_gib_month": Decimal("3.00"), "growth_factor": 1.5, "growth_horizon_months": 12},
    )
    vllm = selection.candidates.get(engine__slug="vllm")
    vllm.launch_flags = "--kv-offloading-size 8"
    vllm.save()
    selection.refresh_from_db()
    return selection


def rows_of(table: dict) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for part in table["tables"]:
        for row in part["rows"]:
            rows.setdefault(row["key"], []).extend(row["cells"])
    return rows


def test_the_monthly_cost_counts_the_gpus_and_the_offload_tiers_host_memory(priced):
    score = compute_scores(priced)
    candidates = list(compared_candidates(priced))
    rows = rows_of(economics_table(priced, score, candidates))
    vllm = [c.display_name for c in candidates].index(priced.candidates.get(engine__slug="vllm").display_name)
    # 32 concurrent at a held 32 per GPU, 1,500 tokens/s at 1,500 per GPU: one replica of one GPU
    assert rows["replicas"][vllm]["text"] == "1"
    assert rows["monthly"][vllm]["text"] == "1,849.00 EUR"  # 2.50 x 730 h + 8 GiB x 3.00
    assert "8.0 GiB host memory (--kv-offloading-size 8)" in rows["monthly"][vllm]["meta"]
    assert rows["budget"][vllm] == {
        "text": "within the budget by 10,151.00 EUR (85%)",
        "meta": "",
        "status": "pass",
    }
    assert rows["sustainable"][vllm]["text"] == "32.0"
    assert "31.5 in flight" in rows["sustainable"][vllm]["meta"]  # the level held, as the scores read it
    others = [i for i in range(len(candidates)) if i != vllm]
    assert all(rows["monthly"][i]["text"] == "1,825.00 EUR" for i in others)  # no offload tier: GPUs only


def test_an_offload_tier_without_a_host_memory_price_is_not_costed_as_free(priced, architect):
    save_constraints(selection=priced, user=architect, data={"host_memory_cost_per_gib_month": None})
    priced.refresh_from_db()
    score = compute_scores(priced)
    vllm = priced.candidates.get(engine__slug="vllm")
    headline = economics_headline(priced, vllm, score)
    assert headline["status"] == "not_derivable" and headline["monthly"] == ""
    assert "the constraints state no host memory price for the offload tier" in headline["verdict"]


def test_a_cost_above_the_budget_says_by_how_much(priced):
    priced.monthly_budget = Decimal("1000")
    priced.save()
    score = compute_scores(priced)
    headline = economics_headline(priced, priced.candidates.get(engine__slug="vllm"), score)
    assert headline["status"] == "over"
    assert headline["verdict"] == "over the budget by 849.00 EUR (85%)"


def test_growth_states_replicas_gpus_and_where_the_kv_pool_and_the_latency_budget_run_out(priced):
    score = compute_scores(priced)
    headline = economics_headline(priced, priced.candidates.get(engine__slug="vllm"), score)
    assert headline["growth_label"] == "At the expected growth (×1.5 in 12 months)"
    assert headline["growth"] == "2 replica(s), 2 GPU(s), 3,698.00 EUR per month"
    assert headline["growth_status"] == "within"
    assert "KV pool runs out at ×" in headline["limits"] and "capacity plan (not measured)" in headline["limits"]
    assert "latency budget at ×1.0 or more (the highest load tested was within the budget)" in headline["limits"]


def test_page_one_and_the_body_and_the_comparison_say_the_same(priced, architect, client):
    record = create_draft(selection=priced, user=architect, rationale="cost")
    context = build_context(record)
    page_one = context["summary"]["economics"]
    body = rows_of(context["economics"])
    winner_monthly = body["monthly"][0]["text"]  # the chosen candidate is the first column
    assert page_one["monthly"] == winner_monthly and page_one["verdict"] == body["budget"][0]["text"]
    # page 1's cost per million output tokens appears in the body with its run
    mtok = context["summary"]["cost_per_mtok"]
    assert body["cost_per_mtok"][0]["text"] == mtok["value"]
    assert mtok["runs"][0] in body["cost_per_mtok"][0]["meta"]
    client.force_login(architect)
    page = client.get(reverse("selection:comparison", args=[priced.pk])).content.decode()
    assert "Cost against the budget and growth" in page
    assert winner_monthly in page and page_one["verdict"] in page


def test_the_chinese_cost_table_sets_the_offload_flag_as_code_and_the_sources_in_wide_brackets(
    priced, architect, client, settings
):
    """Issue 37 item 2: the flag in the cost formula is typed as it stands (code, which the crawler
    does not read as English); a limit's source sits in Chinese brackets, not ASCII ones."""
    compute_scores(priced)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    client.force_login(architect)
    page = client.get(reverse("selection:comparison", args=[priced.pk])).content.decode()
    cost = page[page.index('id="cost-title"') : page.index('id="sens-title"')]
    assert "主机内存（<code>--kv-offloading-size 8</code>）" in cost
    row = cost[cost.index('data-row="kv_limit"') : cost.index("</tr>", cost.index('data-row="kv_limit"'))]
    assert "（容量规划（未实测））" in row or "（引擎自述" in row, row
