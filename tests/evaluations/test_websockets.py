"""Who may open the evaluations' WebSockets: a session from this site's pages, or `?token=`
with the read or evaluate scope; anyone else is closed with a 44xx code."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore

from mlmodelscope.asgi import application
from tests.evaluations.factories import launch, launched_id

pytestmark = pytest.mark.django_db(transaction=True)


def _open(path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    """The first message (or the close) the server sends on `path`."""

    async def run() -> dict[str, Any]:
        communicator = WebsocketCommunicator(application, path, headers=headers or [])
        connected, _ = await communicator.connect()
        assert connected
        message = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return message  # type: ignore[no-any-return]

    return async_to_sync(run)()


def _session_cookie(user) -> bytes:  # type: ignore[no-untyped-def]
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}".encode()


def test_anonymous_connections_are_closed_with_4401() -> None:
    assert _open("/ws/evaluations/") == {"type": "websocket.close", "code": 4401}


def test_an_unknown_token_is_closed_with_4401() -> None:
    assert _open("/ws/evaluations/?token=mlms_nope")["code"] == 4401


def test_an_agent_token_is_closed_with_4403(agent) -> None:  # type: ignore[no-untyped-def]
    assert _open(f"/ws/evaluations/?token={agent.raw_token}")["code"] == 4403


def test_another_users_evaluation_is_closed_with_4404(
    alice_evaluator_client, bob_client, hosts
) -> None:  # type: ignore[no-untyped-def]
    evaluation_id = launched_id(launch(bob_client))

    message = _open(f"/ws/evaluations/{evaluation_id}/?token={alice_evaluator_client.raw_token}")

    assert message["code"] == 4404


def test_a_session_from_this_site_gets_the_snapshot(alice, alice_evaluator_client, hosts) -> None:  # type: ignore[no-untyped-def]
    evaluation_id = launched_id(launch(alice_evaluator_client))
    cookie = (b"cookie", _session_cookie(alice))

    message = _open(
        f"/ws/evaluations/{evaluation_id}/", [cookie, (b"origin", b"http://127.0.0.1:8000")]
    )

    assert message["type"] == "websocket.send"
    assert evaluation_id in message["text"]


def test_a_session_from_another_site_is_refused(alice) -> None:  # type: ignore[no-untyped-def]
    headers = [(b"cookie", _session_cookie(alice)), (b"origin", b"https://evil.example.org")]

    assert _open("/ws/evaluations/", headers)["code"] == 4401
