"""The decision: teams, selections, the constraints one-pager, weights, gates, candidates."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from selection.domain import limits, procurement
from selection.domain.capacity.model_config import model_context
from selection.domain.criteria import CRITERIA, DIMENSIONS
from selection.domain.roles import ROLE_LABELS
from selection.i18n import person_name

CRITERION_CHOICES = [(c.id, _(c.name)) for c in CRITERIA]  # msgids marked in selection.domain.criteria
DIMENSION_CHOICES = [(d.id, _(d.name)) for d in DIMENSIONS]
SCENARIO_CHOICES = [
    ("A", _("A · High-concurrency short text")),
    ("B", _("B · Long documents")),
    ("C", _("C · Multi-turn and agents")),
    ("D", _("D · Offline batch")),
]
KV_PRECISION_CHOICES = [("bf16", "bf16/fp16"), ("fp8", "fp8"), ("int8", "int8"), ("int4", "int4")]


def breach_message(kind: str, params: dict, meta) -> str:
    """A breach of `selection.domain.limits` as the field error shown to the user."""
    if kind == limits.OUT_OF_RANGE:
        return _("must be between %(min)s and %(max)s") % {
            "min": limits.plain_number(params["min"]),
            "max": limits.plain_number(params["max"]),
        }
    if kind == limits.ABOVE_FIELD:
        return _("must not exceed %(field)s (%(limit)s)") % {
            "field": meta.get_field(params["other"]).verbose_name,
            "limit": limits.plain_number(params["limit"], grouping=False),
        }
    if kind == limits.NEEDS_FIELD:
        return _("needs %(field)s to be filled in") % {"field": meta.get_field(params["other"]).verbose_name}
    return _("must be a finite number")


def budget_message(problem: str) -> str:
    """A `procurement.budget_problems` code as the field error shown to the user."""
    lo, hi = procurement.BUDGET_RANGE
    return {
        procurement.BUDGET_NEEDS_AMOUNT: _("a currency needs the monthly budget it is for"),
        procurement.BUDGET_NOT_A_NUMBER: _("must be a number"),
        procurement.BUDGET_OUT_OF_RANGE: _("must be between %(min)s and %(max)s")
        % {"min": limits.plain_number(lo), "max": limits.plain_number(hi)},
        procurement.BAD_CURRENCY: _("must be an ISO 4217 code of three capital letters, e.g. USD, EUR, CNY"),
    }[problem]


def passes_own_validators(instance: models.Model, name: str) -> bool:
    field = instance._meta.get_field(name)
    try:
        field.run_validators(getattr(instance, field.attname))
    except ValidationError:
        return False
    return True


class Team(models.Model):
    name = models.CharField(max_length=120, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        ARCHITECT = "architect", _("Architect (edits)")
        REVIEWER = "reviewer", _("Reviewer (comments, approves)")
        PROCUREMENT = "procurement", _("Procurement (reads, verifies)")

    team = models.ForeignKey(Team, on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.ARCHITECT)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="unique_team_member")]


OWNER_FIELDS = ("business_owner", "platform_owner", "security_owner")
# what the record's one-page summary states for procurement, beside the evidence
PROCUREMENT_FIELDS = ("monthly_budget", "budget_currency", "licence_terms", "vendor_support", "delivery_owner")


def owner_conflicts(owners: dict, changed: tuple[str, ...] | frozenset = ()) -> dict[str, str]:
    """Separation of duties: field -> message for each owner field that repeats a person already
    holding another owner role. ``owners`` maps business_owner / platform_owner / security_owner
    to users (or None); of two fields naming one person, the one in ``changed`` is blamed, else the
    later one. The post-launch observer may be any of them.
    """
    errors: dict[str, str] = {}
    holder: dict = {}
    for name in OWNER_FIELDS:
        user = owners.get(name)
        if user is None:
            continue
        other = holder.get(user.pk)
        if other is None:
            holder[user.pk] = name
            continue
        blamed, kept = (other, name) if other in changed and name not in changed else (name, other)
        errors[blamed] = _(
            "%(user)s is already the %(role)s: the business, platform and security owners must be three "
            "different people"
        ) % {"user": person_name(user), "role": Selection._meta.get_field(kept).verbose_name}
    return errors


def drafter_conflict(team: Team | None, security_owner) -> str | None:
    """The security owner never drafts the record (`records.services.create_draft`): a security owner who
    is the team's only architect leaves nobody who may draft it, and the selection would stop at its last
    step. Why, or None when another architect of the team can draft."""
    if team is None or security_owner is None:
        return None
    architects = set(
        Membership.objects.filter(team=team, role=Membership.Role.ARCHITECT).values_list("user_id", flat=True)
    )
    if security_owner.pk not in architects or architects - {security_owner.pk}:
        return None
    return _(
        "%(person)s is the team's only architect, and the security owner never drafts the decision record: "
        "nobody could draft it. Choose another security owner, or add a second architect to the team first."
    ) % {"person": security_owner.get_full_name() or security_owner.get_username()}


class Selection(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", _("Draft")
        VALIDATING = "validating", _("Validating")
        DECIDING = "deciding", _("Deciding")
        DECIDED = "decided", _("Decided")
        ARCHIVED = "archived", _("Archived")

    name = models.CharField(_("name"), max_length=200)
    description = models.TextField(_("description"), blank=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="selections")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    business_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("business owner")
    )
    platform_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("platform owner")
    )
    security_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("security owner")
    )
    observer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        verbose_name=_("post-launch observer"),
    )
    # procurement: what the record's first page states beside the decision
    monthly_budget = models.DecimalField(
        _("monthly budget"),
        max_digits=16,
        decimal_places=2,
        null=True,
        blank=True,
        help_text=_("What the deployment may cost per month, in the budget's currency"),
    )
    budget_currency = models.CharField(
        _("budget currency"), max_length=3, blank=True, help_text=_("ISO 4217 code, e.g. USD, EUR, CNY")
    )
    licence_terms = models.TextField(
        _("licence terms"),
        blank=True,
        help_text=_("Licence or subscription procurement buys under; the engine catalog's licence is shown beside it"),
    )
    vendor_support = models.TextField(
        _("vendor and support"),
        blank=True,
        help_text=_("Who supports the engine in production: vendor, contract and its level, or community only"),
    )
    delivery_owner = models.CharField(
        _("delivery owner"),
        max_length=200,
        blank=True,
        help_text=_("Who delivers the rollout (person or team) and answers for its schedule"),
    )
    scenario = models.CharField(max_length=1, choices=SCENARIO_CHOICES, blank=True)
    scenario_reasons = models.JSONField(default=list, blank=True)
    scenario_mix = models.JSONField(default=dict, blank=True)
    scenario_accepted = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Scores are written by the `recompute_scores` task when evidence changes, never on a page read:
    # when the latest change asked for rescoring (cleared by the task that covered it), and why the
    # last scoring failed (the field it names), so that pages say "being recomputed" or the error.
    scores_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    scoring_error = models.TextField(blank=True, default="", editable=False)
    # Freshness is a stamp: every change of a scoring input (constraints, weights, gates, candidates,
    # evidence, archiving) sets it in the change's own transaction; a snapshot is current when it was
    # computed from the inputs of this stamp (`Score.inputs_changed_at`), so pages compare two times
    # and rebuild nothing.
    inputs_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When a `recompute_scores` task was handed to the broker and has not finished: at most one is
    # pending per selection; changes meanwhile only mark the selection and that task picks them up.
    rescoring_queued_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        owners = {name: getattr(self, name) if getattr(self, f"{name}_id") else None for name in OWNER_FIELDS}
        errors: dict[str, Any] = owner_conflicts(owners)
        for name, problem in procurement.budget_problems(self.monthly_budget, self.budget_currency).items():
            errors[name] = budget_message(problem)
        if errors:
            raise ValidationError(errors)


class Constraints(models.Model):
    """The one-page sheet of business constraints. Units are in the field names."""

    selection = models.OneToOneField(Selection, on_delete=models.CASCADE, related_name="constraints")
    peak_concurrency = models.PositiveIntegerField(
        _("peak concurrent requests"), validators=[MinValueValidator(1), MaxValueValidator(1_000_000)]
    )
    p95_concurrency = models.PositiveIntegerField(
        _("p95 concurrent requests"), null=True, blank=True, validators=[MaxValueValidator(1_000_000)]
    )
    request_rate = models.FloatField(
        _("request rate (req/s)"), null=True, blank=True, validators=[MinValueValidator(0)]
    )
    tenants = models.PositiveIntegerField(_("tenants"), null=True, blank=True)
    avg_input_tokens = models.PositiveIntegerField(_("average input tokens"), validators=[MinValueValidator(1)])
    p95_input_tokens = models.PositiveIntegerField(_("p95 input tokens"), null=True, blank=True)
    max_input_tokens = models.PositiveIntegerField(
        _("max input tokens"), validators=[MinValueValidator(1), MaxValueValidator(10_000_000)]
    )
    avg_output_tokens = models.PositiveIntegerField(_("average output tokens"), validators=[MinValueValidator(1)])
    p95_output_tokens = models.PositiveIntegerField(_("p95 output tokens"), null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(_("max output tokens"), validators=[MinValueValidator(1)])
    prefix_sharing_ratio = models.FloatField(
        _("prefix-sharing ratio"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text=_("Share of input tokens that repeat a prefix already sent (system prompts, earlier turns)."),
    )
    multi_turn = models.BooleanField(_("multi-turn"), default=False)
    average_turns = models.FloatField(
        _("average turns per session"), null=True, blank=True, validators=[MinValueValidator(1)]
    )
    idle_seconds_between_turns = models.FloatField(
        _("idle time between turns (s)"), null=True, blank=True, validators=[MinValueValidator(0)]
    )
    concurrent_sessions = models.PositiveIntegerField(_("concurrent sessions"), null=True, blank=True)
    never_swap_sessions = models.PositiveIntegerField(
        _("sessions that must never be swapped out"), null=True, blank=True
    )
    # the second session class: every other session may be swapped out while idle, and accepts this much
    # extra time to first token when it resumes (the swap test judges it against this budget)
    swap_in_delay_budget_ms = models.FloatField(
        _("swap-in delay the other sessions accept (ms)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_(
            "Sessions other than the never-swap ones may be swapped out while idle: the extra time to first token "
            "they accept when they resume, over a turn whose history stayed in GPU memory"
        ),
    )
    ttft_p95_ms = models.FloatField(_("TTFT p95 budget (ms)"), null=True, blank=True, validators=[MinValueValidator(1)])
    tpot_p95_ms = models.FloatField(
        _("TPOT p95 budget (ms)"), null=True, blank=True, validators=[MinValueValidator(0.1)]
    )
    e2e_p95_ms = models.FloatField(
        _("end-to-end p95 budget (ms)"), null=True, blank=True, validators=[MinValueValidator(1)]
    )
    throughput_target_tokens_s = models.FloatField(
        _("throughput target (output tokens/s)"), null=True, blank=True, validators=[MinValueValidator(0)]
    )
    gpu_model = models.CharField(_("GPU model"), max_length=60)
    gpu_memory_gib = models.FloatField(
        _("GPU memory (GiB)"), validators=[MinValueValidator(1), MaxValueValidator(4096)]
    )
    gpu_count_budget = models.PositiveIntegerField(_("GPU count budget"), validators=[MinValueValidator(1)])
    cost_per_gpu_hour = models.DecimalField(
        _("cost per GPU-hour"),
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("In the budget's currency"),
    )
    # what an offload tier's host memory costs (its GiB are read from the candidate's launch flags):
    # an offload tier is never costed as free
    host_memory_cost_per_gib_month = models.DecimalField(
        _("host memory price per GiB-month"),
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("In the budget's currency: what the host memory of a KV offload tier costs"),
    )
    # long-term growth (decision step 5): the traffic expected after the horizon, as a multiple of today's
    growth_factor = models.FloatField(
        _("expected traffic growth (x)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text=_("Peak concurrency and throughput at the horizon as a multiple of today's, e.g. 1.5"),
    )
    growth_horizon_months = models.PositiveIntegerField(
        _("growth horizon (months)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(120)],
    )
    ops_team_size = models.PositiveIntegerField(_("operations team size"), validators=[MinValueValidator(1)])
    target_model = models.CharField(
        _("target model"), max_length=120, help_text=_("A shipped model config name, or upload one")
    )
    model_config = models.JSONField(_("uploaded model config"), null=True, blank=True)
    kv_precisions_allowed = models.JSONField(_("KV precision allowed"), default=list)
    notes = models.TextField(_("notes"), blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def clean(self) -> None:
        errors: dict[str, Any] = {}
        values = {f.attname: getattr(self, f.attname) for f in self._meta.concrete_fields}
        for field, kind, params in limits.constraint_breaches(values):
            if passes_own_validators(self, field):  # else clean_fields() has said it already
                errors[field] = breach_message(kind, params, self._meta)
        if self.multi_turn and not self.average_turns:
            errors.setdefault("average_turns", _("required when multi-turn is on"))
        if not self.multi_turn and self.never_swap_sessions:
            errors.setdefault("never_swap_sessions", _("only meaningful for multi-turn sessions"))
        if not self.multi_turn and self.swap_in_delay_budget_ms is not None:
            errors.setdefault("swap_in_delay_budget_ms", _("only meaningful for multi-turn sessions"))
        if self.growth_horizon_months and not self.growth_factor:
            errors.setdefault("growth_horizon_months", _("needs the expected traffic growth it is the horizon of"))
        context = model_context(self.target_model) if self.max_input_tokens and self.max_output_tokens else None
        if context and self.max_input_tokens + self.max_output_tokens > context:
            errors.setdefault(
                "max_input_tokens",
                _(
                    "%(model)s serves at most %(context)s tokens of context, input and output together; "
                    "%(input)s + %(output)s do not fit"
                )
                % {
                    "model": self.target_model,
                    "context": f"{context:,}",
                    "input": f"{self.max_input_tokens:,}",
                    "output": f"{self.max_output_tokens:,}",
                },
            )
        bad = [p for p in self.kv_precisions_allowed or [] if p not in dict(KV_PRECISION_CHOICES)]
        if bad:
            errors["kv_precisions_allowed"] = _("unknown precision(s): %(bad)s") % {"bad": ", ".join(map(str, bad))}
        if errors:
            raise ValidationError(errors)

    def as_domain(self) -> dict:
        """The plain mapping the pure domain functions take."""
        data = {
            f.name: getattr(self, f.name)
            for f in self._meta.concrete_fields
            if f.name not in {"id", "selection", "updated_at", "model_config"}
        }
        for name in ("cost_per_gpu_hour", "host_memory_cost_per_gib_month"):
            if data.get(name) is not None:
                data[name] = float(data[name])
        return data


class TraceImport(models.Model):
    """A production request log imported on a selection: the file, its SHA-256, its statistics and the
    one-pager it proposes (benchmarks.traces). Accepting the proposal writes it into the constraints."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", _("Proposed")
        ACCEPTED = "accepted", _("Accepted")

    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="traces")
    file = models.FileField(upload_to="traces/", max_length=300)
    name = models.CharField(_("file name"), max_length=255)
    sha256 = models.CharField(max_length=64, db_index=True)
    size_bytes = models.PositiveBigIntegerField()
    format = models.CharField(max_length=20)
    rows = models.PositiveBigIntegerField()
    statistics = models.JSONField()
    proposal = models.JSONField(help_text="[{field, value, basis}] in the one-pager's order")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PROPOSED)
    imported_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    imported_at = models.DateTimeField(auto_now_add=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-imported_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["selection", "sha256"], name="unique_trace_per_selection")]

    def __str__(self) -> str:
        return f"{self.name} ({self.sha256[:12]})"


class CriterionWeight(models.Model):
    class Source(models.TextChoices):
        PRESET = "preset", _("Preset")
        EDITED = "edited", _("Edited")

    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="weights")
    criterion = models.CharField(max_length=40, choices=CRITERION_CHOICES)
    weight = models.FloatField(validators=[MinValueValidator(0), MaxValueValidator(1)])
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.PRESET)
    justification = models.TextField(blank=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["selection", "criterion"], name="unique_weight_per_criterion")]
        ordering = ["id"]


class Gate(models.Model):
    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="gates")
    dimension = models.CharField(max_length=20, choices=DIMENSION_CHOICES)
    threshold = models.FloatField(
        _("minimum dimension score (0-1)"), validators=[MinValueValidator(0), MaxValueValidator(1)]
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["selection", "dimension"], name="unique_gate_per_dimension")]
        ordering = ["id"]


class AuditEntry(models.Model):
    """Who changed what, when, from what to what, and why. Append-only."""

    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="audit")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    at = models.DateTimeField(auto_now_add=True)
    action = models.CharField(max_length=60)
    field = models.CharField(max_length=80, blank=True)
    old = models.JSONField(null=True, blank=True)
    new = models.JSONField(null=True, blank=True)
    justification = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"


class Engine(models.Model):
    """An engine of the versioned catalog (documented KV-cache features with sources)."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=80)
    catalog_version = models.CharField(max_length=40)
    data = models.JSONField(help_text="The catalog entry as shipped, facts with their source links")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def versions(self) -> list[str]:
        return [v.get("version") for v in self.data.get("versions", [])]


class Candidate(models.Model):
    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="candidates")
    engine = models.ForeignKey(Engine, on_delete=models.PROTECT, related_name="candidates")
    engine_version = models.CharField(max_length=40)
    label = models.CharField(max_length=120, blank=True, help_text=_("e.g. 'vLLM prefix on'"))
    launch_flags = models.TextField(blank=True)
    launch_recipe = models.TextField(
        blank=True, help_text=_("Optional command the GPU worker runs to start the engine")
    )
    endpoint_url = models.URLField(blank=True)
    metrics_url = models.URLField(blank=True)
    # the same engine started with prefix caching off (vLLM --no-enable-prefix-caching, SGLang
    # --disable-radix-cache): the prefix-reuse test runs the same load on it to measure the saving
    prefix_off_endpoint_url = models.URLField(
        blank=True, help_text=_("The same engine started with prefix caching off, for the prefix-reuse test")
    )
    prefix_off_metrics_url = models.URLField(blank=True)
    api_key_encrypted = models.TextField(blank=True, editable=False)
    model_name = models.CharField(max_length=200, blank=True)
    gpu_model = models.CharField(max_length=60, blank=True)
    gpu_count = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    tensor_parallel = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    kv_precision = models.CharField(max_length=8, choices=KV_PRECISION_CHOICES, default="bf16")
    gpu_pool = models.SlugField(blank=True, help_text=_("GPU pool label: runs go to queue gpu.<label>"))
    measured_capacity = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # archived: out of the comparison, the scores and new records; kept with its runs and in the audit
    # trail (nullable without a default: SQLite adds the column in place)
    archived_at = models.DateTimeField(null=True, blank=True)
    # the architect kept a candidate the documentation screen rules out: {by, at, justification,
    # reasons} (audited; nullable without a default: SQLite adds the column in place)
    screen_override = models.JSONField(null=True, blank=True)
    # what the endpoint said it is when last probed (added, changed, before each run): served models,
    # max model length, KV pool, engine version, the engine host's GPUs, and the mismatches found
    # (benchmarks.harness.identity, selection.domain.provenance); {at, identity, findings}
    endpoint_probe = models.JSONField(null=True, blank=True, editable=False)
    # the architect kept an endpoint that serves another model than the selection's: {by, at,
    # justification, served, target} (audited; shown in the record)
    model_justification = models.JSONField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.label or f"{self.engine.name} {self.engine_version}"

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    @property
    def display_name(self) -> str:
        return str(self)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class UploadToken(models.Model):
    """A per-selection CI upload token: shown once, stored as a SHA-256 hash, revocable."""

    PREFIX = "kvs_"

    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="upload_tokens")
    name = models.CharField(max_length=80)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_hint = models.CharField(max_length=12, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    @classmethod
    def generate(cls) -> str:
        return cls.PREFIX + secrets.token_urlsafe(32)

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class Score(models.Model):
    """One scoring computation: a snapshot of inputs and the full breakdown."""

    selection = models.ForeignKey(Selection, on_delete=models.CASCADE, related_name="scores")
    computed_at = models.DateTimeField(auto_now_add=True)
    rules_version = models.CharField(max_length=40)
    inputs_hash = models.CharField(max_length=64, db_index=True)
    include_simulated = models.BooleanField(default=False)
    signable = models.BooleanField(default=False, help_text="False when SIMULATED evidence was used")
    leader = models.CharField(max_length=40, blank=True)
    coverage = models.FloatField(null=True, blank=True)
    result = models.JSONField()
    inputs = models.JSONField(default=dict)
    # the selection's `inputs_changed_at` when these inputs were read: the snapshot is current while
    # the selection's stamp is still this one
    inputs_changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-computed_at", "-id"]
        get_latest_by = "computed_at"


class DecisionRecord(models.Model):
    """A versioned decision record. Frozen at review start; immutable once signed (also in the database)."""

    class Status(models.TextChoices):
        DRAFT = "draft", _("Draft")
        IN_REVIEW = "in_review", _("In review")
        APPROVED = "approved", _("Approved")
        SIGNED = "signed", _("Signed")
        SUPERSEDED = "superseded", _("Superseded")

    FROZEN_FIELDS = (
        "snapshot",
        "snapshot_sha256",
        "decision",
        "rationale",
        "applies_to",
        "does_not_apply_to",
        "review_by",
        "version",
        "selection_id",
        "supersedes_id",
        "include_simulated",
        "project_checks",
        "tie_choice_id",
        "tie_ground",
        "tie_ground_by_id",
        "tie_ground_at",
    )

    selection = models.ForeignKey(Selection, on_delete=models.PROTECT, related_name="records")
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.DRAFT)
    decision = models.CharField(
        _("decision"), max_length=200, blank=True, help_text=_("The chosen candidate, in words")
    )
    rationale = models.TextField(_("rationale"), blank=True)
    applies_to = models.TextField(_("where the decision applies"), blank=True)
    does_not_apply_to = models.TextField(_("where it does not apply (risk boundary)"), blank=True)
    review_by = models.DateField(_("review-by date"), null=True, blank=True)
    include_simulated = models.BooleanField(default=False)
    # nullable without a default: SQLite adds the column in place (a table rebuild would drop the
    # immutability triggers of migration 0003)
    project_checks = models.JSONField(
        _("project checks"),
        null=True,
        blank=True,
        help_text=_(
            "The three checks of a real project (affected applications, teams and data; platform readiness; "
            "business acceptance and staged rollout), the security checklist and who watches after launch"
        ),
    )
    # When the scores tie (domain/tie_ground.py): which tied candidate the record chooses and the ground
    # its drafter stated for it, with who stated it and when (audited). Nullable without defaults: SQLite
    # adds the columns in place (a table rebuild would drop the immutability triggers of migration 0003)
    tie_choice = models.ForeignKey(
        Candidate,
        verbose_name=_("which tied candidate"),
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("Only when the scores tie: the tied candidate this record chooses."),
    )
    tie_ground = models.TextField(
        _("ground for choosing it"),
        null=True,
        blank=True,
        help_text=_(
            "Only when the scores tie: why this candidate, in full. The record says it was tied on the evidence "
            "and chosen on this ground; the business owner confirms it before approving."
        ),
    )
    tie_ground_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    tie_ground_at = models.DateTimeField(null=True, blank=True)
    snapshot = models.JSONField(null=True, blank=True)
    snapshot_sha256 = models.CharField(max_length=64, blank=True)
    # Set by the periodic re-evaluation check (records/reevaluation.py) on a signed record: since
    # when it is due and why (review-by date passed, newer engine major, hardware changed).
    reevaluation_due_since = models.DateTimeField(null=True, blank=True)
    # nullable, no default: SQLite adds the column in place instead of remaking the table, which would
    # drop the immutability triggers of migration 0003
    reevaluation_reasons = models.JSONField(null=True, blank=True)
    owners_notified_at = models.DateTimeField(null=True, blank=True)
    supersedes = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="superseded_by"
    )
    pdf = models.FileField(upload_to="records/", blank=True, max_length=300)
    pdf_sha256 = models.CharField(max_length=64, blank=True)
    signed_pdf = models.FileField(upload_to="records/signed/", blank=True, max_length=300)
    signed_sha256 = models.CharField(max_length=64, blank=True, db_index=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    review_started_at = models.DateTimeField(null=True, blank=True)
    signed_at = models.DateTimeField(null=True, blank=True)
    # an archived draft is out of the records list and cannot go to review; a draft only (the service
    # refuses the rest, and a record that left draft is frozen). Nullable without a default: SQLite adds
    # the column in place (a table rebuild would drop the immutability triggers of migration 0003)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-version"]
        constraints = [models.UniqueConstraint(fields=["selection", "version"], name="unique_record_version")]

    def __str__(self) -> str:
        return f"{self.selection.name} — record v{self.version}"

    @property
    def frozen(self) -> bool:
        return self.status != self.Status.DRAFT

    def clean(self) -> None:
        if self.status != self.Status.DRAFT:  # a frozen record keeps the date it was reviewed with
            return
        today = timezone.localdate()
        breach = limits.review_by_breach(self.review_by, today)
        if breach == limits.IN_PAST:
            raise ValidationError({"review_by": _("must be after today (%(today)s)") % {"today": today.isoformat()}})
        if breach == limits.TOO_FAR:
            raise ValidationError(
                {
                    "review_by": _("must be within %(years)s years, by %(latest)s at the latest")
                    % {"years": limits.REVIEW_BY_MAX_YEARS, "latest": limits.latest_review_by(today).isoformat()}
                }
            )

    @property
    def simulated(self) -> bool:
        return bool(self.snapshot and self.snapshot.get("simulated"))


class RecordApproval(models.Model):
    class Role(models.TextChoices):
        BUSINESS = "business", _(ROLE_LABELS["business"])
        PLATFORM = "platform", _(ROLE_LABELS["platform"])
        SECURITY = "security", _(ROLE_LABELS["security"])

    record = models.ForeignKey(DecisionRecord, on_delete=models.PROTECT, related_name="approvals")
    role = models.CharField(max_length=10, choices=Role.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    comment = models.TextField(blank=True)
    approved_at = models.DateTimeField(auto_now_add=True)
    signed_at = models.DateTimeField(null=True, blank=True)
    certificate_subject = models.CharField(max_length=300, blank=True)
    certificate_sha256 = models.CharField(max_length=64, blank=True)
    development_certificate = models.BooleanField(
        default=False, help_text="Signed with a certificate from a kvselect development CA: not for procurement"
    )
    # the stated ground of a record chosen among tied candidates, as the business owner confirmed it when
    # approving (domain/tie_ground.py); null: nothing to confirm, or another owner
    confirmed_tie_ground = models.TextField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["record", "role"], name="unique_approval_per_role")]
        ordering = ["id"]


class SigningCertificate(models.Model):
    """An owner's enrolled signing certificate: the public part only, never a key.

    A user has at most one current certificate; signing refuses any other, and the record's
    snapshot names it per owner. A replaced certificate keeps its row (records signed with it
    still name it), with ``replaced_at`` set.
    """

    class Source(models.TextChoices):
        UPLOADED = "uploaded", _("Uploaded by the owner")
        ISSUED = "issued", _("Issued by the configured CA")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="signing_certificates")
    sha256 = models.CharField(max_length=64, db_index=True)
    certificate_pem = models.TextField()
    subject = models.CharField(max_length=500)
    common_name = models.CharField(max_length=200, blank=True)
    issuer = models.CharField(max_length=500)
    trust_root = models.CharField(max_length=200, help_text="The configured trust root that certifies it")
    not_before = models.DateTimeField()
    not_after = models.DateTimeField()
    development = models.BooleanField(default=False, help_text="From a kvselect development CA: not for procurement")
    source = models.CharField(max_length=10, choices=Source.choices)
    enrolled_at = models.DateTimeField(auto_now_add=True)
    replaced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-enrolled_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user"], condition=Q(replaced_at__isnull=True), name="one_current_certificate_per_user"
            ),
            models.UniqueConstraint(
                fields=["sha256"], condition=Q(replaced_at__isnull=True), name="certificate_current_for_one_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.common_name or self.subject} ({self.sha256[:16]}…)"


class SignatureRequest(models.Model):
    """One owner's signature revision, prepared on the server and waiting for their CMS (owner-side signing).

    The prepared PDF (the record with the owner's signature dictionary and a reserved /Contents) stays
    in storage, keyed by the revision it extends (``base_sha256``) and the digest the owner signs: a CMS
    over another digest, an older request's digest, or for a record that has moved on is refused.
    Preparing again supersedes the pending request (its row is kept: an upload for it is named stale);
    completing it sets ``completed_at``; either way its prepared file goes. The private key never comes here.
    """

    record = models.ForeignKey(DecisionRecord, on_delete=models.CASCADE, related_name="signature_requests")
    role = models.CharField(max_length=10, choices=RecordApproval.Role.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    certificate_sha256 = models.CharField(max_length=64)
    base_sha256 = models.CharField(max_length=64, help_text="SHA-256 of the record PDF this revision extends")
    document_digest = models.CharField(max_length=64, help_text="SHA-256 over the prepared revision's /ByteRange")
    signed_attributes = models.BinaryField(help_text="DER CMS signed attributes the owner signs")
    reserved_start = models.PositiveIntegerField()
    reserved_end = models.PositiveIntegerField()
    # emptied (the file deleted) once the request is superseded or completed: its digest stays
    prepared_pdf = models.FileField(upload_to="records/prepared/", max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["record", "role"], name="signature_request_lookup")]

    def __str__(self) -> str:
        return f"{self.record} — {self.role} signature request {self.document_digest[:16]}…"


class RecordCitation(models.Model):
    """Evidence a record's snapshot was built from: every candidate it compared (`run` empty) and every
    run it lists. Written when review starts; from then on the record, the run, its artifacts and
    points, and the candidate cannot be deleted (PROTECT here; the database triggers of the
    migration `evidence_deletion_triggers` for everything else)."""

    record = models.ForeignKey(DecisionRecord, on_delete=models.PROTECT, related_name="citations")
    candidate = models.ForeignKey(Candidate, on_delete=models.PROTECT, related_name="citations")
    run = models.ForeignKey(
        "benchmarks.BenchmarkRun", on_delete=models.PROTECT, null=True, blank=True, related_name="citations"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["record", "run"], condition=models.Q(run__isnull=False), name="unique_cited_run"
            ),
            models.UniqueConstraint(
                fields=["record", "candidate"], condition=models.Q(run__isnull=True), name="unique_cited_candidate"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.record} cites {f'run #{self.run_id}' if self.run_id else self.candidate}"


class RecordComment(models.Model):
    record = models.ForeignKey(DecisionRecord, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]


class OpenItem(models.Model):
    """A readiness or security item an owner marked "not ready" on a record (raised when review
    starts). It keeps the record from procurement until an owner who confirms its section resolves
    it or waives it with a reason; both are audited. The signed PDF shows it as it was rendered."""

    class Status(models.TextChoices):
        OPEN = procurement.OPEN, _("open")
        RESOLVED = procurement.RESOLVED, _("resolved")
        WAIVED = procurement.WAIVED, _("waived")

    record = models.ForeignKey(DecisionRecord, on_delete=models.PROTECT, related_name="open_items")
    key = models.CharField(max_length=60, help_text="section.item of the project checks, e.g. readiness.logs")
    section = models.CharField(max_length=20)
    item = models.CharField(max_length=40)
    note = models.TextField(blank=True, help_text="What the owner's check said when it was marked not ready")
    owner_roles = models.JSONField(default=list, help_text="The owner roles whose approval confirms the item")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    reason = models.TextField(blank=True, help_text="How it was resolved, or why it may be waived")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["record", "key"], name="unique_open_item_per_record")]

    def __str__(self) -> str:
        return f"{self.record}: {self.key} ({self.status})"
