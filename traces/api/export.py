"""`GET /api/v1/traces/<trace_id>?format=chrome|otlp`: every span of a trace."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from traces.api.common import FORMAT, TRACE_ID, TraceView, export_response, readable


class TraceExport(TraceView):
    query_parameters = ("format",)

    @extend_schema(
        summary="Export a trace (Chrome trace JSON or OTLP JSON)",
        parameters=[TRACE_ID, FORMAT],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        readable(request, trace_id)
        return export_response(trace_id, request.query_params.get("format", "chrome"))
