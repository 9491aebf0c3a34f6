"""The demo-like selection the record tests share: the demo's constraints and candidates with measured
runs of five tests per candidate, created in the reverse of the articles' order."""

from __future__ import annotations

from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.storage import save_artifact
from selection.candidates.services import add_candidate
from selection.certificates.signing import issue_dev_certificates
from selection.management.commands.demo import DEMO_CANDIDATES, DEMO_CONSTRAINTS
from selection.setup.services import accept_scenario, create_selection, save_constraints, set_gates
from tests.support.builders import ROLES, enrol_owners

DEMO_LIKE_PASSPHRASE = "document-pass-1"
STRESS_VERDICTS = (
    "zero_errors",
    "ttft_p95_within_budget",
    "tpot_p95_within_budget",
    "e2e_p95_within_budget",
    "concurrency_held",
    "kv_released_after_aborts",
    "no_preemption_storm",
    "kv_peak_below_ceiling",
)
# per test: what the harness writes into metadata["derived"] (the scoring inputs it measured)
DERIVED = {
    "stability": {"soak_drift_p99_ratio": 1.08},
    "prefix_reuse": {"prefix_saving_ratio": 0.7},
    "swap_recovery": {"swap_resume_ttft_ratio": 0.3, "continuation_correct": 1.0, "idle_release_share": 0.9},
    "long_context": {"max_context_rung_reached": 32768.0},
    "concurrency_stress": {"kv_headroom_at_target": 0.25},
}


# the swap runs saw a swap-in (the eviction, and a resume cheaper than a recompute: DERIVED's 0.3):
# session recovery is credited only then (claims.SWAP_IN)
SWAP_IN = {"swap_recovery": ("eviction_exercised", "resume_cheaper_than_recompute", "continuation_identical")}


def demo_like_selection(architect, team, owners, engines, settings, tmp_path):
    """The demo's selection with measured runs of the five tests per candidate, created in the
    reverse of the articles' order; llama.cpp has no swap-out run (a missing score)."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    owners["business"].first_name, owners["business"].last_name = "伟", "张"
    owners["business"].save()
    certs = issue_dev_certificates(tmp_path / "certs", {role: role for role in ROLES}, DEMO_LIKE_PASSPHRASE)
    enrol_owners(owners, certs, DEMO_LIKE_PASSPHRASE, settings)  # the snapshot names each owner's certificate
    selection = create_selection(
        user=architect,
        team=team,
        name="Customer-support assistant (demo)",
        business_owner=owners["business"],
        platform_owner=owners["platform"],
        security_owner=owners["security"],
    )
    save_constraints(selection=selection, user=architect, data=dict(DEMO_CONSTRAINTS))
    set_gates(selection=selection, user=architect, gates={"memory": 0.4, "persistence": 0.3})
    selection.refresh_from_db()
    accept_scenario(selection=selection, user=architect)
    for index, (slug, profile, _flags) in enumerate(DEMO_CANDIDATES):
        engine = engines[slug]
        candidate = add_candidate(
            selection=selection,
            user=architect,
            data={
                "engine": engine,
                "engine_version": engine.versions[0],
                "label": f"{engine.name} (simulated {profile})",
                "model_name": "kvsim-llama-3.1-8b",
                "gpu_model": "H100",
                "gpu_count": 1,
            },
        )
        for test in reversed(list(DERIVED)):
            if slug == "llama-cpp" and test == "swap_recovery":
                continue
            verdicts = [
                {"name": name, "passed": k % 5 != 4, "detail": f"{name} detail"}
                for k, name in enumerate(STRESS_VERDICTS if test == "concurrency_stress" else ("zero_errors",))
            ] + [{"name": name, "passed": True, "detail": f"{name} detail"} for name in SWAP_IN.get(test, ())]
            run = BenchmarkRun.objects.create(
                candidate=candidate,
                test=test,
                origin="harness",
                status="succeeded",
                evidence="MEASURED",
                tool="kvselect-harness",
                tool_version="0.1",
                raw_sha256=f"{index}{len(test)}".ljust(64, "a"),
                verdicts=verdicts,
                # the candidates reuse a shared prefix differently (0.7, 0.55, 0.4 of the possible saving): the
                # memory gate's core dimension separates them, so the scores name a winner (no tie)
                metadata={
                    "derived": {
                        **DERIVED[test],
                        **({"prefix_saving_ratio": 0.7 - 0.15 * index} if test == "prefix_reuse" else {}),
                    },
                    "largest_successful_rung": 32768,
                },
            )
            RunPoint.objects.create(
                run=run,
                index=0,
                concurrency=32,
                achieved_concurrency=31.5,
                ttft_ms={"p95": 300.0 + 100 * index},
                tpot_ms={"p95": 30.0 + 5 * index},
                error_rate=0.0,
                output_token_throughput=1500.0,
            )
            save_artifact(run, Artifact.Kind.REQUESTS, f"run-{run.pk}-requests.parquet", b"PAR1" + bytes([index]))
    selection.refresh_from_db()
    return selection
