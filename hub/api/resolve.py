"""`/api/v1/resolve/`: which manifests can run on which live hosts, under the given constraints."""

from __future__ import annotations

import math
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hub import solver
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.error_codes import HubErrorCode


class Resolve(APIView):
    anonymous_methods = ("GET", "HEAD", "OPTIONS")

    query_parameters = (
        "model",
        "version",
        "framework",
        "framework_version",
        "device",
        "arch",
        "gpu_model",
        "min_memory_gb",
        "host",
    )

    @extend_schema(
        summary="Solve model, framework and hardware constraints against live hosts",
        description="The same constraints as a launch (`POST /api/v1/evaluations/`), solved by "
        "the same solver; an unknown parameter is refused.",
        parameters=[
            OpenApiParameter("model", OpenApiTypes.STR, required=True),
            OpenApiParameter("version", OpenApiTypes.STR, description="npm range, e.g. ^1.0"),
            OpenApiParameter("framework", OpenApiTypes.STR),
            OpenApiParameter("framework_version", OpenApiTypes.STR, description="npm range"),
            OpenApiParameter("device", OpenApiTypes.STR, enum=list(solver.DEVICES)),
            OpenApiParameter("arch", OpenApiTypes.STR, description="amd64, arm64, …"),
            OpenApiParameter(
                "gpu_model", OpenApiTypes.STR, description="a substring of the GPU's name"
            ),
            OpenApiParameter(
                "min_memory_gb",
                OpenApiTypes.NUMBER,
                description="memory of the device: the GPU's for gpu, the host's for cpu",
            ),
            OpenApiParameter("host", OpenApiTypes.STR, description="a host by name"),
        ],
        responses={
            200: OpenApiTypes.OBJECT,
            404: error_response(
                404,
                "No manifest and live host satisfy the constraints; the error's `path` names "
                "the one left unmet.",
            ),
        },
    )
    def get(self, request: Request) -> Response:
        values: dict[str, Any] = {
            field: request.query_params.get(field, "").strip() for field in self.query_parameters
        }
        memory = values.pop("min_memory_gb")
        values["min_memory_gb"] = _number("min_memory_gb", memory) if memory else None
        query = solver.Request(**values)
        try:
            solution = solver.solve(request.user, query)
        except solver.Unsatisfiable as unmet:
            status_code = 400 if isinstance(unmet, solver.InvalidConstraint) else 404
            raise ApiError(
                [{"path": unmet.path, "message": unmet.message}],
                status_code=status_code,
                code="invalid" if status_code == 400 else HubErrorCode.UNSATISFIABLE,
            ) from None
        matches = solution.matches
        return Response(
            {
                "version": matches[0].manifest.version,
                "count": len(matches),
                "matches": [
                    {
                        "manifest": {
                            "id": m.manifest.pk,
                            "name": m.manifest.name,
                            "version": m.manifest.version,
                            "framework": m.manifest.framework,
                            "framework_range": m.manifest.framework_range,
                        },
                        "host": {"id": m.host.pk, "name": m.host.name},
                        "framework_version": m.framework_version,
                        "device": m.device,
                    }
                    for m in matches
                ],
            }
        )


def _number(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ApiError([{"path": name, "message": f"must be a number; got {value!r}"}]) from None
    if not math.isfinite(number) or number < 0:
        raise ApiError([{"path": name, "message": f"must be a number, 0 or more; got {value}"}])
    return number
