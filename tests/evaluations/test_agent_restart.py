"""An agent killed during a job and started again: the hub learns from its new registration
that the process which held the job ended, and the job runs again at once, not once the
agent's silence has lasted HOST_LIVE_SECONDS (60 s here, the default).

A live hub with two pool agents in real processes (`agents_hub`), evaluating the zoo's
digits-cnn on onnxruntime."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from tests.livehub import LiveHub

pytestmark = [pytest.mark.frameworks, pytest.mark.both_stacks]

# The bound: the job is running again within this many seconds of the agent's start.
WITHIN = 10.0


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory,
    agents_hub: Callable[..., AbstractContextManager[LiveHub]],
) -> Iterator[LiveHub]:
    with agents_hub(tmp_path_factory.mktemp("restart"), HOST_LIVE_SECONDS="60") as live:
        yield live


def test_an_agent_killed_during_a_job_and_started_again_has_it_running_again_within_10_s(
    hub: LiveHub,
) -> None:
    evaluation_id = hub.launch(batch_sizes=[1], repeat=200)
    running = hub.progressing(evaluation_id)
    victim = running["host"]
    assert running["status"] == "running" and victim in hub.pool_agents

    hub.kill(victim)
    started = time.monotonic()
    hub.start_agent(victim)
    again = hub.wait(
        lambda: (
            (body := hub.evaluation(evaluation_id))["attempts"] == 2
            and body["status"] in ("running", "succeeded")
            and body
        ),
        "the job to run again",
        90,
    )
    elapsed = time.monotonic() - started
    print(f"running again {elapsed:.1f} s after the agent was started again")

    lost = [h for h in again["history"] if h["status"] == "dispatched"][-1]
    assert lost["reason"].startswith(f"the agent of host {victim} was restarted during the job")
    assert elapsed < WITHIN, f"running again {elapsed:.1f} s after the agent started"
    body = hub.finished(evaluation_id, timeout=120)
    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    assert body["attempts"] == 2 and hub.result_rows(evaluation_id) == 1
