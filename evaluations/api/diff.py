"""`GET /api/v1/compare/traces/?a=<id>,…&b=<id>,…`: two sides of up to 32 evaluations in all
compared item by item down the levels of their traces (`evaluations.compare.diff`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations.api.evaluations import READ_SCOPES
from evaluations.compare import diff


def side_parameter(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.STR,
        required=True,
        description=f"{what}: 1 to {diff.MAX_SIDE} evaluation ids separated by commas (ones "
        f"you may read; {diff.MAX_EVALUATIONS} in all)",
    )


class CompareTraces(generics.GenericAPIView[Any]):
    anonymous_methods = ("GET", "HEAD")
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    query_parameters = ("a", "b", "level", "parent", "batch_size", "noise")

    @extend_schema(
        summary="Diff the traces of two sides of runs, item by item, level by level",
        description=(
            "Per item of `level` (stages, batches, layers, ops, kernels or counters): each "
            "side's median with its interval, the ratio B/A with its test and verdict, the "
            "items added and removed, and each item's contribution to the difference of the "
            "time per inference, largest first, with a waterfall of the largest. With two runs "
            "or more a side the test's unit is one value per run (each run's median of the "
            "item); one run against one compares their spans. See docs/trace-diff.md."
        ),
        parameters=[
            side_parameter("a", "side A, the baseline"),
            side_parameter("b", "side B, compared with A"),
            OpenApiParameter(
                "level",
                OpenApiTypes.STR,
                enum=list(diff.LEVELS),
                description="the level listed (default: layer, else the first the traces hold)",
            ),
            OpenApiParameter(
                "parent",
                OpenApiTypes.STR,
                description="with level op or kernel: only the items inside this layer or op "
                "(an item's `key`)",
            ),
            OpenApiParameter(
                "batch_size",
                OpenApiTypes.INT,
                description="the batch size compared (default: the smallest every run traced)",
            ),
            OpenApiParameter(
                "noise",
                OpenApiTypes.STR,
                description="the difference of the medians, in per cent (0 to 50), below which "
                "a difference is reported as noise (default 5)",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        return Response(diff.from_query(request.user, request.query_params))
