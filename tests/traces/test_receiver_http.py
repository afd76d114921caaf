"""`POST /v1/traces` as daphne serves it: the receiver's own ASGI application
(`traces.api.receiver.asgi_receiver`, routed by mlmodelscope/asgi.py) answers as the Django
view does in-process (the other traces tests): the same refusals, in the same order, with the
same bodies, nothing stored on any of them, and an export stored exactly once however often it
is sent. Other methods at that path, and hosts ALLOWED_HOSTS does not name, still go through
Django."""

from __future__ import annotations

import gzip
import secrets
from collections.abc import Iterator

import pytest
import requests

from tests.livehub import LiveHub
from tests.traces.factories import OTLP, PROTOBUF, export, new_id

pytestmark = pytest.mark.database_free  # a hub of its own


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    with LiveHub(tmp_path_factory.mktemp("receiver")) as live:
        live.migrate()
        live.add_users()
        live.start()
        yield live


def _post(hub: LiveHub, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(hub.url + OTLP, data=body, headers=headers, timeout=30)


def _spans(hub: LiveHub, trace_id: str) -> int:
    status, body = hub.get(f"traces/{trace_id}/layers")
    return int(body["span_count"]) if status == 200 else 0


def _bearer(hub: LiveHub, token: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token or hub.token}", "Content-Type": PROTOBUF}


def test_an_export_is_stored_once_however_often_it_is_sent(hub: LiveHub) -> None:
    trace_id = new_id()
    body = export(trace_id, ("a", 0, 10, {"mlms.level": "model"}), ("b", 5, 2, {}))
    headers = _bearer(hub) | {"X-MLMS-Export": secrets.token_hex(16)}
    for _ in range(2):
        answer = _post(hub, body, headers)
        assert answer.status_code == 200, answer.text
        assert answer.headers["Content-Type"] == PROTOBUF
        # Answered by the receiver's own application: Django's middleware would have added
        # X-Frame-Options (as it does to the GET below).
        assert "X-Frame-Options" not in answer.headers
    assert _spans(hub, trace_id) == 2
    # gzip, and JSON's empty answer
    answer = _post(
        hub,
        gzip.compress(export(trace_id, ("c", 1, 1, {}))),
        _bearer(hub) | {"Content-Encoding": "gzip"},
    )
    assert answer.status_code == 200, answer.text
    assert _spans(hub, trace_id) == 3


@pytest.mark.parametrize(
    ("headers", "body", "status", "message"),
    [
        ({"Content-Type": PROTOBUF}, b"x", 401, "Send 'Authorization: Bearer <token>'."),
        (
            {"Authorization": "Bearer nope", "Content-Type": PROTOBUF},
            b"x",
            401,
            "Invalid token.",
        ),
        ({"Content-Type": "text/plain"}, b"x", 415, "Send OTLP as application/x-protobuf"),
        ({"X-MLMS-Export": "XYZ"}, b"x", 400, "X-MLMS-Export must be 32 lowercase hex digits."),
        ({"Content-Encoding": "br"}, b"x", 415, "Unsupported Content-Encoding 'br'"),
        ({"Content-Encoding": "gzip"}, b"not gzip", 400, "The body is not valid gzip."),
        ({}, b"\xff\xff\xff", 400, "The body is not an OTLP protobuf export"),
    ],
)
def test_refusals_name_the_problem_and_store_nothing(
    hub: LiveHub, headers: dict[str, str], body: bytes, status: int, message: str
) -> None:
    sent = {"Authorization": f"Bearer {hub.token}", "Content-Type": PROTOBUF} | headers
    if "Authorization" not in headers and status == 401:
        del sent["Authorization"]
    answer = _post(hub, body, sent)
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["errors"][0]["message"].startswith(message.split("'")[0]), error
    assert message in error["detail"] or status == 401
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="mlmodelscope"'


def test_a_read_only_token_is_refused_before_the_body_is_looked_at(hub: LiveHub) -> None:
    reader = hub.create_token("alice", "read", create_user=False)
    answer = _post(hub, b"\xff", _bearer(hub, reader))
    assert answer.status_code == 403 and "lacks the 'write'" in answer.json()["detail"]


def test_an_oversized_body_is_413_after_authentication(hub: LiveHub) -> None:
    """A body over TRACE_MAX_BYTES (16 MiB) is refused, after authentication as in-process;
    nothing of it is stored."""
    body = b"\0" * (16 * 1024**2 + 1)
    answer = _post(hub, body, _bearer(hub))
    assert answer.status_code == 413, answer.text
    assert answer.json()["detail"] == f"A trace export may be at most {16 * 1024**2} bytes."
    assert _post(hub, body, _bearer(hub, "nope")).status_code == 401


def test_other_methods_and_unnamed_hosts_go_through_django(hub: LiveHub) -> None:
    answer = requests.get(hub.url + OTLP, timeout=30)
    assert answer.status_code == 405
    assert answer.headers["X-Frame-Options"] == "DENY"  # Django's answer
    answer = _post(hub, b"x", _bearer(hub) | {"Host": "evil.example"})
    assert answer.status_code == 400  # Django's DisallowedHost
