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
