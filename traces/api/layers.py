"""`GET /api/v1/traces/<trace_id>/layers`: the per-level, per-name aggregates, the kernels'
time per layer, and the top kernels."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from predictors.protocol import KERNEL_LEVELS
from traces import aggregates as trace_aggregates
from traces.api.common import TRACE_ID, TraceView, readable

TOP_KERNELS = 50


class TraceLayers(TraceView):
    @extend_schema(
        summary="Per-level, per-name span aggregates of a trace, and its top kernels",
        parameters=[TRACE_ID],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        trace, _evaluation = readable(request, trace_id)
        rows = trace_aggregates.aggregates(trace) if trace is not None else []
        kernels = trace_aggregates.kernels_by_layer(trace_id) if trace is not None else {}
        aggregates = []
        for row in rows:
            aggregate: dict[str, Any] = {
                "level": row.level,
                "name": row.name,
                "op_type": row.op_type,
                "layer_index": row.layer_index,
                "count": row.count,
                "total_ns": row.total_ns,
                "mean_ns": row.mean_ns,
                "p50_ns": row.p50_ns,
                "p99_ns": row.p99_ns,
                "min_ns": row.min_ns,
                "max_ns": row.max_ns,
            }
            if row.name in kernels and row.level not in KERNEL_LEVELS:
                aggregate["kernel_count"], aggregate["kernel_total_ns"] = kernels[row.name]
            aggregates.append(aggregate)
        top = [r for r in rows if r.level == "system_library" and r.op_type == "kernel"]
        return Response(
            {
                "trace_id": trace_id,
                "span_count": trace.span_count if trace else 0,
                "aggregates": aggregates,
                "kernels": [
                    {
                        "name": row.name,
                        "count": row.count,
                        "total_ns": row.total_ns,
                        "mean_ns": row.mean_ns,
                    }
                    for row in top[:TOP_KERNELS]
                ],
            }
        )
