"""Read queries, with object-level permissions: a user sees only selections of their teams."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from selection.domain.records import OWNER_ROLES
from selection.models import Candidate, DecisionRecord, Membership, OpenItem, Selection


def selections_for(user) -> QuerySet[Selection]:
    if not user.is_authenticated:
        return Selection.objects.none()
    if getattr(user, "token", None) is not None and not user.pk:  # a per-selection upload token
        return Selection.objects.filter(pk=user.token.selection_id)
    if user.is_superuser:
        return Selection.objects.all()
    return Selection.objects.filter(team__members=user).distinct()


def candidates_for(user) -> QuerySet[Candidate]:
    return Candidate.objects.filter(selection__in=selections_for(user)).select_related("engine", "selection")


def compared_candidates(selection: Selection) -> QuerySet[Candidate]:
    """The candidates the comparison, the scores and a new record take (archived ones left out), in
    the selection's order (the order that gives each its chart colour)."""
    return selection.candidates.filter(archived_at__isnull=True).select_related("engine").order_by("id")


def archived_candidates(selection: Selection) -> QuerySet[Candidate]:
    return selection.candidates.filter(archived_at__isnull=False).select_related("engine").order_by("id")


def archived_refusal(candidate: Candidate) -> str | None:
    """Why an archived candidate takes no new evidence (runs, uploads, confirmations), or None when it is
    compared. One sentence for the page, the API and the upload form alike."""
    if candidate.archived_at is None:
        return None
    return _(
        "“%(name)s” is archived: it takes no new evidence. Restore it on the candidates page to test it or "
        "upload results for it again."
    ) % {"name": candidate.display_name}


def open_draft(selection: Selection, supersedes: DecisionRecord | None = None) -> DecisionRecord | None:
    """The draft a new draft attempt continues (one open draft per lineage: a second attempt edits it
    instead of leaving an orphan version); archived drafts are not open."""
    return selection.records.filter(
        status=DecisionRecord.Status.DRAFT, archived_at__isnull=True, supersedes=supersedes
    ).first()


def open_items_for(user) -> QuerySet[OpenItem]:
    """Open items of the records of the user's selections (another team's item is a 404)."""
    return OpenItem.objects.filter(record__selection__in=selections_for(user)).select_related("record__selection")


def owner_roles_of(user, selection: Selection) -> list[str]:
    """The owner roles (business, platform, security) `user` holds on `selection`."""
    return [role for role in OWNER_ROLES if getattr(selection, f"{role}_owner_id") == user.pk]


def role_in(user, selection: Selection) -> str | None:
    if user.is_superuser:
        return Membership.Role.ARCHITECT
    membership = Membership.objects.filter(team_id=selection.team_id, user=user).first()
    return membership.role if membership else None


def can_edit(user, selection: Selection) -> bool:
    """Architects of the team change a selection; nobody changes an archived one (restore it first)."""
    return can_archive(user, selection) and selection.status != Selection.Status.ARCHIVED


def can_archive(user, selection: Selection) -> bool:
    """Architects of the team archive a selection, its candidates and drafts, and restore them."""
    return role_in(user, selection) == Membership.Role.ARCHITECT


def can_review(user, selection: Selection) -> bool:
    return role_in(user, selection) in {Membership.Role.ARCHITECT, Membership.Role.REVIEWER}


def can_create_selection(user) -> bool:
    """Architects of some team (and superusers) start selections; reviewers and procurement do not."""
    if not user.is_authenticated:
        return False
    return user.is_superuser or Membership.objects.filter(user=user, role=Membership.Role.ARCHITECT).exists()


def require_editor(user, selection: Selection) -> None:
    if selection.status == Selection.Status.ARCHIVED and can_archive(user, selection):
        raise PermissionDenied("This selection is archived: restore it to change it.")
    if not can_edit(user, selection):
        raise PermissionDenied("Only architects of this selection's team can change it.")


def require_archiver(user, selection: Selection) -> None:
    if not can_archive(user, selection):
        raise PermissionDenied("Only architects of this selection's team can archive or restore.")
