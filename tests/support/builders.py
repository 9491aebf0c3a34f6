"""Plain builders shared by the tests (fixtures in the conftests call them): users, selections, constraints,
engines, runs, owners with enrolled development certificates."""

from __future__ import annotations

import hashlib

from django.contrib.auth import get_user_model

from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate
from selection.certificates import signing
from selection.certificates.services import enrol_certificate
from selection.models import Engine, Membership, Team
from selection.scoring.services import refresh_scores
from selection.setup.services import create_selection, save_constraints

SAMPLE_CONSTRAINTS = {
    "peak_concurrency": 200,
    "request_rate": 20.0,
    "avg_input_tokens": 800,
    "p95_input_tokens": 2000,
    "max_input_tokens": 4096,
    "avg_output_tokens": 200,
    "max_output_tokens": 1024,
    "multi_turn": False,
    "ttft_p95_ms": 800.0,
    "tpot_p95_ms": 60.0,
    "e2e_p95_ms": 15000.0,
    "gpu_model": "H100",
    "gpu_memory_gib": 80.0,
    "gpu_count_budget": 4,
    "cost_per_gpu_hour": "2.50",
    "ops_team_size": 3,
    "target_model": "Llama-3.1-8B",
    "kv_precisions_allowed": ["bf16", "fp8"],
}

ROLES = ("business", "platform", "security")

VALID_CONSTRAINTS = {
    "peak_concurrency": "64",
    "request_rate": "10",
    "throughput_target_tokens_s": "",
    "avg_input_tokens": "1500",
    "p95_input_tokens": "3000",
    "max_input_tokens": "8192",
    "avg_output_tokens": "300",
    "max_output_tokens": "1024",
    "average_turns": "",
    "idle_seconds_between_turns": "",
    "concurrent_sessions": "",
    "never_swap_sessions": "",
    "ttft_p95_ms": "800",
    "tpot_p95_ms": "50",
    "e2e_p95_ms": "",
    "gpu_model": "H100 SXM",
    "gpu_memory_gib": "80",
    "gpu_count_budget": "8",
    "cost_per_gpu_hour": "2.50",
    "ops_team_size": "3",
    "target_model": "Llama-3.1-8B",
    "kv_precisions_allowed": ["bf16", "fp8"],
    "notes": "",
}


def make_user(username: str, team: Team | None = None, role: str = Membership.Role.ARCHITECT):
    user = get_user_model().objects.create_user(username=username, password="pw-" + username)
    if team is not None:
        Membership.objects.create(team=team, user=user, role=role)
    return user


def team_owners(team: Team) -> dict:
    """Three different people who own the team's selections (reviewers of the team), made once per team."""
    owners = {}
    for role in ROLES:
        user, created = get_user_model().objects.get_or_create(username=f"{role}-owner-{team.pk}")
        if created:
            Membership.objects.create(team=team, user=user, role=Membership.Role.REVIEWER)
        owners[role] = user
    return owners


def make_selection(user, team: Team, name: str = "Support bot"):
    owners = team_owners(team)
    return create_selection(
        user=user,
        team=team,
        name=name,
        business_owner=owners["business"],
        platform_owner=owners["platform"],
        security_owner=owners["security"],
    )


def with_constraints(selection, user, **overrides):
    data = {
        "peak_concurrency": 64,
        "avg_input_tokens": 1500,
        "p95_input_tokens": 3000,
        "max_input_tokens": 8192,
        "avg_output_tokens": 300,
        "max_output_tokens": 1024,
        "ttft_p95_ms": 800,
        "gpu_model": "H100",
        "gpu_memory_gib": 80,
        "gpu_count_budget": 8,
        "ops_team_size": 3,
        "target_model": "Llama-3.1-8B",
        "kv_precisions_allowed": ["bf16"],
        **overrides,
    }
    save_constraints(selection=selection, user=user, data=data)
    selection.refresh_from_db()
    return selection


def make_engine(slug: str = "vllm", versions=("0.6.3", "0.8.5")) -> Engine:
    return Engine.objects.create(
        slug=slug,
        name=slug.upper(),
        catalog_version="test",
        data={"slug": slug, "versions": [{"version": v} for v in versions]},
    )


def make_candidate(selection, user, **overrides):
    """A vLLM 0.8.5 candidate serving Llama-3.1-8B on one H100, added through the service as a user would."""
    data = {
        "engine_version": "0.8.5",
        "label": "vLLM prefix on",
        "model_name": "Llama-3.1-8B",
        "endpoint_url": "http://127.0.0.1:8001/v1",
        "gpu_model": "H100",
        "tensor_parallel": 1,
        "kv_precision": "bf16",
    }
    data |= overrides
    if "engine" not in data:
        data["engine"] = make_engine()
    return add_candidate(selection=selection, user=user, data=data)


# A concurrency stress of one second against the mock engine: enough requests to judge, quick to run.
SHORT_STRESS = {
    "concurrency": 4,
    "duration_s": 1.0,
    "warmup_s": 0.0,
    "input_tokens": 16,
    "output_tokens": 8,
    "settle_s": 0.5,
    "abort_fraction": 0.0,
}


def mock_engine_candidate(selection, user, engine: Engine, url: str, *, api_key: str = "", **data):
    """A vLLM 0.11.0 candidate serving the model "mock" at `url` (the in-process mock engine or a
    simulator), its metrics at `url`/metrics; `data` adds fields (gpu_pool, label)."""
    fields = {
        "engine": engine,
        "engine_version": "0.11.0",
        "endpoint_url": url,
        "metrics_url": url + "/metrics",
        "model_name": "mock",
        **data,
    }
    return add_candidate(selection=selection, user=user, data=fields, api_key=api_key)


def stress_run(candidate, ttfts, evidence="MEASURED", concurrencies=(50, 200)):
    """A concurrency-stress run at these concurrencies (50 and 200) with these TTFT p95s."""
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="upload",
        status="succeeded",
        evidence=evidence,
        tool="vllm-bench",
        tool_version="0.33",
        raw_sha256=hashlib.sha256(f"{candidate.pk}{evidence}".encode()).hexdigest(),
    )
    for index, (concurrency, ttft) in enumerate(zip(concurrencies, ttfts, strict=False)):
        RunPoint.objects.create(
            run=run,
            index=index,
            concurrency=concurrency,
            achieved_concurrency=concurrency,
            ttft_ms={"p95": ttft},
            tpot_ms={"p95": 30.0},
            error_rate=0.0,
            output_token_throughput=5000.0,
        )
    return run


def chat_selection(architect, team, owners):
    """The "Chat" selection of `team` with the sample constraints and these owners, no candidates yet."""
    selection = create_selection(
        user=architect,
        team=team,
        name="Chat",
        business_owner=owners["business"],
        platform_owner=owners["platform"],
        security_owner=owners["security"],
    )
    save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS))
    return selection


def decided_selection(architect, team, owners, engines):
    """A selection with vLLM and SGLang candidates and measured stress evidence: enough to score and draft a record."""
    selection = chat_selection(architect, team, owners)
    for slug, ttft in (("vllm", 700.0), ("sglang", 300.0)):
        candidate = add_candidate(
            selection=selection,
            user=architect,
            data={
                "engine": engines[slug],
                "engine_version": engines[slug].versions[0],
                "launch_flags": ALL_FEATURES_FLAGS[slug],
            },
        )
        stress_run(candidate, (ttft / 2, ttft))
    return rescored(selection)


def rescored(selection):
    """The selection after the `recompute_scores` task ran (its body, here): runs written straight to the
    database pass by the hooks that queue it when evidence changes, and pages only read snapshots."""
    assert refresh_scores(selection.pk) == ""
    selection.refresh_from_db()
    return selection


# Launch flags that turn on every feature the catalog documents (documented features count only
# when the flags enable them: selection.domain.launch_flags)
ALL_FEATURES_FLAGS = {
    "vllm": """--kv-transfer-config '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}'""",
    "sglang": "--enable-hierarchical-cache --enable-metrics",
    "llama-cpp": "--metrics --slot-save-path /var/lib/llama/slots",
}


def enrol_owners(owners: dict, certs: signing.DevCertificatePaths, passphrase: str, settings) -> None:
    """Trust the development CA of `certs` and enrol each owner's certificate from it (role -> user)."""
    settings.KVSELECT_TRUST_ROOTS = [str(certs.ca_certificate)]
    for role, user in owners.items():
        info = signing.pkcs12_certificate(certs.pkcs12[role].read_bytes(), passphrase)
        enrol_certificate(user=user, certificate=info.pem.encode())


DEV_PASSPHRASE = "dev-pass-123"  # the development certificates' passphrase in the selection tests
