"""The agent keeps telling the hub it is alive until a job's outcome is posted: a large result
takes a while to send and to store, and a job silent meanwhile would be taken for lost; a
result the hub refuses fails the job saying why, rather than leave it running."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from predictors.agent.daemon import Agent, Timings
from predictors.agent.hub_client import HubClient
from predictors.agent.results import result_upload
from predictors.data import DataManager
from predictors.evaluation import EvaluationOptions, evaluate
from predictors.manifests.catalog import Catalog
from predictors.protocol import Job, JobOptions, ManifestRef, ResultUpload
from tests.predictors.zoo_store import REPO_ROOT, zoo_store

pytestmark = pytest.mark.database_free

# How long the hub takes to store the result, and how often the agent reports.
STORE_SECONDS = 1.5
REPORT_SECONDS = 0.1


class _SlowHub(BaseHTTPRequestHandler):
    """Answers a claim with the server's job, progress with "running", and stores a result in
    STORE_SECONDS; records each request with the time it came in and was answered."""

    def do_POST(self) -> None:  # noqa: N802 (the handler's name)
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        arrived = time.monotonic()
        server: Any = self.server
        if self.path.endswith("/claim/"):
            body: dict[str, Any] = server.job
        elif self.path.endswith("/result/"):
            time.sleep(STORE_SECONDS)
            body = {"status": "succeeded"}
            if server.refusal:
                body = server.refusal
        elif self.path.endswith("/status/"):
            body = {"status": "failed"}
            server.statuses.append(request)
        else:
            body = {"status": "running", "cancel_requested": False}
        server.received.append((self.path, arrived, time.monotonic()))
        payload = json.dumps(body).encode()
        refused = self.path.endswith("/result/") and server.refusal
        self.send_response(server.refusal_status if refused else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHub)
    server.received = []  # type: ignore[attr-defined]
    server.statuses = []  # type: ignore[attr-defined]
    server.refusal = None  # type: ignore[attr-defined]
    server.refusal_status = 413  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


class _Prepared(Agent):
    """An agent whose evaluation is done already (the upload given): only its reports run."""

    upload: ResultUpload

    def _evaluate(self, job: Job, reporter: Any, tracer: Any) -> ResultUpload:
        reporter.progress(10, 10)
        return self.upload


def _agent(hub: Any) -> _Prepared:
    """An agent whose job is digits-cnn's evaluation of 10 inputs, done already."""
    store = zoo_store(("digits-cnn",))
    catalog = Catalog(REPO_ROOT / "manifests")
    model = catalog.find_model("digits-cnn", "*", "onnxruntime")
    dataset = catalog.find_dataset("digits", "*")
    evaluation = evaluate(
        model,
        dataset,
        EvaluationOptions(batch_sizes=(1,), limit=10),
        DataManager(store_dir=store).fetch,
    )
    ref = ManifestRef(1, "digits-cnn", "1.0.0", "onnxruntime", "0" * 64, model.source)
    job = Job("e1", "c" * 32, 1, "cpu", ref, ref, JobOptions())
    hub.job = {**job.to_dict(), "claim": job.claim}
    client = HubClient(f"http://127.0.0.1:{hub.server_address[1]}", "mlms_test", retries=0)
    agent = _Prepared(client, "box-1")
    agent.host_id = 7
    agent.timings = Timings(report_seconds=REPORT_SECONDS)
    agent.upload = result_upload(job, evaluation)
    return agent


def test_the_agent_reports_progress_while_its_result_is_being_stored(hub: Any) -> None:
    assert _agent(hub).run_job("e1", 1) == "succeeded"

    result = next(entry for entry in hub.received if entry[0].endswith("/result/"))
    during = [
        arrived
        for path, arrived, _ in hub.received
        if path.endswith("/progress/") and result[1] < arrived < result[2]
    ]
    # Reported all along: at least every other interval while the hub stored the result.
    assert len(during) >= STORE_SECONDS / REPORT_SECONDS / 2, hub.received
    # And not after: the hub takes no progress once the outcome is stored.
    assert all(arrived < result[2] for path, arrived, _ in hub.received if "/progress/" in path)


def test_a_result_the_hub_refuses_fails_the_job_saying_why(hub: Any) -> None:
    hub.refusal = {
        "detail": "the request body is larger than the limit of 1048576 bytes",
        "code": "too_large",
    }
    assert _agent(hub).run_job("e1", 1) == "failed"
    (status,) = hub.statuses
    assert status["status"] == "failed"
    assert status["reason"].startswith("the hub refused the result: hub answered 413")
    assert "larger than the limit of 1048576 bytes" in status["reason"]


def test_a_result_the_hub_cannot_take_for_now_is_no_refusal(hub: Any) -> None:
    """A 408 or 429 says "not now", not "never": the job is not failed for it."""
    hub.refusal = {"detail": "too many requests"}
    hub.refusal_status = 429
    assert _agent(hub).run_job("e1", 1) == "unreported"
    assert hub.statuses == []
