"""Helpers every page of the workspace shares: the selection (or a 404), the edit check, the page
context, and forms that put a service's ValidationError on the fields it names."""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable

from django import forms
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.functional import SimpleLazyObject
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from selection import selectors
from selection.domain import limits
from selection.models import Candidate, Selection, breach_message


def get_selection(request: HttpRequest, pk: int) -> Selection:
    return get_object_or_404(selectors.selections_for(request.user).select_related("team"), pk=pk)


def require_edit(request: HttpRequest, selection: Selection) -> None:
    if selection.status == Selection.Status.ARCHIVED and selectors.can_archive(request.user, selection):
        raise PermissionDenied(_("This selection is archived: restore it to change it."))
    if not selectors.can_edit(request.user, selection):
        raise PermissionDenied(_("Only architects of this selection's team can change it."))


def require_archive(request: HttpRequest, selection: Selection) -> None:
    if not selectors.can_archive(request.user, selection):
        raise PermissionDenied(_("Only architects of this selection's team can archive or restore."))


def page_context(request: HttpRequest, selection: Selection, section: str, **extra) -> dict:
    return {
        "selection": selection,
        "section": section,
        "can_edit": selectors.can_edit(request.user, selection),
        "can_archive": selectors.can_archive(request.user, selection),
        "role": selectors.role_in(request.user, selection),
        **extra,
    }


def workspace(request: HttpRequest) -> dict:
    """Context processor: what the top navigation offers this user (asked only when a page shows it)."""
    return {"can_create_selection": SimpleLazyObject(lambda: selectors.can_create_selection(request.user))}


def recent_audit(selection: Selection, limit: int = 50, actions: tuple[str, ...] = ()):
    """The selection's latest audit entries; with `actions` (code prefixes such as "gates."), only
    those of that step: a step's page shows its own history, the overview the whole trail."""
    entries = selection.audit.select_related("actor")
    if actions:
        query = Q()
        for prefix in actions:
            query |= Q(action__startswith=prefix)
        entries = entries.filter(query)
    return entries[:limit]


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
            elif key == "__all__" or key in prefixes:
                form.add_error(None, message)  # about the whole form or the whole set ("weights")
            else:  # a field the form does not show: named in words, never by its key
                form.add_error(None, f"{capfirst(key.rsplit('.', 1)[-1].replace('_', ' '))}: {message}")


def service_saved(form: forms.Form, write: Callable[[], Any], prefixes: tuple[str, ...] = ()) -> bool:
    """Run a service write for a valid form: True when it went through, else False with the
    service's ValidationError on the form (see `attach_service_errors`)."""
    try:
        write()
    except ValidationError as error:
        attach_service_errors(form, error, prefixes)
        return False
    return True


def get_candidate(selection: Selection, candidate_pk: int) -> Candidate:
    """One of the selection's candidates, or a 404 (never another selection's)."""
    return get_object_or_404(selection.candidates.select_related("engine"), pk=candidate_pk)


def bound_numbers(form: forms.Form, bounds: dict[str, tuple[float, float]]) -> None:
    """Give each number field of `form` its bounds from `selection.domain.limits`, with the same message
    as the services ("must be between 1 and 100,000"), in place of the database's integer range."""
    for name, (low, high) in bounds.items():
        field = form.fields.get(name)
        if not isinstance(field, (forms.IntegerField, forms.FloatField, forms.DecimalField)):
            continue
        field.validators = [v for v in field.validators if not isinstance(v, (MinValueValidator, MaxValueValidator))]
        field.validators.append(BoundsValidator(low, high))
        field.widget.attrs.update(
            {"min": limits.plain_number(low, grouping=False), "max": limits.plain_number(high, grouping=False)}
        )


class BoundsValidator:
    def __init__(self, low: float, high: float):
        self.low, self.high = low, high

    def __call__(self, value) -> None:
        if value is not None and not self.low <= float(value) <= self.high:
            raise ValidationError(breach_message(limits.OUT_OF_RANGE, {"min": self.low, "max": self.high}, None))

    def __eq__(self, other) -> bool:
        return isinstance(other, BoundsValidator) and (self.low, self.high) == (other.low, other.high)


def action_of(page: str, *page_kwargs: str) -> Callable:
    """A POST-only action URL of `page` (a URL name taking `page_kwargs` of the action's kwargs, the
    selection's as `pk`): a GET
    (a reload or a bookmark after a refusal) opens the page instead of a 405, and a refusal the action
    renders carries `page_url` in its context, which the page's script puts in the address bar."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method == "GET":
                get_selection(request, kwargs["pk"])  # another team's selection stays a 404, here too
                return redirect(page, **{name: kwargs[name] for name in page_kwargs})
            if request.method != "POST":
                return HttpResponseNotAllowed(["GET", "POST"])
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def page_url(page: str, **kwargs: Any) -> str:
    """The URL of the page a refusal belongs to (the body's data-page-url; see `action_of`)."""
    return reverse(page, kwargs=kwargs)
