"""One error format for the whole API.

Every error response is `{"detail": "<summary>", "code": "<what it means>", "errors":
[{"path", "line", "message"}]}`: `path` is the dotted field path (or "" for the whole request),
`line` the manifest's YAML line when there is one. The actions raise domain errors
(`hub.errors`); `STATUS` maps each kind to its HTTP status.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from hub.api.parsers import printable
from hub.errors import Conflict, DomainError, Forbidden, Invalid, NotFound, TooLarge

# Paths whose answers are the API's, in its JSON error format even when no view is reached.
API_PREFIXES = ("/api/", "/v1/")


class ErrorItemSerializer(serializers.Serializer[dict[str, Any]]):
    """One problem of an error response (for the OpenAPI schema)."""

    path = serializers.CharField(
        help_text='The dotted path of the field at fault; "" for the request as a whole.'
    )
    line = serializers.IntegerField(
        allow_null=True, help_text="The manifest's YAML line, where there is one."
    )
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """Every error response of the API (for the OpenAPI schema): `detail` is the first
    error's message."""

    detail = serializers.CharField()
    code = serializers.CharField(
        help_text="What the refusal means: `invalid`, `not_found`, `forbidden`, `conflict`, "
        "or a more precise code (`claim_taken`, `name_taken`, …)."
    )
    errors = ErrorItemSerializer(many=True)


# The HTTP status of each kind of domain error.
STATUS: dict[type[DomainError], int] = {
    Invalid: status.HTTP_400_BAD_REQUEST,
    Forbidden: status.HTTP_403_FORBIDDEN,
    NotFound: status.HTTP_404_NOT_FOUND,
    Conflict: status.HTTP_409_CONFLICT,
    TooLarge: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
}


def error_body(message: str, path: str = "", code: str = "invalid") -> dict[str, Any]:
    """The API's error body for one problem."""
    return {
        "detail": message,
        "code": code,
        "errors": [{"path": path, "line": None, "message": message}],
    }


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 404 handler: under the API's paths a URL that names no endpoint (or an id of
    the wrong form, `/api/v1/manifests/abc/`) answers in the API's error format; elsewhere the
    site's 404 page."""
    if request.path.startswith(API_PREFIXES):
        return JsonResponse(
            error_body("Not found: nothing of the API answers at this URL.", code="not_found"),
            status=404,
        )
    return defaults.page_not_found(request, exception)  # type: ignore[arg-type]


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 400 handler (a SuspiciousOperation no view caught: too many form fields, a
    malformed multipart body read outside DRF): the API's error format under its paths, naming
    the problem; the site's 400 page elsewhere."""
    if request.path.startswith(API_PREFIXES):
        message = printable(str(exception or "")) or "The request is malformed."
        return JsonResponse(error_body(f"Bad request: {message}"), status=400)
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 handler: the API's error format under its paths, the site's page elsewhere."""
    if request.path.startswith(API_PREFIXES):
        return JsonResponse(error_body("Internal server error.", code="server_error"), status=500)
    return defaults.server_error(request)


class ApiError(APIException):
    """An error with field-level details, e.g. from manifest validation or the solver."""

    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(
        self,
        errors: list[dict[str, Any]],
        *,
        status_code: int = 400,
        detail: str | None = None,
        code: str = "invalid",
    ):
        self.code = code
        self.errors = [
            {"path": e.get("path", ""), "line": e.get("line"), "message": e["message"]}
            for e in errors
        ]
        self.status_code = status_code
        super().__init__(
            detail or (self.errors[0]["message"] if self.errors else "Invalid request.")
        )


def valid_body(serializer_class: Any, request: Request) -> dict[str, Any]:
    """The request's body as `serializer_class` validates it; 400 when it is no JSON object."""
    if not isinstance(request.data, dict):
        raise ApiError([{"path": "", "message": "the body must be a JSON object"}])
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def flatten_errors(detail: Any, path: str = "") -> list[dict[str, Any]]:
    if isinstance(detail, dict):
        out: list[dict[str, Any]] = []
        for key, value in detail.items():
            sub = "" if key == "non_field_errors" else str(key)
            out += flatten_errors(value, f"{path}.{sub}" if path and sub else (sub or path))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return [{"path": path, "line": None, "message": str(item)} for item in detail]
        out = []
        for index, item in enumerate(detail):
            out += flatten_errors(item, f"{path}.{index}" if path else str(index))
        return out
    return [{"path": path, "line": None, "message": str(detail)}]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):  # Django's own limit on a body read in memory
        exc = ApiError(
            [
                {
                    "message": "The request body is larger than the limit of "
                    f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
                }
            ],
            status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, DomainError):
        status_code = next(code for kind, code in STATUS.items() if isinstance(exc, kind))
        exc = ApiError(exc.errors, status_code=status_code, code=exc.code)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ApiError):
        errors, code = exc.errors, exc.code
    elif isinstance(exc, ValidationError):
        errors, code = flatten_errors(exc.detail), "invalid"
    else:
        errors = [{"path": "", "line": None, "message": str(getattr(exc, "detail", exc))}]
        code = str(
            getattr(exc, "default_code", None)
            or {403: "forbidden", 404: "not_found"}.get(response.status_code, "error")
        )
    response.data = {
        "detail": errors[0]["message"] if errors else "Invalid request.",
        "code": code,
        "errors": errors,
    }
    return response
