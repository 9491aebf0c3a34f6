from __future__ import annotations

from rest_framework import serializers

from benchmarks import suite
from benchmarks.models import Artifact, BenchmarkRun, RunPoint


class RunPointSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunPoint
        exclude = ["id", "run"]


class ArtifactSerializer(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["kind", "sha256", "size", "created_at"]


class RunSerializer(serializers.ModelSerializer):
    points = RunPointSerializer(many=True, read_only=True)
    artifacts = ArtifactSerializer(many=True, read_only=True)
    status_url = serializers.SerializerMethodField()
    needs_confirmation = serializers.BooleanField(read_only=True)

    class Meta:
        model = BenchmarkRun
        fields = [
            "id",
            "candidate",
            "test",
            "label",
            "origin",
            "status",
            "evidence",
            "tool",
            "tool_version",
            "format",
            "metadata",
            "definitions",
            "params",
            "verdicts",
            "notes",
            "partial",
            "error",
            "progress",
            "uploaded_by",
            "raw_sha256",
            "quality_warnings",
            "needs_confirmation",
            "evidence_confirmed_by",
            "evidence_confirmed_at",
            "created_at",
            "started_at",
            "finished_at",
            "status_url",
            "points",
            "artifacts",
        ]

    def get_status_url(self, obj) -> str:
        return f"/api/v1/runs/{obj.pk}/"


class RunSummarySerializer(RunSerializer):
    class Meta(RunSerializer.Meta):
        fields = [f for f in RunSerializer.Meta.fields if f not in {"definitions", "metadata"}]


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=False)
    test = serializers.ChoiceField(choices=suite.TEST_IDS)
    format = serializers.CharField(required=False, allow_blank=True, max_length=60)
    label = serializers.CharField(required=False, allow_blank=True, max_length=200)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["test"].choices = suite.TEST_IDS  # the suite's rows, read when used


class StartValidationSerializer(serializers.Serializer):
    test = serializers.ChoiceField(choices=suite.RUNNABLE_TEST_IDS)
    params = serializers.DictField(required=False, help_text="Overrides of the planned parameters")
    label = serializers.CharField(required=False, allow_blank=True, max_length=200)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["test"].choices = suite.RUNNABLE_TEST_IDS  # the suite's runnable rows, read when used
