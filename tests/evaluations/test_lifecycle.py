"""An evaluation's lifecycle driven through the agent-facing API: claim, progress, result,
failure and cancel; every transition is a StatusChange row and a WebSocket event sent after
commit."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from evaluations.models import Evaluation, Result, StatusChange
from mlmodelscope.asgi import application
from predictors import manifests
from tests.evaluations.factories import (
    claim,
    error_paths,
    launch,
    launched_id,
    post_result,
    progress,
    result_body,
    url,
)

pytestmark = pytest.mark.django_db


def _statuses(evaluation_id: Any) -> list[str]:
    return list(
        StatusChange.objects.filter(evaluation_id=evaluation_id).values_list("status", flat=True)
    )


@pytest.mark.django_db(transaction=True)
def test_a_job_driven_through_the_agent_api_streams_every_change_after_commit(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client, batch_sizes=[1, 2]))
    token = alice_evaluator_client.raw_token
    host = hosts["cpu-1"]

    async def scenario() -> None:
        one = WebsocketCommunicator(application, f"/ws/evaluations/{evaluation_id}/?token={token}")
        listing = WebsocketCommunicator(application, f"/ws/evaluations/?token={token}")
        assert (await one.connect())[0] and (await listing.connect())[0]

        snapshot = await one.receive_json_from(timeout=5)
        assert snapshot["type"] == "snapshot"
        assert snapshot["evaluation"]["id"] == evaluation_id
        assert snapshot["evaluation"]["status"] == "dispatched"
        assert [h["status"] for h in snapshot["evaluation"]["history"]] == ["queued", "dispatched"]
        listed = await listing.receive_json_from(timeout=5)
        assert listed["type"] == "snapshot"
        assert [e["id"] for e in listed["evaluations"]] == [evaluation_id]

        response = await sync_to_async(claim)(agent, evaluation_id, host)
        assert response.status_code == 200, response.content
        job = response.json()
        for stream in (one, listing):
            event = await stream.receive_json_from(timeout=5)
            assert event["type"] == "status" and event["status"] == "running"
            assert event["host"] == "cpu-1" and event["attempt"] == 1
            assert event["evaluation"]["framework_version"] == "1.17.0"

        response = await sync_to_async(progress)(agent, evaluation_id, job["claim"], 3, 10)
        assert response.json() == {"status": "running", "cancel_requested": False}
        for stream in (one, listing):
            event = await stream.receive_json_from(timeout=5)
            assert event == {
                "type": "progress",
                "id": evaluation_id,
                "status": "running",
                "done": 3,
                "total": 10,
            }

        body = result_body(job["claim"], batch_sizes=(1, 2))
        response = await sync_to_async(post_result)(agent, evaluation_id, body)
        assert response.status_code == 201, response.content
        for stream in (one, listing):
            event = await stream.receive_json_from(timeout=5)
            assert event["type"] == "status" and event["status"] == "succeeded"
            assert event["evaluation"]["accuracy"] == {"top1": 0.5, "top5": 1.0, "count": 2}
        assert await one.receive_nothing(timeout=0.2)
        await one.disconnect()
        await listing.disconnect()

    async_to_sync(scenario)()

    assert _statuses(evaluation_id) == ["queued", "dispatched", "running", "succeeded"]
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.host == host and evaluation.attempts == 1
    assert evaluation.started_at and evaluation.finished_at
    result = Result.objects.get(evaluation=evaluation)
    assert result.latency["2"]["p99_ms"] == 2.5 and result.throughput["2"] == 1200.0
    detail = alice_evaluator_client.get(url(evaluation_id)).json()
    assert detail["result"]["accuracy"]["top1"] == 0.5
    assert "predictions" not in detail["result"]
    full = alice_evaluator_client.get(url(evaluation_id) + "?predictions=1").json()
    assert full["result"]["predictions"]["classes"] == [[0, 1], [0, 1]]


@pytest.mark.django_db(transaction=True)
def test_events_of_a_rolled_back_change_are_never_sent(
    alice_evaluator_client, agent, hosts
) -> None:
    from django.db import transaction

    from evaluations import actions

    evaluation_id = launched_id(launch(alice_evaluator_client))
    token = alice_evaluator_client.raw_token

    async def scenario() -> None:
        one = WebsocketCommunicator(application, f"/ws/evaluations/{evaluation_id}/?token={token}")
        assert (await one.connect())[0]
        await one.receive_json_from(timeout=5)

        def cancel_then_roll_back() -> None:
            with pytest.raises(RuntimeError), transaction.atomic():
                actions.cancel_evaluation(evaluation_id, hosts["cpu-1"].owner)
                raise RuntimeError("rolled back")

        await sync_to_async(cancel_then_roll_back)()
        assert await one.receive_nothing(timeout=0.3)
        await one.disconnect()

    async_to_sync(scenario)()
    assert Evaluation.objects.get(pk=evaluation_id).status == "dispatched"


def test_the_claim_answers_the_job_with_the_manifests_and_options(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client, batch_sizes=[4], limit=10, seed=7))

    job = claim(agent, evaluation_id, hosts["cpu-2"]).json()

    assert job["id"] == evaluation_id and len(job["claim"]) == 32
    assert job["attempt"] == 1 and job["device"] == "cpu"
    assert job["options"]["batch_sizes"] == [4] and job["options"]["limit"] == 10
    assert job["options"]["seed"] == 7 and job["options"]["split"] == "validation"
    model = manifests.load(job["model"]["source"], kind="model")
    assert (model.name, model.version) == ("m", "1.1.0")
    assert model.content_hash() == job["model"]["content_hash"]
    assert manifests.load(job["dataset"]["source"], kind="dataset").name == "d"
    assert len(job["trace_id"]) == 32


def test_a_second_claim_is_refused_while_the_first_claimant_reports(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    first = claim(agent, evaluation_id, hosts["cpu-1"])
    assert first.status_code == 200

    duplicate = claim(agent, evaluation_id, hosts["cpu-2"])

    assert duplicate.status_code == 409
    assert "running on cpu-1" in duplicate.json()["detail"]
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.host == hosts["cpu-1"] and evaluation.attempts == 1
    assert _statuses(evaluation_id) == ["queued", "dispatched", "running"]


def test_a_superseded_dispatch_cannot_be_claimed(alice_evaluator_client, agent, hosts) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))

    response = claim(agent, evaluation_id, hosts["cpu-1"], dispatch=2)

    assert response.status_code == 409
    assert "dispatch" in response.json()["detail"]


def test_a_job_pinned_to_one_host_cannot_be_claimed_by_another(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client, framework_version="^1.18"))

    response = claim(agent, evaluation_id, hosts["cpu-1"])

    assert response.status_code == 409
    assert "gpu-1" in response.json()["detail"]


def test_only_the_token_that_registered_a_host_claims_for_it(
    alice_evaluator_client, make_client, alice, hosts
) -> None:  # type: ignore[no-untyped-def]
    evaluation_id = launched_id(launch(alice_evaluator_client))
    intruder = make_client(alice, scopes=["agent"])

    response = claim(intruder, evaluation_id, hosts["cpu-1"])

    assert response.status_code == 403
    assert (
        claim(alice_evaluator_client, evaluation_id, hosts["cpu-1"]).status_code == 403
    )  # no agent scope


def test_reports_under_a_stale_claim_are_refused(alice_evaluator_client, agent, hosts) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    claim(agent, evaluation_id, hosts["cpu-1"])

    assert progress(agent, evaluation_id, "0" * 32, 1, 2).status_code == 409
    assert post_result(agent, evaluation_id, result_body("0" * 32)).status_code == 409
    assert not Result.objects.exists()


def test_a_failure_is_stored_with_the_agents_message(alice_evaluator_client, agent, hosts) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    message = "cannot fetch repo://models/m/1.1.0/m.onnx: not found (HTTP 404)"

    nameless = agent.post(
        url(evaluation_id, "status"), {"claim": job["claim"], "status": "failed"}, format="json"
    )
    response = agent.post(
        url(evaluation_id, "status"),
        {"claim": job["claim"], "status": "failed", "reason": message},
        format="json",
    )

    assert nameless.status_code == 400 and error_paths(nameless) == ["reason"]
    assert response.status_code == 200, response.content
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "failed" and evaluation.finished_at
    assert evaluation.history.last().reason == f"failed on host cpu-1: {message}"
    assert alice_evaluator_client.get(url(evaluation_id)).json()["reason"].endswith(message)


def test_a_job_given_back_as_lost_is_dispatched_again_or_cancelled_if_asked(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    body = {"claim": job["claim"], "status": "lost"}

    nameless = agent.post(url(evaluation_id, "status"), body, format="json")
    why = "its container was killed mid-run (exit status 137)"
    given_back = agent.post(url(evaluation_id, "status"), body | {"reason": why}, format="json")

    assert nameless.status_code == 400 and error_paths(nameless) == ["reason"]
    assert given_back.status_code == 200, given_back.content
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.claim == ""
    assert evaluation.history.last().reason.startswith(f"host cpu-1 lost it: {why}")
    # The old claim can no longer report; a new claim runs it.
    stale = agent.post(url(evaluation_id, "status"), body | {"reason": why}, format="json")
    assert stale.status_code == 409
    again = claim(agent, evaluation_id, hosts["cpu-2"], dispatch=evaluation.dispatches).json()

    alice_evaluator_client.post(url(evaluation_id, "cancel"))
    lost = {"claim": again["claim"], "status": "lost", "reason": why}
    assert agent.post(url(evaluation_id, "status"), lost, format="json").status_code == 200
    evaluation.refresh_from_db()
    assert evaluation.status == "cancelled"  # a cancel was pending: not dispatched again


def test_a_result_posted_twice_is_stored_once(alice_evaluator_client, agent, hosts) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()

    first = post_result(agent, evaluation_id, result_body(job["claim"]))
    again = post_result(agent, evaluation_id, result_body(job["claim"]))

    assert first.status_code == again.status_code == 201
    assert Result.objects.filter(evaluation_id=evaluation_id).count() == 1
    assert _statuses(evaluation_id).count("succeeded") == 1


def test_a_result_must_cover_the_requested_batch_sizes(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client, batch_sizes=[1, 8]))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()

    response = post_result(agent, evaluation_id, result_body(job["claim"], batch_sizes=(1,)))

    assert response.status_code == 400
    assert error_paths(response) == ["latency"]
    assert Evaluation.objects.get(pk=evaluation_id).status == "running"


def test_a_malformed_result_is_refused_naming_the_field(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    body = result_body(job["claim"])
    del body["latency"]["1"]["p90_ms"]

    response = post_result(agent, evaluation_id, body)

    assert response.status_code == 400
    assert error_paths(response) == ["latency.1.p90_ms"]


def test_cancelling_a_dispatched_evaluation_cancels_it_at_once(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))

    response = alice_evaluator_client.post(url(evaluation_id, "cancel"))

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert claim(agent, evaluation_id, hosts["cpu-1"]).status_code == 409
    assert alice_evaluator_client.post(url(evaluation_id, "cancel")).status_code == 409


def test_cancelling_a_running_evaluation_reaches_its_agent(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    progress(agent, evaluation_id, job["claim"], 2, 10)

    response = alice_evaluator_client.post(url(evaluation_id, "cancel"))

    assert response.status_code == 200
    assert response.json()["status"] == "running" and response.json()["cancel_requested"]
    answer = progress(agent, evaluation_id, job["claim"], 3, 10).json()
    assert answer == {"status": "running", "cancel_requested": True}
    done = agent.post(
        url(evaluation_id, "status"), {"claim": job["claim"], "status": "cancelled"}, format="json"
    )
    assert done.status_code == 200
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "cancelled"
    assert (
        evaluation.history.last().reason
        == "cancelled; host cpu-1 stopped it after 3 of 10 predictions"
    )


def test_a_cancel_that_loses_the_race_with_the_result_is_said_in_the_history(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    assert alice_evaluator_client.post(url(evaluation_id, "cancel")).status_code == 200

    assert post_result(agent, evaluation_id, result_body(job["claim"])).status_code == 201

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "succeeded" and evaluation.cancel_requested
    assert evaluation.history.last().reason.endswith(
        "a cancel was requested, but the run finished before the agent saw it"
    )


def test_only_the_owner_or_staff_cancel(
    alice_evaluator_client, bob_client, make_client, staff, hosts
) -> None:  # type: ignore[no-untyped-def]
    evaluation_id = launched_id(launch(alice_evaluator_client))

    assert bob_client.post(url(evaluation_id, "cancel")).status_code == 404
    assert make_client(staff).post(url(evaluation_id, "cancel")).status_code == 200
