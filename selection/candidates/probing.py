"""The candidate's endpoint, asked what it is where evidence enters (issue 33 item 5, 36 item 5).

When a candidate is added or its endpoint changes, and before each run, kvselect probes the endpoint
(`benchmarks.harness.identity`: /v1/models, /version and the engine's metrics) and compares the answer
with the selection (`domain.provenance`): an endpoint serving another model than the selection's is
refused, naming both, unless the architect keeps it with a justification (audited, stored on the
candidate, printed in the record); the other mismatches (engine version, the engine host's GPUs, a
context shorter than the longest request, the candidate's model name not served) are kept on the
candidate's latest probe and flagged wherever its evidence is shown. An endpoint that does not answer
yet (an engine the worker launches from its recipe) is probed again before each run.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from benchmarks.harness import identity as identity_probe
from benchmarks.harness import nvml
from benchmarks.validation.target import candidate_urls, lenient_resolver, refused_urls
from selection.domain import catalog as catalog_domain
from selection.domain import provenance
from selection.domain.messages import Code, Message
from selection.i18n import clauses, message_text
from selection.models import Candidate, Constraints
from selection.secretbox import decrypt


def constraints_of(candidate: Candidate) -> Constraints | None:
    return Constraints.objects.filter(selection_id=candidate.selection_id).first()


def findings_for(candidate: Candidate, identity: dict[str, Any]) -> list[dict[str, Any]]:
    """The mismatches between what the endpoint says and the candidate's selection and configuration."""
    c = constraints_of(candidate)
    return provenance.findings(
        identity,
        target_model=c.target_model if c else "",
        candidate_model=candidate.model_name,
        stated_version=candidate.engine_version,
        gpu_model=(c.gpu_model if c else "") or candidate.gpu_model,
        gpu_memory_gib=c.gpu_memory_gib if c else None,
        longest_request=(c.max_input_tokens + c.max_output_tokens) if c else None,
    )


def probe_candidate(candidate: Candidate) -> dict[str, Any] | None:
    """{at, identity, findings} for the candidate's endpoint; None when it has none or the outbound
    allow-list refuses it (nothing is sent to a refused URL)."""
    if not candidate.endpoint_url or refused_urls(candidate_urls(candidate), resolver=lenient_resolver):
        return None
    key = decrypt(candidate.api_key_encrypted) if candidate.api_key_encrypted else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # every request through the outbound guard: resolved once, refused names and addresses never contacted
    identity = identity_probe.probe(
        candidate.endpoint_url,
        candidate.metrics_url or None,
        headers,
        allowed_hosts=settings.KVSELECT_ALLOWED_TARGETS,
    )
    return {"at": timezone.now().isoformat(), "identity": identity, "findings": findings_for(candidate, identity)}


def model_mismatch(probe: dict[str, Any] | None) -> dict[str, Any] | None:
    return next((f for f in (probe or {}).get("findings") or [] if f["code"] == provenance.MODEL_MISMATCH), None)


def kept(candidate: Candidate, mismatch: dict[str, Any]) -> bool:
    """The architect kept this endpoint's model for this selection's model (the same names)."""
    justified = candidate.model_justification or {}
    return bool(justified.get("justification")) and justified.get("target") == mismatch["target"]


REFUSAL = gettext_noop(
    "the endpoint serves %(served)s, not the selection's model %(target)s: evidence about another model "
    "is not evidence about this one (point the candidate at an endpoint serving %(target)s, or keep it "
    "with a justification)"
)


def refusal(mismatch: dict[str, Any]) -> str:
    return _(REFUSAL) % {"served": mismatch["served"], "target": mismatch["target"]}


def refusal_message(mismatch: dict[str, Any]) -> Message:
    """The refusal as a message the run page renders in its language (the model names as code)."""
    return Message(REFUSAL, {"served": Code(str(mismatch["served"])), "target": Code(str(mismatch["target"]))})


FINDING_TEXT = {
    provenance.MODEL_MISMATCH: gettext_noop("the endpoint serves %(served)s, not the selection's model %(target)s"),
    provenance.MODEL_NOT_SERVED: gettext_noop(
        "the candidate's model name %(candidate)s is not served (the endpoint serves %(served)s)"
    ),
    provenance.VERSION_MISMATCH: gettext_noop(
        "the engine reports version %(reported)s (%(source)s), the candidate states %(stated)s"
    ),
    provenance.GPU_MISMATCH: gettext_noop("the engine host runs %(engine_gpu)s, the target is %(target_gpu)s"),
    provenance.CONTEXT_SHORT: gettext_noop(
        "the engine serves at most %(max_model_len)s tokens, the longest request needs %(needed)s"
    ),
}


def finding_text(finding: dict[str, Any]) -> str:
    """A finding in the active language."""
    template = FINDING_TEXT.get(finding["code"])
    if template is None:
        return finding["code"]
    params = {k: ("—" if v is None else f"{v:g}" if isinstance(v, float) else v) for k, v in finding.items()}
    if finding["code"] == provenance.GPU_MISMATCH:
        params["engine_gpu"] = f"{finding['engine_gpu']}" + (
            f" {finding['engine_memory_gib']:g} GiB" if finding.get("engine_memory_gib") else ""
        )
        params["target_gpu"] = f"{finding['target_gpu']}" + (
            f" {finding['target_memory_gib']:g} GiB" if finding.get("target_memory_gib") else ""
        )
    return _(template) % params


def assumed_version(candidate: Candidate) -> str | None:
    """The catalog version whose facts a version the catalog does not list is planned with."""
    if not candidate.engine_id:
        return None
    return provenance.assumed_version(candidate.engine_version, [v for v in candidate.engine.versions if v])


def version_note(candidate: Candidate) -> str:
    """ "version 99.99 is not in the catalog: facts of 0.11.0 assumed" ("" for a catalog version)."""
    assumed = assumed_version(candidate)
    if assumed is None:
        return ""
    return _("version %(version)s is not in the engine catalog: facts of %(assumed)s assumed") % {
        "version": candidate.engine_version,
        "assumed": assumed,
    }


def catalog_version(candidate: Candidate) -> str | None:
    """The catalog version whose facts the candidate is screened, scored and planned with."""
    known = [v for v in candidate.engine.versions if v]
    if candidate.engine_version in known:
        return candidate.engine_version
    if candidate.engine.slug in catalog_domain.default_catalog().slugs:
        return known[0] if known else None
    return None


def probe_before_run(candidate: Candidate, *, launched: bool) -> dict[str, Any]:
    """Probe the endpoint again before a run (`launched`: the worker started the engine on its own
    machine, so its NVML reads the engine host's GPUs); keep the answer on the candidate. Returns the
    run's provenance {at, identity, findings, kept_model} and `refusal` (why the run may not start: an
    endpoint serving another model than the selection's that nobody kept with a justification)."""
    probe = probe_candidate(candidate) or {"at": timezone.now().isoformat(), "identity": {}, "findings": []}
    identity = probe["identity"]
    if launched:
        gpus, driver, _why = nvml.host_gpus()
        nvml_gpu = identity_probe.gpu_from_nvml(gpus, driver)
        if nvml_gpu is not None:
            identity["gpu"] = nvml_gpu
            probe["findings"] = findings_for(candidate, identity)
    Candidate.objects.filter(pk=candidate.pk).update(endpoint_probe=probe)
    mismatch = model_mismatch(probe)
    refused = mismatch is not None and not kept(candidate, mismatch)
    return {
        **probe,
        "kept_model": candidate.model_justification,
        "refusal": refusal(mismatch) if refused else "",
        "refusal_message": refusal_message(mismatch) if refused else None,
    }


def run_identity(run: Any) -> dict[str, Any]:
    """What a run recorded about the engine host: a kvselect run's probe before the load, an upload's
    metadata (never the load client's NVML)."""
    metadata = run.metadata or {}
    if isinstance(metadata.get("engine_host"), dict):
        return metadata["engine_host"].get("identity") or {}
    if getattr(run, "origin", "") == "upload" or metadata.get("engine_version") or metadata.get("hardware"):
        return identity_probe.identity_from_upload(metadata)
    return {}


# what the evidence shows, with the runs that show it: "1× H100 (80 GiB) (run-1, run-2 · SIMULATED)"
SHOWN_BY_RUNS = gettext_noop("%(what)s (%(runs)s)")


def _runs_label(runs: list[Any]) -> str:
    simulated = any(getattr(r, "is_simulated", False) for r in runs)
    return ", ".join(f"run-{r.pk}" for r in runs) + (" · SIMULATED" if simulated else "")


def _shown_by(what: str, runs: str) -> str:
    return _(SHOWN_BY_RUNS) % {"what": what, "runs": runs}


def evidence_provenance(candidate: Candidate, runs: list[Any]) -> dict[str, Any]:
    """What the chosen candidate's evidence ran on and as, against the target: "validated on X; target
    Y" and every mismatch (GPU, engine version, model), each with the runs that show it."""
    c = constraints_of(candidate)
    target = candidate.gpu_model
    if c is not None:
        target = _("%(gpu)s with %(mem)s GiB") % {"gpu": c.gpu_model, "mem": f"{c.gpu_memory_gib:g}"}
    mine = [r for r in runs if r.candidate_id == candidate.pk]
    hardware: dict[str, list[Any]] = {}
    flags: list[str] = []
    for run in mine:
        identity = run_identity(run)
        described = message_text(provenance.validated_on_message(identity.get("gpu")))  # in the active language
        if described:
            hardware.setdefault(described, []).append(run)
        for finding in findings_for(candidate, identity):
            if finding["code"] != provenance.CONTEXT_SHORT:
                flags.append(_shown_by(finding_text(finding), f"run-{run.pk}"))
    if hardware:
        validated = clauses(_shown_by(gpu, _runs_label(rs)) for gpu, rs in hardware.items())
        statement = _("Validated on %(validated)s; target %(target)s.") % {"validated": validated, "target": target}
    else:
        statement = _(
            "No run reported the engine host's GPUs (no engine metrics stating them, no worker-launched engine, no "
            "upload metadata): the evidence is not shown to come from the target %(target)s."
        ) % {"target": target}
    kept_model = candidate.model_justification or {}
    if kept_model.get("justification"):
        flags.append(
            _("the endpoint serves %(served)s, not the selection's model %(target)s: kept by %(who)s: %(why)s")
            % {
                "served": kept_model.get("served", ""),
                "target": kept_model.get("target", ""),
                "who": kept_model.get("by", ""),
                "why": kept_model["justification"],
            }
        )
    note = version_note(candidate)
    return {"statement": statement, "flags": list(dict.fromkeys(flags + ([note] if note else []))), "target": target}
