"""Messages to channel-layer groups (the pages' WebSockets), sent from synchronous code, or
collected where they would reach nobody.

The embedded default's channel layer lives in daphne's process: a message sent from another
process (the receiver's ingest processes, `traces.ingest_processes`) would reach no page. There
the sends are `collected` and handed to daphne's process, which makes them (`send_collected`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

# A message for each of its groups.
Sends = list[tuple[list[str], dict[str, Any]]]

# While set (`collected`): where sends go instead of the channel layer.
_COLLECTOR: ContextVar[Sends | None] = ContextVar("group_sends", default=None)


def send(groups: list[str], message: dict[str, Any]) -> None:
    """`message` to every group of `groups` (or to the block's list, inside `collected`)."""
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


@contextmanager
def collected() -> Iterator[Sends]:
    """The sends made inside the block, as (groups, message), instead of sending them."""
    sends: Sends = []
    token = _COLLECTOR.set(sends)
    try:
        yield sends
    finally:
        _COLLECTOR.reset(token)


async def send_collected(sends: Sends) -> None:
    """Make the sends that `collected` kept, from the event loop."""
    layer = get_channel_layer()
    if layer is None:
        return
    for groups, message in sends:
        for group in groups:
            await layer.group_send(group, message)
