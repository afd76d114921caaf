"""What every page's template may show beside its own content."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from hub import groups


def invitations(request: HttpRequest) -> dict[str, Any]:
    """`pending_invitations`: how many group invitations wait for the signed-in user's answer
    (every page's header says so until they answer)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"pending_invitations": 0}
    return {"pending_invitations": groups.invitations_of(user).count()}
