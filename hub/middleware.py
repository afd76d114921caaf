"""Refuse query strings holding NUL characters before any view or database sees them."""

from __future__ import annotations

import json
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from hub.api.errors import error_body


class RejectNulQueryMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                message = f"query parameter '{key.replace(chr(0), '')}' contains a NUL character"
                body = error_body(message, path=key.replace("\x00", ""))
                return HttpResponse(json.dumps(body), status=400, content_type="application/json")
        return self.get_response(request)
