"""ASGI entry point, served by daphne: HTTP through Django, WebSockets through Channels.

WebSockets authenticate with the browser's session (from this site's own pages: an `Origin`
header must name one of ALLOWED_HOSTS or CSRF_TRUSTED_ORIGINS) or with `?token=<API token>`,
since a browser cannot set an Authorization header on a WebSocket. The consumers find the user
in `scope["user"]`, the scopes it holds in `scope["auth_scopes"]` and the token's id (None for a
session) in `scope["auth_token_id"]`. A WebSocket path that
names no route (`/ws/evaluations/None/`, `/ws/nope/`) is accepted and closed with 4404, like an
evaluation the caller may not see.

`POST /v1/traces` (OTLP spans) goes to the receiver's own ASGI application (`OtlpRoute`); other
HTTP requests go to Django through `BodyLengthASGIHandler`, which gives a body sent without a
Content-Length (`Transfer-Encoding: chunked`) the length it turned out to have; daphne answers
a URL too long for it with 414 (mlmodelscope.daphne_limits).
"""

import os
from typing import Any
from urllib.parse import parse_qs, urlsplit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlmodelscope.settings")

import django  # noqa: E402
from django.core.handlers.asgi import ASGIHandler, ASGIRequest  # noqa: E402
from django.http import HttpResponse  # noqa: E402


class BodyLengthASGIHandler(ASGIHandler):
    """Django's ASGI handler, setting CONTENT_LENGTH for a body that came without one.

    A chunked request (`Transfer-Encoding: chunked`, as `curl -T -` or a streaming client
    sends) carries no Content-Length header, so Django's ASGIRequest has no CONTENT_LENGTH, and
    both DRF (`Request._load_stream`) and Django's multipart parser read a missing length as
    0: the body is parsed as empty although the server delivered it. By the time the request
    is made, the handler has read the whole body into `body_file`, so its length is known; with
    it set, the body parses, and every size limit that reads CONTENT_LENGTH applies to it too.
    """

    def create_request(
        self, scope: dict[str, Any], body_file: Any
    ) -> tuple[ASGIRequest | None, HttpResponse | None]:
        request, error = super().create_request(scope, body_file)
        if request is not None and not request.META.get("CONTENT_LENGTH"):
            body_file.seek(0, os.SEEK_END)
            size = body_file.tell()
            body_file.seek(0)
            if size:
                request.META["CONTENT_LENGTH"] = str(size)
        return request, error


# Django's set-up comes first (as django.core.asgi.get_asgi_application does it): the imports
# below need the app registry.
django.setup(set_prefix=False)

from evaluations.broker_access import refuse_open_redis  # noqa: E402

# Not on a Redis that anyone may read: the agents' scoped broker users would protect nothing
# (BROKER_ALLOW_OPEN_DEFAULT_USER=true overrides; one connection per Redis, once).
refuse_open_redis()
django_asgi_app = BodyLengthASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.db import database_sync_to_async  # noqa: E402
from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import AnonymousUser  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402
from django.urls import re_path  # noqa: E402
from rest_framework.exceptions import AuthenticationFailed  # noqa: E402

from evaluations.routing import websocket_urlpatterns  # noqa: E402
from evaluations.sweeper import Sweeper  # noqa: E402
from hub.authentication import SESSION_SCOPES, authenticate_token  # noqa: E402
from mlmodelscope.daphne_limits import answer_overlong_lines, bodies_in_memory  # noqa: E402
from traces.api.receiver import asgi_receiver  # noqa: E402


def _token_user(raw: str) -> tuple[Any, frozenset[str], int | None]:
    try:
        token = authenticate_token(raw)
    except AuthenticationFailed:
        return AnonymousUser(), frozenset(), None
    return token.user, frozenset(token.scopes), token.pk


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
        scope["auth_token_id"] = None
        if raw:
            user, scopes, token_id = await database_sync_to_async(_token_user)(raw)
            scope["user"], scope["auth_scopes"], scope["auth_token_id"] = user, scopes, token_id
        elif scope["user"].is_authenticated and _same_site(scope):
            scope["auth_scopes"] = SESSION_SCOPES
        else:
            scope["user"], scope["auth_scopes"] = AnonymousUser(), frozenset()
        return await self.app(scope, receive, send)


class NoSuchPath(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Any WebSocket path no route names: accepted, then closed with 4404 (unrouted, Channels
    would raise, and daphne would drop the connection with no close code)."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=4404)


websocket_application = AuthMiddlewareStack(
    WebSocketAuthMiddleware(URLRouter([*websocket_urlpatterns, re_path(r"", NoSuchPath.as_asgi())]))
)


def _named_host(scope: dict[str, Any]) -> bool:
    """Whether the request's Host is one ALLOWED_HOSTS names (as Django checks it)."""
    host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


class OtlpRoute:
    """`POST /v1/traces` straight to the OTLP receiver's ASGI application
    (`traces.api.receiver.asgi_receiver`), without Django's request handling, which costs more
    than storing an export; everything else, that path's other methods and hosts Django refuses
    included, to Django."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["path"] == "/v1/traces" and scope["method"] == "POST" and _named_host(scope):
            return await asgi_receiver(scope, receive, send)
        return await self.app(scope, receive, send)


answer_overlong_lines()
bodies_in_memory()
application = Sweeper(
    ProtocolTypeRouter({"http": OtlpRoute(django_asgi_app), "websocket": websocket_application})
)
