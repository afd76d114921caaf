"""Realtime events of evaluations, sent to WebSocket consumers through the channel layer.

Every event is sent with `transaction.on_commit`, so a browser never sees a state that the
database rolled back. An event goes to the evaluation's own group (`/ws/evaluations/<id>/`), to
its user's group and to the staff group (`/ws/evaluations/`). Shapes (see docs/api.md):

    {"type": "status", "id", "status", "reason", "at", "attempt", "host", "evaluation": {…}}
    {"type": "progress", "id", "status", "done", "total"}
    {"type": "cancel_requested", "id", "evaluation": {…}}
    {"type": "spans", "id", "count", "levels": {level: count}}

`evaluation` is the evaluation as `GET /api/v1/evaluations/` lists it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from rest_framework.utils.encoders import JSONEncoder

from evaluations.models import Evaluation, StatusChange

logger = logging.getLogger(__name__)

STAFF_GROUP = "evaluations.staff"
# The consumers' handler for every event (`evaluation_event`).
MESSAGE_TYPE = "evaluation.event"


def evaluation_group(evaluation_id: Any) -> str:
    return f"evaluation.{evaluation_id}"


def user_group(user_id: Any) -> str:
    return f"evaluations.user.{user_id}"


def plain(data: Any) -> Any:
    """`data` with only JSON types (UUIDs and datetimes as strings), as every layer can carry."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def status_changed(evaluation: Evaluation, change: StatusChange) -> None:
    from evaluations.api.serializers import EvaluationSerializer

    _send(
        evaluation,
        {
            "type": "status",
            "id": str(evaluation.pk),
            "status": change.status,
            "reason": change.reason,
            "at": change.at,
            "attempt": change.attempt,
            "host": change.host.name if change.host else None,
            "evaluation": EvaluationSerializer(evaluation).data,
        },
    )


def progressed(evaluation: Evaluation) -> None:
    _send(
        evaluation,
        {
            "type": "progress",
            "id": str(evaluation.pk),
            "status": evaluation.status,
            "done": evaluation.progress_done,
            "total": evaluation.progress_total,
        },
    )


def cancel_requested(evaluation: Evaluation) -> None:
    from evaluations.api.serializers import EvaluationSerializer

    _send(
        evaluation,
        {
            "type": "cancel_requested",
            "id": str(evaluation.pk),
            "evaluation": EvaluationSerializer(evaluation).data,
        },
    )


def spans_received(evaluation: Evaluation, levels: dict[str, int]) -> None:
    """Spans of the evaluation's trace arrived (a summary: how many, per level)."""
    _send(
        evaluation,
        {
            "type": "spans",
            "id": str(evaluation.pk),
            "count": sum(levels.values()),
            "levels": levels,
        },
    )


def on_spans_received(
    sender: Any, *, evaluation: Evaluation, levels: dict[str, int], **_: Any
) -> None:
    """`traces.signals.spans_received`: send `spans_received`."""
    spans_received(evaluation, levels)


def _send(evaluation: Evaluation, payload: dict[str, Any]) -> None:
    message = {"type": MESSAGE_TYPE, "payload": plain(payload)}
    groups = [evaluation_group(evaluation.pk), user_group(evaluation.user_id), STAFF_GROUP]
    transaction.on_commit(lambda: _group_send(groups, message), robust=True)


# While set (`collected`): where events go instead of the channel layer.
_COLLECTOR: ContextVar[list[tuple[list[str], dict[str, Any]]] | None] = ContextVar(
    "evaluation_events", default=None
)


@contextmanager
def collected() -> Iterator[list[tuple[list[str], dict[str, Any]]]]:
    """The events sent inside the block, as (groups, message), instead of sending them: a
    process whose channel layer no page listens on (the receiver's ingest processes) hands them
    to one that sends them (`send_collected`)."""
    events: list[tuple[list[str], dict[str, Any]]] = []
    token = _COLLECTOR.set(events)
    try:
        yield events
    finally:
        _COLLECTOR.reset(token)


async def send_collected(events: list[tuple[list[str], dict[str, Any]]]) -> None:
    """Send events that `collected` kept, from the event loop."""
    layer = get_channel_layer()
    if layer is None:
        return
    for groups, message in events:
        for group in groups:
            await layer.group_send(group, message)


def _group_send(groups: list[str], message: dict[str, Any]) -> None:
    collector = _COLLECTOR.get()
    if collector is not None:
        collector.append((groups, message))
        return
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all() -> None:
        for group in groups:
            await layer.group_send(group, message)

    # One hop to the event loop for all the groups, not one per group.
    async_to_sync(send_all)()
