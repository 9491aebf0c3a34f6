"""The architect's web pages: rendering, permissions, validation, audit and language."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from selection.candidates.services import add_candidate
from selection.domain.messages import render
from selection.models import AuditEntry, Candidate, Constraints, CriterionWeight, Gate, Membership, Selection, Team
from selection.secretbox import decrypt
from selection.setup.services import accept_scenario, set_gates
from tests.support.builders import VALID_CONSTRAINTS, make_engine, make_selection, make_user, with_constraints

pytestmark = pytest.mark.django_db

PAGES = ["selection:detail", "selection:constraints", "selection:scenario", "selection:gates", "selection:candidates"]


@pytest.fixture
def team():
    return Team.objects.create(name="Platform")


@pytest.fixture
def architect(team):
    return make_user("alice", team)


@pytest.fixture
def reviewer(team):
    return make_user("rita", team, Membership.Role.REVIEWER)


@pytest.fixture
def selection(architect, team):
    return make_selection(architect, team)


@pytest.fixture
def configured(selection, architect):
    """A selection with its constraints filled in (scenario inferred, preset weights set)."""
    return with_constraints(selection, architect, kv_precisions_allowed=["bf16", "fp8"])


def url(name, selection, *args):
    return reverse(name, args=[selection.pk, *args])


# --- rendering ------------------------------------------------------------------------------


def test_login_required(client, selection):
    response = client.get(url("selection:detail", selection))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_login_page_renders(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200 and 'name="password"' in response.content.decode()


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_for_a_team_member(client, architect, configured, page):
    make_engine()
    client.force_login(architect)
    response = client.get(url(page, configured))
    assert response.status_code == 200
    body = response.content.decode()
    assert configured.name in body and "htmx.min.js" in body


@pytest.mark.parametrize("page", PAGES)
def test_pages_render_before_constraints_exist(client, architect, selection, page):
    client.force_login(architect)
    assert client.get(url(page, selection)).status_code == 200


def test_dashboard_lists_selections_with_next_step(client, architect, configured, team):
    other = make_selection(architect, team, name="Batch labelling")
    client.force_login(architect)
    body = client.get(reverse("selection:dashboard")).content.decode()
    assert "Support bot" in body and "Batch labelling" in body
    assert "Review the scenario" in body  # configured, not accepted
    assert "Fill in the constraints" in body  # the other one
    assert reverse("selection:constraints", args=[other.pk]) in body


def test_dashboard_empty_state_explains_what_to_do(client, architect):
    client.force_login(architect)
    body = client.get(reverse("selection:dashboard")).content.decode()
    assert "No selections yet" in body and reverse("selection:create") in body


def test_dashboard_hides_other_teams_selections(client, selection):
    stranger = make_user("eve", Team.objects.create(name="Other"))
    client.force_login(stranger)
    assert selection.name not in client.get(reverse("selection:dashboard")).content.decode()


# --- permissions ----------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_another_teams_selection_is_404(client, selection, page):
    stranger = make_user("eve", Team.objects.create(name="Other"))
    client.force_login(stranger)
    assert client.get(url(page, selection)).status_code == 404
    assert client.post(url(page, selection), {}).status_code == 404


@pytest.mark.parametrize(
    "page",
    [
        "selection:constraints",
        "selection:scenario",
        "selection:gates",
        "selection:candidates",
        "selection:scenario-accept",
    ],
)
def test_reviewer_can_view_but_not_post(client, reviewer, configured, page):
    client.force_login(reviewer)
    if page != "selection:scenario-accept":
        response = client.get(url(page, configured))
        assert response.status_code == 200
        assert "You can view this selection but not change it" in response.content.decode()
    before = AuditEntry.objects.count()
    assert client.post(url(page, configured), {"justification": "x"}).status_code == 403
    assert AuditEntry.objects.count() == before


def test_reviewer_cannot_edit_a_candidate(client, reviewer, architect, configured):
    candidate = add_candidate(
        selection=configured, user=architect, data={"engine": make_engine(), "engine_version": "0.8.5"}
    )
    client.force_login(reviewer)
    assert client.post(url("selection:candidate-edit", configured, candidate.pk), {"label": "x"}).status_code == 403


def test_create_offers_only_teams_where_user_is_architect(client, team):
    user = make_user("bob", team, Membership.Role.REVIEWER)
    own = Team.objects.create(name="Own team")
    Membership.objects.create(team=own, user=user, role=Membership.Role.ARCHITECT)
    client.force_login(user)
    body = client.get(reverse("selection:create")).content.decode()
    assert "Own team" in body and ">Platform<" not in body
    response = client.post(
        reverse("selection:create"),
        {"name": "x", "team": team.pk, "business_owner": user.pk, "platform_owner": user.pk, "security_owner": user.pk},
    )
    assert response.status_code == 200 and not Selection.objects.exists()
    assert "Select a valid choice" in response.content.decode()


# --- create ---------------------------------------------------------------------------------


def test_create_selection_with_owners(client, architect, team):
    owner = make_user("olga", team, Membership.Role.REVIEWER)
    security = make_user("sid", team, Membership.Role.REVIEWER)
    client.force_login(architect)
    response = client.post(
        reverse("selection:create"),
        {
            "name": "Contract review",
            "description": "Long docs",
            "team": team.pk,
            "business_owner": owner.pk,
            "platform_owner": architect.pk,
            "security_owner": security.pk,
            "observer": owner.pk,  # the observer may be one of the owners
        },
    )
    selection = Selection.objects.get(name="Contract review")
    assert response.status_code == 302 and response["Location"] == url("selection:constraints", selection)
    assert (selection.business_owner, selection.observer, selection.created_by) == (owner, owner, architect)
    assert selection.audit.filter(action="selection.created").exists()


def test_create_refuses_one_person_in_two_owner_roles(client, architect, team):
    owner = make_user("olga", team, Membership.Role.REVIEWER)
    client.force_login(architect)
    response = client.post(
        reverse("selection:create"),
        {
            "name": "Contract review",
            "team": team.pk,
            "business_owner": owner.pk,
            "platform_owner": architect.pk,
            "security_owner": owner.pk,
        },
    )
    body = response.content.decode()
    assert response.status_code == 200 and not Selection.objects.filter(name="Contract review").exists()
    form = response.context["form"]
    assert list(form.errors) == ["security_owner"]
    assert "olga is already the business owner" in form.errors["security_owner"][0]
    assert "three different people" in body


def test_create_rejects_owner_outside_the_team(client, architect, team):
    other = Team.objects.create(name="Other")
    Membership.objects.create(team=other, user=architect, role=Membership.Role.ARCHITECT)
    outsider = make_user("otto", other)
    client.force_login(architect)
    response = client.post(
        reverse("selection:create"),
        {
            "name": "x",
            "team": team.pk,
            "business_owner": outsider.pk,
            "platform_owner": architect.pk,
            "security_owner": architect.pk,
        },
    )
    assert response.status_code == 200 and not Selection.objects.exists()
    assert response.context["form"].errors["business_owner"] == ["otto is not a member of team Platform"]


# --- constraints ----------------------------------------------------------------------------


def test_constraints_save_infers_scenario_and_audits(client, architect, selection):
    client.force_login(architect)
    response = client.post(url("selection:constraints", selection), VALID_CONSTRAINTS)
    assert response.status_code == 302 and response["Location"] == url("selection:scenario", selection)
    selection.refresh_from_db()
    assert selection.scenario == "A" and selection.constraints.kv_precisions_allowed == ["bf16", "fp8"]
    assert selection.weights.count() == 7
    assert selection.audit.filter(action="constraints.changed", field="max_input_tokens").exists()


def test_constraints_error_names_the_field_and_saves_nothing(client, architect, selection):
    client.force_login(architect)
    response = client.post(url("selection:constraints", selection), {**VALID_CONSTRAINTS, "avg_input_tokens": "9000"})
    assert response.status_code == 200
    assert "must not exceed max input tokens (8192)" in response.context["form"].errors["avg_input_tokens"][0]
    body = response.content.decode()
    assert "Nothing was saved" in body and 'href="#id_avg_input_tokens"' in body
    assert not Constraints.objects.exists() and not selection.audit.filter(action="constraints.changed").exists()


def test_constraints_bad_edit_keeps_the_saved_values(client, architect, configured):
    client.force_login(architect)
    audit_before = AuditEntry.objects.count()
    response = client.post(
        url("selection:constraints", configured),
        {**VALID_CONSTRAINTS, "peak_concurrency": "5", "multi_turn": "on", "average_turns": ""},
    )
    assert "average_turns" in response.context["form"].errors
    assert Constraints.objects.get().peak_concurrency == 64 and AuditEntry.objects.count() == audit_before


def test_constraints_page_groups_fields_with_units(client, architect, selection):
    client.force_login(architect)
    body = client.get(url("selection:constraints", selection)).content.decode()
    for heading in ["Traffic", "Context", "Multi-turn", "Latency budget", "Hardware &amp; cost", "Team &amp; model"]:
        assert f"<legend>{heading}</legend>" in body
    assert '<span class="unit">GiB</span>' in body and 'type="checkbox" name="kv_precisions_allowed"' in body


# --- scenario and weights -------------------------------------------------------------------


def weight_post(selection, **values):
    data = {w.criterion: round(w.weight * 100, 3) for w in selection.weights.all()}
    data.update(values)
    return data


def test_scenario_page_shows_reasons_mix_and_weights(client, architect, configured):
    client.force_login(architect)
    body = client.get(url("selection:scenario", configured)).content.decode()
    assert escape(render(configured.scenario_reasons[0])) in body
    assert "Accept scenario A" in body and "Memory allocation strategy" in body and "Preset" in body


def test_scenario_page_says_kv_management_is_not_decisive_for_short_low_concurrency_traffic(
    client, architect, selection
):
    quiet = with_constraints(selection, architect, peak_concurrency=4, avg_input_tokens=500, avg_output_tokens=100)
    client.force_login(architect)
    body = client.get(url("selection:scenario", quiet)).content.decode()
    assert "data-kv-not-decisive" in body and "KV-cache management is not decisive" in body
    assert any("not decisive" in render(r) for r in quiet.scenario_reasons)  # the reason, kept for the record


def test_scenario_page_of_high_concurrency_traffic_makes_no_such_claim(client, architect, configured):
    client.force_login(architect)
    assert "data-kv-not-decisive" not in client.get(url("selection:scenario", configured)).content.decode()


def test_accept_scenario(client, architect, configured):
    client.force_login(architect)
    response = client.post(url("selection:scenario-accept", configured))
    assert response.status_code == 302 and response["Location"] == url("selection:gates", configured)
    configured.refresh_from_db()
    assert configured.scenario_accepted and configured.audit.filter(action="scenario.accepted").exists()


def test_weights_edit_without_justification_saves_nothing(client, architect, configured):
    client.force_login(architect)
    before = dict(CriterionWeight.objects.values_list("criterion", "weight"))
    response = client.post(
        url("selection:scenario", configured), weight_post(configured, cache_reuse=50, justification="  ")
    )
    assert response.status_code == 200
    assert response.context["form"].errors["justification"] == ["A justification is required to change weights."]
    assert dict(CriterionWeight.objects.values_list("criterion", "weight")) == before
    assert not AuditEntry.objects.filter(action="weight.changed").exists()


def test_weights_edit_normalises_and_audit_appears(client, architect, configured):
    client.force_login(architect)
    values = {c: 1 for c in configured.weights.values_list("criterion", flat=True)}
    values["cache_reuse"] = 4
    response = client.post(url("selection:scenario", configured), {**values, "justification": "Prefix-heavy traffic"})
    assert response.status_code == 302
    weight = CriterionWeight.objects.get(criterion="cache_reuse")
    assert weight.weight == pytest.approx(0.4) and weight.source == "edited"
    body = client.get(url("selection:scenario", configured)).content.decode()
    assert "Prefix-heavy traffic" in body and "weight.changed" in body and "alice" in body
    assert "40.0%" in body  # shown normalised as a percentage


def test_weights_negative_value_names_the_criterion(client, architect, configured):
    client.force_login(architect)
    response = client.post(
        url("selection:scenario", configured), weight_post(configured, cache_reuse=-1, justification="why")
    )
    assert "cache_reuse" in response.context["form"].errors
    assert not CriterionWeight.objects.filter(source="edited").exists()


def test_weights_all_zero_shows_service_error(client, architect, configured):
    client.force_login(architect)
    zeros = {c: 0 for c in configured.weights.values_list("criterion", flat=True)}
    response = client.post(url("selection:scenario", configured), {**zeros, "justification": "why"})
    errors = str(response.context["form"].non_field_errors())
    assert "At least one weight must be positive." in errors and "weights:" not in errors


# --- gates ----------------------------------------------------------------------------------


def test_gates_save_and_audit(client, architect, configured):
    client.force_login(architect)
    response = client.post(
        url("selection:gates", configured),
        {"use_memory": "on", "threshold_memory": "0.7", "use_scheduling": "on", "threshold_scheduling": "0.5"},
        follow=True,
    )
    assert dict(Gate.objects.values_list("dimension", "threshold")) == {"memory": 0.7, "scheduling": 0.5}
    entry = AuditEntry.objects.get(action="gates.changed")
    assert entry.new == {"memory": 0.7, "scheduling": 0.5} and "gates.changed" in response.content.decode()


def test_gate_warning_shows_with_four_gates(client, architect, configured):
    client.force_login(architect)
    data = {}
    for dim in ["memory", "scheduling", "context", "persistence"]:
        data[f"use_{dim}"], data[f"threshold_{dim}"] = "on", "0.5"
    response = client.post(url("selection:gates", configured), data, follow=True)
    assert Gate.objects.count() == 4
    body = response.content.decode()
    assert 'data-gate-warning role="alert">' in body  # rendered visible, not hidden
    assert "No candidate scores full marks everywhere" in body and "4 gates chosen" in body


def test_no_visible_gate_warning_with_two_gates(client, architect, configured):
    client.force_login(architect)
    response = client.post(
        url("selection:gates", configured),
        {"use_memory": "on", "threshold_memory": "0.7", "use_cost": "on", "threshold_cost": "0.5"},
        follow=True,
    )
    body = response.content.decode()
    assert 'data-gate-warning role="alert" hidden>' in body
    assert "gates chosen: pick 2-3" not in body


def test_gate_threshold_out_of_range_names_the_dimension(client, architect, configured):
    client.force_login(architect)
    response = client.post(url("selection:gates", configured), {"use_memory": "on", "threshold_memory": "1.5"})
    assert response.status_code == 200 and "threshold_memory" in response.context["form"].errors
    assert "Memory allocation and reuse" in response.content.decode() and not Gate.objects.exists()


# --- candidates -----------------------------------------------------------------------------


def candidate_post(engine, **overrides):
    return {
        "engine": engine.pk,
        "engine_version": "0.8.5",
        "label": "vLLM prefix on",
        "launch_flags": "--enable-prefix-caching",
        "endpoint_url": "http://127.0.0.1:8001/v1",
        "metrics_url": "http://127.0.0.1:8001/metrics",
        "api_key": "sk-secret",
        "model_name": "Llama-3.1-8B",
        "gpu_model": "H100",
        "gpu_count": "1",
        "tensor_parallel": "1",
        "kv_precision": "fp8",
        "gpu_pool": "h100",
        **overrides,
    }


def test_add_candidate_encrypts_key_and_never_shows_it(client, architect, configured):
    engine = make_engine()
    client.force_login(architect)
    response = client.post(url("selection:candidates", configured), candidate_post(engine))
    assert response.status_code == 302
    candidate = Candidate.objects.get()
    assert candidate.kv_precision == "fp8" and decrypt(candidate.api_key_encrypted) == "sk-secret"
    body = client.get(url("selection:candidates", configured)).content.decode()
    assert "vLLM prefix on" in body and "sk-secret" not in body and candidate.api_key_encrypted not in body
    assert "0.6.3" in body  # the catalog's documented versions are offered
    edit = client.get(url("selection:candidate-edit", configured, candidate.pk)).content.decode()
    assert "sk-secret" not in edit and 'type="password"' in edit


def test_add_candidate_bad_url_names_the_field(client, architect, configured):
    engine = make_engine()
    client.force_login(architect)
    response = client.post(
        url("selection:candidates", configured), candidate_post(engine, endpoint_url="not a url", gpu_count="0")
    )
    errors = response.context["form"].errors
    assert "endpoint_url" in errors and "gpu_count" in errors and not Candidate.objects.exists()


def test_edit_candidate_keeps_key_unless_replaced(client, architect, configured):
    engine = make_engine()
    client.force_login(architect)
    client.post(url("selection:candidates", configured), candidate_post(engine))
    candidate = Candidate.objects.get()
    response = client.post(
        url("selection:candidate-edit", configured, candidate.pk),
        candidate_post(engine, api_key="", gpu_count="2", tensor_parallel="2", label="vLLM TP2"),
    )
    assert response.status_code == 302
    candidate.refresh_from_db()
    assert candidate.tensor_parallel == 2 and decrypt(candidate.api_key_encrypted) == "sk-secret"
    client.post(
        url("selection:candidate-edit", configured, candidate.pk),
        candidate_post(engine, api_key="", clear_api_key="on"),
    )
    candidate.refresh_from_db()
    assert candidate.api_key_encrypted == ""
    assert AuditEntry.objects.filter(action="candidate.changed").count() == 2


# --- overview -------------------------------------------------------------------------------


def test_overview_ties_it_together(client, architect, configured):
    accept_scenario(selection=configured, user=architect)
    set_gates(selection=configured, user=architect, gates={"memory": 0.6})
    client.force_login(architect)
    body = client.get(url("selection:detail", configured)).content.decode()
    assert "Constraints one-pager" in body and "8192" in body and "Memory allocation and reuse" in body
    assert "Add candidates" in body and reverse("selection:candidates", args=[configured.pk]) in body


# --- language -------------------------------------------------------------------------------


def test_language_switch_to_simplified_chinese(client, architect):
    client.force_login(architect)
    assert 'lang="en"' in client.get(reverse("selection:dashboard")).content.decode()
    response = client.post(reverse("set_language"), {"language": "zh-hans", "next": reverse("selection:dashboard")})
    assert response.status_code == 302
    body = client.get(reverse("selection:dashboard")).content.decode()
    assert '<html lang="zh-hans">' in body
    assert 'value="zh-hans" lang="zh-hans" selected' in body


def test_weights_cannot_be_posted_before_constraints(client, architect, selection):
    client.force_login(architect)
    response = client.post(url("selection:scenario", selection), {"cache_reuse": 1, "justification": "why"})
    assert response.status_code == 302 and response["Location"] == url("selection:constraints", selection)
    assert not CriterionWeight.objects.exists()
