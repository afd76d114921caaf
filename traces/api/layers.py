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
        summary="Per-layer aggregates of a trace, per batch size, and its top kernels",
        description=(
            "Per level, name, op type and batch size (`batch_size` null: spans outside any "
            "batch), the count and the total, mean, p50, p99, min and max durations of the "
            "trace's spans; for a layer, the kernels correlated to it at that batch size "
            "(`kernel_count`, `kernel_total_ns`). Statistics are never mixed across batch "
            "sizes: `batch_sizes` lists those the trace holds. `kernels`: the "
            f"{TOP_KERNELS} kernels of most total time per batch size. Computed when the "
            "evaluation finished; for a running one, from the spans stored so far."
        ),
        parameters=[TRACE_ID],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        trace, _evaluation = readable(request, trace_id)
        rows = trace_aggregates.aggregates(trace) if trace is not None else []
        aggregates = []
        for row in rows:
            aggregate: dict[str, Any] = {
                "level": row.level,
                "name": row.name,
                "op_type": row.op_type,
                "batch_size": row.batch_size,
                "layer_index": row.layer_index,
                "parent": row.parent,
                "count": row.count,
                "total_ns": row.total_ns,
                "mean_ns": row.mean_ns,
                "p50_ns": row.p50_ns,
                "p99_ns": row.p99_ns,
                "min_ns": row.min_ns,
                "max_ns": row.max_ns,
            }
            if row.kernel_count is not None and row.level not in KERNEL_LEVELS:
                aggregate["kernel_count"] = row.kernel_count
                aggregate["kernel_total_ns"] = row.kernel_total_ns
            aggregates.append(aggregate)
        # A kernel's calls and time over the whole trace, per batch size: the aggregates keep
        # a row per kernel and parent path (the op and layer that ran it).
        summed: dict[tuple[int | None, str], list[int]] = {}
        for row in rows:
            if row.level == "system_library" and row.op_type == "kernel":
                found = summed.setdefault((row.batch_size, row.name), [0, 0])
                found[0] += row.count
                found[1] += row.total_ns
        top: dict[int | None, list[dict[str, Any]]] = {}
        for (batch_size, name), (count, total) in sorted(
            summed.items(), key=lambda item: (item[0][0] is None, item[0][0] or 0, -item[1][1])
        ):
            kernels = top.setdefault(batch_size, [])
            if len(kernels) < TOP_KERNELS:
                kernels.append(
                    {
                        "name": name,
                        "batch_size": batch_size,
                        "count": count,
                        "total_ns": total,
                        "mean_ns": total / count if count else 0.0,
                    }
                )
        return Response(
            {
                "trace_id": trace_id,
                "span_count": trace.span_count if trace else 0,
                "batch_sizes": sorted({r.batch_size for r in rows if r.batch_size is not None}),
                "aggregates": aggregates,
                "kernels": [kernel for kernels in top.values() for kernel in kernels],
            }
        )
