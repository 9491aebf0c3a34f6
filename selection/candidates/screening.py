"""The documentation screen of a selection's candidates (decision step 3, before any test), and its
audited override. The rules are `selection.domain.screening`; this module reads the selection's
priority dimensions and the catalog, and keeps the architect's override on the candidate."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from selection.audit import audit
from selection.domain import catalog as catalog_domain
from selection.domain import screening
from selection.domain.messages import render, to_json
from selection.models import Candidate, Selection
from selection.selectors import archived_refusal, require_editor


def selection_priorities(selection: Selection) -> tuple[str, ...]:
    """The selection's priority dimensions: its gates, else its scenario's priorities."""
    return screening.priority_dimensions([g.dimension for g in selection.gates.all()], selection.scenario)


def documentation_screen(candidate: Candidate, dimensions: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The candidate's screen: {status: kept | screened_out | overridden | not_screened, dimensions,
    rows, reasons (Messages), homepage, override}. A version the catalog does not list is read as the
    engine's newest documented one (as scoring reads it); an engine it does not know is not screened
    (nothing to read), and says so."""
    dims = selection_priorities(candidate.selection) if dimensions is None else dimensions
    homepage = (candidate.engine.data or {}).get("homepage") or {}
    base = {
        "dimensions": dims,
        "homepage": homepage.get("value") or "",
        "homepage_source": homepage.get("source") or "",
        "homepage_source_kind": screening.source_kind(homepage.get("source")),
        "override": candidate.screen_override or None,
    }
    try:
        version = candidate.engine_version if candidate.engine_version in candidate.engine.versions else None
        caps = catalog_domain.capabilities(candidate.engine.slug, version)
    except (catalog_domain.CatalogLookupError, catalog_domain.CatalogError):
        return {**base, "status": screening.NOT_SCREENED, "rows": [], "reasons": []}
    found = screening.screen_candidate(caps, dims)
    status = found["status"]
    if status == screening.SCREENED_OUT and candidate.screen_override:
        status = screening.OVERRIDDEN
    return {**base, **found, "status": status}


def offered_for_tests(screen: dict[str, Any]) -> bool:
    """A candidate the documentation rules out is not offered for tests unless overridden."""
    return screen["status"] != screening.SCREENED_OUT


def refusal(candidate: Candidate) -> str | None:
    """Why the candidate may not be tested ("screen: ..."), or None."""
    screen = documentation_screen(candidate)
    if offered_for_tests(screen):
        return None
    reasons = "; ".join(render(r) for r in screen["reasons"])
    return _(
        "screen: the documentation screen rules this candidate out (%(reasons)s); keep it with a justification "
        "on the candidates page to test it anyway"
    ) % {"reasons": reasons}


JUSTIFICATION_MAX = 2000  # the page's input says the same (maxlength)


@transaction.atomic
def override_screen(*, candidate: Candidate, user, justification: str) -> Candidate:
    """Keep a candidate the documentation screen rules out, so it is tested anyway: who, when, why and
    the reasons it was ruled out on are kept on the candidate and in the audit trail."""
    require_editor(user, candidate.selection)
    justification = (justification or "").strip()
    if not justification:
        raise ValidationError({"justification": _("say why the candidate is kept despite the documentation screen")})
    if len(justification) > JUSTIFICATION_MAX:
        raise ValidationError(
            {
                "justification": _("a justification is at most %(max)s characters; this one has %(n)s")
                % {"max": f"{JUSTIFICATION_MAX:,}", "n": f"{len(justification):,}"}
            }
        )
    candidate = Candidate.objects.select_for_update().select_related("selection", "engine").get(pk=candidate.pk)
    if archived_refusal(candidate):
        raise ValidationError({"justification": archived_refusal(candidate)})
    screen = documentation_screen(candidate)
    if screen["status"] not in (screening.SCREENED_OUT, screening.OVERRIDDEN):
        raise ValidationError(
            {"justification": _("the documentation screen keeps this candidate: nothing to override")}
        )
    reasons = [render(r) for r in screen["reasons"]]
    candidate.screen_override = {
        "by": user.get_username(),
        "at": timezone.now().isoformat(),
        "justification": justification,
        "reasons": reasons,
        "reason_messages": to_json(screen["reasons"]),
    }
    candidate.save(update_fields=["screen_override"])
    audit(
        candidate.selection,
        user,
        "candidate.screen_overridden",
        field=f"candidate:{candidate.pk}",
        old={"status": screening.SCREENED_OUT, "reasons": reasons},
        new={"status": screening.OVERRIDDEN},
        justification=justification,
    )
    return candidate
