"""Teach drf-spectacular about the API's two authentications: bearer tokens and, for the
browser's own pages, the signed-in session."""

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class _Scheme(OpenApiAuthenticationExtension):
    """An authentication's security scheme: the subclass's `fields()`, described by its
    docstring."""

    def fields(self) -> dict[str, str]:
        raise NotImplementedError

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {**self.fields(), "description": " ".join((self.__doc__ or "").split())}


class BearerTokenScheme(_Scheme):
    """An API token: `Authorization: Bearer mlms_…`. Scopes: read, write, evaluate, agent."""

    target_class = "hub.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def fields(self) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class BrowserSessionScheme(_Scheme):
    """The session of a user signed in to the hub's pages; it holds the read, write and evaluate
    scopes. Other methods than GET also need the CSRF token in an `X-CSRFToken` header."""

    target_class = "hub.authentication.BrowserSessionAuthentication"
    name = "sessionAuth"

    def fields(self) -> dict[str, str]:
        return {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME}
