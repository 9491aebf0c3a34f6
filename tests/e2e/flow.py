"""Steps of the flow that both the English and the Chinese browser tests drive (language-neutral selectors)."""

from __future__ import annotations

import re

from tests.e2e.conftest import OWNERS

SCENARIOS = {"A", "B", "C", "D", "E", "F"}


def fill_constraints(page) -> None:
    values = {
        "peak_concurrency": "64",
        "request_rate": "10",
        "avg_input_tokens": "1500",
        "p95_input_tokens": "3000",
        "max_input_tokens": "8192",
        "avg_output_tokens": "300",
        "max_output_tokens": "1024",
        "ttft_p95_ms": "800",
        "tpot_p95_ms": "50",
        "e2e_p95_ms": "20000",
        "gpu_model": "H100",
        "gpu_memory_gib": "80",
        "gpu_count_budget": "8",
        "cost_per_gpu_hour": "2.50",
        "ops_team_size": "3",
    }
    for name, value in values.items():
        page.fill(f"#id_{name}", value)
    target = page.locator("#id_target_model")
    if target.evaluate("e => e.tagName") == "SELECT":
        target.select_option("Llama-3.1-8B")
    else:
        target.fill("Llama-3.1-8B")
    for precision in ("bf16", "fp8"):
        page.check(f"input[name=kv_precisions_allowed][value={precision}]")


def create_selection(page, base_url: str, people, name: str) -> int:
    page.goto(f"{base_url}/selections/new/")
    page.fill("#id_name", name)
    page.fill("#id_description", "Customer-support chat on Llama-3.1-8B")
    page.select_option("#id_team", str(people["team"].pk))
    for role in OWNERS:
        page.select_option(f"#id_{role}_owner", str(people[role].pk))
    page.click("form.card button[type=submit].btn--primary")
    page.wait_for_url(re.compile(r"/selections/\d+/constraints/$"))
    return int(re.search(r"/selections/(\d+)/", page.url).group(1))


def save_constraints(page, pk: int) -> str:
    """Submit the one-pager; the app infers the scenario and shows it with its reasons. Returns its letter."""
    page.click("form .actions button[type=submit].btn--primary")
    page.wait_for_url(re.compile(rf"/selections/{pk}/scenario/$"))
    scenario = page.inner_text(".scenario-id").strip()
    assert scenario in SCENARIOS, scenario
    assert page.locator("ul.reasons li").count() >= 1
    return scenario


def accept_scenario(page, pk: int) -> None:
    page.click(f"form[action$='/selections/{pk}/scenario/accept/'] button[type=submit]")
    page.wait_for_url(re.compile(rf"/selections/{pk}/gates/$"))
