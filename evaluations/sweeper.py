"""The hub's periodic sweep for lost evaluations (`actions.requeue_lost`).

It runs inside every hub process, on the server's own event loop, every
EVALUATION_SWEEP_SECONDS (0 turns it off): started by the first connection the ASGI application
receives (mlmodelscope.asgi wraps the application in `Sweeper`), its first pass no sooner than
HOST_LIVE_SECONDS later, so that a restarted hub does not take its own absence for its agents'. Running in the hub process
means that its WebSocket events reach browsers through the in-process channel layer of the
embedded default as well as through Redis. Several hub processes may sweep at once: each
evaluation is changed under a row lock, and a locked one is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from evaluations import actions, broker_access, watches
from traces import finishing

logger = logging.getLogger(__name__)


class Sweeper:
    """ASGI middleware that starts the sweep loop on the first event it sees."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        interval = settings.EVALUATION_SWEEP_SECONDS
        if self.task is None and interval > 0 and scope["type"] in ("http", "websocket"):
            self.task = asyncio.get_running_loop().create_task(sweep_forever(interval))
        return await self.app(scope, receive, send)


async def sweep_forever(interval: float) -> None:
    # The first sweep waits HOST_LIVE_SECONDS at least: while this hub was down (a restart),
    # agents could neither heartbeat nor report, and their jobs must not be judged lost before
    # they have had the time to do so again.
    delay = max(interval, float(settings.HOST_LIVE_SECONDS))
    while True:
        await asyncio.sleep(delay)
        delay = interval
        try:
            await sync_to_async(sweep_once)()
        except Exception:
            logger.exception("the sweep for lost evaluations failed; trying again later")


def sweep_once() -> int:
    close_old_connections()
    try:
        changed = actions.requeue_lost()
        # After a Redis restart the broker users of the agents' scopes are gone; their agents
        # reconnect with the same credentials once the sweep has made them again.
        broker_access.ensure_host_scopes()
        # Traces of finished evaluations that no finish has seen (a hub stopped first).
        finishing.sweep()
        # Watches whose scheduled run is due (each launched once, whichever process sweeps).
        watches.run_due()
    finally:
        close_old_connections()
    for evaluation in changed:
        logger.info("lost evaluation %s is now %s", evaluation.pk, evaluation.status)
    return len(changed)
