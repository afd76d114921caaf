"""What the trace reads share: the base view (scopes, JSON whatever `?format=` says), who may
read a trace, the answer of an export, and the parameters' schemas and checks."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluations.models import Evaluation
from hub.api.errors import ApiError
from traces import exports
from traces.access import readable_trace
from traces.models import Trace
from traces.otlp import INT64_MAX

READ_SCOPES = ("read", "evaluate")


class JsonOnly(BaseContentNegotiation):
    """JSON answers, whatever `?format=` says (here it picks the trace format, not DRF's
    renderer)."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type


class TraceView(APIView):
    required_scopes = {"GET": READ_SCOPES}
    # An anonymous caller reads the traces of published evaluations (`readable_trace`).
    anonymous_methods = ("GET", "HEAD")
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnly


def readable(request: Request, trace_id: str) -> tuple[Trace | None, Evaluation | None]:
    """(the trace's row, its evaluation) when the caller may read the trace, else 404."""
    found = readable_trace(request.user, trace_id)
    if found is None:
        raise Http404("No such trace for you.")
    return found


def export_response(trace_id: str, fmt: str) -> Response:
    """Every span of the trace in format `fmt` (`chrome` or `otlp`), else 400 naming `format`."""
    # A download, named after the trace and the format.
    disposition = {"Content-Disposition": f'attachment; filename="{trace_id}.{fmt}.json"'}
    if fmt == "chrome":
        return Response(exports.chrome(trace_id), headers=disposition)
    if fmt == "otlp":
        return Response(exports.otlp(trace_id), headers=disposition)
    raise ApiError([{"path": "format", "message": "format must be 'chrome' or 'otlp'."}])


FORMAT = OpenApiParameter(
    "format", OpenApiTypes.STR, enum=["chrome", "otlp"], description="default chrome"
)
TRACE_ID = OpenApiParameter(
    "trace_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern="^[0-9a-f]{32}$",
    description="32 lowercase hex digits; 404 for a trace you may not read",
)


def int_schema(minimum: int) -> dict[str, Any]:
    """What `int_param` takes, as an OpenAPI schema."""
    return {"type": "integer", "minimum": minimum, "maximum": INT64_MAX}


_INTEGER = re.compile(r"-?[0-9]+")


def int_param(request: Request, name: str, default: int | None, minimum: int = 0) -> int | None:
    """An integer query parameter in [minimum, 2^63 - 1] (what the span columns hold), else
    400 naming it."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # Plain digits: int() would also take "", " 7", "1_000" and other scripts' digits.
    if not _INTEGER.fullmatch(raw):
        raise ApiError([{"path": name, "message": f"{name} must be an integer."}])
    # More than 20 digits is out of range either way (and int() refuses 4,300 and more).
    value = int(raw) if len(raw) <= 20 else (-1 if raw[0] == "-" else 1) * 2**64
    if value < minimum:
        raise ApiError([{"path": name, "message": f"{name} must be at least {minimum}."}])
    if value > INT64_MAX:
        raise ApiError(
            [{"path": name, "message": f"{name} must be at most {INT64_MAX} (2^63 - 1)."}]
        )
    return value
