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
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from rest_framework.utils.encoders import JSONEncoder

from evaluations.listing import EvaluationSerializer
from evaluations.models import Evaluation, StatusChange
from hub import group_sends

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


# The consumers' handler for "check your access again" (`access_changed`).
ACCESS_MESSAGE = {"type": "access.changed"}


def access_groups(
    *, user_id: Any = None, token_id: Any = None, evaluation_id: Any = None
) -> list[str]:
    """The groups of the sockets whose access may end with a user's (a group left or a member
    removed), a token's (revoked) or an evaluation's (unshared, unpublished)."""
    groups = []
    if user_id is not None:
        groups.append(f"access.user.{user_id}")
    if token_id is not None:
        groups.append(f"access.token.{token_id}")
    if evaluation_id is not None:
        groups.append(f"access.evaluation.{evaluation_id}")
    return groups


def access_withdrawn(
    users: Iterable[Any] = (), tokens: Iterable[Any] = (), evaluations: Iterable[Any] = ()
) -> None:
    """Tell the sockets of these users, tokens and evaluations, on commit, to check their
    access again (and close, or drop what they may no longer see)."""
    groups = [
        *(group for pk in users for group in access_groups(user_id=pk)),
        *(group for pk in tokens for group in access_groups(token_id=pk)),
        *(group for pk in evaluations for group in access_groups(evaluation_id=pk)),
    ]
    if groups:
        transaction.on_commit(lambda: group_sends.send(groups, ACCESS_MESSAGE), robust=True)


def on_access_withdrawn(
    sender: Any,
    *,
    users: Iterable[Any] = (),
    tokens: Iterable[Any] = (),
    evaluations: Iterable[Any] = (),
    **_: Any,
) -> None:
    """`hub.signals.access_withdrawn`: `access_withdrawn`."""
    access_withdrawn(users, tokens, evaluations)


def _send(evaluation: Evaluation, payload: dict[str, Any]) -> None:
    message = {"type": MESSAGE_TYPE, "payload": plain(payload)}
    groups = [evaluation_group(evaluation.pk), user_group(evaluation.user_id), STAFF_GROUP]
    transaction.on_commit(lambda: group_sends.send(groups, message), robust=True)
