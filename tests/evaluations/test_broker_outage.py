"""A broker killed while agents run jobs, and started again: nothing is lost, stuck or duplicated.

The hub and two agents (real processes, `test_end_to_end.LiveHub`) use a Redis server of this
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

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.evaluations.test_end_to_end import AGENTS, LiveHub, _free_port

pytestmark = [pytest.mark.frameworks, pytest.mark.redis]


class RedisServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.skip("redis-server is not installed")
        self.process = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)


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
    hub.wait(lambda: not _live(hub), "the agents to stop heartbeating", 60)
    redis_server.start()
    hub.wait(lambda: _live(hub) == set(AGENTS), "the agents to come back", 90)
    after = [hub.launch(batch_sizes=[1], limit=20) for _ in range(6)]
    bodies = [hub.finished(evaluation_id, timeout=180) for evaluation_id in after]

    assert [b["status"] for b in bodies] == ["succeeded"] * 6, hub.logs()
    for evaluation_id in [running_id, *after]:
        assert hub.result_rows(evaluation_id) == 1


def _live(hub: LiveHub) -> set[str]:
    status, body = hub.get("hosts/?live=1")
    assert status == 200, body
    return {host["name"] for host in body["results"]}
