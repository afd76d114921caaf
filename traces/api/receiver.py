"""`POST /v1/traces`: the OTLP/HTTP receiver.

An OTLP ExportTraceServiceRequest (application/x-protobuf or application/json, optionally
gzip), `Authorization: Bearer <token>` of scope `write`, `evaluate` or `agent`; answers an
ExportTraceServiceResponse in the request's encoding. Optional headers: `X-MLMS-Export` (an id
per export, stored once however often it is sent) and `X-MLMS-Claim` (an agent's claim: refused
with 409 once another attempt holds the job).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework import exceptions

from hub.api.errors import STATUS, error_body
from hub.authentication import authenticate_token
from hub.errors import DomainError
from hub.models import ApiToken
from traces import ingest_processes
from traces.access import WRITE_SCOPES
from traces.ingest import ingest
from traces.otlp import decode

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Answer:
    """What the receiver answers: status, body, content type, and any extra headers."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mlmodelscope"'}


def _error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    path: str = "",
    code: str | None = None,
) -> Answer:
    code = code or {
        404: "not_found",
        403: "forbidden",
        405: "method_not_allowed",
        409: "conflict",
        413: "too_large",
        500: "server_error",
        503: "unavailable",
    }.get(status)
    body = json.dumps(error_body(message, path=path, code=code or "invalid")).encode()
    return Answer(status, body, "application/json", dict(headers or {}))


class Refusal(Exception):
    """What the receiver refuses before ingest reads the export (its size, encoding, headers):
    `status` is the HTTP status to answer, `path` the header at fault ("" for the body)."""

    def __init__(self, status: int, message: str, path: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = path


def too_large(limit: int) -> Refusal:
    return Refusal(413, f"A trace export may be at most {limit} bytes.")


def _inflated(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body with its Content-Encoding undone, refused (413) past `limit` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise Refusal(415, f"Unsupported Content-Encoding {encoding!r}; use gzip.")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise Refusal(400, "The body is not valid gzip.") from None
    if len(body) > limit:
        raise too_large(limit)
    return body


def _delivery_headers(headers: Mapping[str, str]) -> tuple[str, str]:
    """`X-MLMS-Export` (the export's id: stored once however often sent) and `X-MLMS-Claim`
    (the sender's claim on the evaluation), each 32 lowercase hex digits when given."""
    values = []
    for header in ("X-MLMS-Export", "X-MLMS-Claim"):
        value = headers.get(header.lower(), "").strip()
        if value and not _HEX32.match(value):
            raise Refusal(400, f"{header} must be 32 lowercase hex digits.", header)
        values.append(value)
    return values[0], values[1]


def authorize(headers: Mapping[str, str]) -> ApiToken | Answer:
    """The request's token, or the answer that refuses it (401/403/415): what the receiver
    checks before it reads the body. `headers`: names in lower case."""
    header = headers.get("authorization", "").split()
    if len(header) != 2 or header[0].lower() != "bearer":
        return _error(401, "Send 'Authorization: Bearer <token>'.", _CHALLENGE)
    try:
        token = authenticate_token(header[1])
    except exceptions.AuthenticationFailed as error:
        return _error(401, str(error.detail), _CHALLENGE)
    if not set(token.scopes) & WRITE_SCOPES:
        return _error(403, "This token lacks the 'write', 'evaluate' or 'agent' scope.")
    if content_type(headers) not in ("application/x-protobuf", "application/json"):
        return _error(415, "Send OTLP as application/x-protobuf or application/json.")
    return token


def content_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def receive(
    token: ApiToken, headers: Mapping[str, str], raw: bytes, *, oversized: bool = False
) -> Answer:
    """Decode, authorize and store an export (`raw`: the body as sent, at most
    TRACE_MAX_BYTES + 1 bytes of it; `oversized`: the body was longer and was not read);
    nothing is stored on any error."""
    limit = settings.TRACE_MAX_BYTES
    kind = content_type(headers)
    try:
        key, claim = _delivery_headers(headers)
        if oversized or len(raw) > limit:
            raise too_large(limit)
        body = _inflated(raw, headers.get("content-encoding", "identity"), limit)
        ingest(token, decode(body, kind), key=key, claim=claim)
    except Refusal as error:
        return _error(error.status, error.message, path=error.path)
    except DomainError as error:
        status = next(status for kind, status in STATUS.items() if isinstance(error, kind))
        return _error(status, error.message, path=str(error.errors[0]["path"]), code=error.code)
    if kind == "application/json":
        return Answer(200, b"{}", "application/json")
    return Answer(200, _EMPTY_RESPONSE, "application/x-protobuf")


_EMPTY_RESPONSE = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()


def _response(answer: Answer) -> HttpResponse:
    return HttpResponse(
        answer.body,
        status=answer.status,
        content_type=answer.content_type,
        headers=answer.headers,
    )


_ALLOW = {"Allow": "POST, OPTIONS"}


@csrf_exempt
def otlp_receiver(request: HttpRequest) -> HttpResponse:
    """OTLP/HTTP traces through Django (the in-process clients; daphne serves the same path
    through `asgi_receiver`): decode, authorize, store; nothing is stored on any error.
    OPTIONS answers what the receiver takes (as the API's other endpoints do); any other
    method than POST is 405 in the API's error format."""
    if request.method == "OPTIONS":
        metadata = {
            "name": "OTLP/HTTP trace receiver",
            "description": "OpenTelemetry span exports (ExportTraceServiceRequest).",
            "renders": ["application/x-protobuf", "application/json"],
            "parses": ["application/x-protobuf", "application/json"],
            "methods": ["POST", "OPTIONS"],
            "schema": "/api/schema/",
        }
        return HttpResponse(json.dumps(metadata), content_type="application/json", headers=_ALLOW)
    if request.method != "POST":
        method = str(request.method)[:16]
        return _response(_error(405, f"Method {method!r} is not allowed here: POST spans.", _ALLOW))
    headers = {name.lower(): value for name, value in request.headers.items()}
    token = authorize(headers)
    if isinstance(token, Answer):
        return _response(token)
    limit = settings.TRACE_MAX_BYTES
    length = request.META.get("CONTENT_LENGTH") or ""
    oversized = length.isdigit() and int(length) > limit
    raw = b"" if oversized else request.read(limit + 1)
    return _response(receive(token, headers, raw, oversized=oversized))


# --- The same receiver as an ASGI application ----------------------------------------------------
#
# Django's ASGI handler costs several milliseconds per request here whatever the view does (its
# request object, a thread for the synchronous middleware, the hops between the event loop and
# that thread), as much as storing a 512-span export. daphne routes `POST /v1/traces` to this
# instead (mlmodelscope/asgi.py): the body is read on the event loop and the one synchronous call
# (authorization, decoding, storing) runs in the thread Django's own synchronous code runs in.
# Anything else at that path (another method, a host ALLOWED_HOSTS does not name) goes through
# Django as before.


async def asgi_receiver(scope: dict[str, Any], receive_message: Any, send: Any) -> None:
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }
    limit = settings.TRACE_MAX_BYTES
    length = headers.get("content-length", "")
    oversized = length.isdigit() and int(length) > limit
    chunks: list[bytes] = []
    size = 0
    while not oversized:
        message = await receive_message()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        size += len(chunk)
        oversized = size > limit  # the rest is not read
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    raw = b"".join(chunks)
    answer = await _answer(headers, raw, oversized)
    response_headers = [
        (b"content-type", answer.content_type.encode()),
        (b"content-length", str(len(answer.body)).encode()),
        (b"x-content-type-options", b"nosniff"),
        *((name.encode(), value.encode()) for name, value in answer.headers.items()),
    ]
    await send(
        {"type": "http.response.start", "status": answer.status, "headers": response_headers}
    )
    await send({"type": "http.response.body", "body": answer.body})


async def _answer(headers: dict[str, str], raw: bytes, oversized: bool) -> Answer:
    """The export stored by an ingest process (`traces.ingest_processes`) once one is ready,
    else in Django's thread for synchronous code."""
    processes = ingest_processes.pool(authorized_receive)
    if processes is None or not processes.ready:
        return await database_sync_to_async(authorized_receive)(headers, raw, oversized)
    try:
        answer: Answer | None = await processes.receive(headers, raw, oversized)
    except ingest_processes.Unavailable as error:
        return _error(503, str(error), {"Retry-After": "1"})
    # None: storing it failed unexpectedly (the process logged the error).
    return answer if answer is not None else _error(500, "Internal server error.")


def authorized_receive(headers: Mapping[str, str], raw: bytes, oversized: bool) -> Answer:
    """An export's answer: its token checked (`authorize`), then stored (`receive`)."""
    token = authorize(headers)
    if isinstance(token, Answer):
        return token
    return receive(token, headers, raw, oversized=oversized)
