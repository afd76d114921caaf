"""The receiver's ingest processes (`traces.ingest_processes`) under daphne: exports stored by
processes beside daphne's own, each stored once, their `spans` events sent to the pages that
listen (daphne's channel layer); a process that dies costs the export it held one 503, which
the sender sends again, and is replaced."""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.livehub import LiveHub
from tests.traces.factories import OTLP, PROTOBUF, export

pytestmark = pytest.mark.database_free  # a hub of its own

PROCESSES = 2
SPANS_PER_EXPORT = 20

_EVALUATION = """
import json
from django.contrib.auth import get_user_model
from evaluations.models import Evaluation
evaluation = Evaluation.objects.create(
    user=get_user_model().objects.get(username="alice"), model_name="digits-cnn",
    model_version="1.0.0", framework="onnxruntime", dataset_name="digits",
    dataset_version="1.0.0", split="validation", device="cpu", request={},
    status=Evaluation.RUNNING,
)
print(json.dumps({"id": str(evaluation.pk), "trace_id": evaluation.trace_id}))
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    folder = tmp_path_factory.mktemp("ingest-processes")
    with LiveHub(folder, settings={"TRACE_INGEST_PROCESSES": str(PROCESSES)}) as live:
        live.migrate()
        live.add_users()
        live.start()
        # The first export starts the processes (it is stored in daphne's own thread).
        trace_id = secrets.token_hex(16)
        assert _post(live, export(trace_id, ("first", 0, 1, {}))).status_code == 200
        live.wait(lambda: len(_ingest_processes(live)) == PROCESSES, "ingest processes", 60)
        live.wait(
            lambda: f"{PROCESSES} ingest processes ready" in _log(live),
            "the ingest processes to be ready",
            60,
        )
        yield live


def _log(hub: LiveHub) -> str:
    return (hub.folder / "hub.log").read_text(errors="replace")


def _ingest_processes(hub: LiveHub) -> dict[int, float]:
    """The hub's ingest processes (daphne's children that multiprocessing spawned): their
    CPU seconds so far, by pid."""
    pid = hub.processes["hub"].pid
    found = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # ended meanwhile
            continue
        if b"spawn_main" in command:
            # utime and stime, fields 14 and 15 of stat (11 and 12 after the name).
            found[int(child)] = (int(fields[11]) + int(fields[12])) / 100
    return found


def _post(hub: LiveHub, body: bytes, key: str = "") -> requests.Response:
    headers = {"Authorization": f"Bearer {hub.token}", "Content-Type": PROTOBUF}
    if key:
        headers["X-MLMS-Export"] = key
    return requests.post(hub.url + OTLP, data=body, headers=headers, timeout=60)


def _evaluation(hub: LiveHub) -> tuple[str, str]:
    made = json.loads(hub.shell(_EVALUATION).splitlines()[-1])
    return made["id"], made["trace_id"]


def _exports(trace_id: str, count: int) -> list[tuple[bytes, str]]:
    spans = [(f"layer {i}", i * 10, 5, {"mlms.level": "layer"}) for i in range(SPANS_PER_EXPORT)]
    return [(export(trace_id, *spans), secrets.token_hex(16)) for _ in range(count)]


def _span_count(hub: LiveHub, trace_id: str) -> int:
    status, body = hub.get(f"traces/{trace_id}/layers")
    assert status == 200, body
    return int(body["span_count"])


def test_exports_are_stored_by_the_ingest_processes_and_their_events_reach_open_pages(
    hub: LiveHub,
) -> None:
    evaluation_id, trace_id = _evaluation(hub)
    page = hub.websocket(f"/ws/evaluations/{evaluation_id}/")
    first = page.receive()
    assert first and first["type"] == "snapshot", first
    before = _ingest_processes(hub)
    exports = _exports(trace_id, 40)
    answers: list[int] = []

    def send(part: list[tuple[bytes, str]]) -> None:
        answers.extend(_post(hub, body, key).status_code for body, key in part)

    senders = [threading.Thread(target=send, args=(exports[i::4],)) for i in range(4)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()

    assert answers == [200] * len(exports)
    assert _span_count(hub, trace_id) == len(exports) * SPANS_PER_EXPORT
    # Each process did work: the exports went to both (an idle one takes the next export).
    after = _ingest_processes(hub)
    assert set(after) == set(before)
    assert all(after[pid] > before[pid] for pid in before), (before, after)
    # Their events were sent by daphne's process, whose channel layer the page listens on.
    received = 0
    while received < len(exports) * SPANS_PER_EXPORT:
        event = page.receive(timeout=30)
        assert event is not None, f"{received} spans announced of {len(exports) * SPANS_PER_EXPORT}"
        if event["type"] == "spans":
            assert event["id"] == evaluation_id and event["levels"] == {"layer": SPANS_PER_EXPORT}
            received += event["count"]
    assert received == len(exports) * SPANS_PER_EXPORT
    page.close()


def test_a_killed_ingest_process_costs_an_export_one_503_and_is_replaced(hub: LiveHub) -> None:
    _evaluation_id, trace_id = _evaluation(hub)
    before = _ingest_processes(hub)
    assert len(before) == PROCESSES
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    refused = 0
    exports = _exports(trace_id, 12)
    for body, key in exports:
        answer = _post(hub, body, key)
        while answer.status_code == 503:  # as an OTLP exporter does: sent again
            refused += 1
            assert answer.headers["Retry-After"] == "1"
            assert "ingest process ended" in answer.json()["detail"]
            time.sleep(0.1)
            answer = _post(hub, body, key)
        assert answer.status_code == 200, answer.text
    # The dead process was found by the one export handed to it.
    assert refused == 1
    assert _span_count(hub, trace_id) == len(exports) * SPANS_PER_EXPORT
    after = hub.wait(
        lambda: (found := _ingest_processes(hub)) and len(found) == PROCESSES and found,
        "a new ingest process",
        60,
    )
    assert victim not in after and set(before) - {victim} <= set(after)
    hub.wait(lambda: "an ingest process ended" in _log(hub), "the hub to log the ended process", 10)
