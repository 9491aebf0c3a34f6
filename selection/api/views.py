"""REST API for selections. Thin: validate with a serializer, call a service, return a serializer."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from selection.api.serializers import (
    AuditEntrySerializer,
    CandidateSerializer,
    ConstraintsSerializer,
    EngineSerializer,
    GateSerializer,
    GatesUpdateSerializer,
    SelectionSerializer,
    WeightSerializer,
    WeightsUpdateSerializer,
)
from selection.candidates.services import add_candidate, archive_candidate, restore_candidate, update_candidate
from selection.domain.headline import decision_headline
from selection.domain.messages import Message, plain
from selection.models import Engine
from selection.scoring.services import ScoresState, compute_scores, scores_state
from selection.selectors import candidates_for, compared_candidates, require_editor, selections_for
from selection.setup.services import (
    accept_scenario,
    create_selection,
    save_constraints,
    set_gates,
    update_selection,
    update_weights,
)


def require_api_edit(request, selection) -> None:
    """403 before the body is read: who may not change the selection learns that first, not its field errors."""
    require_editor(request.user, selection)


def _scores_body(state: ScoresState) -> dict:
    """The latest scoring as the API returns it: its identity, freshness and the full result."""
    score = state.score
    return {
        "id": score.pk,
        "current": state.current,
        "recomputing": state.recomputing,
        "computed_at": score.computed_at,
        "rules_version": score.rules_version,
        "inputs_hash": score.inputs_hash,
        "include_simulated": score.include_simulated,
        "signable": score.signable,
        "leader": score.leader,
        "coverage": score.coverage,
        "result": plain(score.result),  # its sentences as English text, as before
        "decision": decision_body(score.result),
    }


def decision_body(result: dict) -> dict:
    """The comparison's headline as the API states it: the verdict (clear, close, inconclusive, misfit,
    tie, none), the recommended candidate (None for a tie: a tie names no winner), the tied candidates,
    what the choice rests on and every constraint the recommendation misses, in English."""
    out = decision_headline(result)
    return plain(
        {
            "verdict": out["verdict"],
            "recommended": (out.get("leader") or {}).get("candidate"),
            "tied": [c.get("candidate") for c in out.get("tied") or []],
            "rests_on": result.get("rests_on"),
            "misses": out.get("misses") or [],
            "reason": out.get("verdict_reason"),
        }
    )


class SelectionViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = SelectionSerializer

    def get_queryset(self):
        return selections_for(self.request.user).select_related(
            "team", "business_owner", "platform_owner", "security_owner", "observer"
        )

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = create_selection(user=self.request.user, **data)

    def update(self, request, *args, **kwargs):
        require_api_edit(request, self.get_object())
        return super().update(request, *args, **kwargs)

    def perform_update(self, serializer):
        serializer.instance = update_selection(
            selection=serializer.instance, user=self.request.user, **serializer.validated_data
        )

    @extend_schema(request=ConstraintsSerializer, responses=ConstraintsSerializer)
    @action(detail=True, methods=["get", "put"])
    def constraints(self, request, pk=None, format=None):
        selection = self.get_object()
        instance = getattr(selection, "constraints", None) if hasattr(selection, "constraints") else None
        if request.method == "GET":
            if instance is None:
                return Response({"detail": "No constraints yet: PUT the one-pager first."}, status=404)
            return Response(ConstraintsSerializer(instance).data)
        require_api_edit(request, selection)
        serializer = ConstraintsSerializer(instance, data=request.data)
        serializer.is_valid(raise_exception=True)
        constraints = save_constraints(selection=selection, user=request.user, data=serializer.validated_data)
        return Response(ConstraintsSerializer(constraints).data)

    @extend_schema(request=WeightsUpdateSerializer, responses=WeightSerializer(many=True))
    @action(detail=True, methods=["get", "put"], pagination_class=None)
    def weights(self, request, pk=None, format=None):
        selection = self.get_object()
        if request.method == "PUT":
            require_api_edit(request, selection)
            serializer = WeightsUpdateSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            update_weights(selection=selection, user=request.user, **serializer.validated_data)
        return Response(WeightSerializer(selection.weights.all(), many=True).data)

    @extend_schema(request=GatesUpdateSerializer, responses=GateSerializer(many=True))
    @action(detail=True, methods=["get", "put"], pagination_class=None)
    def gates(self, request, pk=None, format=None):
        selection = self.get_object()
        warnings: list[Message] = []
        if request.method == "PUT":
            require_api_edit(request, selection)
            serializer = GatesUpdateSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            warnings = set_gates(selection=selection, user=request.user, **serializer.validated_data)
        response = Response(GateSerializer(selection.gates.all(), many=True).data)
        if warnings:
            response["Warning"] = '199 kvselect "' + plain(warnings[0]).replace('"', "'") + '"'
        return response

    @extend_schema(request=None, responses=SelectionSerializer)
    @action(detail=True, methods=["post"], url_path="accept-scenario")
    def accept_scenario(self, request, pk=None, format=None):
        selection = self.get_object()
        accept_scenario(selection=selection, user=request.user)
        return Response(SelectionSerializer(selection, context={"request": request}).data)

    @extend_schema(methods=["GET"], responses=CandidateSerializer(many=True))
    @extend_schema(methods=["POST"], request=CandidateSerializer, responses={201: CandidateSerializer})
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def candidates(self, request, pk=None, format=None):
        selection = self.get_object()
        if request.method == "GET":
            return Response(CandidateSerializer(selection.candidates.select_related("engine"), many=True).data)
        require_api_edit(request, selection)
        serializer = CandidateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        api_key = data.pop("api_key", "")
        justification = data.pop("model_justification", "")
        candidate = add_candidate(
            selection=selection, user=request.user, data=data, api_key=api_key, model_justification=justification
        )
        return Response(CandidateSerializer(candidate).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("include_simulated", bool)], request=None, responses={200: dict, 404: dict}
    )
    @action(detail=True, methods=["get", "post"])
    def scores(self, request, pk=None, format=None):
        """The latest scoring with the full breakdown (a GET only reads: scores are written when evidence
        changes); POST recomputes it now. `current` says whether it matches today's inputs,
        `recomputing` whether a recompute is queued for inputs it does not cover yet."""

        selection = self.get_object()
        include_simulated = request.query_params.get("include_simulated") in {"1", "true", "yes"}
        if request.method == "POST":
            if not compared_candidates(selection).exists():
                return Response({"detail": "No candidates yet: add candidates before scoring."}, status=404)
            compute_scores(selection, include_simulated=include_simulated)
        state = scores_state(selection, include_simulated)
        if state.score is None:
            detail = "No scores yet: POST to this URL to compute them."
            if state.recomputing:
                detail = "No scores yet: they are being computed; try again in a moment."
            return Response({"detail": detail, "recomputing": state.recomputing, "error": state.error}, status=404)
        return Response(_scores_body(state))

    @extend_schema(responses=AuditEntrySerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)  # the newest 500, unpaginated (as documented)
    def audit(self, request, pk=None, format=None):
        selection = self.get_object()
        return Response(AuditEntrySerializer(selection.audit.select_related("actor")[:500], many=True).data)


class CandidateViewSet(mixins.RetrieveModelMixin, mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """A candidate; DELETE (or POST …/archive/) archives it, as the candidates page does: it leaves the
    comparison, the scores and new records and takes no new evidence, and is kept with its runs (nothing
    is deleted from the workspace). POST …/restore/ brings it back; both are audited."""

    serializer_class = CandidateSerializer

    def get_queryset(self):
        return candidates_for(self.request.user)

    def update(self, request, *args, **kwargs):
        require_api_edit(request, self.get_object().selection)
        return super().update(request, *args, **kwargs)

    @extend_schema(request=None, responses=CandidateSerializer, summary="Archive the candidate (kept, restorable)")
    def destroy(self, request, pk=None, format=None):
        return self.archive(request, pk=pk)

    @extend_schema(request=None, responses=CandidateSerializer)
    @action(detail=True, methods=["post"])
    def archive(self, request, pk=None, format=None):
        candidate = archive_candidate(candidate=self.get_object(), user=request.user)
        return Response(CandidateSerializer(candidate).data)

    @extend_schema(request=None, responses=CandidateSerializer)
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None, format=None):
        candidate = restore_candidate(candidate=self.get_object(), user=request.user)
        return Response(CandidateSerializer(candidate).data)

    def perform_update(self, serializer):
        data = dict(serializer.validated_data)
        api_key = data.pop("api_key", None)
        justification = data.pop("model_justification", "")
        serializer.instance = update_candidate(
            candidate=serializer.instance,
            user=self.request.user,
            data=data,
            api_key=api_key,
            model_justification=justification,
        )


class EngineViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = EngineSerializer
    queryset = Engine.objects.all()
    lookup_field = "slug"
