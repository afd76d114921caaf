"""Traces: the OTLP/HTTP receiver (`POST /v1/traces`) and the trace API under /api/v1/.

- `POST /v1/traces`: an OTLP ExportTraceServiceRequest (application/x-protobuf or
  application/json, optionally gzip), `Authorization: Bearer <token>` of scope `write`,
  `evaluate` or `agent`; answers an ExportTraceServiceResponse in the request's encoding.
  Optional headers: `X-MLMS-Export` (an id per export, stored once however often it is sent)
  and `X-MLMS-Claim` (an agent's claim: refused with 409 once another attempt holds the job).
- `GET /api/v1/traces/<trace_id>?format=chrome|otlp` and `GET /api/v1/evaluations/<id>/trace`:
  every span of the trace.
- `GET /api/v1/traces/<trace_id>/timeline?start=&end=&max_spans=&max_points=`: the longest spans
  of a window, and its hardware counters, downsampled.
- `GET /api/v1/traces/<trace_id>/layers`: the per-level, per-name aggregates, the kernels' time
  per layer, and the top kernels.
"""

from __future__ import annotations

import re
import zlib
from typing import Any
from uuid import UUID

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluations import traces
from evaluations.models import Evaluation
from hub.api.errors import ApiError, error_body
from hub.authentication import authenticate_token
from predictors.protocol import KERNEL_LEVELS

READ_SCOPES = ("read", "evaluate")
MAX_TIMELINE_SPANS = 10_000
MAX_COUNTER_POINTS = 10_000
TOP_KERNELS = 50


def _error(
    status: int, message: str, headers: dict[str, str] | None = None, path: str = ""
) -> JsonResponse:
    code = {404: "not_found", 403: "forbidden", 409: "conflict", 413: "too_large"}.get(status)
    return JsonResponse(
        error_body(message, path=path, code=code or "invalid"), status=status, headers=headers
    )


def _body(request: HttpRequest, limit: int) -> bytes:
    """The request's body, gzip undone, refused (413) past `limit` bytes either way."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > limit:
        raise traces.TraceError(413, f"A trace export may be at most {limit} bytes.")
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise traces.TraceError(413, f"A trace export may be at most {limit} bytes.")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise traces.TraceError(415, f"Unsupported Content-Encoding {encoding!r}; use gzip.")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise traces.TraceError(400, "The body is not valid gzip.") from None
    if len(body) > limit:
        raise traces.TraceError(413, f"A trace export may be at most {limit} bytes.")
    return body


_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def _delivery_headers(request: HttpRequest) -> tuple[str, str]:
    """`X-MLMS-Export` (the export's id: stored once however often sent) and `X-MLMS-Claim`
    (the sender's claim on the evaluation), each 32 lowercase hex digits when given."""
    values = []
    for header in ("X-MLMS-Export", "X-MLMS-Claim"):
        value = request.headers.get(header, "").strip()
        if value and not _HEX32.match(value):
            raise traces.TraceError(400, f"{header} must be 32 lowercase hex digits.", header)
        values.append(value)
    return values[0], values[1]


@csrf_exempt
@require_POST
def otlp_receiver(request: HttpRequest) -> HttpResponse:
    """OTLP/HTTP traces: decode, authorize, store; nothing is stored on any error."""
    header = request.headers.get("Authorization", "").split()
    if len(header) != 2 or header[0].lower() != "bearer":
        return _error(
            401,
            "Send 'Authorization: Bearer <token>'.",
            {"WWW-Authenticate": 'Bearer realm="mlmodelscope"'},
        )
    try:
        token = authenticate_token(header[1])
    except exceptions.AuthenticationFailed as error:
        return _error(401, str(error.detail), {"WWW-Authenticate": 'Bearer realm="mlmodelscope"'})
    if not set(token.scopes) & traces.WRITE_SCOPES:
        return _error(403, "This token lacks the 'write', 'evaluate' or 'agent' scope.")
    content_type = (request.content_type or "").lower()
    if content_type not in ("application/x-protobuf", "application/json"):
        return _error(415, "Send OTLP as application/x-protobuf or application/json.")
    try:
        key, claim = _delivery_headers(request)
        message = traces.decode(_body(request, settings.TRACE_MAX_BYTES), content_type)
        traces.ingest(token, message, key=key, claim=claim)
    except traces.TraceError as error:
        return _error(error.status, error.message, path=error.path)
    answer = trace_service_pb2.ExportTraceServiceResponse()
    if content_type == "application/json":
        return HttpResponse(b"{}", content_type="application/json")
    return HttpResponse(answer.SerializeToString(), content_type="application/x-protobuf")


def _readable(request: Request, trace_id: str) -> tuple[Any, Evaluation | None]:
    found = traces.readable_trace(request.user, trace_id)
    if found is None:
        raise Http404("No such trace for you.")
    return found


def _export(trace_id: str, fmt: str) -> Response:
    if fmt == "chrome":
        return Response(traces.chrome(trace_id))
    if fmt == "otlp":
        return Response(traces.otlp(trace_id))
    raise ApiError([{"path": "format", "message": "format must be 'chrome' or 'otlp'."}])


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
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnly


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


def _int_schema(minimum: int) -> dict[str, Any]:
    """What `_int_param` takes, as an OpenAPI schema."""
    return {"type": "integer", "minimum": minimum, "maximum": traces.INT64_MAX}


class TraceExport(TraceView):
    query_parameters = ("format",)

    @extend_schema(
        summary="Export a trace (Chrome trace JSON or OTLP JSON)",
        parameters=[TRACE_ID, FORMAT],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        _readable(request, trace_id)
        return _export(trace_id, request.query_params.get("format", "chrome"))


class EvaluationTrace(TraceView):
    query_parameters = ("format",)

    @extend_schema(
        summary="Export an evaluation's trace (Chrome trace JSON or OTLP JSON)",
        parameters=[FORMAT],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, pk: UUID) -> Response:
        evaluation = get_object_or_404(Evaluation.objects.visible_to(request.user), pk=pk)
        return _export(evaluation.trace_id, request.query_params.get("format", "chrome"))


_INTEGER = re.compile(r"-?[0-9]+")


def _int_param(request: Request, name: str, default: int | None, minimum: int = 0) -> int | None:
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
    if value > traces.INT64_MAX:
        raise ApiError(
            [{"path": name, "message": f"{name} must be at most {traces.INT64_MAX} (2^63 - 1)."}]
        )
    return value


class TraceTimeline(TraceView):
    query_parameters = ("start", "end", "max_spans", "max_points")

    @extend_schema(
        summary="The longest spans and the hardware counters of a trace in a time window",
        parameters=[
            TRACE_ID,
            OpenApiParameter("start", _int_schema(0), description="Unix ns"),
            OpenApiParameter("end", _int_schema(0), description="Unix ns, not before start"),
            OpenApiParameter(
                "max_spans",
                _int_schema(1),
                description=f"default 1000; at most {MAX_TIMELINE_SPANS} are answered",
            ),
            OpenApiParameter(
                "max_points",
                _int_schema(1),
                description="points per counter, default 1000 (each the max of its bucket); "
                f"at most {MAX_COUNTER_POINTS}",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        trace, _evaluation = _readable(request, trace_id)
        start = _int_param(request, "start", None)
        end = _int_param(request, "end", None)
        if start is not None and end is not None and end < start:
            raise ApiError([{"path": "end", "message": f"end ({end}) is before start ({start})."}])
        max_spans = _int_param(request, "max_spans", 1000, minimum=1)
        max_points = _int_param(request, "max_points", 1000, minimum=1)
        assert max_spans is not None and max_points is not None
        window = traces.timeline(
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
            }
        )


class TraceLayers(TraceView):
    @extend_schema(
        summary="Per-level, per-name span aggregates of a trace, and its top kernels",
        parameters=[TRACE_ID],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        trace, _evaluation = _readable(request, trace_id)
        rows = traces.aggregates(trace) if trace is not None else []
        kernels = traces.kernels_by_layer(trace_id) if trace is not None else {}
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
