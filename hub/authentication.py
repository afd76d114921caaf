"""API authentication: `Authorization: Bearer <token>` and, for the browser, the session."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from hub.models import SCOPES, ApiToken, hash_token
from hub.statements import statement

# A token's last use is recorded at most this often, so reads do not turn into writes.
_LAST_USED_RESOLUTION = timedelta(minutes=1)
# Scopes a signed-in browser session holds. The agent scope is for agents' tokens alone.
SESSION_SCOPES = frozenset({"read", "write", "evaluate"})


@functools.cache
def _token_statement() -> str:
    """The token of a key hash, with whether its user is active (`user_is_active`)."""
    placeholder = "0" * 64
    queryset = ApiToken.objects.filter(key_hash=placeholder).annotate(
        user_is_active=F("user__is_active")
    )
    return statement(queryset, [placeholder])


def authenticate_token(raw: str) -> ApiToken:
    """The active token for `raw`, or AuthenticationFailed saying why not. Its user is read
    when asked for. The query is built once (`hub.statements`): building it took twenty times
    as long as the database took to answer it, on every request and every span export."""
    found = list(ApiToken.objects.raw(_token_statement(), [hash_token(raw)]))
    if not found:
        raise exceptions.AuthenticationFailed("Invalid token.")
    token = found[0]
    if token.revoked_at is not None:
        raise exceptions.AuthenticationFailed("This token has been revoked.")
    if token.is_expired:
        raise exceptions.AuthenticationFailed("This token has expired.")
    if not token.user_is_active:  # type: ignore[attr-defined]
        raise exceptions.AuthenticationFailed("The token's user is inactive.")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header; expected 'Bearer <token>'."
            )
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        token = authenticate_token(raw)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="mlmodelscope"'


class BrowserSessionAuthentication(authentication.SessionAuthentication):
    """Django's session, with CSRF enforced, for the browser pages' calls to the API."""


def scopes_of(request: Request) -> frozenset[str]:
    if isinstance(request.auth, ApiToken):
        return frozenset(request.auth.scopes)
    if request.user is not None and request.user.is_authenticated:
        return SESSION_SCOPES
    return frozenset()


__all__ = ["SCOPES", "BearerTokenAuthentication", "BrowserSessionAuthentication", "scopes_of"]
