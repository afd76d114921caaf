"""Scope enforcement. Every API view states which scope each HTTP method needs."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, permissions
from rest_framework.request import Request

from hub.authentication import scopes_of

_SAFE = {"GET", "HEAD", "OPTIONS"}


class HasScope(permissions.BasePermission):
    """Allow a request when the caller's token (or session) holds the scope its method needs.

    A view sets `required_scopes` ({method: scope, or a tuple of scopes any one of which
    will do}; by default reads need `read` and writes need `write`) and `anonymous_methods`,
    the methods an anonymous caller may use (none by default). An anonymous caller elsewhere
    gets 401; a token lacking the scope gets 403.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        method = request.method or "GET"
        if not (request.user and request.user.is_authenticated):
            if method in getattr(view, "anonymous_methods", ()):
                return True
            raise exceptions.NotAuthenticated()
        needed = required_scopes(view, method)
        if not scopes_of(request) & set(needed):
            wanted = " or ".join(f"'{scope}'" for scope in needed)
            raise exceptions.PermissionDenied(f"This token lacks the {wanted} scope.")
        return True


def required_scopes(view: Any, method: str) -> tuple[str, ...]:
    """The scopes of which a caller needs one to use `method` on `view`."""
    configured: dict[str, str | tuple[str, ...]] = getattr(view, "required_scopes", {})
    needed = configured.get(method, "read" if method in _SAFE else "write")
    return (needed,) if isinstance(needed, str) else needed


class KnownQueryParameters(permissions.BasePermission):
    """Refuse a query parameter the view does not read: `?created_after=2030-01-01` on a list
    that has no such filter would otherwise answer everything, as if it had been applied.

    A view lists the parameters it reads in `query_parameters` (the same ones its OpenAPI
    schema declares; a test holds the two together), for every method or by method; a paginated
    list also reads `page` and `page_size`. Anything else is 400 naming the parameter and the ones the view takes.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        allowed = known_query_parameters(view, request.method or "GET")
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            from hub.api.errors import ApiError

            takes = ", ".join(sorted(allowed)) or "none"
            raise ApiError(
                [
                    {
                        "path": name,
                        "message": f"unknown query parameter '{name[:64]}' (this endpoint "
                        f"takes: {takes})",
                    }
                    for name in unknown[:8]
                ]
            )
        return True


def known_query_parameters(view: Any, method: str = "GET") -> set[str]:
    """The query parameters `view` reads for `method` (`query_parameters` is a tuple for every
    method, or a dict of tuples by method)."""
    declared = getattr(view, "query_parameters", ())
    if isinstance(declared, dict):
        declared = declared.get("GET" if method == "HEAD" else method, ())
    allowed = set(declared)
    paginator = getattr(view, "paginator", None)
    if paginator is not None and hasattr(view, "list") and method in ("GET", "HEAD"):
        allowed |= {paginator.page_query_param, paginator.page_size_query_param}
    return allowed
