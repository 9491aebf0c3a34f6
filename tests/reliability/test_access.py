"""Access control: every URL as a user of another team, token scope, login rate limit, CSRF, sealed records."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun, RunPoint
from benchmarks.uploads.tokens import create_upload_token, revoke_upload_token
from selection.candidates.services import add_candidate
from selection.models import Candidate, DecisionRecord, Membership, Selection, Team, UploadToken
from selection.setup.services import create_selection, save_constraints
from tests.support.builders import SAMPLE_CONSTRAINTS
from tests.support.uploads import token_client, upload

pytestmark = pytest.mark.reliability

MARKER = "VICTIMSECRET"


@pytest.fixture
def victim(make_user, engines):
    """Another team's selection with a candidate, a run, a draft and a signed record, and a token."""
    team = Team.objects.create(name=f"{MARKER}-team")
    owner = make_user("victor", team)
    selection = create_selection(
        user=owner,
        team=team,
        name=f"{MARKER} selection",
        business_owner=owner,
        platform_owner=make_user("victoria", team, Membership.Role.REVIEWER),
        security_owner=make_user("vincent", team, Membership.Role.REVIEWER),
    )
    save_constraints(selection=selection, user=owner, data=dict(SAMPLE_CONSTRAINTS))
    candidate = add_candidate(
        selection=selection,
        user=owner,
        data={
            "engine": engines["vllm"],
            "engine_version": "0.11.0",
            "label": f"{MARKER} candidate",
            "endpoint_url": "http://127.0.0.1:9/",
            "model_name": "m",
        },
    )
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="upload",
        status="succeeded",
        label=f"{MARKER} run",
        evidence="MEASURED",
        tool="vllm-bench",
    )
    RunPoint.objects.create(run=run, index=0, label=f"{MARKER} point", ttft_ms={"p95": 1.0})
    draft = DecisionRecord.objects.create(selection=selection, version=1, decision=f"{MARKER} draft", created_by=owner)
    signed = DecisionRecord.objects.create(
        selection=selection,
        version=2,
        decision=f"{MARKER} signed",
        status=DecisionRecord.Status.SIGNED,
        created_by=owner,
        snapshot={"x": 1},
        snapshot_sha256="a" * 64,
        signed_sha256="b" * 64,
        signed_at=timezone.now(),
    )
    token, _ = create_upload_token(selection=selection, user=owner, name=f"{MARKER}-ci")
    return {
        "team": team,
        "owner": owner,
        "selection": selection,
        "candidate": candidate,
        "run": run,
        "draft": draft,
        "signed": signed,
        "token": token,
    }


def _walk(patterns, prefix="", namespace=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            ns = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), ns)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield prefix + str(pattern.pattern), namespace + pattern.name, list(pattern.pattern.regex.groupindex)


def _fill(route: str, params: list[str], victim) -> dict[str, str]:
    """Each URL parameter filled with the victim's object of the right kind."""
    sel, cand, run, rec = (victim["selection"].pk, victim["candidate"].pk, victim["run"].pk, victim["signed"].pk)
    models = {
        "selection/selection": sel,
        "selection/candidate": cand,
        "benchmarks/benchmarkrun": run,
        "selection/decisionrecord": rec,
        "selection/uploadtoken": victim["token"].pk,
        "selection/team": victim["team"].pk,
        "auth/user": victim["owner"].pk,
    }
    kwargs = {}
    for name in params:
        if name == "format":
            kwargs[name] = "json"
        elif name == "slug":
            kwargs[name] = "vllm"
        elif name in ("selection_id",):
            kwargs[name] = sel
        elif name in ("candidate_id", "candidate_pk"):
            kwargs[name] = cand
        elif name == "run_id":
            kwargs[name] = run
        elif name == "record_id":
            kwargs[name] = rec
        elif name == "pk":
            kwargs[name] = cand if "candidates/(?P<pk>" in route else sel
        elif name == "object_id":
            kwargs[name] = next(
                (pk for key, pk in models.items() if key in route or key.replace("/", "/") in route), sel
            )
        elif name == "content_type_id":
            kwargs[name] = ContentType.objects.get_for_model(Selection).pk
        elif name == "app_label":
            kwargs[name] = "selection"
        else:
            kwargs[name] = sel
    return {k: str(v) for k, v in kwargs.items()}


OBJECT_PARAMS = {"selection_id", "candidate_id", "candidate_pk", "run_id", "record_id", "pk"}


def _targets(victim):
    for route, name, params in _walk(get_resolver().url_patterns):
        kwargs = _fill(route, params, victim)
        try:
            url = reverse(name, kwargs=kwargs)
        except Exception as exc:  # a pattern this walker cannot fill is a test bug, not a pass
            raise AssertionError(f"cannot build {name} ({route}) with {kwargs}: {exc}") from exc
        yield route, name, url, bool(OBJECT_PARAMS & set(params)) and "engines" not in route


def _assert_no_leak(response, method, url):
    assert response.status_code < 500, f"{method} {url} -> {response.status_code}"
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert MARKER.encode() not in body, f"{method} {url} leaked another team's data ({response.status_code})"


@pytest.mark.parametrize("who", ["outsider", "anonymous"])
def test_every_url_refuses_another_teams_objects(victim, outsider, who):
    client = Client()
    if who == "outsider":
        client.force_login(outsider)
    checked = 0
    for route, name, url, has_object in _targets(victim):
        methods = ("get", "post") if route.startswith("admin/") else ("get", "post", "put", "patch", "delete")
        for method in methods:
            if name == "logout" or (name == "set_language" and method == "post"):
                continue
            kwargs = {"content_type": "application/json", "data": "{}"} if method in ("put", "patch") else {}
            response = getattr(client, method)(url, **kwargs)
            _assert_no_leak(response, method.upper(), url)
            if route.startswith("admin/"):
                if name not in ("admin:login", "admin:logout"):  # not staff: always sent to the admin login
                    assert response.status_code == 302 and "/admin/login/" in response["Location"], (method, url)
            elif has_object:
                allowed = {403, 404, 405} | ({401, 302} if who == "anonymous" else set())
                assert response.status_code in allowed, f"{method.upper()} {url} -> {response.status_code}"
                if response.status_code == 302:
                    assert "/accounts/login/" in response["Location"]
            checked += 1
    assert checked > 150
    # Nothing was changed by all those writes.
    v = victim
    assert Selection.objects.get(pk=v["selection"].pk).name == f"{MARKER} selection"
    assert Candidate.objects.filter(pk=v["candidate"].pk).exists()
    assert BenchmarkRun.objects.get(pk=v["run"].pk).status == "succeeded"
    assert DecisionRecord.objects.filter(selection=v["selection"]).count() == 2
    assert not BenchmarkRun.objects.exclude(pk=v["run"].pk).exists()


def test_upload_token_is_scoped_to_its_selection(victim, selection_with_constraints, architect, engines):
    mine = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    ci = token_client(selection_with_constraints, architect)
    theirs, their_run = victim["candidate"], victim["run"]
    assert upload(ci, theirs.pk, b'{"a": 1}', key="x").status_code == 403
    for url in (
        f"/api/v1/candidates/{theirs.pk}/results/",
        f"/api/v1/runs/{their_run.pk}/",
        f"/api/v1/runs/{their_run.pk}/requests/",
    ):
        response = ci.get(url)
        assert response.status_code == 403, url
        assert MARKER not in response.content.decode()
    # Outside the upload endpoints a token is refused even for its own selection.
    for url in (
        f"/api/v1/selections/{selection_with_constraints.pk}/",
        "/api/v1/selections/",
        f"/api/v1/candidates/{mine.pk}/validations/",
        f"/api/v1/selections/{selection_with_constraints.pk}/records/",
    ):
        assert ci.get(url).status_code == 403, url
    assert ci.get(f"/api/v1/candidates/{mine.pk}/results/").status_code == 200
    assert not BenchmarkRun.objects.filter(candidate=theirs).exclude(pk=their_run.pk).exists()


def test_upload_tokens_are_stored_hashed_and_revocable(selection_with_constraints, architect, engines):
    token, raw = create_upload_token(selection=selection_with_constraints, user=architect, name="ci")
    row = UploadToken.objects.get(pk=token.pk)
    assert raw not in str(row.__dict__) and row.key_hash != raw and len(row.key_hash) == 64
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    assert client.get(f"/api/v1/candidates/{candidate.pk}/results/").status_code == 200
    revoke_upload_token(token=token, user=architect)
    assert client.get(f"/api/v1/candidates/{candidate.pk}/results/").status_code in (401, 403)
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw[:-1]}x")
    assert client.get(f"/api/v1/candidates/{candidate.pk}/results/").status_code in (401, 403)


def test_login_is_locked_after_five_failures(architect, settings):
    from axes.utils import reset

    reset()
    client = Client()
    for attempt in range(1, settings.AXES_FAILURE_LIMIT + 1):
        response = client.post("/accounts/login/", {"username": "alice", "password": "wrong-password"})
        # the form again with an error, until the limit-th failure locks the account
        assert response.status_code == (429 if attempt == settings.AXES_FAILURE_LIMIT else 200), attempt
    locked = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-Long1"})
    assert locked.status_code in (403, 429), locked.status_code
    assert "_auth_user_id" not in client.session
    reset()
    ok = Client().post("/accounts/login/", {"username": "alice", "password": "pw-alice-Long1"})
    assert ok.status_code == 302


def test_session_posts_to_the_api_need_a_csrf_token(architect, team):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(architect)  # a real session cookie (axes forbids client.login without a request)
    body = {"name": "Via session", "team": team.pk}
    refused = client.post("/api/v1/selections/", body, format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert not Selection.objects.filter(name="Via session").exists()
    client.get("/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    accepted = client.post("/api/v1/selections/", body, format="json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code != 403, accepted.content


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-Long1")


def test_admin_cannot_alter_or_delete_decision_records_even_as_superuser(victim, staff):
    client = Client()
    client.force_login(staff)
    for record in (victim["signed"], victim["draft"]):
        change = reverse("admin:selection_decisionrecord_change", args=[record.pk])
        page = client.get(change)
        assert page.status_code == 200  # viewable
        assert b'name="decision"' not in page.content  # but no editable field
        assert client.post(change, {"decision": "tampered", "status": "draft"}).status_code == 403
        delete = reverse("admin:selection_decisionrecord_delete", args=[record.pk])
        assert client.post(delete, {"post": "yes"}).status_code == 403
    changelist = reverse("admin:selection_decisionrecord_changelist")
    bulk = client.post(
        changelist, {"action": "delete_selected", "_selected_action": [victim["signed"].pk], "post": "yes"}
    )
    assert bulk.status_code in (200, 302)
    assert client.get(reverse("admin:selection_decisionrecord_add")).status_code == 403
    signed = DecisionRecord.objects.get(pk=victim["signed"].pk)
    assert signed.decision == f"{MARKER} signed" and signed.status == "signed"
    assert DecisionRecord.objects.filter(selection=victim["selection"]).count() == 2


def test_signed_records_are_immutable_below_the_admin_too(victim):
    """Anyone with a shell (or a future admin bug) hits the database triggers."""
    signed = DecisionRecord.objects.get(pk=victim["signed"].pk)
    for field, value in (("decision", "tampered"), ("signed_sha256", "c" * 64), ("status", "draft")):
        setattr(signed, field, value)
        with pytest.raises(DatabaseError), transaction.atomic():
            signed.save()
        signed.refresh_from_db()
    with pytest.raises(DatabaseError), transaction.atomic():
        DecisionRecord.objects.filter(pk=signed.pk).delete()
    assert DecisionRecord.objects.get(pk=signed.pk).decision == f"{MARKER} signed"
