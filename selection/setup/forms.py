"""Web forms of the architect's workspace. They parse and check input; services do the writes.

No form here saves anything: views pass ``cleaned_data`` to ``selection.services`` and attach the
services' ``ValidationError`` back with :func:`attach_service_errors`.
"""

from __future__ import annotations

from typing import Any, Callable

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from selection.domain import criteria as criteria_domain
from selection.domain import limits, procurement
from selection.domain.capacity.model_config import shipped_models
from selection.domain.roles import ROLE_LABELS
from selection.i18n import criterion_name, dimension_name, person_name
from selection.models import (
    KV_PRECISION_CHOICES,
    OWNER_FIELDS,
    PROCUREMENT_FIELDS,
    Constraints,
    Membership,
    Selection,
    Team,
    budget_message,
    drafter_conflict,
    owner_conflicts,
)
from selection.web import AccessibleErrorsMixin, bound_numbers

# The one-pager's sections, in the order an architect thinks about them.
CONSTRAINT_GROUPS: list[tuple[str, str, list[str]]] = [
    (
        "traffic",
        _("Traffic"),
        [
            "peak_concurrency",
            "p95_concurrency",
            "request_rate",
            "throughput_target_tokens_s",
            "tenants",
            "growth_factor",
            "growth_horizon_months",
        ],
    ),
    (
        "context",
        _("Context"),
        [
            "avg_input_tokens",
            "p95_input_tokens",
            "max_input_tokens",
            "avg_output_tokens",
            "p95_output_tokens",
            "max_output_tokens",
            "prefix_sharing_ratio",
        ],
    ),
    (
        "multi_turn",
        _("Multi-turn"),
        [
            "multi_turn",
            "average_turns",
            "idle_seconds_between_turns",
            "concurrent_sessions",
            "never_swap_sessions",
            "swap_in_delay_budget_ms",
        ],
    ),
    ("latency", _("Latency budget"), ["ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms"]),
    (
        "hardware",
        _("Hardware & cost"),
        ["gpu_model", "gpu_memory_gib", "gpu_count_budget", "cost_per_gpu_hour", "host_memory_cost_per_gib_month"],
    ),
    ("team_model", _("Team & model"), ["ops_team_size", "target_model", "kv_precisions_allowed", "notes"]),
]
CONSTRAINT_FIELDS = [name for _key, _title, names in CONSTRAINT_GROUPS for name in names]

# Units shown next to each input (the model's labels name the quantity).
CONSTRAINT_UNITS = {
    "peak_concurrency": _("requests"),
    "p95_concurrency": _("requests"),
    "request_rate": _("req/s"),
    "tenants": _("tenants"),
    "p95_output_tokens": _("tokens"),
    "prefix_sharing_ratio": _("0-1"),
    "throughput_target_tokens_s": _("output tokens/s"),
    "avg_input_tokens": _("tokens"),
    "p95_input_tokens": _("tokens"),
    "max_input_tokens": _("tokens"),
    "avg_output_tokens": _("tokens"),
    "max_output_tokens": _("tokens"),
    "average_turns": _("turns"),
    "idle_seconds_between_turns": _("s"),
    "concurrent_sessions": _("sessions"),
    "never_swap_sessions": _("sessions"),
    "swap_in_delay_budget_ms": _("ms"),
    "ttft_p95_ms": _("ms"),
    "tpot_p95_ms": _("ms"),
    "e2e_p95_ms": _("ms"),
    "gpu_memory_gib": _("GiB"),
    "gpu_count_budget": _("GPUs"),
    "cost_per_gpu_hour": _("per GPU-hour"),
    "host_memory_cost_per_gib_month": _("per GiB-month"),
    "growth_factor": _("x today"),
    "growth_horizon_months": _("months"),
    "ops_team_size": _("people"),
}


class SelectionCreateForm(AccessibleErrorsMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=200)
    description = forms.CharField(label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 3}))
    team = forms.ModelChoiceField(
        label=_("Team"), queryset=Team.objects.none(), help_text=_("Teams where you are an architect.")
    )
    business_owner = forms.ModelChoiceField(label=_(ROLE_LABELS["business"]), queryset=None)
    platform_owner = forms.ModelChoiceField(label=_(ROLE_LABELS["platform"]), queryset=None)
    security_owner = forms.ModelChoiceField(
        label=_(ROLE_LABELS["security"]),
        queryset=None,
        help_text=_("Three different people own the decision; the security owner does not draft its record."),
    )
    observer = forms.ModelChoiceField(
        label=_("Post-launch observer"), queryset=None, required=False, help_text=_("May be one of the owners.")
    )

    OWNER_FIELDS = ("business_owner", "platform_owner", "security_owner", "observer")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        if user.is_superuser:
            teams = Team.objects.all()
        else:
            teams = Team.objects.filter(membership__user=user, membership__role=Membership.Role.ARCHITECT)
        self.fields["team"].queryset = teams.order_by("name").distinct()
        members = get_user_model().objects.filter(memberships__team__in=teams).distinct().order_by("username")
        label = user_labeller(members)
        for name in self.OWNER_FIELDS:
            self.fields[name].queryset = members
            self.fields[name].label_from_instance = label
        if teams.count() == 1:
            self.fields["team"].initial = teams.first().pk
        self.fields.update(procurement_fields())

    def clean_budget_currency(self) -> str:
        return (self.cleaned_data.get("budget_currency") or "").strip().upper()

    def clean(self):
        data = super().clean()
        add_owner_errors(self, data.get("team"), data)
        # the service's checks too, so that every error shows at once (not the owners first, then the budget)
        budget = {name: data.get(name) for name in PROCUREMENT_FIELDS[:2]}
        if "monthly_budget" not in self.errors and "budget_currency" not in self.errors:
            problems = procurement.budget_problems(budget["monthly_budget"], budget["budget_currency"] or "")
            for name, problem in problems.items():
                self.add_error(name, budget_message(problem))
        return data


def add_owner_errors(form: forms.Form, team: Team | None, data: dict, changed: tuple[str, ...] = ()) -> None:
    """The owners' rules on a form, all at once (the API's and the services' rules): each a member of the
    team; the business, platform and security owners three different people; and a security owner who is
    not the team's only architect, who could then never have the record drafted."""
    fields = [name for name in (*OWNER_FIELDS, "observer") if name in form.fields]
    if team:
        member_ids = set(Membership.objects.filter(team=team).values_list("user_id", flat=True))
        for name in fields:
            user = data.get(name)
            if user is not None and user.pk not in member_ids:
                message = _("%(user)s is not a member of team %(team)s")
                form.add_error(name, message % {"user": user_labeller([user])(user), "team": team.name})
    for name, message in owner_conflicts({n: data.get(n) for n in OWNER_FIELDS}, changed=changed).items():
        if name not in form.errors:
            form.add_error(name, message)
    problem = drafter_conflict(team, data.get("security_owner"))
    if problem and "security_owner" not in form.errors:
        form.add_error("security_owner", problem)


class OwnersForm(AccessibleErrorsMixin, forms.Form):
    """Who owns the decision (three different people) and who watches after launch, changed on the
    overview with the API's rules; the security owner may not be the team's only architect."""

    business_owner = forms.ModelChoiceField(label=_(ROLE_LABELS["business"]), queryset=None)
    platform_owner = forms.ModelChoiceField(label=_(ROLE_LABELS["platform"]), queryset=None)
    security_owner = forms.ModelChoiceField(
        label=_(ROLE_LABELS["security"]),
        queryset=None,
        help_text=_("Three different people own the decision; the security owner does not draft its record."),
    )
    observer = forms.ModelChoiceField(
        label=_("Post-launch observer"), queryset=None, required=False, help_text=_("May be one of the owners.")
    )

    def __init__(self, *args, selection: Selection, **kwargs):
        kwargs.setdefault("initial", {name: getattr(selection, f"{name}_id") for name in (*OWNER_FIELDS, "observer")})
        super().__init__(*args, **kwargs)
        self.selection = selection
        members = get_user_model().objects.filter(memberships__team=selection.team).order_by("username")
        label = user_labeller(members)
        for field in self.fields.values():
            field.queryset = members
            field.label_from_instance = label

    def clean(self):
        data = super().clean()
        changed = tuple(name for name in self.changed_data if name in OWNER_FIELDS)
        add_owner_errors(self, self.selection.team, data, changed=changed)
        return data


PROCUREMENT_WIDGETS = {
    "licence_terms": forms.Textarea(attrs={"rows": 2}),
    "vendor_support": forms.Textarea(attrs={"rows": 2}),
    "budget_currency": forms.TextInput(attrs={"size": 3, "autocapitalize": "characters"}),
}


def procurement_fields() -> dict[str, forms.Field]:
    """The selection's procurement fields (all optional) as form fields, labelled from the model."""
    return forms.fields_for_model(Selection, fields=PROCUREMENT_FIELDS, widgets=PROCUREMENT_WIDGETS)


class ProcurementForm(AccessibleErrorsMixin, forms.ModelForm):
    """What the record's first page states for procurement: budget (with its currency), licence terms,
    vendor and support, delivery owner. The model's clean refuses a budget without its currency."""

    class Meta:
        model = Selection
        fields = PROCUREMENT_FIELDS
        widgets = PROCUREMENT_WIDGETS

    def clean_budget_currency(self) -> str:
        return (self.cleaned_data.get("budget_currency") or "").strip().upper()


def user_labeller(users) -> Callable[[Any], str]:
    """How the people in `users` are offered in a choice: by their name, as their script writes it;
    the login name is added only to tell apart two people of the same name (or shown alone when a
    user has no name)."""
    names = [person_name(user) if (user.first_name or user.last_name) else "" for user in users]
    shared = {name for name in names if name and names.count(name) > 1}

    def label(user) -> str:
        full = person_name(user) if (user.first_name or user.last_name) else ""
        return f"{full} ({user.get_username()})" if full in shared else full or user.get_username()

    return label


class ConstraintsForm(AccessibleErrorsMixin, forms.ModelForm):
    """Every field of the one-pager. Model validators and Constraints.clean() run on is_valid()."""

    kv_precisions_allowed = forms.MultipleChoiceField(
        label=_("KV precision allowed"),
        choices=KV_PRECISION_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text=_("Cache precisions the team accepts (accuracy vs memory)."),
    )

    class Meta:
        model = Constraints
        fields = CONSTRAINT_FIELDS
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, model_configs: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        configs = shipped_models() if model_configs is None else model_configs
        if configs:
            current = self.initial.get("target_model") or ""
            choices = [("", "---------")] + [(c, c) for c in configs]
            if current and current not in configs:
                choices.append((current, current))
            self.fields["target_model"] = forms.ChoiceField(
                label=capfirst(Constraints._meta.get_field("target_model").verbose_name),
                choices=choices,
                help_text=_("A model config shipped with kvselect."),
            )
        bound_numbers(self, limits.CONSTRAINT_BOUNDS)
        for name, field in self.fields.items():
            field.unit = CONSTRAINT_UNITS.get(name, "")
            if isinstance(field.widget, forms.NumberInput):
                field.widget.attrs.setdefault("inputmode", "decimal")

    def _update_errors(self, errors):
        """The model's cross-field rules add nothing to a field that already has its own error ("must be
        at least 1" says it; "required when multi-turn is on" for a typed −5 would not)."""
        if hasattr(errors, "error_dict"):
            kept = {f: e for f, e in errors.error_dict.items() if f not in self._errors}
            if not kept:
                return
            errors = ValidationError(kept)
        super()._update_errors(errors)

    def groups(self):
        """(key, title, bound fields) per section, for the template."""
        return [(key, title, [self[name] for name in names]) for key, title, names in CONSTRAINT_GROUPS]

    def service_data(self) -> dict:
        return {name: self.cleaned_data.get(name) for name in CONSTRAINT_FIELDS}


class WeightsForm(AccessibleErrorsMixin, forms.Form):
    """One number per criterion of the selection's scenario mix (relative; normalised on save).

    Each starts at its current percentage (`criteria.percentages`): a row left as it is stays
    unedited when another changes (see `setup.services.update_weights`)."""

    justification = forms.CharField(
        label=_("Justification"),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Why these weights? Recorded in the audit trail with the change."),
        error_messages={"required": _("A justification is required to change weights.")},
    )

    def __init__(self, *args, criteria: list[criteria_domain.Criterion], current_percent: dict[str, float], **kwargs):
        super().__init__(*args, **kwargs)
        self.criteria, self.current_percent = criteria, current_percent
        justification = self.fields.pop("justification")
        for criterion in criteria:
            self.fields[criterion.id] = forms.FloatField(
                label=criterion_name(criterion.id),
                min_value=0,
                max_value=1000,
                initial=current_percent.get(criterion.id, 0.0),
                widget=forms.NumberInput(attrs={"step": "any", "data-weight-input": criterion.id}),
            )
        self.fields["justification"] = justification

    def weight_fields(self):
        return [self[c.id] for c in self.criteria]

    def weights(self) -> dict[str, float]:
        return {c.id: self.cleaned_data[c.id] for c in self.criteria}


class GatesForm(AccessibleErrorsMixin, forms.Form):
    """A checkbox and a threshold (0-1) per dimension; 2-3 gates recommended."""

    def __init__(self, *args, current: dict[str, float], **kwargs):
        super().__init__(*args, **kwargs)
        for dimension in criteria_domain.DIMENSIONS:
            self.fields[f"use_{dimension.id}"] = forms.BooleanField(
                label=dimension_name(dimension.id),
                required=False,
                initial=dimension.id in current,
                widget=forms.CheckboxInput(attrs={"data-gate-toggle": dimension.id}),
            )
            self.fields[f"threshold_{dimension.id}"] = forms.FloatField(
                label=_("Minimum score for %(dimension)s") % {"dimension": dimension_name(dimension.id)},
                required=False,
                min_value=0,
                max_value=1,
                initial=current.get(dimension.id, 0.6),
                widget=forms.NumberInput(attrs={"step": "0.05", "min": "0", "max": "1"}),
            )

    def rows(self):
        return [(d, self[f"use_{d.id}"], self[f"threshold_{d.id}"]) for d in criteria_domain.DIMENSIONS]

    def clean(self):
        data = super().clean()
        for dimension in criteria_domain.DIMENSIONS:
            if (
                data.get(f"use_{dimension.id}")
                and data.get(f"threshold_{dimension.id}") is None
                and f"threshold_{dimension.id}" not in self.errors
            ):
                self.add_error(f"threshold_{dimension.id}", _("a threshold between 0 and 1 is required for a gate"))
        return data

    def gates(self) -> dict[str, float]:
        return {
            d.id: self.cleaned_data[f"threshold_{d.id}"]
            for d in criteria_domain.DIMENSIONS
            if self.cleaned_data.get(f"use_{d.id}")
        }
