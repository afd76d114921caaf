"""The agent on its own: what it registers, its reporter against a real HTTP server, the result
it posts, its command-line errors, and that it runs without Django. (The agent running real
jobs for a real hub is in tests/evaluations/test_end_to_end.py.)"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from predictors import manifests
from predictors.agent.daemon import Agent
from predictors.agent.hub_client import HubClient
from predictors.agent.main import main
from predictors.agent.results import Reporter, result_upload
from predictors.data import DataManager
from predictors.evaluation import EvaluationOptions, evaluate
from predictors.host import introspection
from predictors.manifests.catalog import Catalog
from predictors.protocol import Job, JobOptions, ManifestRef, ProtocolError, ResultUpload
from tests.predictors.zoo_store import REPO_ROOT, zoo_store


class _Hub(BaseHTTPRequestHandler):
    """Answers every POST with the server's next (status, body); records what it was sent."""

    def do_POST(self) -> None:  # noqa: N802 (the handler's name)
        length = int(self.headers.get("Content-Length") or 0)
        self.server.received.append((self.path, json.loads(self.rfile.read(length) or b"{}")))  # type: ignore[attr-defined]
        status, body = self.server.answer  # type: ignore[attr-defined]
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    server.received = []  # type: ignore[attr-defined]
    server.answer = (200, {"status": "running", "cancel_requested": False})  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _client(server: Any) -> HubClient:
    return HubClient(f"http://127.0.0.1:{server.server_address[1]}", "mlms_test", retries=0)


def test_the_registration_describes_this_host_and_its_queues() -> None:
    agent = Agent(HubClient("http://hub.invalid", "t"), "box-1", frameworks=["onnxruntime"])

    registration = agent.registration()

    (onnx,) = registration["frameworks"]
    assert onnx["name"] == "onnxruntime"
    assert onnx["version"] == introspection.framework_versions(["onnxruntime"])["onnxruntime"]
    assert onnx["devices"][0] == "cpu"
    assert registration["hardware"]["architecture"] == introspection.architecture()
    assert registration["hardware"]["memory_bytes"] > 0
    # The hub names the queues from the frameworks and devices; the agent asks for none.
    assert "queues" not in registration
    assert registration["pool"] is False and "group" not in registration
    assert registration["software"]["frameworks"]["onnxruntime"] == onnx["version"]
    # The host's roofline, measured once: its CPU's peak compute and memory bandwidth.
    cpu = registration["hardware"]["roofline"]["cpu"]
    assert cpu["measured"] is True
    assert cpu["peak_gflops_per_s"] > 0 and cpu["bandwidth_gb_per_s"] > 0
    assert cpu["ridge_flop_per_byte"] == pytest.approx(
        cpu["peak_gflops_per_s"] / cpu["bandwidth_gb_per_s"], rel=1e-3
    )
    assert agent.registration() is registration  # measured once


def test_queues_given_choose_the_capabilities_and_the_scope_is_asked_for() -> None:
    agent = Agent(
        HubClient("http://hub.invalid", "t"),
        "box-1",
        frameworks=["onnxruntime"],
        queues=["onnxruntime.cpu"],
        group="lab",
    )

    registration = agent.registration()

    assert registration["queues"] == ["onnxruntime.cpu"]
    assert registration["group"] == "lab" and registration["pool"] is False


def test_the_agent_consumes_the_queues_the_hub_named(hub: Any) -> None:
    hub.answer = (201, {"id": 3, "scope": "user-4", "queues": ["user-4.host.box-1", "user-4.x"]})
    agent = Agent(_client(hub), "box-1", frameworks=["onnxruntime"])

    agent.register(wait_seconds=0)

    assert agent.host_id == 3
    assert agent.queues == ["user-4.host.box-1", "user-4.x"]


def test_the_reporter_learns_of_a_cancel_from_the_hubs_answer(hub: Any) -> None:
    reporter = Reporter(_client(hub), "e1", "c" * 32, interval=0.05)
    reporter.progress(3, 10)
    reporter.report()
    assert not reporter.cancelled.is_set()

    hub.answer = (200, {"status": "running", "cancel_requested": True})
    reporter.report()

    assert reporter.cancelled.is_set() and not reporter.lost
    assert hub.received[-1] == (
        "/api/v1/evaluations/e1/progress/",
        {"claim": "c" * 32, "done": 3, "total": 10},
    )


def test_a_reporter_whose_claim_was_superseded_stops_the_job(hub: Any) -> None:
    hub.answer = (
        409,
        {
            "detail": "no longer yours",
            "code": "claim_superseded",
            "errors": [{"path": "", "message": "x"}],
        },
    )
    reporter = Reporter(_client(hub), "e1", "c" * 32, interval=0.05)

    reporter.start()
    reporter.stop()

    assert reporter.lost and reporter.cancelled.is_set()


def test_a_job_another_agent_claimed_is_dropped(hub: Any) -> None:
    hub.answer = (
        409,
        {"detail": "running on b", "code": "claim_taken", "errors": [{"path": "", "message": "x"}]},
    )
    agent = Agent(_client(hub), "box-1")
    agent.host_id = 7

    assert agent.run_job("e1", 1) == "not claimed"
    assert hub.received == [("/api/v1/evaluations/e1/claim/", {"host": 7, "dispatch": 1})]


@pytest.mark.frameworks
def test_the_result_payload_carries_accuracy_latency_and_predictions() -> None:
    store = zoo_store(("digits-cnn",))
    catalog = Catalog(REPO_ROOT / "manifests")
    model = catalog.find_model("digits-cnn", "*", "onnxruntime")
    dataset = catalog.find_dataset("digits", "*")
    options = EvaluationOptions(batch_sizes=(1, 4), limit=20)
    evaluation = evaluate(model, dataset, options, DataManager(store_dir=store).fetch)
    ref = ManifestRef(1, "digits-cnn", "1.0.0", "onnxruntime", "0" * 64, model.source)
    job = Job("e", "c" * 32, 1, "cpu", ref, ref, JobOptions(trace_level="full"))

    upload = result_upload(job, evaluation)
    payload = upload.to_dict()

    assert payload["accuracy"]["count"] == 20
    assert set(payload["latency"]) == set(payload["throughput"]) == {"1", "4"}
    assert {"mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms"} <= set(
        payload["latency"]["4"]
    )
    predictions = payload["predictions"]
    assert len(predictions["labels"]) == len(predictions["classes"]) == 20
    assert predictions["top_k"] == len(predictions["classes"][0]) == 5
    assert payload["content_hash"] == manifests.load(model.source).content_hash()
    assert payload["details"]["trace_level_requested"] == "full"
    # Plain JSON, as it travels, and read back by the hub as the same object.
    assert ResultUpload.from_dict(json.loads(json.dumps(payload))) == upload


def test_the_command_line_refuses_a_bad_name_and_a_missing_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLMS_AGENT_TOKEN", raising=False)

    assert main(["--hub", "http://127.0.0.1:9", "--name", "no spaces"]) == 2
    assert "--name" in capsys.readouterr().err
    assert main(["--hub", "http://127.0.0.1:9", "--name", "ok"]) == 1
    assert "no token" in capsys.readouterr().err
    for kib in ("0", "1048577"):
        command = ["--hub", "http://127.0.0.1:9", "--name", "ok", "--predictions-page-kib", kib]
        assert main(command) == 2
        assert f"--predictions-page-kib must be from 1 to 1048576 (1 GiB); got {kib}" in (
            capsys.readouterr().err
        )


def test_an_agent_in_a_predictor_image_registers_the_image_its_digest_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No image holds its own digest: whoever starts the container passes it in
    MLMS_CONTAINER_DIGEST. With it the agent registers its image, packages included; a value that
    is no digest stops the agent at its start, naming the variable."""
    import predictors.agent.registration as registration_module

    environment = {"python": "3.11.2", "python_packages": {"onnxruntime": "1.31.1"}}
    own = tmp_path / "environment.json"
    own.write_text(json.dumps(environment))
    monkeypatch.setattr(registration_module, "OWN_ENVIRONMENT", own)
    digest = "sha256:" + "ab" * 32
    monkeypatch.setenv("MLMS_CONTAINER_IMAGE", "mlmodelscope/onnxruntime:1.31-cpu")
    monkeypatch.setenv("MLMS_CONTAINER_DIGEST", digest)
    registration = Agent(
        HubClient("http://hub.invalid", "t"), "box-1", frameworks=["onnxruntime"]
    ).registration()
    assert registration["software"]["container"]["digest"] == digest
    (image,) = registration["images"]
    assert image["digest"] == digest and image["tags"] == ["mlmodelscope/onnxruntime:1.31-cpu"]
    assert image["framework"] == "onnxruntime" and image["device"] == "cpu"
    assert image["environment"] == environment

    # Without the digest: the tag is recorded, no image is registered.
    monkeypatch.delenv("MLMS_CONTAINER_DIGEST")
    registration = Agent(
        HubClient("http://hub.invalid", "t"), "box-1", frameworks=["onnxruntime"]
    ).registration()
    assert registration["software"]["container"]["digest"] is None
    assert "images" not in registration

    monkeypatch.setenv("MLMS_CONTAINER_DIGEST", "latest")
    monkeypatch.setenv("MLMS_AGENT_TOKEN", "t")
    assert main(["--hub", "http://127.0.0.1:9", "--name", "ok"]) == 2
    assert "MLMS_CONTAINER_DIGEST='latest' is not an image digest" in capsys.readouterr().err


def test_an_unreachable_hub_is_one_line_and_status_1(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("mlms_x\n")
    done = subprocess.run(
        [sys.executable, "-m", "predictors.agent", "--hub", "http://127.0.0.1:9"]
        + ["--token-file", str(token), "--wait", "0", "--frameworks", "onnxruntime"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("mlms agent: error: the hub at")


def test_the_agent_runs_where_django_is_not_installed() -> None:
    # As in a slim predictor container: any import of Django fails.
    code = (
        "import sys\n"
        "sys.modules['django'] = None\n"
        "from predictors.agent.daemon import Agent\n"
        "from predictors.agent.hub_client import HubClient\n"
        "app = Agent(HubClient('http://hub.invalid', 't'), 'x').celery_app('memory://', {})\n"
        "app.finalize()\n"
        "assert 'mlmodelscope.evaluate' in app.tasks\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mlmodelscope.settings"}

    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )

    assert done.returncode == 0, done.stderr


class _Otlp(BaseHTTPRequestHandler):
    """Answers every OTLP export with the server's `status`; records (path, headers, body)."""

    def do_POST(self) -> None:  # noqa: N802 (the handler's name)
        length = int(self.headers.get("Content-Length") or 0)
        self.server.received.append((self.path, self.headers, self.rfile.read(length)))  # type: ignore[attr-defined]
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def otlp_hub() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Otlp)
    server.received = []  # type: ignore[attr-defined]
    server.status = 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _traced_job() -> Job:
    model = ManifestRef(1, "digits-cnn", "1.0.0", "onnxruntime", "0" * 64, "")
    dataset = ManifestRef(2, "digits", "1.0.0", "", "0" * 64, "")
    return Job(
        id="e1",
        claim="c" * 32,
        attempt=1,
        device="cpu",
        model=model,
        dataset=dataset,
        options=JobOptions(),
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        parent_span_id="00f067aa0ba902b7",
    )


def _spans_only() -> Any:
    from types import SimpleNamespace

    from predictors.tracing import Span

    return SimpleNamespace(
        spans=[
            Span("batch", 1_000, 2_000, {"mlms.level": "model"}, span_id=1),
            Span("conv", 1_100, 1_500, {"mlms.level": "framework"}, span_id=2, parent_id=1),
        ]
    )


def test_the_agent_exports_a_jobs_spans_under_its_trace_and_parent(
    otlp_hub: Any, tmp_path: Path
) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    agent = Agent(_client(otlp_hub), "a1", cache_dir=tmp_path)
    counts = agent._export_trace(_traced_job(), _spans_only())
    assert counts == {"sent": 3, "stored": 3, "refused": 0, "spooled": 0, "retries": 0}

    ((path, headers, body),) = otlp_hub.received
    assert path == "/v1/traces" and headers["Authorization"] == "Bearer mlms_test"
    # Sent once under an id of its own, and under the job's claim.
    assert re.fullmatch(r"[0-9a-f]{32}", headers["X-MLMS-Export"])
    assert headers["X-MLMS-Claim"] == "c" * 32
    message = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    spans = {s.name: s for r in message.resource_spans for g in r.scope_spans for s in g.spans}
    assert set(spans) == {"evaluation", "batch", "conv"}
    assert {s.trace_id.hex() for s in spans.values()} == {_traced_job().trace_id}
    assert spans["evaluation"].parent_span_id.hex() == "00f067aa0ba902b7"
    assert spans["batch"].parent_span_id == spans["evaluation"].span_id
    assert spans["conv"].parent_span_id == spans["batch"].span_id


def test_a_refused_export_is_a_note_not_a_failure(otlp_hub: Any, tmp_path: Path) -> None:
    otlp_hub.status = 403
    agent = Agent(_client(otlp_hub), "a1", cache_dir=tmp_path)

    counts = agent._export_trace(_traced_job(), _spans_only())

    assert counts is not None
    assert counts["sent"] == counts["refused"] == 3 and counts["stored"] == 0
    assert counts["note"] == "0 of 3 spans stored: 3 refused (403: Forbidden)"
    assert len(otlp_hub.received) == 1  # a refusal is not retried
    assert not (tmp_path / "spool").exists() or not any((tmp_path / "spool").iterdir())
    assert (
        agent._export_trace(dataclasses.replace(_traced_job(), trace_id=None), _spans_only())
        is None
    )


def test_a_job_with_an_unknown_trace_level_is_refused_naming_it(hub: Any) -> None:
    job = dataclasses.replace(_traced_job(), options=JobOptions()).to_dict()
    job["options"]["trace_level"] = "everything"
    hub.answer = (200, job)
    agent = Agent(_client(hub), "box-1")
    agent.host_id = 7

    assert agent.run_job("e1", 1) == "refused"

    path, body = hub.received[-1]
    assert path == "/api/v1/evaluations/e1/status/"
    assert body["status"] == "failed" and body["claim"] == "c" * 32
    assert "options.trace_level" in body["reason"] and "everything" in body["reason"]


def test_the_job_and_the_result_travel_as_the_same_objects() -> None:
    job = _traced_job()
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    with pytest.raises(ProtocolError) as refused:
        JobOptions.from_dict({"batch_sizes": [1], "speed": "fast"})
    assert refused.value.path == "options.speed"


def test_an_unreachable_docker_daemon_stops_the_agent_at_start() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "predictors.agent",
            "--hub",
            "http://127.0.0.1:9",
            "--token",
            "t",
        ]
        + ["--docker"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        timeout=120,
    )
    assert done.returncode == 1
    assert (
        "mlms agent: error: --docker: the Docker daemon at unix:///nonexistent/docker.sock does "
        "not answer" in done.stderr
    ), done.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--memory", "4g"], "--memory limits containers: it needs --docker"),
        (["--docker", "--memory", "lots"], "--memory 'lots' is not a size (e.g. 512m, 4g)"),
        (["--docker", "--memory", "1k"], "--memory '1k' is less than Docker's minimum of 6 MiB"),
        (["--docker", "--cpus", "0"], "--cpus must be more than 0"),
    ],
)
def test_container_limits_are_checked_before_anything_starts(
    flags: list[str], message: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "predictors.agent",
            "--hub",
            "http://127.0.0.1:9",
            "--token",
            "t",
        ]
        + flags,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert message in done.stderr, done.stderr
