"""Read queries, with object-level permissions: a user sees only selections of their teams."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from selection.models import Candidate, Membership, Selection


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
    """The candidates the comparison, the scores and a new record take, in the selection's order
    (the order that gives each its chart colour)."""
    return selection.candidates.select_related("engine").order_by("id")


def role_in(user, selection: Selection) -> str | None:
    if user.is_superuser:
        return Membership.Role.ARCHITECT
    membership = Membership.objects.filter(team_id=selection.team_id, user=user).first()
    return membership.role if membership else None


def can_edit(user, selection: Selection) -> bool:
    return role_in(user, selection) == Membership.Role.ARCHITECT


def can_review(user, selection: Selection) -> bool:
    return role_in(user, selection) in {Membership.Role.ARCHITECT, Membership.Role.REVIEWER}


def can_create_selection(user) -> bool:
    """Architects of some team (and superusers) start selections; reviewers and procurement do not."""
    if not user.is_authenticated:
        return False
    return user.is_superuser or Membership.objects.filter(user=user, role=Membership.Role.ARCHITECT).exists()


def require_editor(user, selection: Selection) -> None:
    if not can_edit(user, selection):
        raise PermissionDenied("Only architects of this selection's team can change it.")
