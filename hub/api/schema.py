"""`/api/v1/schema/manifest.json`: the published JSON Schema of model and dataset manifests."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from predictors import manifests as spec


class ManifestSchema(APIView):
    permission_classes = [AllowAny]

    @extend_schema(
        summary="The manifest JSON Schema",
        responses={(200, "application/schema+json"): OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        return Response(spec.published_schema(), content_type="application/schema+json")
