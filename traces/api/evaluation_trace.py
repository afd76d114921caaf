"""`GET /api/v1/evaluations/<id>/trace?format=chrome|otlp`: every span of an evaluation's
trace."""

from __future__ import annotations

from uuid import UUID

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations.models import Evaluation
from traces.api.common import FORMAT, TraceView, export_response


class EvaluationTrace(TraceView):
    query_parameters = ("format",)

    @extend_schema(
        summary="Export an evaluation's trace (Chrome trace JSON or OTLP JSON)",
        parameters=[FORMAT],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, pk: UUID) -> Response:
        evaluation = get_object_or_404(Evaluation.objects.visible_to(request.user), pk=pk)
        return export_response(evaluation.trace_id, request.query_params.get("format", "chrome"))
