"""Is the evidence about the selection's model, engine version and hardware? (issue 33 item 5, 36 item 5)

Where evidence enters (a candidate added or changed, before each run, an upload) kvselect compares
what the engine host says it is (`benchmarks.harness.identity`) with what the selection decides on:

* **Model.** The endpoint must serve the selection's model: one of its served names or the model
  path behind them names it (organisation and case aside; an instruction-tuned or chat variant of the
  same model counts: `-instruct`, `-chat`, `-it`, `-hf`). Otherwise it is `MODEL_MISMATCH`: refused
  with both names, unless the architect keeps it with a justification (audited, shown in the record).
  The candidate's own model name must be one the endpoint serves (`MODEL_NOT_SERVED`): requests for
  another name fail.
* **Version.** The version the engine reports differs from the candidate's stated one:
  `VERSION_MISMATCH`. A stated version the catalog does not list is planned and screened with the
  catalog's newest version of that engine, and says so (`assumed_version`, "facts of v0.11.0 assumed").
* **Hardware.** The engine host's GPU model or memory differs from the constraints' target:
  `GPU_MISMATCH` (results on one GPU generation or memory size do not carry to another).
* **Context.** The engine's longest context is below the constraints' longest request (input +
  output): `CONTEXT_SHORT`.

Each finding is a code and its values; the shells word them. Pure Python: no Django.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from selection.domain.messages import NAME_SEPARATOR, Message
from selection.domain.messages import marked as _

MODEL_MISMATCH, MODEL_NOT_SERVED = "model_mismatch", "model_not_served"
VERSION_MISMATCH, VERSION_NOT_IN_CATALOG = "version_mismatch", "version_not_in_catalog"
GPU_MISMATCH, CONTEXT_SHORT = "gpu_mismatch", "context_short"
REFUSING = (MODEL_MISMATCH,)  # refused unless kept with an audited justification

VARIANT_SUFFIXES = ("-instruct", "-chat", "-it", "-hf", "-base")
GPU_MEMORY_TOLERANCE_GIB = 2.0  # "80 GB" cards report 79.6-81.6 GiB


def model_key(name: Any) -> str:
    """A model name without its organisation, case, a trailing slash and a variant suffix:
    meta-llama/Llama-3.1-8B-Instruct -> llama-3.1-8b."""
    key = str(name or "").strip().rstrip("/").split("/")[-1].lower()
    for suffix in VARIANT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
    return key


def model_matches(names: Iterable[str], target: str) -> bool:
    """True when one of the names (served names, model paths) is the target model."""
    wanted = model_key(target)
    return bool(wanted) and any(model_key(name) == wanted for name in names)


def served_names(identity: Mapping[str, Any]) -> list[str]:
    return [*(identity.get("served_models") or []), *(identity.get("model_paths") or [])]


def model_findings(identity: Mapping[str, Any], *, target_model: str, candidate_model: str) -> list[dict[str, Any]]:
    """MODEL_MISMATCH and MODEL_NOT_SERVED for what the endpoint serves (nothing when it said nothing)."""
    names = served_names(identity)
    if not names:
        return []
    findings = []
    if target_model and not model_matches(names, target_model):
        findings.append({"code": MODEL_MISMATCH, "served": ", ".join(names), "target": target_model})
    served = identity.get("served_models") or []
    if candidate_model and served and candidate_model not in served:
        findings.append({"code": MODEL_NOT_SERVED, "served": ", ".join(served), "candidate": candidate_model})
    return findings


def _version_key(version: str) -> str:
    return re.sub(r"^v", "", version.strip().lower())


def version_findings(identity: Mapping[str, Any], stated_version: str) -> list[dict[str, Any]]:
    reported = identity.get("engine_version")
    if not reported or not stated_version or _version_key(reported) == _version_key(stated_version):
        return []
    return [
        {
            "code": VERSION_MISMATCH,
            "reported": reported,
            "stated": stated_version,
            "source": identity.get("version_source") or "",
        }
    ]


def _gpu_key(name: str) -> str:
    """ "NVIDIA H100 80GB HBM3" and "H100-80GB" -> "h100"."""
    words = re.findall(r"[a-z]+\d+[a-z]*|\d+[a-z]+\d*", name.lower().replace("nvidia", ""))
    return next((w for w in words if not re.fullmatch(r"\d+(gb|gib|g)", w)), name.strip().lower())


def gpu_findings(identity: Mapping[str, Any], *, gpu_model: str, gpu_memory_gib: float | None) -> list[dict]:
    gpu = identity.get("gpu") or {}
    if not gpu or not gpu.get("model"):
        return []
    same_model = not gpu_model or _gpu_key(gpu["model"]) == _gpu_key(gpu_model)
    memory = gpu.get("memory_gib")
    same_memory = (
        memory is None or not gpu_memory_gib or abs(float(memory) - float(gpu_memory_gib)) <= GPU_MEMORY_TOLERANCE_GIB
    )
    if same_model and same_memory:
        return []
    return [
        {
            "code": GPU_MISMATCH,
            "engine_gpu": gpu["model"],
            "engine_memory_gib": memory,
            "target_gpu": gpu_model,
            "target_memory_gib": gpu_memory_gib,
        }
    ]


def context_findings(identity: Mapping[str, Any], longest_request: int | None) -> list[dict[str, Any]]:
    limit = identity.get("max_model_len")
    if not limit or not longest_request or limit >= longest_request:
        return []
    return [{"code": CONTEXT_SHORT, "max_model_len": limit, "needed": longest_request}]


def findings(
    identity: Mapping[str, Any],
    *,
    target_model: str,
    candidate_model: str = "",
    stated_version: str = "",
    gpu_model: str = "",
    gpu_memory_gib: float | None = None,
    longest_request: int | None = None,
) -> list[dict[str, Any]]:
    """Every mismatch between what the engine host says and what the selection decides on."""
    return [
        *model_findings(identity, target_model=target_model, candidate_model=candidate_model),
        *version_findings(identity, stated_version),
        *gpu_findings(identity, gpu_model=gpu_model, gpu_memory_gib=gpu_memory_gib),
        *context_findings(identity, longest_request),
    ]


def assumed_version(stated: str, catalog_versions: list[str]) -> str | None:
    """The catalog version whose facts a stated version is planned with: None when the catalog lists
    the stated one (its own facts), else the catalog's newest (first listed) version."""
    if not catalog_versions or stated in catalog_versions:
        return None
    return catalog_versions[0]


# An engine host's GPUs as the record and the pages read them: "1× H100 (80 GiB, driver 550.54)"; the
# simulator reports its driver as "simulated" (words, not a version).
GPU_WITH_DETAILS = _("%(gpu)s (%(details)s)")
DRIVER_VERSION = _("driver %(driver)s")
DRIVER_SIMULATED = _("driver simulated")


def validated_on_message(gpu: Mapping[str, Any] | None) -> Message | str:
    """An engine host's GPU description as a message ("2× H100 (80 GiB, driver 550.54)"); "" when none."""
    if not gpu or not gpu.get("model"):
        return ""
    count = f"{gpu['count']}× " if gpu.get("count") else ""
    details: list[Any] = []
    if gpu.get("memory_gib"):
        details.append(f"{float(gpu['memory_gib']):g} GiB")
    if gpu.get("driver"):
        driver = str(gpu["driver"])
        simulated = driver == "simulated"
        details.append(Message(DRIVER_SIMULATED) if simulated else Message(DRIVER_VERSION, {"driver": driver}))
    name = f"{count}{gpu['model']}"
    return Message(GPU_WITH_DETAILS, {"gpu": name, "details": NAME_SEPARATOR.join(details)}) if details else name


def validated_on(gpu: Mapping[str, Any] | None) -> str:
    """ "2× H100 (80 GiB, driver 550.54)" from an engine host's GPU description ("" when none), in English."""
    return str(validated_on_message(gpu))
