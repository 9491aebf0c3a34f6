"""Helpers every page of the workspace shares: the selection (or a 404), the edit check, the page
context, and forms that put a service's ValidationError on the fields it names."""

from __future__ import annotations

from django import forms
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _

from selection import selectors
from selection.models import Candidate, Selection


def get_selection(request: HttpRequest, pk: int) -> Selection:
    return get_object_or_404(selectors.selections_for(request.user).select_related("team"), pk=pk)


def require_edit(request: HttpRequest, selection: Selection) -> None:
    if not selectors.can_edit(request.user, selection):
        raise PermissionDenied(_("Only architects of this selection's team can change it."))


def page_context(request: HttpRequest, selection: Selection, section: str, **extra) -> dict:
    return {
        "selection": selection,
        "section": section,
        "can_edit": selectors.can_edit(request.user, selection),
        "role": selectors.role_in(request.user, selection),
        **extra,
    }


def recent_audit(selection: Selection, limit: int = 50):
    return selection.audit.select_related("actor")[:limit]


class AccessibleErrorsMixin:
    """Point each invalid input at its error list (aria-describedby), so screen readers read the reason."""

    def add_error(self, field, error) -> None:
        super().add_error(field, error)
        for name in list(getattr(self, "_errors", None) or {}):
            if name in self.fields:
                bound = self[name]
                ids = [f"{bound.auto_id}_errors"] + ([f"{bound.auto_id}_helptext"] if bound.help_text else [])
                self.fields[name].widget.attrs["aria-describedby"] = " ".join(ids)


def attach_service_errors(form: forms.Form, error: ValidationError, prefixes: tuple[str, ...] = ()) -> None:
    """Put a service's ValidationError on the form fields it names ("weights.x" -> field "x")."""
    if not hasattr(error, "error_dict"):
        form.add_error(None, error)
        return
    for key, messages in error.message_dict.items():
        field = key
        for prefix in prefixes:
            if key.startswith(prefix + "."):
                field = key[len(prefix) + 1 :]
        for message in messages:
            if field in form.fields:
                form.add_error(field, message)
            else:
                form.add_error(None, f"{key}: {message}" if key != "__all__" else message)


def get_candidate(selection: Selection, candidate_pk: int) -> Candidate:
    """One of the selection's candidates, or a 404 (never another selection's)."""
    return get_object_or_404(selection.candidates.select_related("engine"), pk=candidate_pk)
