"""ASGI entry point, served by daphne: HTTP through Django, WebSockets through Channels.

WebSockets authenticate with the browser's session (from this site's own pages: an `Origin`
header must name one of ALLOWED_HOSTS or CSRF_TRUSTED_ORIGINS) or with `?token=<API token>`,
since a browser cannot set an Authorization header on a WebSocket. The consumers find the user
in `scope["user"]` and the scopes it holds in `scope["auth_scopes"]`.
"""

import os
from typing import Any
from urllib.parse import parse_qs, urlsplit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlmodelscope.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Django's set-up comes first: the imports below need the app registry.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.db import database_sync_to_async  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import AnonymousUser  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402
from rest_framework.exceptions import AuthenticationFailed  # noqa: E402

from evaluations.routing import websocket_urlpatterns  # noqa: E402
from evaluations.sweeper import Sweeper  # noqa: E402
from hub.authentication import SESSION_SCOPES, authenticate_token  # noqa: E402


def _token_user(raw: str) -> tuple[Any, frozenset[str]]:
    try:
        token = authenticate_token(raw)
    except AuthenticationFailed:
        return AnonymousUser(), frozenset()
    return token.user, frozenset(token.scopes)


def _same_site(scope: dict[str, Any]) -> bool:
    origin = dict(scope.get("headers", [])).get(b"origin")
    if origin is None:  # not a browser: no cross-site request to fear
        return True
    text = origin.decode("latin-1")
    if text in settings.CSRF_TRUSTED_ORIGINS:
        return True
    domain, _port = split_domain_port(urlsplit(text).netloc)
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


class WebSocketAuthMiddleware:
    """`?token=` authenticates like a bearer token; otherwise the session (AuthMiddlewareStack
    resolved it already) counts when the connection comes from this site's pages."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        scope = dict(scope)
        raw = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        if raw:
            scope["user"], scope["auth_scopes"] = await database_sync_to_async(_token_user)(raw)
        elif scope["user"].is_authenticated and _same_site(scope):
            scope["auth_scopes"] = SESSION_SCOPES
        else:
            scope["user"], scope["auth_scopes"] = AnonymousUser(), frozenset()
        return await self.app(scope, receive, send)


websocket_application = AuthMiddlewareStack(
    WebSocketAuthMiddleware(URLRouter(websocket_urlpatterns))
)

application = Sweeper(
    ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application})
)
