"""Malformed input to the evaluations API and the WebSockets: a 4xx in the API's JSON error
format (or a 44xx close code) naming the problem, nothing stored on refusal. (The OTLP
receiver's and the trace reads': tests/traces/test_malformed_spans.py.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from evaluations.models import Evaluation
from mlmodelscope.asgi import application
from tests.evaluations.factories import EVALUATIONS_URL, url
from tests.helpers import error_of

JSON = "application/json"
DEEP = 100_000


# --- JSON bodies that are not objects, or nest too deep ----------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "named"),
    [("[1, 2]", "an array"), ("3", "a number"), ('"x"', "a string"), ("null", "null")],
)
def test_a_launch_whose_body_is_not_a_json_object_is_refused(bob_client, body, named) -> None:  # type: ignore[no-untyped-def]
    response = bob_client.generic("POST", EVALUATIONS_URL, body, content_type=JSON)

    assert response.status_code == 400
    error = error_of(response)
    assert error["path"] == ""
    assert error["message"] == f"The request body must be a JSON object, not {named}."
    assert not Evaluation.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["claim", "progress", "status", "result"])
def test_an_agent_report_whose_body_is_not_a_json_object_is_refused(agent, action) -> None:  # type: ignore[no-untyped-def]
    response = agent.generic("POST", url(uuid.uuid4(), action), "[]", content_type=JSON)

    assert response.status_code == 400
    assert error_of(response)["message"] == "The request body must be a JSON object, not an array."


def test_the_launch_serializer_refuses_a_list_without_breaking() -> None:
    """Called with a list by other code than the API (which the parser guards), the launch
    serializer reports an error instead of raising from `.errors`."""
    from evaluations.api.serializers import EvaluationRequestSerializer

    serializer = EvaluationRequestSerializer(data=[1, 2])

    assert not serializer.is_valid()
    assert serializer.errors == {"non_field_errors": ["the request body must be a JSON object"]}


@pytest.mark.django_db
@pytest.mark.parametrize("body", ["[" * DEEP + "]" * DEEP, '{"a": ' * 65 + "1" + "}" * 65])
def test_a_launch_nested_too_deep_is_refused(bob_client, body) -> None:  # type: ignore[no-untyped-def]
    response = bob_client.generic("POST", EVALUATIONS_URL, body, content_type=JSON)

    assert response.status_code == 400
    assert "more than 64 levels deep" in error_of(response)["message"]
    assert not Evaluation.objects.exists()


@pytest.mark.django_db
def test_a_json_body_over_the_memory_limit_is_413_in_the_api_format(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    body = '{"a": ' * DEEP + "1" + "}" * DEEP  # 600 kB: over DATA_UPLOAD_MAX_MEMORY_SIZE

    response = bob_client.generic("POST", EVALUATIONS_URL, body, content_type=JSON)

    assert response.status_code == 413
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in error_of(response)["message"]
    assert not Evaluation.objects.exists()


# --- WebSocket paths -----------------------------------------------------------------------------


def _close_code(path: str) -> Any:
    async def run() -> Any:
        communicator = WebsocketCommunicator(application, path)
        # Generous waits: a loaded 2-core VM has taken over the default second to connect.
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        message = await communicator.receive_output(timeout=10)
        await communicator.disconnect()
        return message

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "path",
    [
        "/ws/evaluations/None/",
        "/ws/evaluations/not-a-uuid/",
        "/ws/evaluations/12345/",
        f"/ws/evaluations/{uuid.uuid4()}/extra/",
        "/ws/nope/",
        "/",
    ],
)
def test_an_unknown_websocket_path_is_closed_with_4404(bob_client, path) -> None:  # type: ignore[no-untyped-def]
    assert _close_code(path) == {"type": "websocket.close", "code": 4404}
    assert _close_code(f"{path}?token={bob_client.raw_token}") == {
        "type": "websocket.close",
        "code": 4404,
    }


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_that_does_not_exist_is_closed_with_4404(bob_client) -> None:  # type: ignore[no-untyped-def]
    message = _close_code(f"/ws/evaluations/{uuid.uuid4()}/?token={bob_client.raw_token}")

    assert message == {"type": "websocket.close", "code": 4404}
