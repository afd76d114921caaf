"""`GET /api/v1/evaluations/<id>/predictions/`: a result's per-input outputs, a page at a time;
and `GET /api/v1/evaluations/<id>/layers/`: the layer outputs it captured (`capture_inputs`).

Each row: `index` (the input's position in the split), `label` (its class in the dataset),
`classes` (the model's top-k classes) and `probabilities` (theirs); a detector's `boxes`, a
text recognizer's decoded `text`. The rows live in a columnar
file in the artifact store (`evaluations.outputs`); a page reads only the row groups it needs.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import FileResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import outputs
from evaluations.api.evaluations import READ_SCOPES, visible_evaluations
from hub import storage
from hub.errors import NotFound

ROW = inline_serializer(
    "PredictionRow",
    many=True,
    fields={
        "index": serializers.IntegerField(help_text="the input's position in the split"),
        "label": serializers.IntegerField(help_text="its class in the dataset"),
        "classes": serializers.ListField(child=serializers.IntegerField()),
        "probabilities": serializers.ListField(child=serializers.FloatField()),
        "boxes": serializers.ListField(
            child=serializers.ListField(child=serializers.FloatField()),
            required=False,
            help_text="a detector's: the [x, y, w, h] of each of its classes",
        ),
        "text": serializers.CharField(
            required=False, help_text="a text recognizer's: the text it decoded"
        ),
    },
)


class _Rows:
    """The rows of a predictions file as a sequence that pagination slices."""

    def __init__(self, path: str):
        self.path = path
        self._count: int | None = None

    def __len__(self) -> int:
        if self._count is None:
            self._count = outputs.count(self.path)
        return self._count

    def count(self) -> int:
        return len(self)

    def __getitem__(self, item: slice) -> list[dict[str, Any]]:
        start = item.start or 0
        stop = len(self) if item.stop is None else item.stop
        return outputs.page(self.path, start, max(stop - start, 0))


class EvaluationPredictions(generics.GenericAPIView[Any]):
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    anonymous_methods = ("GET", "HEAD")
    query_parameters = ("page", "page_size")

    @extend_schema(
        summary="An evaluation's per-input predictions, a page at a time",
        responses={200: ROW},
    )
    def get(self, request: Request, pk: UUID) -> Response:
        evaluation = get_object_or_404(visible_evaluations(request), pk=pk)
        result = getattr(evaluation, "result", None)
        if result is None or not result.predictions_path:
            raise NotFound(f"evaluation {pk} has no result yet", path="")
        page = self.paginate_queryset(_Rows(result.predictions_path))  # type: ignore[arg-type]
        return self.get_paginated_response(page)


class EvaluationLayers(generics.GenericAPIView[Any]):
    """`GET /api/v1/evaluations/<id>/layers/`: the layer outputs an evaluation launched with
    `capture_inputs` kept (the `.npz` capture file that `mlms diverge a.npz b.npz` reads)."""

    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    anonymous_methods = ("GET", "HEAD")

    @extend_schema(
        summary="The layer outputs an evaluation captured (capture_inputs), as a capture file",
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, pk: UUID) -> HttpResponseBase:
        evaluation = get_object_or_404(visible_evaluations(request), pk=pk)
        file = storage.resolve(outputs.layers_path_of(evaluation.pk))
        if not file.is_file():
            raise NotFound(f"evaluation {pk} kept no layer outputs", path="")
        response = FileResponse(file.open("rb"), content_type="application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="{pk}-layers.npz"'
        return response
