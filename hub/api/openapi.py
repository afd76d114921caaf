"""The OpenAPI schema (`/api/schema/`) as the hub really answers.

drf-spectacular derives each operation's parameters, request body, success answer and the
serializers' validation rules from the views. `AutoSchema` adds what it cannot see:

- **Security**, from the view's `anonymous_methods` and `required_scopes` (`hub.permissions`):
  a bearer token always; the browser's session where the scopes it holds (read, write,
  evaluate) will do, so not on the agents' endpoints; and no credentials at all (`{}`) where
  anonymous callers are served (public reads).
- **Error answers**, all in the API's error format (`Error`, `hub.api.errors`), by what the
  permission class, DRF and the views do: 401 everywhere (a token that is unknown, revoked or
  expired is refused even on public endpoints), 403 wherever a scope is needed, 400 where a
  query parameter or a body is read, 404 where a path names an object and on lists (a page
  past the last), 413 and 415 where a body is read. A view declares the others it answers
  (409, a 404 of its own) with `extend_schema(responses=…)`, using `error_response`.
- **Request bodies** as the API documents them: JSON for the views on DRF's default parsers
  (its form encodings serve the browsable API only); a view with parsers of its own shows those.

`add_otlp_receiver`, a postprocessing hook, adds `POST /v1/traces`: the OTLP/HTTP receiver is a
plain Django view (traces/api/receiver.py), which drf-spectacular does not see.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular import openapi
from drf_spectacular.utils import OpenApiResponse
from rest_framework.permissions import AllowAny
from rest_framework.settings import api_settings

from hub.api.errors import ErrorSerializer
from hub.authentication import SESSION_SCOPES
from hub.permissions import required_scopes

BEARER = "bearerAuth"
SESSION = "sessionAuth"
ERROR_REF = {"$ref": "#/components/schemas/Error"}

ERROR_DESCRIPTIONS = {
    400: "Invalid input: each error names the query parameter or body field at fault (`path`).",
    401: "No valid credentials: the operation needs a token or a signed-in session, or the "
    "token sent is unknown, malformed, revoked or expired.",
    403: "The token lacks the scope the operation needs (the error names it), or the caller "
    "may not act on this object (not its owner; for a session: no CSRF token).",
    404: "No such object, or one the caller may not see; on a list, a page past the last.",
    409: "The request conflicts with the current state (the error says how).",
    413: "The request body is larger than the limit (the error states it).",
    415: "The request body's Content-Type is not one that the operation takes.",
}
WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "description": '`Bearer realm="mlmodelscope"`: how to authenticate.',
        "required": True,
        "schema": {"type": "string"},
    }
}


def error_response(status: int, description: str | None = None) -> OpenApiResponse:
    """An error answer in the API's format, for `extend_schema(responses={status: …})`."""
    return OpenApiResponse(ErrorSerializer, description=description or ERROR_DESCRIPTIONS[status])


def _error_object(status: int) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": ERROR_DESCRIPTIONS[status],
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if status == 401:
        answer["headers"] = WWW_AUTHENTICATE
    return answer


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's AutoSchema with the hub's security, error answers and body types."""

    def _allows_anyone(self) -> bool:
        return any(isinstance(p, AllowAny) for p in self.view.get_permissions())

    def get_auth(self) -> list[dict[str, list[str]]]:
        super().get_auth()  # registers the security schemes' components
        if self._allows_anyone():
            return [{BEARER: []}, {SESSION: []}, {}]
        security: list[dict[str, list[str]]] = [{BEARER: []}]
        if set(required_scopes(self.view, self.method)) & SESSION_SCOPES:
            security.append({SESSION: []})
        if self.method in getattr(self.view, "anonymous_methods", ()):
            security.append({})
        return security

    def map_parsers(self) -> list[Any]:
        parsers = self.view.get_parsers()
        if [type(p) for p in parsers] == list(api_settings.DEFAULT_PARSER_CLASSES):
            return ["application/json"]
        return super().map_parsers()  # type: ignore[no-any-return]

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        self.resolve_serializer(ErrorSerializer, "response")  # registers the Error component
        locations = {parameter["in"] for parameter in operation.get("parameters", [])}
        statuses = {401}
        if not self._allows_anyone():
            statuses.add(403)
        if "query" in locations or "requestBody" in operation:
            statuses.add(400)
        if "path" in locations or (self.method == "GET" and self._is_list_view()):
            statuses.add(404)
        if "requestBody" in operation:
            statuses |= {413, 415}
        responses = operation["responses"]
        for status in statuses:
            responses.setdefault(str(status), _error_object(status))
        operation["responses"] = dict(sorted(responses.items()))
        return operation


# --- POST /v1/traces -------------------------------------------------------------------------

_OTLP_JSON = {
    "type": "object",
    "description": "An OTLP ExportTraceServiceRequest in OTLP/JSON (trace and span ids in hex, "
    "times as decimal strings of Unix nanoseconds).",
    "properties": {
        "resourceSpans": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "resource": {"type": "object"},
                    "scopeSpans": {"type": "array", "items": {"type": "object"}},
                },
            },
        }
    },
}


def _otlp_receiver() -> dict[str, Any]:
    errors = {
        400: "The body is not an OTLP export (or not valid gzip), or a span is invalid: the "
        "error's `path` names it in OTLP/JSON's names.",
        401: ERROR_DESCRIPTIONS[401],
        403: "The token lacks the `write`, `evaluate` or `agent` scope, or names a trace of "
        "another user's.",
        409: "`X-MLMS-Claim` is no longer current: the hub gave the evaluation's job to another "
        "attempt, whose spans replace these.",
        413: "The body is larger than TRACE_MAX_BYTES, before or after gzip.",
        415: "The Content-Type is not application/x-protobuf or application/json, or the "
        "Content-Encoding is not gzip or identity.",
    }
    responses: dict[str, Any] = {
        "200": {
            "description": "Stored: an ExportTraceServiceResponse in the request's encoding.",
            "content": {
                "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                "application/json": {"schema": {"type": "object"}},
            },
        }
    }
    for status, description in errors.items():
        responses[str(status)] = {**_error_object(status), "description": description}
    return {
        "post": {
            "operationId": "otlp_traces_export",
            "summary": "Export spans (OTLP/HTTP)",
            "description": "The OpenTelemetry exporters' standard endpoint: an "
            "ExportTraceServiceRequest, optionally gzipped. Spans of an evaluation's trace "
            "need a token of the evaluation's user or of its host's agent; other spans form "
            "traces of the caller's own. Nothing is stored when any span is refused.",
            "tags": ["traces"],
            "security": [{BEARER: []}],
            "parameters": [
                {
                    "name": "Content-Encoding",
                    "in": "header",
                    "required": False,
                    "description": "gzip or identity, in any case; empty is identity",
                    "schema": {
                        "type": "string",
                        "pattern": "^([Gg][Zz][Ii][Pp]|[Ii][Dd][Ee][Nn][Tt][Ii][Tt][Yy])?$",
                    },
                },
                {
                    "name": "X-MLMS-Export",
                    "in": "header",
                    "required": False,
                    "description": "The export's id: an export sent again is stored once.",
                    "schema": {"type": "string", "pattern": "^([0-9a-f]{32})?$"},
                },
                {
                    "name": "X-MLMS-Claim",
                    "in": "header",
                    "required": False,
                    "description": "An agent's claim on the evaluation whose spans these are.",
                    "schema": {"type": "string", "pattern": "^([0-9a-f]{32})?$"},
                },
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-protobuf": {
                        "schema": {
                            "type": "string",
                            "format": "binary",
                            "maxLength": settings.TRACE_MAX_BYTES,
                        }
                    },
                    "application/json": {"schema": _OTLP_JSON},
                },
            },
            "responses": responses,
        }
    }


def add_otlp_receiver(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: `POST /v1/traces` (mlmodelscope/urls.py)."""
    result.setdefault("paths", {})["/v1/traces"] = _otlp_receiver()
    return result
