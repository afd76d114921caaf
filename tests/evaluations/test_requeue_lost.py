"""`actions.requeue_lost`, the sweep the hub runs every few seconds: a job whose agent went
silent is dispatched again (a new attempt) or failed after EVALUATION_MAX_ATTEMPTS, never left
running; a job waiting for a host that died is sent elsewhere or failed saying why."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from evaluations import actions
from evaluations.models import Evaluation, Result
from hub.models import Host
from predictors.protocol import TASK_NAME
from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    progress,
    result_body,
)

pytestmark = pytest.mark.django_db

LONG_AGO = timedelta(minutes=5)


def _silence(evaluation_id: str, *hosts: Host) -> None:
    """The claimant (and `hosts`) stopped reporting and heartbeating a while ago."""
    before = timezone.now() - LONG_AGO
    Evaluation.objects.filter(pk=evaluation_id).update(last_report_at=before, updated_at=before)
    Host.objects.filter(pk__in=[h.pk for h in hosts]).update(last_heartbeat=before)


def test_a_job_whose_agent_went_silent_is_dispatched_again(
    alice_evaluator_client, agent, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    old = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    _silence(evaluation_id, hosts["cpu-1"])
    broker.drain("pool.onnxruntime.cpu")

    with django_capture_on_commit_callbacks(execute=True):
        assert [e.pk for e in actions.requeue_lost()] == [uuid.UUID(evaluation_id)]

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.dispatches == 2
    assert evaluation.host is None
    assert evaluation.history.last().reason == (
        "host cpu-1 stopped heartbeating; sent to queue pool.onnxruntime.cpu, shared by the hosts "
        "that can run it"
    )
    assert broker.take("pool.onnxruntime.cpu") == [(TASK_NAME, [evaluation_id, 2])]
    # The lost claimant is told to stop; the new message is claimed by another host.
    assert progress(agent, evaluation_id, old["claim"], 5, 10).status_code == 409
    new = claim(agent, evaluation_id, hosts["cpu-2"], dispatch=2).json()
    assert new["attempt"] == 2
    assert post_result(agent, evaluation_id, result_body(old["claim"])).status_code == 409
    assert post_result(agent, evaluation_id, result_body(new["claim"])).status_code == 201
    assert Result.objects.get(evaluation_id=evaluation_id).host == hosts["cpu-2"]
    statuses = list(evaluation.history.values_list("status", flat=True))
    assert statuses == ["queued", "dispatched", "running", "dispatched", "running", "succeeded"]


def test_a_job_lost_on_every_attempt_fails_saying_why(alice_evaluator_client, agent, hosts) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))  # EVALUATION_MAX_ATTEMPTS is 2 here
    for attempt, host in ((1, hosts["cpu-1"]), (2, hosts["cpu-2"])):
        claim(agent, evaluation_id, host, dispatch=attempt)
        _silence(evaluation_id, host)
        actions.requeue_lost()

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "failed"
    assert evaluation.history.last().reason == (
        "host cpu-2 stopped heartbeating; gave up after 2 attempts on lost hosts"
    )


def test_a_restarted_agent_that_forgot_its_job_loses_it(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    claim(agent, evaluation_id, hosts["cpu-1"])
    _silence(evaluation_id)  # the host heartbeats, but nobody reports on the job

    actions.requeue_lost()

    reason = Evaluation.objects.get(pk=evaluation_id).history.last().reason
    assert reason.startswith("the agent on host cpu-1 stopped reporting on it")


def test_a_reporting_agent_keeps_its_job(alice_evaluator_client, agent, hosts) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    progress(agent, evaluation_id, job["claim"], 1, 2)

    assert actions.requeue_lost() == []
    assert Evaluation.objects.get(pk=evaluation_id).status == "running"


def test_a_redelivered_message_takes_over_from_a_silent_claimant(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    claim(agent, evaluation_id, hosts["cpu-1"])
    _silence(evaluation_id, hosts["cpu-1"])

    response = claim(agent, evaluation_id, hosts["cpu-2"])

    assert response.status_code == 200 and response.json()["attempt"] == 2
    reason = Evaluation.objects.get(pk=evaluation_id).history.last().reason
    assert reason == "host cpu-1 stopped heartbeating; claimed by host cpu-2 (attempt 2)"


def test_a_lost_job_that_was_being_cancelled_is_cancelled(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    claim(agent, evaluation_id, hosts["cpu-1"])
    alice_evaluator_client.post(f"/api/v1/evaluations/{evaluation_id}/cancel/")
    _silence(evaluation_id, hosts["cpu-1"])

    actions.requeue_lost()

    assert Evaluation.objects.get(pk=evaluation_id).status == "cancelled"


def test_a_job_waiting_for_a_dead_host_of_hosts_all_waits_then_fails_naming_it(
    alice_evaluator_client, hosts, settings
) -> None:
    launch(alice_evaluator_client, hosts="all")
    gpu_job = Evaluation.objects.get(target_host=hosts["gpu-1"])
    _silence(str(gpu_job.pk), hosts["gpu-1"])

    # The host may come back (an agent restarting): the job waits for it, saying so once.
    assert [e.pk for e in actions.requeue_lost()] == [gpu_job.pk]
    assert actions.requeue_lost() == []
    gpu_job.refresh_from_db()
    assert gpu_job.status == "dispatched"
    assert gpu_job.history.last().reason == (
        "host gpu-1 stopped heartbeating before the job started; no live host can run it now "
        "(host gpu-1 is no longer live); it waits up to 600 s after its dispatch for a host that "
        "can run it"
    )
    assert Evaluation.objects.filter(status="dispatched").count() == 3
    later = timezone.now() + timedelta(seconds=settings.EVALUATION_WAIT_SECONDS)
    assert gpu_job.pk in [e.pk for e in actions.requeue_lost(later)]

    gpu_job.refresh_from_db()
    assert gpu_job.status == "failed"
    assert gpu_job.history.last().reason.startswith(
        "host gpu-1 stopped heartbeating before the job started, and no other host can run it"
    )


def test_a_job_whose_queue_lost_all_its_hosts_waits_then_fails(
    alice_evaluator_client, hosts, settings
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    _silence(evaluation_id, *hosts.values())

    actions.requeue_lost()
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched"
    assert "it waits up to 600 s" in evaluation.history.last().reason
    actions.requeue_lost(timezone.now() + timedelta(seconds=settings.EVALUATION_WAIT_SECONDS))

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "failed"
    assert "no live host consumes queue pool.onnxruntime.cpu" in evaluation.history.last().reason


def test_a_running_job_whose_hosts_all_died_goes_back_to_its_queue_to_wait(
    alice_evaluator_client, agent, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    claim(agent, evaluation_id, hosts["cpu-1"])
    broker.drain("pool.onnxruntime.cpu")
    _silence(evaluation_id, *hosts.values())

    with django_capture_on_commit_callbacks(execute=True):
        actions.requeue_lost()

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.dispatches == 2
    assert evaluation.queue == "pool.onnxruntime.cpu"
    reason = evaluation.history.last().reason
    assert reason.startswith("host cpu-1 stopped heartbeating; no live host can run it now")
    assert "it waits up to 600 s" in reason
    assert broker.take("pool.onnxruntime.cpu") == [(TASK_NAME, [evaluation_id, 2])]
    # A host that comes back takes it.
    Host.objects.filter(pk=hosts["cpu-2"].pk).update(last_heartbeat=timezone.now())
    assert claim(agent, evaluation_id, hosts["cpu-2"], dispatch=2).status_code == 200


def test_a_dispatch_the_broker_does_not_take_is_tried_again_then_failed(
    alice_evaluator_client, hosts, settings
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))  # never sent (no on-commit here)
    later = timezone.now() + timedelta(seconds=settings.EVALUATION_WAIT_SECONDS)

    actions.requeue_lost(later)

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "failed"
    assert evaluation.history.last().reason.startswith(
        "the broker did not take dispatch 1 within 600 s"
    )


def test_a_consumer_that_cannot_run_the_job_sends_it_to_one_that_can(
    alice_evaluator_client, agent, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    # Launched while gpu-1 was away: only cpu-1 and cpu-2 consumed onnxruntime.cpu then.
    Host.objects.filter(pk=hosts["gpu-1"].pk).update(last_heartbeat=timezone.now() - LONG_AGO)
    evaluation_id = launched_id(launch(alice_evaluator_client, framework_version="~1.17"))
    assert Evaluation.objects.get(pk=evaluation_id).queue == "pool.onnxruntime.cpu"
    broker.drain("pool.host.cpu-1", "pool.host.cpu-2")

    with django_capture_on_commit_callbacks(execute=True):
        response = claim(agent, evaluation_id, hosts["gpu-1"])  # back, with onnxruntime 1.18

    assert response.status_code == 409
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.dispatches == 2
    assert evaluation.target_host.name in ("cpu-1", "cpu-2")
    queue = f"pool.host.{evaluation.target_host.name}"
    assert broker.take(queue) == [(TASK_NAME, [evaluation_id, 2])]


# -- the outbox and lost messages ------------------------------------------------------------


def test_a_dispatch_the_hub_never_sent_is_sent_by_the_sweep(
    alice_evaluator_client, agent, hosts, broker, settings, django_capture_on_commit_callbacks
) -> None:
    broker.drain("pool.onnxruntime.cpu")
    # The hub stopped between its commit and the send: the on-commit send never ran.
    evaluation_id = launched_id(launch(alice_evaluator_client))
    assert Evaluation.objects.get(pk=evaluation_id).sent_at is None
    assert actions.requeue_lost() == []  # not yet: a send may still be under way

    later = timezone.now() + timedelta(seconds=settings.EVALUATION_SEND_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert [e.pk for e in actions.requeue_lost(later)] == [uuid.UUID(evaluation_id)]

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.dispatches == 2
    assert evaluation.sent_at is not None
    assert "had not sent dispatch 1" in evaluation.history.last().reason
    assert broker.take("pool.onnxruntime.cpu") == [(TASK_NAME, [evaluation_id, 2])]
    assert claim(agent, evaluation_id, hosts["cpu-1"], dispatch=1).status_code == 409
    assert claim(agent, evaluation_id, hosts["cpu-1"], dispatch=2).status_code == 200


def test_a_message_the_broker_lost_is_sent_again_when_a_consumer_sits_idle(
    alice_evaluator_client, agent, hosts, broker, settings, django_capture_on_commit_callbacks
) -> None:
    broker.drain("pool.onnxruntime.cpu")
    with django_capture_on_commit_callbacks(execute=True):
        evaluation_id = launched_id(launch(alice_evaluator_client))
    assert Evaluation.objects.get(pk=evaluation_id).sent_at is not None
    broker.drain("pool.onnxruntime.cpu")  # the broker lost it

    later = timezone.now() + timedelta(seconds=settings.EVALUATION_DISPATCH_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert [e.pk for e in actions.requeue_lost(later)] == [uuid.UUID(evaluation_id)]

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.dispatches == 2 and evaluation.status == "dispatched"
    assert "the broker lost its message" in evaluation.history.last().reason
    assert broker.take("pool.onnxruntime.cpu") == [(TASK_NAME, [evaluation_id, 2])]
    # Each dispatch is recorded in the history.
    assert [h.status for h in evaluation.history.all()] == ["queued", "dispatched", "dispatched"]


def test_a_job_waiting_behind_busy_hosts_is_left_alone(
    alice_evaluator_client, agent, hosts, broker, settings, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        busy = [launched_id(launch(alice_evaluator_client)) for _ in hosts]
        waiting = launched_id(launch(alice_evaluator_client))
    for evaluation_id, host in zip(busy, hosts.values(), strict=True):
        assert claim(agent, evaluation_id, host).status_code == 200
    broker.drain("pool.onnxruntime.cpu")

    later = timezone.now() + timedelta(seconds=settings.EVALUATION_DISPATCH_SECONDS + 1)
    Evaluation.objects.filter(pk__in=busy).update(last_report_at=later)
    assert actions.requeue_lost(later) == []
    assert Evaluation.objects.get(pk=waiting).dispatches == 1


def _reregister(agent, host: Host, instance: str):  # type: ignore[no-untyped-def]
    """The host's agent registers again, as the process `instance`."""
    from tests.hub.factories import register_host

    return register_host(
        agent,
        host.name,
        [("onnxruntime", "1.17.0")],
        hardware=host.hardware,
        queues=["onnxruntime.cpu"],
        pool=True,
        instance=instance,
    )


def test_an_agent_that_starts_again_has_the_jobs_of_its_last_process_dispatched_at_once(
    alice_evaluator_client, agent, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    assert _reregister(agent, hosts["cpu-1"], first).status_code == 200
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    broker.drain("pool.onnxruntime.cpu")
    # The same process registering again (the hub forgot the host) changes nothing.
    assert _reregister(agent, hosts["cpu-1"], first).status_code == 200
    assert Evaluation.objects.get(pk=evaluation_id).status == "running"

    # Killed and started again: the new process registers, and the job is sent again now, not
    # after HOST_LIVE_SECONDS of silence.
    with django_capture_on_commit_callbacks(execute=True):
        assert _reregister(agent, hosts["cpu-1"], second).status_code == 200

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.dispatches == 2
    assert "agent of host cpu-1 was restarted during the job" in evaluation.history.last().reason
    assert [args for _, args in broker.take("pool.onnxruntime.cpu")] == [[evaluation_id, 2]]
    # The process that died cannot report on its attempt any more (were it alive after all).
    assert progress(agent, evaluation_id, job["claim"], 1, 2).status_code == 409
    again = claim(agent, evaluation_id, hosts["cpu-1"], dispatch=2)
    assert again.status_code == 200 and again.json()["attempt"] == 2


def test_a_malformed_agent_instance_is_refused_naming_it(agent, hosts) -> None:
    response = _reregister(agent, hosts["cpu-1"], "not-hex")
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == ["instance"]
    assert Host.objects.get(name="cpu-1").agent_instance == ""
