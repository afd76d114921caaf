"""`/api/v1/evaluations/`: launch evaluations, list them, read one.

Launching solves the request's model, framework and hardware constraints against the live
hosts and dispatches one evaluation (`hosts: one`) or one per matching host (`hosts: all`).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import actions
from evaluations.api.serializers import (
    EvaluationDetailSerializer,
    EvaluationRequestSerializer,
    EvaluationSerializer,
)
from evaluations.models import Evaluation
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.api.query import choice, flag, flag_parameter
from traces.traceparent import TraceParentError, parse_traceparent

READ_SCOPES = ("read", "evaluate")

_FILTERS = {
    # query parameter: (lookup, description)
    "model": ("model_name", "model name"),
    "framework": ("framework", "pytorch, tensorflow or onnxruntime"),
    "dataset": ("dataset_name", "dataset name"),
    "host": ("host__name", "the host it ran (or runs) on"),
    "status": ("status", "queued, dispatched, running, succeeded, failed or cancelled"),
    "user": ("user__username", "user name (staff see every user's evaluations)"),
    "group": ("group", "the evaluations one request launched"),
}


def visible_evaluations(request: Request) -> QuerySet[Evaluation]:
    return (
        Evaluation.objects.visible_to(request.user)
        .select_related("user", "host", "result")
        .prefetch_related("history")
    )


_FILTER_TYPES: dict[str, dict[str, Any]] = {
    "status": {"enum": [value for value, _ in Evaluation.STATUSES]},
    "group": {"type": OpenApiTypes.UUID},
}


LAUNCHED = inline_serializer(
    "LaunchedEvaluations",
    {
        "group": serializers.UUIDField(help_text="the launch's id: `?group=` lists them"),
        "count": serializers.IntegerField(min_value=1),
        "evaluations": EvaluationDetailSerializer(many=True),
    },
)


@extend_schema_view(
    get=extend_schema(
        summary="List your evaluations (staff: everyone's)",
        parameters=[
            OpenApiParameter(
                name,
                _FILTER_TYPES.get(name, {}).get("type", OpenApiTypes.STR),
                enum=_FILTER_TYPES.get(name, {}).get("enum"),
                description=text,
            )
            for name, (_, text) in _FILTERS.items()
        ],
    ),
)
class EvaluationList(generics.ListAPIView[Evaluation]):
    query_parameters = tuple(_FILTERS)
    serializer_class = EvaluationSerializer
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES, "POST": "evaluate"}

    def get_queryset(self) -> QuerySet[Evaluation]:
        queryset = visible_evaluations(self.request)
        params = self.request.query_params
        choice(self.request, "status", sorted(value for value, _ in Evaluation.STATUSES))
        group = params.get("group")
        if group is not None:
            try:
                uuid.UUID(group)
            except ValueError:
                raise ApiError(
                    [{"path": "group", "message": f"group must be a UUID, not {group[:40]!r}"}]
                ) from None
        for name, (lookup, _) in _FILTERS.items():
            value = params.get(name)
            if value:
                queryset = queryset.filter(**{lookup: value})
        return queryset

    @extend_schema(
        summary="Launch an evaluation",
        parameters=[
            OpenApiParameter(
                "traceparent",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="W3C trace context: the evaluations join the caller's trace",
                pattern="^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$",
            )
        ],
        request=EvaluationRequestSerializer,
        responses={
            201: LAUNCHED,
            404: error_response(404, "No such model or dataset (that you may use)."),
        },
    )
    def post(self, request: Request) -> Response:
        parent = None
        header = request.headers.get("traceparent")
        if header is not None:
            try:
                parent = parse_traceparent(header)
            except TraceParentError as error:
                raise ApiError([{"path": "traceparent", "message": str(error)}]) from None
        serializer = EvaluationRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        launched = actions.launch_evaluation(
            request.user,  # type: ignore[arg-type]
            serializer.validated_data,
            trace_parent=parent,
        )
        order = {e.pk: index for index, e in enumerate(launched)}
        evaluations = visible_evaluations(request).filter(pk__in=order)
        body = {
            "group": str(launched[0].group),
            "count": len(launched),
            "evaluations": EvaluationDetailSerializer(
                sorted(evaluations, key=lambda e: order[e.pk]), many=True
            ).data,
        }
        return Response(body, status=status.HTTP_201_CREATED)


class EvaluationDetail(generics.RetrieveAPIView[Evaluation]):
    query_parameters = ("predictions",)
    serializer_class = EvaluationDetailSerializer
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}

    @extend_schema(
        summary="One evaluation with its request, status history, progress and result",
        parameters=[
            flag_parameter("predictions", "include the per-input predictions in the result")
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_object(self) -> Evaluation:
        return get_object_or_404(visible_evaluations(self.request), pk=self.kwargs["pk"])

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        context["predictions"] = flag(self.request, "predictions")
        return context
