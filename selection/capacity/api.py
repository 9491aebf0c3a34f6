"""POST /api/v1/capacity/: the capacity model over HTTP (same inputs as `manage.py kvcapacity`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from selection.domain.capacity.base import ENGINES, KV_DTYPES, CapacityError
from selection.domain.capacity.model_config import shipped_models
from selection.domain.capacity.plan import plan_for_model
from selection.domain.capacity.verdict import verdict
from selection.domain.messages import plain


class CapacityRequestSerializer(serializers.Serializer):
    model = serializers.CharField(required=False, help_text="A shipped model name (see GET)")
    config = serializers.JSONField(required=False, help_text="A Hugging Face config.json, instead of `model`")
    kv_dtype = serializers.ChoiceField(choices=list(KV_DTYPES), default="bf16")
    tp = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    pp = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    engine = serializers.ChoiceField(choices=list(ENGINES), default="vllm")
    gpu = serializers.CharField(required=False)
    gpu_mem_gib = serializers.FloatField(required=False, min_value=1, max_value=4096)
    contexts = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=10_000_000), required=False, max_length=32
    )
    gpu_memory_utilization = serializers.FloatField(required=False, min_value=0.01, max_value=1)
    mem_fraction_static = serializers.FloatField(required=False, min_value=0.01, max_value=1)
    free_gpu_memory_fraction = serializers.FloatField(required=False, min_value=0.01, max_value=1)
    constraints = serializers.DictField(
        required=False,
        help_text="Optional: peak_concurrency, avg/max input and output tokens, gpu_budget -> adds a verdict",
    )

    def validate(self, attrs):
        if not attrs.get("model") and not attrs.get("config"):
            raise serializers.ValidationError({"model": "give a shipped model name or a config"})
        return attrs


class CapacityView(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response(
            {
                "models": shipped_models(),
                "engines": list(ENGINES),
                "kv_dtypes": list(KV_DTYPES),
            }
        )

    @extend_schema(request=CapacityRequestSerializer, responses={200: dict})
    def post(self, request):
        serializer = CapacityRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        constraints = data.pop("constraints", None)
        source = data.pop("config", None) or data.pop("model")
        data.pop("model", None)
        try:
            plan = plan_for_model(source, **data)
            body = plain(plan.to_dict())  # notes as English text, as before
            if constraints:
                body["verdict"] = plain(verdict(plan, constraints))  # English text, as before
        except CapacityError as exc:
            field, _, message = str(exc).partition(": ")
            return Response({field or "non_field_errors": [message or str(exc)]}, status=400)
        return Response(body)
