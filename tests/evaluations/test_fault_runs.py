"""Fault runs in production mode (PostgreSQL and Redis): evaluations launched together while the
broker, the hub or an agent is killed (SIGKILL) and started again end with 0 lost, 0 stuck and
0 duplicated, and every evaluation's trace holds as many spans as its agent sent.

Each run launches `MLMS_FAULT_RUN_EVALUATIONS` evaluations (4 by default, to keep CI short; 30
for the figures in docs/reliability.md) of the zoo's digits-cnn on onnxruntime, traced at level
`framework` (3,210 spans each, in seven exports), on a hub and two agents in real
processes (conftest's `outage_hub`), then injects its fault until every evaluation has
finished. The broker and agent runs launch while the fault is injected; the hub run launches
first (a launch cut short by the hub's kill would leave its outcome unknown):

- **broker**: the hub's and agents' Redis server (one of the test's own, without persistence,
  so the queued messages die with it) is killed while jobs run and others wait, and started
  again 8 s later; twice, 20 s apart, when the run lasts long enough;
- **hub**: daphne is killed at once while a job runs, then whenever a job starts exporting its
  spans (its progress is complete; once per job, at least 2 s after the hub's last start) or
  8 s after its last start, and started again 3 s later;
- **agent**: an agent is killed while it runs a first attempt, and started again 2 s later.

With `MLMS_FAULT_REPORT=<file>` each run appends its figures to that file (JSON lines).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests

from tests.livehub import LiveHub, RedisServer

pytestmark = [pytest.mark.frameworks, pytest.mark.postgres, pytest.mark.redis]

COUNT = int(os.environ.get("MLMS_FAULT_RUN_EVALUATIONS", "4"))
FINISHED = ("succeeded", "failed", "cancelled")
# Launches refused (400, no live host) in each run, for its report.
REFUSED: list[int] = []
# Seconds for the whole run to finish; what is unfinished then is stuck.
FINISH_SECONDS = 180 + 20 * COUNT


REQUEST = {"batch_sizes": [1], "limit": 64, "repeat": 6, "trace_level": "framework"}


def _launch(hub: LiveHub) -> str:
    return hub.launch(**REQUEST)


class Launcher(threading.Thread):
    """Launches COUNT evaluations one after another while the fault is injected; `ids` grows
    as they are launched. A launch refused because no host is live (agents that cannot reach
    the broker stop heartbeating) is tried again a second later, and counted."""

    def __init__(self, hub: LiveHub) -> None:
        super().__init__(daemon=True)
        self.hub = hub
        self.ids: list[str] = []
        self.refused = 0

    def run(self) -> None:
        body = {"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits", **REQUEST}
        url = f"{self.hub.url}/api/v1/evaluations/"
        while len(self.ids) < COUNT:
            response = requests.post(url, json=body, headers=self.hub.auth_headers(), timeout=30)
            if response.status_code == 400 and "no live host" in response.text:
                self.refused += 1
                time.sleep(1)
                continue
            assert response.status_code == 201, response.text
            self.ids.append(str(response.json()["evaluations"][0]["id"]))


def _states(hub: LiveHub, ids: list[str]) -> dict[str, dict[str, Any]] | None:
    """Every evaluation's state as the list shows it, or None while the hub does not answer."""
    try:
        status, body = hub.get("evaluations/?page_size=500")
    except (requests.RequestException, ValueError):
        return None
    if status != 200:
        return None
    listed = {str(b["id"]): b for b in body["results"]}
    return {
        evaluation_id: listed[evaluation_id] for evaluation_id in ids if evaluation_id in listed
    }


def _run(
    hub: LiveHub,
    fault: Callable[[dict[str, dict[str, Any]]], None],
    ids: list[str] | None = None,
) -> tuple[list[str], dict[str, dict[str, Any]], float]:
    """Launch COUNT evaluations (in a thread, while `fault` runs, unless `ids` were launched
    already) and call `fault` with their states until they have all finished or
    FINISH_SECONDS have passed; their ids, their final detail and the seconds it took."""
    launcher = None
    if ids is None:
        launcher = Launcher(hub)
        launcher.start()
    started = time.monotonic()
    while time.monotonic() - started < FINISH_SECONDS:
        current = ids if launcher is None else list(launcher.ids)
        launching = launcher is not None and launcher.is_alive()
        states = _states(hub, current)
        if states is not None:
            done = all(b["status"] in FINISHED for b in states.values())
            if done and not launching and len(states) == len(current):
                break
            fault(states)
        time.sleep(0.2)
    seconds = time.monotonic() - started
    if launcher is not None:
        launcher.join(timeout=60)
        ids = list(launcher.ids)
        REFUSED.append(launcher.refused)
    assert ids is not None and len(ids) == COUNT
    # The faults are over: the final figures come from a hub that answers.
    hub.wait(lambda: hub.get("manifests/")[0] == 200, "the hub to answer", 60)
    return ids, {evaluation_id: hub.evaluation(evaluation_id) for evaluation_id in ids}, seconds


def _report(
    name: str, hub: LiveHub, ids: list[str], states: dict[str, Any], **figures: Any
) -> dict[str, Any]:
    rows = {evaluation_id: hub.result_rows(evaluation_id) for evaluation_id in ids}
    finished = [b for b in states.values() if b["status"] in FINISHED]
    succeeded = [b for b in states.values() if b["status"] == "succeeded"]
    spans = [b["spans"] for b in succeeded]
    report = {
        "fault": name,
        "evaluations": len(ids),
        "succeeded": len(succeeded),
        "lost": len([b for b in finished if b["status"] != "succeeded"]),
        "stuck": len(ids) - len(finished),
        "duplicated": sum(
            1
            for evaluation_id, body in states.items()
            if rows[evaluation_id] > 1
            or [h["status"] for h in body["history"]].count("succeeded") > 1
        ),
        "attempts_beyond_first": sum(max(0, b["attempts"] - 1) for b in states.values()),
        "dispatches_beyond_first": sum(
            max(0, sum(1 for h in b["history"] if "sent to " in h["reason"]) - 1)
            for b in states.values()
        ),
        "waits_noted": sum(
            1 for b in states.values() for h in b["history"] if "it waits" in h["reason"]
        ),
        "spans_sent": sum(s["sent"] or 0 for s in spans),
        "spans_stored": sum(s["stored"] for s in spans),
        "span_mismatches": sum(1 for s in spans if s["sent"] != s["stored"]),
        "export_retries": sum(
            (b["result"]["details"].get("spans") or {}).get("retries", 0) for b in succeeded
        ),
        **figures,
    }
    target = os.environ.get("MLMS_FAULT_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(report) + "\n")
    return report


def _check(report: dict[str, Any], states: dict[str, Any], hub: LiveHub) -> None:
    problems = {
        evaluation_id: (body["status"], body["spans"], [h["reason"] for h in body["history"]])
        for evaluation_id, body in states.items()
        if body["status"] != "succeeded" or body["spans"]["sent"] != body["spans"]["stored"]
    }
    assert not problems, f"{report}\n{json.dumps(problems, indent=1)}\n{hub.logs()}"
    assert report["lost"] == report["stuck"] == report["duplicated"] == 0, report
    assert report["spans_sent"] == report["spans_stored"] > 0, report


def test_a_broker_killed_during_tasks_loses_nothing(
    outage_hub: tuple[LiveHub, RedisServer],
) -> None:
    hub, redis_server = outage_hub
    kills: list[float] = []

    def fault(states: dict[str, dict[str, Any]]) -> None:
        running = any(b["status"] == "running" for b in states.values())
        waiting = any(b["status"] in ("queued", "dispatched") for b in states.values())
        spaced = not kills or time.monotonic() - kills[-1] > 20
        if running and waiting and spaced and len(kills) < 2:
            redis_server.kill()  # the queued messages die with it
            kills.append(time.monotonic())
            time.sleep(8)
            redis_server.start()

    ids, states, seconds = _run(hub, fault)
    report = _report(
        "broker killed",
        hub,
        ids,
        states,
        kills=len(kills),
        launches_refused_no_live_host=REFUSED[-1],
        seconds=round(seconds),
    )
    _check(report, states, hub)
    assert kills


def test_a_hub_killed_while_spans_stream_loses_no_span(
    outage_hub: tuple[LiveHub, RedisServer],
) -> None:
    hub, _redis = outage_hub
    # Launched first: a launch the hub's kill cuts short would leave its outcome unknown.
    ids = [_launch(hub) for _ in range(COUNT)]
    kills: list[str] = []
    started = [time.monotonic()]
    targeted: set[str] = set()

    def fault(states: dict[str, dict[str, Any]]) -> None:
        exporting = [
            evaluation_id
            for evaluation_id, b in states.items()
            if b["status"] == "running"
            and 0 < b["progress"]["total"] == b["progress"]["done"]
            and evaluation_id not in targeted
        ]
        up = time.monotonic() - started[0]
        running = any(b["status"] == "running" for b in states.values())
        # The first kill comes at once, while a job runs: a short run (CI's 4 jobs) may end
        # before any export is seen at its start.
        if (exporting and (up > 2 or not kills)) or up > 8 or (running and not kills):
            hub.kill("hub")
            kills.append("exporting" if exporting else "running" if not kills else "timed")
            targeted.update(exporting)
            time.sleep(3)
            hub.start()
            started[0] = time.monotonic()

    ids, states, seconds = _run(hub, fault, ids)
    report = _report(
        "hub killed while spans stream",
        hub,
        ids,
        states,
        kills=len(kills),
        kills_while_exporting=kills.count("exporting"),
        seconds=round(seconds),
    )
    _check(report, states, hub)
    assert kills


def test_an_agent_killed_during_a_run_loses_nothing(
    outage_hub: tuple[LiveHub, RedisServer],
) -> None:
    hub, _redis = outage_hub
    kills: list[str] = []
    victims: set[str] = set()

    def fault(states: dict[str, dict[str, Any]]) -> None:
        for evaluation_id, body in states.items():
            host = body.get("host")
            if (
                body["status"] == "running"
                and body["attempts"] == 1
                and host in hub.pool_agents
                and evaluation_id not in victims
                and len(kills) < max(2, COUNT // 3)
            ):
                hub.kill(host)
                kills.append(host)
                victims.add(evaluation_id)
                time.sleep(2)
                hub.start_agent(host)
                return

    ids, states, seconds = _run(hub, fault)
    report = _report("agent killed", hub, ids, states, kills=len(kills), seconds=round(seconds))
    _check(report, states, hub)
    assert kills
    # A killed attempt was run again (a victim may also have posted its result just before
    # the kill).
    assert report["attempts_beyond_first"] >= 1
