"""Refuse URLs that no view or database should see: a NUL character (or a lone surrogate) in the
path or in a query parameter's name or value is a 400 before any view runs.

PostgreSQL's text columns cannot hold a NUL, so a path such as `/models/%00/` reached the
database as a lookup and became a 500. Under the API's paths (`/api/`, `/v1/`) the answer is
the API's JSON error, naming the parameter (`path` its name, "" for the URL's path); elsewhere
the site's HTML 400 page, saying what is wrong with the address. Request bodies are the
parsers' to check (`hub.api.parsers`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string

from hub.api.errors import API_PREFIXES, error_body
from hub.api.parsers import printable, text_problem


def _problem(request: HttpRequest) -> tuple[str, str] | None:
    """(the parameter at fault, "" for the URL's path; the message) or None."""
    for text in (request.path, request.path_info):
        problem = text_problem(text)
        if problem is not None:
            return "", f"The URL's path {problem}."
    for key, values in request.GET.lists():
        problem = text_problem(key)
        if problem is None:
            problem = next(
                (found for value in values if (found := text_problem(value)) is not None), None
            )
        if problem is not None:
            name = printable(key)
            return name, f"The query parameter '{name}' {problem}."
    return None


class RejectMalformedUrlMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        found = _problem(request)
        if found is None:
            return self.get_response(request)
        parameter, message = found
        if request.path.startswith(API_PREFIXES):
            body = error_body(message, path=parameter)
            return HttpResponse(json.dumps(body), status=400, content_type="application/json")
        page = render_to_string("400.html", {"message": message}, request)
        return HttpResponseBadRequest(page)
