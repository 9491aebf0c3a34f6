"""The evidence: benchmark runs (uploaded or run by kvselect), their load points and artifacts."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from benchmarks.suite import TEST_IDS

TEST_CHOICES = [(name, name) for name in TEST_IDS]


class BenchmarkRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        PARSING = "parsing", _("Parsing")
        RUNNING = "running", _("Running")
        SUCCEEDED = "succeeded", _("Succeeded")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    class Origin(models.TextChoices):
        UPLOAD = "upload", _("CI upload")
        HARNESS = "harness", _("Validation run")

    class Evidence(models.TextChoices):
        MEASURED = "MEASURED", _("Measured")
        SIMULATED = "SIMULATED", _("Simulated")

    TERMINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    candidate = models.ForeignKey("selection.Candidate", on_delete=models.CASCADE, related_name="runs")
    test = models.CharField(max_length=32, choices=TEST_CHOICES)
    label = models.CharField(max_length=200, blank=True)
    origin = models.CharField(max_length=10, choices=Origin.choices)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED, db_index=True)
    evidence = models.CharField(max_length=10, choices=Evidence.choices, default=Evidence.MEASURED)
    tool = models.CharField(max_length=60, blank=True)
    tool_version = models.CharField(max_length=60, blank=True)
    format = models.CharField(max_length=60, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    definitions = models.JSONField(default=dict, blank=True)
    params = models.JSONField(default=dict, blank=True)
    verdicts = models.JSONField(default=list, blank=True)
    timeseries = models.JSONField(default=dict, blank=True)
    notes = models.JSONField(default=list, blank=True)
    partial = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    # the same error as a message (`Message.to_dict`) where one was written: a page renders it in its reader's
    # language (a malformed upload parsed in the background names its key path); `error` stays the English text
    error_message = models.JSONField(null=True, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    cancel_requested = models.BooleanField(default=False)
    idempotency_key = models.CharField(max_length=200, blank=True)
    uploaded_by = models.CharField(max_length=150, blank=True, help_text="user name or 'token:<name>'")
    raw_sha256 = models.CharField(max_length=64, blank=True)
    # Evidence-quality warnings of an upload (model or engine in the file's metadata not the
    # candidate's, too few requests): such a run counts for scoring only once someone who may edit
    # the selection has confirmed it as evidence (`benchmarks.uploads.quality`).
    quality_warnings = models.JSONField(default=list, blank=True)
    evidence_confirmed_by = models.CharField(max_length=150, blank=True)
    evidence_confirmed_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # the GPU pool and engine hosts the run loads (benchmarks.validation.hardware), held while it runs:
    # no other run needing one of them starts meanwhile
    hardware = models.JSONField(default=list, blank=True)
    enqueued_at = models.DateTimeField(
        null=True, blank=True, help_text="when the broker last took this run's task; empty: it refused it"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["candidate", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="unique_idempotency_key_per_candidate",
            )
        ]

    def __str__(self) -> str:
        return f"{self.test} #{self.pk}"

    @property
    def origin_label(self) -> str:
        """Where the run came from, as people read it: an upload (a CI job's or a person's, from the
        page or the API) or a validation run. The stored choice's label stays "CI upload" (no migration)."""
        return _("Upload") if self.origin == self.Origin.UPLOAD else _("Validation run")

    @property
    def is_simulated(self) -> bool:
        return self.evidence == self.Evidence.SIMULATED

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def needs_confirmation(self) -> bool:
        """Warned about and not yet confirmed as evidence: scoring leaves it out."""
        return bool(self.quality_warnings) and self.evidence_confirmed_at is None


class HardwareSlot(models.Model):
    """A GPU pool or engine host (`benchmarks.validation.hardware` key): the row a claim locks so that
    two workers never start runs on the same hardware at once. Who holds it is read from the running
    runs' `hardware`, never stored here (a dead worker's hold ends with its heartbeat)."""

    key = models.CharField(max_length=300, primary_key=True)

    def __str__(self) -> str:
        return self.key


class RunPoint(models.Model):
    """One load point of a run, with the summary statistics in kvselect's definitions (ms)."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="points")
    index = models.PositiveIntegerField()
    label = models.CharField(max_length=120, blank=True)
    concurrency = models.FloatField(null=True, blank=True)
    request_rate = models.FloatField(null=True, blank=True)
    achieved_concurrency = models.FloatField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    requests_completed = models.PositiveIntegerField(null=True, blank=True)
    requests_failed = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.JSONField(default=dict)
    tpot_ms = models.JSONField(default=dict)
    itl_ms = models.JSONField(default=dict)
    e2e_ms = models.JSONField(default=dict)
    request_throughput = models.FloatField(null=True, blank=True)
    output_token_throughput = models.FloatField(null=True, blank=True)
    input_token_throughput = models.FloatField(null=True, blank=True)
    error_rate = models.FloatField(null=True, blank=True)
    goodput = models.FloatField(null=True, blank=True)
    slo_attainment = models.FloatField(null=True, blank=True)
    client_bound = models.BooleanField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="unique_point_index")]


def artifact_path(instance: "Artifact", filename: str) -> str:
    return f"runs/{instance.run_id}/{instance.kind}/{filename}"


class Artifact(models.Model):
    class Kind(models.TextChoices):
        RAW = "raw", _("Raw upload")
        REQUESTS = "requests", _("Per-request records (Parquet)")
        ENGINE_LOG = "engine_log", _("Engine log")
        NATIVE = "native", _("Native result JSON")

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="artifacts")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    file = models.FileField(upload_to=artifact_path, max_length=300)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
