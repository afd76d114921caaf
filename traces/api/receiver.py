"""`POST /v1/traces`: the OTLP/HTTP receiver.

An OTLP ExportTraceServiceRequest (application/x-protobuf or application/json, optionally
gzip), `Authorization: Bearer <token>` of scope `write`, `evaluate` or `agent`; answers an
ExportTraceServiceResponse in the request's encoding. Optional headers: `X-MLMS-Export` (an id
per export, stored once however often it is sent) and `X-MLMS-Claim` (an agent's claim: refused
with 409 once another attempt holds the job).
"""

from __future__ import annotations

import re
import zlib

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework import exceptions

from hub.api.errors import error_body
from hub.authentication import authenticate_token
from traces.access import WRITE_SCOPES
from traces.errors import TraceError
from traces.ingest import ingest
from traces.otlp import decode

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


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
        raise TraceError(413, f"A trace export may be at most {limit} bytes.")
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise TraceError(413, f"A trace export may be at most {limit} bytes.")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise TraceError(415, f"Unsupported Content-Encoding {encoding!r}; use gzip.")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise TraceError(400, "The body is not valid gzip.") from None
    if len(body) > limit:
        raise TraceError(413, f"A trace export may be at most {limit} bytes.")
    return body


def _delivery_headers(request: HttpRequest) -> tuple[str, str]:
    """`X-MLMS-Export` (the export's id: stored once however often sent) and `X-MLMS-Claim`
    (the sender's claim on the evaluation), each 32 lowercase hex digits when given."""
    values = []
    for header in ("X-MLMS-Export", "X-MLMS-Claim"):
        value = request.headers.get(header, "").strip()
        if value and not _HEX32.match(value):
            raise TraceError(400, f"{header} must be 32 lowercase hex digits.", header)
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
    if not set(token.scopes) & WRITE_SCOPES:
        return _error(403, "This token lacks the 'write', 'evaluate' or 'agent' scope.")
    content_type = (request.content_type or "").lower()
    if content_type not in ("application/x-protobuf", "application/json"):
        return _error(415, "Send OTLP as application/x-protobuf or application/json.")
    try:
        key, claim = _delivery_headers(request)
        message = decode(_body(request, settings.TRACE_MAX_BYTES), content_type)
        ingest(token, message, key=key, claim=claim)
    except TraceError as error:
        return _error(error.status, error.message, path=error.path)
    answer = trace_service_pb2.ExportTraceServiceResponse()
    if content_type == "application/json":
        return HttpResponse(b"{}", content_type="application/json")
    return HttpResponse(answer.SerializeToString(), content_type="application/x-protobuf")
