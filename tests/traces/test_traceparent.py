"""W3C `traceparent` on launch: the parser, the evaluation's trace id and parent span, the job
the agent claims, writing a trace that `hosts: all` evaluations share; and the live `spans`
event after spans of an evaluation's trace arrive."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from evaluations.models import Evaluation
from mlmodelscope.asgi import application
from tests.evaluations.factories import EVALUATIONS_URL, claim, error_paths, launch, launched_id
from tests.traces.factories import export, post
from traces.models import Trace
from traces.traceparent import TraceParent, TraceParentError, parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
HEADER = f"00-{TRACE}-{SPAN}-01"


def test_a_valid_traceparent_parses() -> None:
    assert parse_traceparent(HEADER) == TraceParent(TRACE, SPAN, 1)
    assert parse_traceparent(f" 00-{TRACE}-{SPAN}-00 ").flags == 0
    assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-future").trace_id == TRACE


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        f"00-{TRACE.upper()}-{SPAN}-01",
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}0-01",
        f"00-{TRACE}-{SPAN}-1",
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"ff-{TRACE}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-01-extra",
        f"0x-{TRACE}-{SPAN}-01",
    ],
)
def test_a_malformed_traceparent_is_refused(header: str) -> None:
    with pytest.raises(TraceParentError, match="traceparent"):
        parse_traceparent(header)


@pytest.mark.django_db
def test_launch_with_traceparent_takes_the_callers_trace_and_span(
    alice_evaluator_client, agent, hosts
) -> None:  # type: ignore[no-untyped-def]
    response = alice_evaluator_client.post(
        EVALUATIONS_URL,
        {"model": "m", "framework": "onnxruntime", "dataset": "d"},
        format="json",
        HTTP_TRACEPARENT=HEADER,
    )
    evaluation = Evaluation.objects.get(pk=launched_id(response))
    assert evaluation.trace_id == TRACE and evaluation.trace_parent_span_id == SPAN
    assert response.json()["evaluations"][0]["trace_id"] == TRACE

    job = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    assert job["trace_id"] == TRACE and job["parent_span_id"] == SPAN


@pytest.mark.django_db
def test_launch_without_traceparent_gets_a_fresh_trace_and_no_parent(
    alice_evaluator_client, agent, hosts
) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(alice_evaluator_client)))
    assert evaluation.trace_id != TRACE and evaluation.trace_parent_span_id == ""
    assert claim(agent, evaluation.pk, hosts["cpu-1"]).json()["parent_span_id"] is None


@pytest.mark.django_db
def test_a_malformed_traceparent_is_400_naming_it(alice_evaluator_client, hosts) -> None:  # type: ignore[no-untyped-def]
    response = alice_evaluator_client.post(
        EVALUATIONS_URL,
        {"model": "m", "framework": "onnxruntime", "dataset": "d"},
        format="json",
        HTTP_TRACEPARENT="00-nope-01",
    )
    assert response.status_code == 400
    assert error_paths(response) == ["traceparent"]
    assert not Evaluation.objects.exists()


@pytest.mark.django_db
def test_hosts_all_evaluations_share_the_trace_and_each_agent_writes_its_own(
    alice_evaluator_client, agent, hosts, make_client, django_user_model
) -> None:  # type: ignore[no-untyped-def]
    response = alice_evaluator_client.post(
        EVALUATIONS_URL,
        {"model": "m", "framework": "onnxruntime", "dataset": "d", "hosts": "all"},
        format="json",
        HTTP_TRACEPARENT=HEADER,
    )
    assert response.status_code == 201, response.content
    evaluations = list(Evaluation.objects.filter(group=response.json()["group"]))
    assert len(evaluations) == 3 and {e.trace_id for e in evaluations} == {TRACE}
    # Only one is claimed, and not the one the receiver finds first by trace id: its agent
    # may still write the shared trace, and so may the evaluations' user.
    first = Evaluation.objects.filter(trace_id=TRACE).first()
    claimed = next(e for e in evaluations if e != first)
    job = claim(agent, claimed.pk, claimed.target_host)
    assert job.status_code == 200
    held = {"HTTP_X_MLMS_CLAIM": job.json()["claim"]}
    assert (
        post(agent, export(TRACE, ("predict", 0, 100, {"mlms.level": "model"})), **held).status_code
        == 200
    )
    stranger = make_client(django_user_model.objects.create_user("eve"), scopes=["agent"])
    assert post(stranger, export(TRACE, ("x", 0, 1, {}))).status_code == 403
    assert post(alice_evaluator_client, export(TRACE, ("app", 0, 500, {}))).status_code == 200

    trace = Trace.objects.get(trace_id=TRACE)
    assert trace.span_count == 2 and trace.owner.username == "alice"
    for evaluation in evaluations:
        otlp = alice_evaluator_client.get(
            f"/api/v1/evaluations/{evaluation.pk}/trace?format=otlp"
        ).json()
        names = [
            span["name"]
            for resource in otlp["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        ]
        assert sorted(names) == ["app", "predict"]


@pytest.mark.django_db(transaction=True)
def test_spans_arriving_send_a_summary_on_the_evaluations_stream(
    alice_evaluator_client, agent, hosts
) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(alice_evaluator_client)))
    job = claim(agent, evaluation.pk, hosts["cpu-1"])
    assert job.status_code == 200
    held = {"HTTP_X_MLMS_CLAIM": job.json()["claim"]}
    body = export(
        evaluation.trace_id,
        ("batch", 0, 1000, {"mlms.level": "model"}),
        ("conv", 10, 100, {"mlms.level": "framework"}),
        ("relu", 110, 10, {"mlms.level": "framework"}),
    )

    async def run() -> list[dict[str, Any]]:
        path = f"/ws/evaluations/{evaluation.pk}/?token={alice_evaluator_client.raw_token}"
        communicator = WebsocketCommunicator(application, path)
        connected, _ = await communicator.connect()
        assert connected
        assert (await communicator.receive_json_from(timeout=5))["type"] == "snapshot"
        response = await sync_to_async(post)(agent, body, **held)
        assert response.status_code == 200
        events = [await communicator.receive_json_from(timeout=5)]
        while events[-1]["type"] != "spans":
            events.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return events

    event = async_to_sync(run)()[-1]
    assert event == {
        "type": "spans",
        "id": str(evaluation.pk),
        "count": 3,
        "levels": {"model": 1, "framework": 2},
    }
    assert len(json.dumps(event)) < 200


@pytest.mark.django_db
def test_another_users_trace_cannot_be_joined(alice_evaluator_client, bob_client, hosts) -> None:  # type: ignore[no-untyped-def]
    bobs = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    assert post(bob_client, export(TRACE, ("app", 0, 10, {}))).status_code == 200

    for trace_id in (bobs.trace_id, TRACE):
        response = alice_evaluator_client.post(
            EVALUATIONS_URL,
            {"model": "m", "framework": "onnxruntime", "dataset": "d"},
            format="json",
            HTTP_TRACEPARENT=f"00-{trace_id}-{SPAN}-01",
        )
        assert response.status_code == 400 and error_paths(response) == ["traceparent"]
    assert not Evaluation.objects.filter(user__username="alice").exists()
    # Bob may put an evaluation into his own application's trace.
    response = bob_client.post(
        EVALUATIONS_URL,
        {"model": "m", "framework": "onnxruntime", "dataset": "d"},
        format="json",
        HTTP_TRACEPARENT=HEADER,
    )
    assert Evaluation.objects.get(pk=launched_id(response)).trace_id == TRACE
