"""Query parameters that take a fixed set of values: anything else is 400 naming the parameter.

A filter that silently ignores a value it does not know (`?live=yes`, `?kind=modle`) answers
something other than what the caller asked for; the OpenAPI schema states each parameter's
values (`FLAG_VALUES`, an enum), and these helpers hold the views to it.
"""

from __future__ import annotations

from collections.abc import Iterable

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from hub.api.errors import ApiError

FLAG_VALUES = ("true", "false", "1", "0")


def choice(request: Request, name: str, choices: Iterable[str]) -> str | None:
    """The value of query parameter `name`: None when absent, else one of `choices` (an empty
    value too is refused: it names no choice)."""
    value = request.query_params.get(name)
    if value is None:
        return None
    allowed = list(choices)
    if value not in allowed:
        raise ApiError([{"path": name, "message": f"{name} must be one of {', '.join(allowed)}"}])
    return value


def flag(request: Request, name: str) -> bool:
    """Query parameter `name` as a yes/no: true or 1, false or 0; False when absent."""
    value = choice(request, name, FLAG_VALUES)
    return value in ("true", "1")


def flag_parameter(name: str, description: str) -> OpenApiParameter:
    """The OpenAPI declaration of a `flag` parameter."""
    return OpenApiParameter(name, str, enum=list(FLAG_VALUES), description=description)
