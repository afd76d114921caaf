"""`/api/v1/evaluations/`: launch evaluations, list them, read one.

Launching solves the request's model, framework and hardware constraints against the live
hosts and dispatches one evaluation (`hosts: one`) or one per matching host (`hosts: all`).
"""

from __future__ import annotations

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

from evaluations import actions, history, outputs
from evaluations.api.serializers import EvaluationDetailSerializer, EvaluationRequestSerializer
from evaluations.listing import EvaluationSerializer
from evaluations.models import Evaluation
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.api.query import flag, flag_parameter
from hub.errors import Invalid
from traces.traceparent import TraceParentError, parse_traceparent

READ_SCOPES = ("read", "evaluate")


def visible_evaluations(request: Request) -> QuerySet[Evaluation]:
    return (
        Evaluation.objects.visible_to(request.user)
        .select_related("user", "host", "result")
        .prefetch_related("history", "result__batch_results")
    )


_KIND_TYPES = {
    "integer": OpenApiTypes.INT,
    "uuid": OpenApiTypes.UUID,
    "date": OpenApiTypes.STR,
    "text": OpenApiTypes.STR,
    "choice": OpenApiTypes.STR,
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
        summary="List the evaluations you may read: yours, those shared with your groups, and published ones (anonymous: published ones; staff: all)",
        parameters=[
            *(
                OpenApiParameter(
                    spec.name,
                    _KIND_TYPES[spec.kind],
                    enum=list(spec.choices) or None,
                    description=spec.description,
                )
                for spec in history.FILTERS
            ),
            OpenApiParameter(
                "ordering",
                OpenApiTypes.STR,
                enum=list(history.ORDERINGS),
                description="sort by a field or metric, `-` for descending (default: "
                "-created_at); the latency and throughput metrics need `batch_size`",
            ),
        ],
    ),
)
class EvaluationList(generics.ListAPIView[Evaluation]):
    query_parameters = (*(spec.name for spec in history.FILTERS), "ordering")
    serializer_class = EvaluationSerializer
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES, "POST": "evaluate"}
    # Anonymous callers list and read published evaluations only (`visible_to`).
    anonymous_methods = ("GET", "HEAD")

    def get_queryset(self) -> QuerySet[Evaluation]:
        return history.apply(visible_evaluations(self.request), self.request.query_params)

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
    anonymous_methods = ("GET", "HEAD")

    @extend_schema(
        summary="One evaluation with its request, status history, progress and result",
        parameters=[
            flag_parameter("predictions", "include the per-input predictions in the result")
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_object(self) -> Evaluation:
        evaluation = get_object_or_404(visible_evaluations(self.request), pk=self.kwargs["pk"])
        result = getattr(evaluation, "result", None)
        if flag(self.request, "predictions") and result is not None and result.predictions_path:
            # Every row in one answer is for results of a size one answer can carry.
            rows = outputs.count(result.predictions_path)
            if rows > outputs.INLINE_ROWS:
                raise Invalid(
                    f"the result holds {rows} inputs' predictions, more than one answer carries "
                    f"({outputs.INLINE_ROWS}): read them a page at a time from "
                    f"/api/v1/evaluations/{evaluation.pk}/predictions/",
                    path="predictions",
                )
        return evaluation

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        context["predictions"] = flag(self.request, "predictions")
        return context
