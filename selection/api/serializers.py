from __future__ import annotations

from django.contrib.auth import get_user_model
from rest_framework import serializers

from selection.domain import limits, procurement
from selection.domain.criteria import CRITERIA_BY_ID, DIMENSION_IDS
from selection.domain.messages import plain
from selection.models import (
    OWNER_FIELDS,
    PROCUREMENT_FIELDS,
    AuditEntry,
    Candidate,
    Constraints,
    CriterionWeight,
    Engine,
    Gate,
    Selection,
    Team,
    budget_message,
    drafter_conflict,
    owner_conflicts,
)
from selection.records.staleness import staleness

User = get_user_model()


class LookupField(serializers.SlugRelatedField):
    """A slug lookup that refuses text no database can compare (a NUL character) on its own field: PostgreSQL
    raises DataError for it in the WHERE clause, which DRF does not turn into a field error."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            raise serializers.ValidationError("must not contain a NUL (0x00) character")
        return super().to_internal_value(data)


class UserField(LookupField):
    def __init__(self, **kwargs):
        super().__init__(slug_field="username", queryset=User.objects.all(), **kwargs)


class EnglishMessagesField(serializers.JSONField):
    """A JSON field whose stored messages (selection.domain.messages) are shown as English text."""

    def to_representation(self, value):
        return plain(super().to_representation(value))


class SelectionSerializer(serializers.ModelSerializer):
    team = LookupField(slug_field="name", queryset=Team.objects.all())
    scenario_reasons = EnglishMessagesField(read_only=True)
    business_owner = UserField()
    platform_owner = UserField()
    security_owner = UserField()
    observer = UserField(required=False, allow_null=True)
    inputs_changed = serializers.SerializerMethodField(
        help_text="Set once the constraints, weights, gates, candidates or evidence changed after the current signed "
        "record was signed: since when, and what changed"
    )

    class Meta:
        model = Selection
        fields = [
            "id",
            "name",
            "description",
            "team",
            "status",
            "business_owner",
            "platform_owner",
            "security_owner",
            "observer",
            *PROCUREMENT_FIELDS,
            "inputs_changed",
            "scenario",
            "scenario_reasons",
            "scenario_mix",
            "scenario_accepted",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "status",
            "scenario",
            "scenario_reasons",
            "scenario_mix",
            "scenario_accepted",
            "created_at",
            "updated_at",
        ]

    def get_inputs_changed(self, obj) -> dict | None:
        stale = staleness(obj)
        return stale.as_dict() if stale else None

    def validate_team(self, team):
        user = self.context["request"].user
        if not user.is_superuser and not team.members.filter(pk=user.pk).exists():
            raise serializers.ValidationError("You are not a member of this team.")
        return team

    def validate(self, attrs):
        """Every rule at once (not the owners first, then the budget): members of the team, three different
        owners, a security owner who is not the team's only architect (else nobody drafts the record), and
        a budget with its currency."""
        team = attrs.get("team") or getattr(self.instance, "team", None)
        errors: dict[str, str] = {}
        for role in ("business_owner", "platform_owner", "security_owner", "observer"):
            user = attrs.get(role)
            if user is not None and team is not None and not team.members.filter(pk=user.pk).exists():
                errors[role] = f"{user.username} is not a member of team {team.name}."
        owners = {name: attrs.get(name, getattr(self.instance, name, None)) for name in OWNER_FIELDS}
        for name, message in owner_conflicts(owners, changed=tuple(attrs)).items():
            errors.setdefault(name, str(message))
        if self.instance is None or {"security_owner", "team"} & set(attrs):
            problem = drafter_conflict(team, owners["security_owner"])
            if problem:
                errors.setdefault("security_owner", str(problem))
        budget = {name: attrs.get(name, getattr(self.instance, name, None)) for name in PROCUREMENT_FIELDS[:2]}
        for name, problem in procurement.budget_problems(
            budget["monthly_budget"], budget["budget_currency"] or ""
        ).items():
            errors.setdefault(name, str(budget_message(problem)))
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def bounded(bounds: dict[str, tuple[float, float]]) -> dict[str, dict]:
    """extra_kwargs giving each number its bounds from `selection.domain.limits` (checked, and in the schema)."""
    return {name: {"min_value": low, "max_value": high} for name, (low, high) in bounds.items()}


class ConstraintsSerializer(serializers.ModelSerializer):
    class Meta:
        model = Constraints
        exclude = ["id", "selection"]
        read_only_fields = ["updated_at"]
        extra_kwargs = bounded(limits.CONSTRAINT_BOUNDS)


class WeightSerializer(serializers.ModelSerializer):
    updated_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = CriterionWeight
        fields = ["criterion", "weight", "source", "justification", "updated_by", "updated_at"]


class WeightsUpdateSerializer(serializers.Serializer):
    weights = serializers.DictField(child=serializers.FloatField(min_value=0), allow_empty=False)
    justification = serializers.CharField(allow_blank=False, trim_whitespace=True)

    def validate_weights(self, value):
        unknown = [k for k in value if k not in CRITERIA_BY_ID]
        if unknown:
            raise serializers.ValidationError(f"unknown criteria: {', '.join(unknown)}")
        return value


class GateSerializer(serializers.ModelSerializer):
    class Meta:
        model = Gate
        fields = ["dimension", "threshold"]


class GatesUpdateSerializer(serializers.Serializer):
    gates = serializers.DictField(child=serializers.FloatField(min_value=0, max_value=1))

    def validate_gates(self, value):
        unknown = [k for k in value if k not in DIMENSION_IDS]
        if unknown:
            raise serializers.ValidationError(
                f"unknown dimensions: {', '.join(unknown)}; one of {', '.join(DIMENSION_IDS)}"
            )
        return value


class EngineSerializer(serializers.ModelSerializer):
    class Meta:
        model = Engine
        fields = ["slug", "name", "catalog_version", "data"]


class CandidateSerializer(serializers.ModelSerializer):
    engine = serializers.SlugRelatedField(slug_field="slug", queryset=Engine.objects.all())
    selection = serializers.PrimaryKeyRelatedField(read_only=True)
    api_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        help_text="Endpoint API key: stored encrypted, never returned",
    )
    has_api_key = serializers.SerializerMethodField()
    model_justification = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Only for an endpoint serving another model than the selection's: why its evidence may stand "
        "(audited, printed in the record)",
    )
    kept_model = serializers.JSONField(source="model_justification", read_only=True)

    class Meta:
        model = Candidate
        fields = [
            "id",
            "selection",
            "engine",
            "engine_version",
            "label",
            "launch_flags",
            "launch_recipe",
            "endpoint_url",
            "metrics_url",
            "prefix_off_endpoint_url",
            "prefix_off_metrics_url",
            "api_key",
            "has_api_key",
            "model_name",
            "gpu_model",
            "gpu_count",
            "tensor_parallel",
            "kv_precision",
            "gpu_pool",
            "measured_capacity",
            "endpoint_probe",
            "model_justification",
            "kept_model",
            "created_at",
            "archived_at",
        ]
        read_only_fields = ["measured_capacity", "endpoint_probe", "created_at", "archived_at"]
        extra_kwargs = bounded(limits.CANDIDATE_BOUNDS)

    def get_has_api_key(self, obj) -> bool:
        return bool(obj.api_key_encrypted)


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = AuditEntry
        fields = ["at", "actor", "action", "field", "old", "new", "justification"]
