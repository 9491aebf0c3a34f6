"""Import a production trace on a selection, and accept the one-pager it proposes.

The parsing, statistics and proposal are `benchmarks.traces` (pure); here: who may, the KV pool of
each candidate (its measured or planned capacity, for the prefix sharing it can reuse), the stored
file with its SHA-256 (the same file twice is the same import), one transaction per write, the
audit trail ("from trace <sha256>" on every constraint the proposal changed). The readers and the
statistics (pandas) are loaded by `import_trace`, the one service that reads a trace, so the pages and
every other process start without them (tests/architecture/test_lean_imports.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from django.core.exceptions import ValidationError
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.utils import timezone

from benchmarks.traces.catalog import TraceError, detect, file_sha256, format_named
from benchmarks.traces.proposal import proposal_values, propose_constraints
from benchmarks.traces.service_model import ServiceModel
from selection.audit import audit, jsonable
from selection.capacity.measured import measured_capacity
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity.base import CapacityError
from selection.models import Constraints, Selection, TraceImport
from selection.selectors import require_editor
from selection.setup.services import save_constraints

logger = logging.getLogger(__name__)
DEFAULT_SERVICE = ServiceModel()


def service_model_for(selection: Selection) -> ServiceModel:
    """How long a request without an observed latency is held in flight: the selection's latency
    budget when it has one (the concurrency the engine must hold if it answers within budget)."""
    constraints = Constraints.objects.filter(selection=selection).first()
    if constraints is None:
        return DEFAULT_SERVICE
    if not constraints.ttft_p95_ms and not constraints.tpot_p95_ms:
        return DEFAULT_SERVICE
    return ServiceModel(
        ttft_ms=constraints.ttft_p95_ms or DEFAULT_SERVICE.ttft_ms,
        tpot_ms=constraints.tpot_p95_ms or DEFAULT_SERVICE.tpot_ms,
        source="latency budget",
    )


def kv_pools_for(selection: Selection) -> tuple[dict[str, int], dict[str, str]]:
    """Each candidate's KV pool in tokens, for the prefix sharing an engine of that pool can reuse:
    the measured capacity (engine log or metrics) when a run gave it, else the capacity plan's.
    Returns (name -> tokens, name -> where it came from); a candidate the plan cannot size is left out."""
    pools: dict[str, int] = {}
    sources: dict[str, str] = {}
    for candidate in selection.candidates.select_related("engine", "selection"):
        name = str(candidate)
        measured = measured_capacity(candidate)
        if measured.get("token_capacity"):
            pools[name], sources[name] = int(measured["token_capacity"]), "measured"
            continue
        try:
            tokens = plan_for_candidate(candidate).get("token_capacity")
        except CapacityError as exc:
            logger.info("trace import: no KV pool for candidate %s: %s", candidate.pk, exc)
            continue
        if tokens:
            pools[name], sources[name] = int(tokens), "capacity plan"
    return pools, sources


def import_trace(
    *,
    selection: Selection,
    user,
    path: str | Path,
    name: str | None = None,
    format: str | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[TraceImport, bool]:
    """Read the trace at `path` whole (nothing is stored unless it all reads), store it with its
    statistics and proposal. Returns (import, created); the same file again returns the first import."""
    from benchmarks.traces.formats import read_trace  # the readers, loaded by the read (module docstring)
    from benchmarks.traces.stats import trace_statistics

    require_editor(user, selection)
    path = Path(path)
    name = (name or path.name)[:255]
    sha256 = file_sha256(path)
    existing = TraceImport.objects.filter(selection=selection, sha256=sha256).first()
    if existing is not None:
        return existing, False
    try:
        trace_format = detect(path) if not format else format_named(format)
        pools, pool_sources = kv_pools_for(selection)
        statistics = trace_statistics(
            lambda: read_trace(path, trace_format),
            service=service_model_for(selection),
            progress=progress,
            kv_pools=pools,
        )
        for name, pool in statistics["prefix"]["pools"].items():
            pool["source"] = pool_sources[name]
    except TraceError as exc:
        raise ValidationError({"file": str(exc)}) from exc
    except OSError as exc:
        raise ValidationError({"file": f"{name}: cannot read ({exc.strerror or exc})"}) from exc
    if statistics["rows"] == 0:
        raise ValidationError({"file": f"{name}: the trace has no request"})
    trace = TraceImport(
        selection=selection,
        name=name,
        sha256=sha256,
        size_bytes=path.stat().st_size,
        format=trace_format.name,
        rows=statistics["rows"],
        statistics=jsonable(statistics),
        proposal=jsonable(propose_constraints(statistics)),
        imported_by=user,
    )
    suffix = "".join(path.suffixes[-2:]) if path.suffix.lower() == ".gz" else path.suffix
    stored = ""
    try:
        with transaction.atomic():
            with path.open("rb") as handle:
                trace.file.save(f"{selection.pk}/{sha256}{suffix.lower()}", File(handle), save=False)
            stored = trace.file.name
            trace.save()
            audit(
                selection,
                user,
                "trace.imported",
                field=f"trace:{sha256[:12]}",
                new={"sha256": sha256, "format": trace_format.name, "rows": statistics["rows"], "name": name},
            )
    except IntegrityError:
        _discard(stored)
        existing = TraceImport.objects.filter(selection=selection, sha256=sha256).first()
        if existing is not None:  # the same file imported at the same moment
            return existing, False
        raise
    except BaseException:
        _discard(stored)
        raise
    return trace, True


@transaction.atomic
def accept_trace_proposal(*, trace: TraceImport, user) -> Constraints:
    """Write the trace's proposal into the one-pager; every changed field is audited "from trace <sha256>"."""
    selection = trace.selection
    require_editor(user, selection)
    if not Constraints.objects.filter(selection=selection).exists():
        raise ValidationError(
            {
                "constraints": "fill in the one-pager first (hardware, model, latency budget, team): "
                "a trace proposes only the traffic fields"
            }
        )
    constraints = save_constraints(
        selection=selection,
        user=user,
        data=proposal_values(trace.proposal),
        justification=f"from trace {trace.sha256}",
    )
    TraceImport.objects.filter(pk=trace.pk).update(
        status=TraceImport.Status.ACCEPTED, accepted_by=user, accepted_at=timezone.now()
    )
    audit(
        selection,
        user,
        "trace.accepted",
        field=f"trace:{trace.sha256[:12]}",
        new={"sha256": trace.sha256, "fields": sorted(proposal_values(trace.proposal))},
        justification=f"from trace {trace.sha256}",
    )
    return constraints


def _discard(name: str) -> None:
    if not name:
        return
    try:
        default_storage.delete(name)
    except OSError:  # best effort: an orphan file is harmless, a half row is not
        logger.warning("could not delete orphan trace file %s", name)
