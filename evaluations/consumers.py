"""WebSocket consumers: live status and progress of evaluations.

- `/ws/evaluations/<id>/`: one evaluation. On connect, `{"type": "snapshot", "evaluation":
  {…as GET /api/v1/evaluations/<id>/…}}`, then every event of it (see evaluations.events).
- `/ws/evaluations/`: the user's evaluations (staff: everyone's). On connect, `{"type":
  "snapshot", "evaluations": [the 50 latest, as the list endpoint shows them]}`, then every
  event of any of them, new ones included.

Authentication is the browser's session, or `?token=<API token>` with the `read` or `evaluate`
scope (mlmodelscope.asgi). A refused connection is accepted and closed at once with code 4401
(not authenticated), 4403 (the token lacks the scope) or 4404 (no such evaluation for you).

Access withdrawn is withdrawn here too: every event is checked against the socket's current
access before it is sent (the answer of a check is reused for at most `RECHECK_SECONDS`), and
whatever may end someone's access (an evaluation unshared or unpublished, a member leaving or
removed from a group, a token revoked: `events.access_withdrawn`) tells the sockets concerned
to check at once. A socket that may no longer follow what it follows is closed with 4403, and
sends nothing more.
"""

from __future__ import annotations

import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from evaluations import events
from evaluations.api.serializers import EvaluationDetailSerializer
from evaluations.listing import EvaluationSerializer
from evaluations.models import Evaluation
from hub.models import ApiToken

READ_SCOPES = {"read", "evaluate"}
SNAPSHOT_SIZE = 50
# How long the answer of an access check stands when no withdrawal was announced meanwhile: a
# withdrawal whose announcement was lost still stops the events within this time.
RECHECK_SECONDS = 0.5
# The close code of a socket whose access ended.
WITHDRAWN = 4403


class _EvaluationsConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    joined: list[str]
    # Whether an anonymous caller may connect (and then sees only published evaluations).
    anonymous = False

    async def connect(self) -> None:
        self.joined = []
        self.user: Any = AnonymousUser()
        self.checked_until = 0.0
        self.withdrawn = False
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            if self.anonymous:
                # An anonymous reader follows a published evaluation (`visible_to`).
                await self.start(AnonymousUser())
                return
            await self.close(code=4401)
            return
        if not READ_SCOPES & set(self.scope.get("auth_scopes", ())):
            await self.close(code=4403)
            return
        self.user = user
        await self.join(*events.access_groups(user_id=user.pk, token_id=self.token_id))
        await self.start(user)

    @property
    def token_id(self) -> int | None:
        return self.scope.get("auth_token_id")  # type: ignore[no-any-return]

    async def start(self, user: Any) -> None:
        raise NotImplementedError

    async def join(self, *groups: str) -> None:
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    # -- access ----------------------------------------------------------------------------------

    def still_allowed(self) -> bool:
        """Whether the socket may still follow what it follows (in a thread: it reads the
        database). The user is active and their token, if it came with one, neither revoked
        nor expired; subclasses add what they follow."""
        if self.user.is_authenticated:
            if not get_user_model().objects.filter(pk=self.user.pk, is_active=True).exists():
                return False
            if self.token_id is not None:
                token = ApiToken.objects.filter(pk=self.token_id).first()
                if token is None or not token.is_active:
                    return False
        return True

    async def check_access(self, *, now: bool = False) -> bool:
        """Whether the socket may go on; closes it (once) when not. Checked again when `now`
        or when the last answer is older than RECHECK_SECONDS."""
        if self.withdrawn:
            return False
        if not now and time.monotonic() < self.checked_until:
            return True
        if await database_sync_to_async(self.still_allowed)():
            self.checked_until = time.monotonic() + RECHECK_SECONDS
            return True
        self.withdrawn = True
        await self.close(code=WITHDRAWN)
        return False

    async def access_changed(self, event: dict[str, Any]) -> None:
        """`events.access_withdrawn`: check at once."""
        await self.check_access(now=True)

    async def evaluation_event(self, event: dict[str, Any]) -> None:
        if await self.check_access():
            await self.send_json(event["payload"])


def _evaluations(user: Any) -> Any:
    return (
        Evaluation.objects.visible_to(user)
        .select_related("user", "host", "result")
        .prefetch_related("history")
    )


class EvaluationConsumer(_EvaluationsConsumer):
    anonymous = True

    async def start(self, user: Any) -> None:
        self.pk = self.scope["url_route"]["kwargs"]["pk"]
        if not await database_sync_to_async(_evaluations(user).filter(pk=self.pk).exists)():
            await self.close(code=4404)
            return
        # Join first, then read: an event that happens in between is sent after the snapshot
        # rather than lost.
        await self.join(
            events.evaluation_group(self.pk), *events.access_groups(evaluation_id=self.pk)
        )
        snapshot = await database_sync_to_async(self._snapshot)(user, self.pk)
        if snapshot is None:  # withdrawn between the check and the read
            await self.close(code=WITHDRAWN)
            return
        self.checked_until = time.monotonic() + RECHECK_SECONDS
        await self.send_json({"type": "snapshot", "evaluation": snapshot})

    def still_allowed(self) -> bool:
        return super().still_allowed() and _evaluations(self.user).filter(pk=self.pk).exists()

    @staticmethod
    def _snapshot(user: Any, pk: Any) -> dict[str, Any] | None:
        evaluation = _evaluations(user).filter(pk=pk).first()
        if evaluation is None:
            return None
        return events.plain(EvaluationDetailSerializer(evaluation).data)  # type: ignore[no-any-return]


class EvaluationListConsumer(_EvaluationsConsumer):
    async def start(self, user: Any) -> None:
        self.staff = bool(user.is_staff)
        await self.join(events.STAFF_GROUP if self.staff else events.user_group(user.pk))
        snapshot = await database_sync_to_async(self._snapshot)(user)
        self.checked_until = time.monotonic() + RECHECK_SECONDS
        await self.send_json({"type": "snapshot", "evaluations": snapshot})

    def still_allowed(self) -> bool:
        """…and a socket that follows everyone's evaluations still belongs to staff."""
        if not super().still_allowed():
            return False
        return not self.staff or (
            get_user_model().objects.filter(pk=self.user.pk, is_staff=True).exists()
        )

    @staticmethod
    def _snapshot(user: Any) -> list[dict[str, Any]]:
        latest = _evaluations(user)[:SNAPSHOT_SIZE]
        return events.plain(EvaluationSerializer(latest, many=True).data)  # type: ignore[no-any-return]
