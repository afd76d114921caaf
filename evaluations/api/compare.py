"""`GET /api/v1/compare/?evaluations=<id>,<id>,…`: two to eight evaluations side by side
against a baseline (`evaluations.compare`); and `GET /api/v1/evaluations/<id>/inputs/<n>/`:
input `n` of the evaluation's dataset split, as the image file it is stored as, so that a
comparison can show the inputs on which evaluations disagree."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pyarrow.parquet as pq
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import compare
from evaluations.api.evaluations import READ_SCOPES, visible_evaluations
from hub import storage
from hub.api.query import flag, flag_parameter
from hub.errors import NotFound
from predictors.data.readers import input_column
from predictors.tasks import input_columns

# The content type an input is served as, by its dataset's encoding (others as bytes).
_IMAGE_TYPES = {
    "jpeg": "image/jpeg",
    "jpg": "image/jpeg",
    "png": "image/png",
    "text": "text/plain; charset=utf-8",
}


class Compare(generics.GenericAPIView[Any]):
    anonymous_methods = ("GET", "HEAD")
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    query_parameters = ("evaluations", "baseline", "all", "noise")

    @extend_schema(
        summary="Compare two to eight evaluations against a baseline",
        parameters=[
            OpenApiParameter(
                "evaluations",
                OpenApiTypes.STR,
                required=True,
                description="2 to 8 evaluation ids separated by commas (ones you may read)",
            ),
            OpenApiParameter(
                "baseline",
                OpenApiTypes.UUID,
                description="the evaluation the others are compared with (default: the first)",
            ),
            flag_parameter("all", "true: every row of 'what differs', not only differing ones"),
            OpenApiParameter(
                "noise",
                OpenApiTypes.STR,
                description="the difference of the medians, in per cent (0 to 50), below which "
                "a latency difference is reported as noise (default 5)",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        ids = compare.parse_ids(request.query_params.get("evaluations"))
        noise = compare.parse_noise(request.query_params.get("noise"))
        evaluations = compare.load(request.user, ids, request.query_params.get("baseline"))
        return Response(compare.compare(evaluations, show_all=flag(request, "all"), noise=noise))


class EvaluationInput(generics.GenericAPIView[Any]):
    anonymous_methods = ("GET", "HEAD")
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    query_parameters = ()

    @extend_schema(
        summary="Input n of an evaluation's dataset split, as its stored image file",
        responses={(200, "image/*"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, pk: UUID, index: int) -> HttpResponse:
        evaluation = get_object_or_404(visible_evaluations(request), pk=pk)
        dataset = evaluation.dataset
        split = (dataset.content.get("splits") or {}).get(evaluation.split) if dataset else None
        path = str((split or {}).get("path") or "")
        if not path.startswith("repo://"):
            raise NotFound(f"the dataset of evaluation {pk} is no longer stored", path="")
        try:
            file = storage.resolve(path[len("repo://") :])
            with pq.ParquetFile(file) as parquet:
                start = 0
                for group in range(parquet.metadata.num_row_groups):
                    size = parquet.metadata.row_group(group).num_rows
                    if start <= index < start + size:
                        # `image`, `audio` or `input` (.npy tensors, text), as the loop reads;
                        # a model whose inputs name their columns: its first input's.
                        column = default = input_column(parquet.schema_arrow.names)
                        model = evaluation.model
                        named = input_columns(model.content) if model else None
                        if named:
                            column = named[0]
                        table = parquet.read_row_group(group, columns=[column])
                        data = table.column(column)[index - start].as_py()
                        break
                    start += size
                else:
                    raise NotFound(f"the split has {start} inputs: no input {index}", path="index")
        except (OSError, ValueError, KeyError):
            raise NotFound(f"the dataset of evaluation {pk} cannot be read", path="") from None
        # The dataset's encoding is its input column's; another column's is not known here.
        encoding = str(dataset.content.get("encoding") or "").lower()  # type: ignore[union-attr]
        known = column == default
        response = HttpResponse(
            data,
            content_type=_IMAGE_TYPES.get(encoding, "application/octet-stream")
            if known
            else "application/octet-stream",
        )
        response["Cache-Control"] = "private, max-age=3600"
        return response
