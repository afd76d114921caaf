"""`/api/v1/divergence/`: where two evaluations of one model part (`evaluations.divergences`).

- `POST /api/v1/divergence/` {a, b, inputs?, tolerance?}: launch the two capture runs (each
  evaluation's request again on its host, capturing every layer's output of the inputs);
  201 with the divergence, `pending` until both runs are stored.
- `GET /api/v1/divergence/`: the caller's divergences, newest first.
- `GET /api/v1/divergence/<id>/`: one of them; once both captures are stored, its report (per
  layer the largest and the relative error and the cosine similarity, and the first layer
  that diverges, or the input).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import divergences
from evaluations.api.evaluations import READ_SCOPES
from evaluations.models import Divergence
from hub.api.fields import KnownFields
from hub.api.openapi import error_response
from predictors.protocol.options import MAX_CAPTURED_INPUTS


class DivergenceRequestSerializer(KnownFields):
    a = serializers.UUIDField(help_text="the reference evaluation (one you may read)")
    b = serializers.UUIDField(help_text="the evaluation compared with it, of the same model")
    inputs = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=2**31 - 1),
        min_length=1,
        max_length=MAX_CAPTURED_INPUTS,
        required=False,
        help_text="dataset indices of the inputs to compare (default: the first on which A "
        f"and B disagree, then the first inputs, {divergences.DEFAULT_INPUTS} in all)",
    )
    tolerance = serializers.FloatField(
        min_value=1e-9,
        max_value=1.0,
        required=False,
        help_text="the relative error a layer's output may reach before it diverges "
        "(default: float32 rounding, see docs/divergence.md)",
    )


class DivergenceList(generics.GenericAPIView[Divergence]):
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES, "POST": "evaluate"}

    @extend_schema(summary="Your divergences, newest first", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        found = Divergence.objects.filter(user_id=request.user.pk).select_related(
            "a__host", "b__host", "capture_a", "capture_b"
        )[:100]
        return Response({"results": [divergences.as_dict(d) for d in found]})

    @extend_schema(
        summary="Find where two evaluations of one model part, layer by layer",
        request=DivergenceRequestSerializer,
        responses={
            201: OpenApiTypes.OBJECT,
            404: error_response(404, "No such evaluation (that you may read)."),
        },
    )
    def post(self, request: Request) -> Response:
        body = DivergenceRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data: dict[str, Any] = body.validated_data
        divergence = divergences.launch(
            request.user,  # type: ignore[arg-type]
            data["a"],
            data["b"],
            inputs=data.get("inputs"),
            tolerance=data.get("tolerance"),
        )
        return Response(divergences.as_dict(divergence), status=status.HTTP_201_CREATED)


class DivergenceDetail(generics.GenericAPIView[Divergence]):
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}

    @extend_schema(
        summary="One of your divergences",
        responses={200: OpenApiTypes.OBJECT, 404: error_response(404, "No such divergence.")},
    )
    def get(self, request: Request, pk: UUID) -> Response:
        divergence = divergences.refresh(divergences.visible(request.user, pk))  # type: ignore[arg-type]
        return Response(divergences.as_dict(divergence))
