"""`GET /api/v1/traces/<trace_id>/timeline?start=&end=&max_spans=&max_points=`: the longest
spans of a window, and its hardware counters, downsampled."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from hub.api.errors import ApiError
from predictors.protocol import CANCELLED, FAILED
from traces import timeline
from traces.api.common import TRACE_ID, TraceView, int_param, int_schema, readable

MAX_TIMELINE_SPANS = 10_000
# The statuses of an evaluation that stopped before it measured everything.
PARTIAL = (FAILED, CANCELLED)
MAX_COUNTER_POINTS = 10_000


class TraceTimeline(TraceView):
    query_parameters = ("start", "end", "max_spans", "max_points")

    @extend_schema(
        summary="The longest spans and the hardware counters of a trace in a time window",
        description=(
            "`total`: the spans (counter samples aside) overlapping the window; `spans`: the "
            "longest `max_spans` of them. `partial`: the trace's evaluation failed or was "
            "cancelled, and the spans are those it measured before it stopped."
        ),
        parameters=[
            TRACE_ID,
            OpenApiParameter("start", int_schema(0), description="Unix ns"),
            OpenApiParameter("end", int_schema(0), description="Unix ns, not before start"),
            OpenApiParameter(
                "max_spans",
                int_schema(1),
                description=f"default 1000; at most {MAX_TIMELINE_SPANS} are answered",
            ),
            OpenApiParameter(
                "max_points",
                int_schema(1),
                description="points per counter, default 1000 (each the max of its bucket); "
                f"at most {MAX_COUNTER_POINTS}",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        trace, evaluation = readable(request, trace_id)
        start = int_param(request, "start", None)
        end = int_param(request, "end", None)
        if start is not None and end is not None and end < start:
            raise ApiError([{"path": "end", "message": f"end ({end}) is before start ({start})."}])
        max_spans = int_param(request, "max_spans", 1000, minimum=1)
        max_points = int_param(request, "max_points", 1000, minimum=1)
        assert max_spans is not None and max_points is not None
        window = timeline.timeline(
            trace_id,
            start,
            end,
            min(max_spans, MAX_TIMELINE_SPANS),
            min(max_points, MAX_COUNTER_POINTS),
        )
        return Response(
            {
                "trace_id": trace_id,
                "start": start,
                "end": end,
                "trace_start": trace.start_ns if trace else None,
                "trace_end": trace.end_ns if trace else None,
                "total": window.total,
                "spans": window.spans,
                "counter_samples": window.counter_samples,
                "counters": window.counters,
                # The evaluation failed or was cancelled: the spans are what it measured before
                # it stopped.
                "partial": evaluation is not None and evaluation.status in PARTIAL,
            }
        )
