import pytest
from rest_framework.test import APIClient

from selection.models import Engine
from tests.support.builders import SAMPLE_CONSTRAINTS


@pytest.fixture
def api(architect):
    client = APIClient()
    client.force_authenticate(architect)
    return client


@pytest.fixture
def engine(db):
    return Engine.objects.create(
        slug="vllm", name="vLLM", catalog_version="test", data={"versions": [{"version": "0.11"}]}
    )


def test_create_selection_and_put_constraints(api, architect, team, selection_owners):
    response = api.post(
        "/api/v1/selections/",
        {
            "name": "Docs QA",
            "team": team.name,
            "business_owner": "alice",
            "platform_owner": "pat",
            "security_owner": "sid",
            "observer": "alice",  # the observer may be one of the owners
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    sid = response.json()["id"]
    response = api.put(
        f"/api/v1/selections/{sid}/constraints/", dict(SAMPLE_CONSTRAINTS, max_input_tokens=130000), format="json"
    )
    assert response.status_code == 200, response.json()
    detail = api.get(f"/api/v1/selections/{sid}/").json()
    assert detail["scenario"] == "B"
    assert any("long documents" in r for r in detail["scenario_reasons"])


def test_one_person_cannot_hold_two_owner_roles(api, team, selection, selection_owners):
    """Separation of duties: creating or changing a selection names the field that repeats an owner."""
    payload = {"name": "Dup", "team": team.name, "business_owner": "bea", "platform_owner": "pat"}
    response = api.post("/api/v1/selections/", dict(payload, security_owner="bea"), format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["security_owner"] and "already the business owner" in str(response.json())
    response = api.patch(f"/api/v1/selections/{selection.pk}/", {"platform_owner": "sid"}, format="json")
    assert response.status_code == 400 and "platform_owner" in response.json()
    selection.refresh_from_db()
    assert selection.platform_owner == selection_owners["platform"]
    response = api.patch(f"/api/v1/selections/{selection.pk}/", {"observer": "sid"}, format="json")
    assert response.status_code == 200 and response.json()["observer"] == "sid"
    change = selection.audit.get(action="selection.changed")
    assert change.new == {"observer": "sid"} and change.old == {"observer": None}


def test_constraints_errors_are_json_naming_the_field(api, selection):
    response = api.put(
        f"/api/v1/selections/{selection.pk}/constraints/", dict(SAMPLE_CONSTRAINTS, peak_concurrency=-5), format="json"
    )
    assert response.status_code == 400
    assert "peak_concurrency" in response.json()
    response = api.put(
        f"/api/v1/selections/{selection.pk}/constraints/",
        dict(SAMPLE_CONSTRAINTS, avg_output_tokens=5000, max_output_tokens=100),
        format="json",
    )
    assert response.status_code == 400
    assert "avg_output_tokens" in response.json()


def test_weights_put_requires_justification(api, selection_with_constraints):
    url = f"/api/v1/selections/{selection_with_constraints.pk}/weights/"
    response = api.put(url, {"weights": {"cache_reuse": 1}}, format="json")
    assert response.status_code == 400 and "justification" in response.json()
    response = api.put(
        url, {"weights": {"cache_reuse": 1, "cost_control": 3}, "justification": "cost first"}, format="json"
    )
    assert response.status_code == 200
    weights = {w["criterion"]: w["weight"] for w in response.json()}
    assert weights == pytest.approx({"cache_reuse": 0.25, "cost_control": 0.75})


def test_gates_more_than_three_carry_a_warning(api, selection_with_constraints):
    url = f"/api/v1/selections/{selection_with_constraints.pk}/gates/"
    response = api.put(url, {"gates": {"memory": 0.5, "scheduling": 0.5, "cost": 0.5, "context": 0.5}}, format="json")
    assert response.status_code == 200
    assert "full marks" in response["Warning"]
    response = api.put(url, {"gates": {"latency": 0.5}}, format="json")
    assert response.status_code == 400 and "gates" in response.json()


def test_add_candidate_keeps_api_key_write_only(api, selection_with_constraints, engine):
    url = f"/api/v1/selections/{selection_with_constraints.pk}/candidates/"
    response = api.post(
        url,
        {"engine": "vllm", "engine_version": "0.11.0", "endpoint_url": "http://127.0.0.1:8100", "api_key": "sk-secret"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert "api_key" not in body and body["has_api_key"] is True
    assert "sk-secret" not in str(api.get(url).json())


def test_another_teams_selection_is_404(selection_with_constraints, outsider):
    client = APIClient()
    client.force_authenticate(outsider)
    sid = selection_with_constraints.pk
    for url in (
        f"/api/v1/selections/{sid}/",
        f"/api/v1/selections/{sid}/constraints/",
        f"/api/v1/selections/{sid}/weights/",
        f"/api/v1/selections/{sid}/audit/",
    ):
        assert client.get(url).status_code == 404, url
    assert client.get("/api/v1/selections/").json()["count"] == 0


def test_reviewer_reads_but_cannot_write(selection_with_constraints, reviewer):
    client = APIClient()
    client.force_authenticate(reviewer)
    url = f"/api/v1/selections/{selection_with_constraints.pk}/gates/"
    assert client.get(url).status_code == 200
    assert client.put(url, {"gates": {"memory": 0.5}}, format="json").status_code == 403


def test_anonymous_is_rejected(selection):
    assert APIClient().get("/api/v1/selections/").status_code in (401, 403)


def test_openapi_schema_and_docs(api):
    assert api.get("/api/schema/").status_code == 200
    assert api.get("/api/docs/").status_code == 200


def test_capacity_endpoint_matches_the_domain_model(api):
    response = api.post(
        "/api/v1/capacity/", {"model": "Llama-3.1-8B", "gpu_mem_gib": 80, "contexts": [8192]}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert body["block_size"] == 16 and body["num_blocks"] > 0


def test_capacity_endpoint_names_the_bad_field(api):
    response = api.post("/api/v1/capacity/", {"model": "Llama-3.1-70B", "tp": 3}, format="json")
    assert response.status_code == 400
    assert "tp" in " ".join(response.json()) or "tp" in str(response.json())
    response = api.post("/api/v1/capacity/", {"config": {"num_hidden_layers": -1}}, format="json")
    assert response.status_code == 400 and "config" in str(response.json())


def test_engines_come_from_the_catalog(api, engines):
    slugs = {e["slug"] for e in api.get("/api/v1/engines/").json()["results"]}
    assert {"vllm", "sglang", "llama-cpp", "tgi", "lmdeploy"} <= slugs or len(slugs) >= 6


def test_api_docs_work_offline_under_the_sites_csp(api, client, architect):
    """Swagger UI comes from the drf-spectacular-sidecar package, served by kvselect: no CDN, no inline script."""
    import re

    response = api.get("/api/docs/")
    body = response.content.decode()
    assert response.status_code == 200 and "script-src 'self'" in response["Content-Security-Policy"]
    sources = re.findall(r'(?:src|href)="([^"]+)"', body)
    assert sources and all(s.startswith("/") for s in sources), sources  # nothing from another host
    assert "<script>" not in body
    client.force_login(architect)
    for source in sources:
        assert client.get(source).status_code == 200, source
    assert any("swagger-ui-bundle.js" in s for s in sources)


@pytest.mark.django_db
def test_a_huge_page_limit_is_capped_not_a_server_error(client, architect, selection):
    client.force_login(architect)
    response = client.get("/api/v1/selections/", {"limit": str(10**30), "offset": str(10**25)})
    assert response.status_code == 200
    assert response.json()["results"] == []
    response = client.get("/api/v1/selections/", {"limit": str(10**30)})
    assert response.status_code == 200 and len(response.json()["results"]) == 1
