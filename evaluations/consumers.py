"""WebSocket consumers: live status and progress of evaluations.

- `/ws/evaluations/<id>/`: one evaluation. On connect, `{"type": "snapshot", "evaluation":
  {…as GET /api/v1/evaluations/<id>/…}}`, then every event of it (see evaluations.events).
- `/ws/evaluations/`: the user's evaluations (staff: everyone's). On connect, `{"type":
  "snapshot", "evaluations": [the 50 latest, as the list endpoint shows them]}`, then every
  event of any of them, new ones included.

Authentication is the browser's session, or `?token=<API token>` with the `read` or `evaluate`
scope (mlmodelscope.asgi). A refused connection is accepted and closed at once with code 4401
(not authenticated), 4403 (the token lacks the scope) or 4404 (no such evaluation for you).
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth.models import AnonymousUser

from evaluations import events
from evaluations.api.serializers import EvaluationDetailSerializer, EvaluationSerializer
from evaluations.models import Evaluation

READ_SCOPES = {"read", "evaluate"}
SNAPSHOT_SIZE = 50


class _EvaluationsConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    joined: list[str]
    # Whether an anonymous caller may connect (and then sees only published evaluations).
    anonymous = False

    async def connect(self) -> None:
        self.joined = []
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
        await self.start(user)

    async def start(self, user: Any) -> None:
        raise NotImplementedError

    async def join(self, group: str) -> None:
        await self.channel_layer.group_add(group, self.channel_name)
        self.joined.append(group)

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def evaluation_event(self, event: dict[str, Any]) -> None:
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
        pk = self.scope["url_route"]["kwargs"]["pk"]
        if not await database_sync_to_async(_evaluations(user).filter(pk=pk).exists)():
            await self.close(code=4404)
            return
        # Join first, then read: an event that happens in between is sent after the snapshot
        # rather than lost.
        await self.join(events.evaluation_group(pk))
        snapshot = await database_sync_to_async(self._snapshot)(user, pk)
        await self.send_json({"type": "snapshot", "evaluation": snapshot})

    @staticmethod
    def _snapshot(user: Any, pk: Any) -> dict[str, Any]:
        evaluation = _evaluations(user).get(pk=pk)
        return events.plain(EvaluationDetailSerializer(evaluation).data)  # type: ignore[no-any-return]


class EvaluationListConsumer(_EvaluationsConsumer):
    async def start(self, user: Any) -> None:
        await self.join(events.STAFF_GROUP if user.is_staff else events.user_group(user.pk))
        snapshot = await database_sync_to_async(self._snapshot)(user)
        await self.send_json({"type": "snapshot", "evaluations": snapshot})

    @staticmethod
    def _snapshot(user: Any) -> list[dict[str, Any]]:
        latest = _evaluations(user)[:SNAPSHOT_SIZE]
        return events.plain(EvaluationSerializer(latest, many=True).data)  # type: ignore[no-any-return]
