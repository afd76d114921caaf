"""An idle WebSocket on daphne in production mode (the Redis channel layer) stays open and still
receives events; see docs/reliability.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import _production
from tests.livehub import Closed

IDLE_SECONDS = 30

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_a_websocket_idle_for_30_s_stays_open_and_receives_the_next_event(
    tmp_path: Path,
) -> None:
    with _production.production_hub(tmp_path) as hub:
        socket = _production.follow(hub)
        try:
            try:
                during_idle = socket.receive(timeout=IDLE_SECONDS)
            except Closed as closed:
                pytest.fail(f"the idle socket was {closed}\n{hub.logs()}")
            _production.export_spans(hub, count=8)
            event = socket.receive(timeout=10)
        finally:
            socket.close()

    assert during_idle is None
    assert event is not None
    assert event["type"] == "spans"
    assert event["id"] == hub.evaluation_id
    assert event["count"] == 8
