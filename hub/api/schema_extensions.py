"""Teach drf-spectacular about the API's two authentications: bearer tokens and, for the
browser's own pages, the signed-in session."""

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "hub.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token: `Authorization: Bearer mlms_…`. Scopes: read, write, evaluate, agent.",
        }


class BrowserSessionScheme(OpenApiAuthenticationExtension):
    target_class = "hub.authentication.BrowserSessionAuthentication"
    name = "sessionAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": settings.SESSION_COOKIE_NAME,
            "description": "The session of a user signed in to the hub's pages; it holds the "
            "read, write and evaluate scopes. Other methods than GET also need the CSRF token "
            "in an `X-CSRFToken` header.",
        }
