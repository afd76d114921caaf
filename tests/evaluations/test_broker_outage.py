"""A broker killed while agents run jobs, and started again: nothing is lost, stuck or duplicated.

The hub and two agents (real processes, conftest's `outage_hub`) use a Redis server of this
test's own, which the test kills (SIGKILL) in the middle of a job and starts again only after the
job has ended (its worker's acknowledgement fails meanwhile). The running job reports over HTTP
and finishes; while the broker is away the agents stop heartbeating, so the hub offers their
hosts no work; once it is back they start afresh and run the jobs launched afterwards, each with
exactly one result.

With Celery 5.7 / kombu 5.7 here the worker itself also recovered from this outage when the
agent's broker watch was turned off: the deaf worker of the report did not reproduce. What this
test proves of the watch is that a host whose agent cannot reach the broker stops being live.
"""

from __future__ import annotations

import pytest

from tests.livehub import LiveHub, RedisServer

pytestmark = [pytest.mark.frameworks, pytest.mark.redis]


def test_a_broker_killed_during_a_job_loses_nothing_and_the_agents_hear_again(
    outage_hub: tuple[LiveHub, RedisServer],
) -> None:
    hub, redis_server = outage_hub
    running_id = hub.launch(batch_sizes=[1], repeat=60)
    hub.wait(lambda: hub.evaluation(running_id)["status"] == "running", "the job to start", 60)

    redis_server.kill()
    # The job ends (it reports over HTTP) while the broker is still away, so its worker's
    # acknowledgement fails: the case that left agents deaf.
    first = hub.finished(running_id, timeout=120)
    assert first["status"] == "succeeded", f"{first['history']}\n{hub.logs()}"
    # Deaf to the broker, the agents stop heartbeating: the hub offers their hosts no work.
    hub.wait(lambda: not hub.live_hosts(), "the agents to stop heartbeating", 60)
    redis_server.start()
    hub.wait(lambda: hub.live_hosts() == set(hub.pool_agents), "the agents to come back", 90)
    after = [hub.launch(batch_sizes=[1], limit=20) for _ in range(6)]
    bodies = [hub.finished(evaluation_id, timeout=180) for evaluation_id in after]

    assert [b["status"] for b in bodies] == ["succeeded"] * 6, hub.logs()
    for evaluation_id in [running_id, *after]:
        assert hub.result_rows(evaluation_id) == 1
