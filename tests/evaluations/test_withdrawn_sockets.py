"""Access withdrawn is withdrawn on the WebSockets too: a socket that follows an evaluation
receives no event more than a second after its reader lost access to it, and is closed with
4403, whether the evaluation was unshared, its reader removed from the group or left it, it was
unpublished, or the reader's token revoked.

One live hub (daphne in a process of its own, on this pass's services: the embedded default's
in-process channel layer, or Redis) serves the module. While the reader's socket follows the
evaluation, its owner keeps exporting spans into its trace every 0.1 s, so that a `spans` event
is sent to the evaluation's sockets all along, before and after the withdrawal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import _hub
from tests.livehub import Closed, LiveHub

pytestmark = pytest.mark.both_stacks  # the in-process channel layer, then Redis

# What every case needs, made in the hub with its own ORM (`manage.py shell`): alice, whose
# evaluations the cases follow; bob, their reader, with a token for his socket and another to
# act with; per case, a group of alice's that bob joined by accepting her invitation and an
# evaluation of alice's shared with it, and a published evaluation.
_SEED = """
import json
from benchmarks import _hub
from hub import groups
from hub.models import ApiToken
alice, alice_token = _hub.user_with_token("alice", ["read", "write", "evaluate"])
bob, bob_token = _hub.user_with_token("bob", ["read", "write", "evaluate"])
_socket, bob_socket_token = ApiToken.issue(bob, name="socket", scopes=["read"])
seed = {"alice": alice_token, "bob": bob_token, "bob_socket": bob_socket_token,
        "bob_socket_id": _socket.pk, "cases": {}}
for case in ("unshare", "remove", "leave", "revoke"):
    group = groups.create_group(alice, f"lab-{case}")
    groups.accept_invitation(groups.invite(alice, group, "bob"))
    evaluation = _hub.evaluation(alice, finished=False)
    evaluation.shared_groups.add(group)
    seed["cases"][case] = {"id": str(evaluation.pk), "trace_id": evaluation.trace_id}
published = _hub.evaluation(alice, finished=True)
published.published = True
published.save()
seed["cases"]["unpublish"] = {"id": str(published.pk), "trace_id": published.trace_id}
print(json.dumps(seed))
"""

# How late after the withdrawal an event may still arrive (the bound).
WITHIN = 1.0


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    folder: Path = tmp_path_factory.mktemp("withdrawn")
    with LiveHub(folder, services="environ", settings={"EVALUATION_SWEEP_SECONDS": "0"}) as live:
        live.migrate()
        live.seed = json.loads(live.shell(_SEED).splitlines()[-1])  # type: ignore[attr-defined]
        live.start()
        yield live


class Follower(threading.Thread):
    """Reads a socket until it closes or `stop()`: every message with when it came, and the
    close code with when it came."""

    def __init__(self, hub: LiveHub, path: str, token: str) -> None:
        super().__init__(daemon=True)
        self.socket = hub.websocket(path, token)
        snapshot = self.socket.receive(timeout=30)
        assert snapshot is not None and snapshot["type"] == "snapshot", snapshot
        self.messages: list[tuple[float, dict[str, Any]]] = []
        self.closed: tuple[float, int] | None = None
        self._ending = threading.Event()

    def run(self) -> None:
        while not self._ending.is_set():
            try:
                message = self.socket.receive(timeout=0.1)
            except Closed as closed:
                self.closed = (time.monotonic(), closed.code)
                return
            if message is not None:
                self.messages.append((time.monotonic(), message))

    def stop(self) -> None:
        self._ending.set()
        self.join(timeout=10)
        if self.closed is None:
            self.socket.close()


def _export(hub: LiveHub, trace_id: str) -> None:
    """Alice exports two spans into her evaluation's trace: a `spans` event follows."""
    body = next(_hub.export_bodies(trace_id, _hub.agent_spans(2), 2))
    status, answer = hub.request(
        "POST",
        "/v1/traces",
        body,
        token=hub.seed["alice"],  # type: ignore[attr-defined]
        content_type="application/x-protobuf",
    )
    assert status == 200, answer


def _withdrawals(hub: LiveHub) -> dict[str, Callable[[dict[str, str]], tuple[int, Any]]]:
    seed = hub.seed  # type: ignore[attr-defined]
    alice, bob = seed["alice"], seed["bob"]
    return {
        "unshare": lambda case: hub.request(
            "DELETE", f"/api/v1/evaluations/{case['id']}/shares/lab-unshare/", token=alice
        ),
        "remove": lambda case: hub.request(
            "DELETE", "/api/v1/groups/lab-remove/members/bob/", token=alice
        ),
        "leave": lambda case: hub.request(
            "DELETE", "/api/v1/groups/lab-leave/members/bob/", token=bob
        ),
        "unpublish": lambda case: hub.request(
            "DELETE", f"/api/v1/evaluations/{case['id']}/publish/", token=alice
        ),
        "revoke": lambda case: hub.request(
            "DELETE", f"/api/v1/tokens/{seed['bob_socket_id']}/", token=bob
        ),
    }


@pytest.mark.parametrize("case", ["unshare", "remove", "leave", "unpublish", "revoke"])
def test_a_socket_gets_no_event_a_second_after_its_access_is_withdrawn(
    hub: LiveHub, case: str
) -> None:
    seed = hub.seed  # type: ignore[attr-defined]
    evaluation = seed["cases"][case]
    # The published evaluation is followed by an anonymous reader; the others by bob's token.
    token = "" if case == "unpublish" else seed["bob_socket"]
    follower = Follower(hub, f"/ws/evaluations/{evaluation['id']}/", token)
    follower.start()
    try:
        # Events reach the reader while he may read.
        deadline = time.monotonic() + 15
        while not follower.messages and time.monotonic() < deadline:
            _export(hub, evaluation["trace_id"])
            time.sleep(0.1)
        assert follower.messages, f"no event reached the reader before the withdrawal\n{hub.logs()}"

        withdrawn = time.monotonic()
        status, answer = _withdrawals(hub)[case](evaluation)
        assert status == (200 if case == "unpublish" else 204), answer
        # Events go on for two seconds after it.
        while time.monotonic() < withdrawn + 2 * WITHIN:
            _export(hub, evaluation["trace_id"])
            time.sleep(0.1)
    finally:
        follower.stop()

    late = [message for at, message in follower.messages if at > withdrawn + WITHIN]
    assert late == [], f"{len(late)} events came more than {WITHIN} s after the withdrawal"
    assert follower.closed is not None, "the socket stayed open"
    closed_at, code = follower.closed
    assert code == 4403
    assert closed_at - withdrawn < WITHIN
