"""End to end, in real processes: a hub served by daphne (with its own database and broker) and
two agents (`python -m predictors.agent`) consuming the same capability queue, evaluating the
zoo's digits-cnn on onnxruntime on the CPU (`agents_hub` of conftest.py, on
tests.livehub).

On the embedded default the hub and the agents share a filesystem broker (the agents learn its
folder from the hub); with CELERY_BROKER_URL=redis://… they share Redis, and with
DATABASE_URL=postgres://… the hub gets a fresh PostgreSQL database of its own. The tests run in
file order: the last one kills an agent.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import requests

from predictors.agent.hub_client import HubError, evaluate_remote
from tests.livehub import ROOT, LiveHub

pytestmark = [pytest.mark.frameworks, pytest.mark.both_stacks]


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory,
    agents_hub: Callable[..., AbstractContextManager[LiveHub]],
) -> Iterator[LiveHub]:
    with agents_hub(tmp_path_factory.mktemp("e2e")) as live:
        yield live


def test_digits_cnn_runs_on_an_agent_to_succeeded_and_streams_live(hub: LiveHub) -> None:
    stream = hub.websocket("/ws/evaluations/")
    snapshot = stream.receive()
    assert snapshot and snapshot["type"] == "snapshot", snapshot

    evaluation_id = hub.launch(batch_sizes=[1, 32])
    body = hub.finished(evaluation_id)

    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    assert [h["status"] for h in body["history"]] == [
        "queued",
        "dispatched",
        "running",
        "succeeded",
    ]
    assert body["host"] in hub.pool_agents and body["framework_version"]
    assert body["progress"]["done"] == body["progress"]["total"] > 0
    result = body["result"]
    assert result["accuracy"]["top1"] >= 0.95 and result["accuracy"]["count"] == 360
    for size in ("1", "32"):
        latency = result["latency"][size]
        assert 0 < latency["min_ms"] <= latency["p50_ms"] <= latency["p90_ms"]
        assert latency["p90_ms"] <= latency["p99_ms"] <= latency["max_ms"]
        assert latency["mean_ms"] > 0 and latency["std_ms"] >= 0
        assert result["throughput"][size] > 0
    _, manifests = hub.get("manifests/?name=digits-cnn&framework=onnxruntime")
    assert result["content_hash"] == manifests["results"][0]["content_hash"]
    assert result["stack"]["frameworks"]["onnxruntime"] == body["framework_version"]

    seen = []
    while not seen or seen[-1] != "succeeded":
        event = stream.receive()
        assert event is not None, f"no event after {seen}"
        if event["type"] == "status" and event["id"] == evaluation_id:
            seen.append(event["status"])
    stream.close()
    assert seen == ["queued", "dispatched", "running", "succeeded"]


def test_a_stateful_streaming_model_runs_in_both_formats_and_they_agree(hub: LiveHub) -> None:
    """toggle-gru on toggle-clicks, in ONNX Runtime and TorchScript: the accuracy with the
    state carried and with it reset at every call, both reported; compared input by input.
    The pool runs ONNX Runtime: a PyTorch agent joins it for this test."""
    hub.start_agent("e2e-torch", frameworks="pytorch")
    hub.wait(lambda: "e2e-torch" in hub.live_hosts(), "agent e2e-torch to register", 60)
    ids = [
        hub.launch(model="toggle-gru", framework=framework, dataset="toggle-clicks")
        for framework in ("onnxruntime", "pytorch")
    ]
    bodies = [hub.finished(evaluation_id, timeout=180) for evaluation_id in ids]
    for body in bodies:
        assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
        details = body["result"]["details"]
        assert details["accuracy"]["top1"] >= 0.97
        assert details["accuracy_state_reset"]["top1"] <= 0.7
        assert details["accuracy"]["f1"] >= 0.97 and details["accuracy"]["roc_auc"] >= 0.97
        reason = body["history"][-1]["reason"]
        assert "with the state carried" in reason and "reset at every call" in reason, reason
    status, compared = hub.get(f"compare/?evaluations={ids[0]},{ids[1]}")
    assert status == 200, compared
    other = compared["accuracy"]["rows"][1]
    assert other["agreement"] == 1.0 and other["disagreeing_inputs"] == 0, compared
    assert other["max_abs_difference"] < 1e-4
    assert compared["accuracy"]["distributions"] == "exact"
    hub.stop("e2e-torch")


def test_a_detectors_map_on_the_hub_is_pycocotools_on_the_predictions_it_stored(
    hub: LiveHub,
) -> None:
    """The zoo's shapes-detector through the hub and an agent: the mAP the hub reports is the
    one pycocotools computes from the detections the hub stored and the dataset's boxes."""
    import contextlib
    import io

    import pyarrow.parquet as pq
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    evaluation_id = hub.launch(model="shapes-detector", dataset="shapes-boxes")
    body = hub.finished(evaluation_id, timeout=180)
    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    details = body["result"]["details"]
    reported = details["accuracy"]["map"]
    assert body["result"]["accuracy"]["top1"] == reported
    assert "mAP" in body["history"][-1]["reason"]
    assert details["batch_sizes"][0]["input_sizes"]["distinct"] > 100

    status, stored = hub.get(f"evaluations/{evaluation_id}/?predictions=1")
    assert status == 200, stored
    predictions = stored["result"]["predictions"]
    split = pq.read_table(
        Path(hub.env["ARTIFACT_ROOT"]) / "datasets/shapes-boxes/1.0.0/validation.parquet"
    ).to_pylist()
    truth: dict[str, Any] = {
        "images": [],
        "annotations": [],
        "categories": [{"id": c} for c in range(3)],
    }
    found = []
    for image_id, row in enumerate(split):
        truth["images"].append({"id": image_id})
        for box, kind in zip(row["boxes"], row["classes"], strict=True):
            truth["annotations"].append(
                {
                    "id": len(truth["annotations"]) + 1,
                    "image_id": image_id,
                    "bbox": box,
                    "area": box[2] * box[3],
                    "category_id": kind,
                    "iscrowd": 0,
                }
            )
        for kind, score, box in zip(
            predictions["classes"][image_id],
            predictions["probabilities"][image_id],
            predictions["boxes"][image_id],
            strict=True,
        ):
            found.append({"image_id": image_id, "bbox": box, "score": score, "category_id": kind})
    with contextlib.redirect_stdout(io.StringIO()):
        ground = COCO()
        ground.dataset = truth
        ground.createIndex()
        coco = COCOeval(ground, ground.loadRes(found), "bbox")
        coco.evaluate()
        coco.accumulate()
        coco.summarize()
    # The hub keeps boxes to 0.01 px and scores to 1e-5: the same mAP to rounding.
    assert abs(float(coco.stats[0]) - reported) < 2e-3, (coco.stats[0], reported)


def test_predictions_posted_in_pages_are_the_same_as_in_one_body(hub: LiveHub) -> None:
    """An agent whose pages are 8 KiB posts the digits' predictions (360 inputs, top 5) in
    pages before its result; the hub assembles them into what a result of one body holds."""
    hub.start_agent("e2e-paged", options=["--predictions-page-kib", "8"])
    hub.wait(lambda: "e2e-paged" in hub.live_hosts(), "agent e2e-paged to register", 60)
    ids = [hub.launch(batch_sizes=[32], host=host) for host in ("e2e-paged", hub.pool_agents[0])]
    bodies = [hub.finished(evaluation_id) for evaluation_id in ids]
    for body in bodies:
        assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    hub.stop("e2e-paged")
    log = (hub.folder / "e2e-paged.log").read_text(errors="replace")
    assert f"evaluation {ids[0]}: predictions posted in" in log, log[-2000:]
    stored = []
    for evaluation_id in ids:
        status, body = hub.get(f"evaluations/{evaluation_id}/?predictions=1")
        assert status == 200, body
        stored.append(body["result"]["predictions"])
    paged, whole = stored
    assert len(paged["labels"]) == len(whole["labels"]) == 360
    assert paged["labels"] == whole["labels"] and paged["classes"] == whole["classes"]
    assert all(
        row == pytest.approx(other, abs=1e-4)
        for row, other in zip(paged["probabilities"], whole["probabilities"], strict=True)
    )
    # Assembled, the staged pages are gone.
    pages = Path(hub.env["ARTIFACT_ROOT"]) / f"results/{ids[0]}/pages"
    assert not pages.exists() or not any(pages.rglob("*.parquet"))


def test_a_regression_and_a_latency_only_run_go_through_the_hub(hub: LiveHub) -> None:
    """The zoo's diabetes-mlp through the hub and an agent: its error, in the target's units,
    is the mean absolute difference of the values the hub stored and the dataset's targets. And
    digits-cnn timed without scoring: a result without accuracy, with its latency."""
    import pyarrow.parquet as pq

    regression = hub.launch(model="diabetes-mlp", dataset="diabetes", batch_sizes=[1, 32])
    timed = hub.launch(batch_sizes=[1], limit=64, latency_only=True, threads=64)
    body = hub.finished(regression)
    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    accuracy = body["result"]["details"]["accuracy"]
    assert body["result"]["accuracy"]["top1"] == accuracy["mae"] > 1  # no fraction
    assert body["history"][-1]["reason"].startswith(f"MAE {accuracy['mae']:.4g}, RMSE ")
    status, stored = hub.get(f"evaluations/{regression}/?predictions=1")
    assert status == 200, stored
    values = [row[0] for row in stored["result"]["predictions"]["probabilities"]]
    targets = pq.read_table(
        Path(hub.env["ARTIFACT_ROOT"]) / "datasets/diabetes/1.0.0/validation.parquet"
    ).column("target")
    errors = [abs(v - t) for v, t in zip(values, targets.to_pylist(), strict=True)]
    assert abs(sum(errors) / len(errors) - accuracy["mae"]) < 1e-3

    body = hub.finished(timed)
    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    result = body["result"]
    assert result["accuracy"] == {"top1": None, "top5": None, "count": 64}
    assert result["latency"]["1"]["count"] == 64 and result["throughput"]["1"] > 0
    assert body["history"][-1]["reason"].startswith("latency only (not scored): 64 inputs timed")
    # 64 threads on this machine's few cores: the result says so (measurement hygiene).
    (crowded,) = [w for w in result["details"]["hygiene"] if w["code"] == "threads_over_cores"]
    assert crowded["threads"] == 64 and crowded["cores"] < 64


def test_a_coco_dataset_sent_to_the_hub_scores_as_the_zoos_split(
    hub: LiveHub, tmp_path: Path
) -> None:
    """`mlms datasets from-coco --hub`: the COCO files converted, uploaded and checked by the
    hub; the detector launched on it scores the mAP it scores on shapes-boxes."""
    from tests.predictors.test_coco_dataset import coco_files

    store = Path(hub.env["ARTIFACT_ROOT"])
    annotations = coco_files(store, tmp_path / "coco", crowd=True)
    command = [sys.executable, "-m", "predictors.cli", "datasets", "from-coco", str(annotations)]
    command += ["--images", str(tmp_path / "coco/images"), "--name", "shapes-coco"]
    command += ["--hub", hub.url, "--token", hub.token, "--visibility", "private"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "shapes-coco 1.0.0 on" in done.stdout and "1 crowd annotations left out" in done.stdout

    ids = [
        hub.launch(model="shapes-detector", dataset=dataset)
        for dataset in ("shapes-coco", "shapes-boxes")
    ]
    coco, zoo = (hub.finished(evaluation_id, timeout=180) for evaluation_id in ids)
    assert coco["status"] == zoo["status"] == "succeeded", f"{coco['history']}\n{hub.logs()}"
    assert (
        coco["result"]["details"]["accuracy"]["map"] == zoo["result"]["details"]["accuracy"]["map"]
    )


def test_ten_jobs_on_one_queue_are_spread_over_both_agents(hub: LiveHub) -> None:
    ids = [hub.launch(batch_sizes=[1], repeat=3) for _ in range(10)]

    bodies = [hub.finished(evaluation_id) for evaluation_id in ids]

    assert [b["status"] for b in bodies] == ["succeeded"] * 10, hub.logs()
    assert {b["host"] for b in bodies} == set(hub.pool_agents)
    assert all(b["queue"] == "pool.onnxruntime.cpu" and b["attempts"] == 1 for b in bodies)


def test_evaluate_remote_launches_and_waits_for_the_result(hub: LiveHub) -> None:
    updates: list[str] = []

    (body,) = evaluate_remote(
        hub.url,
        hub.token,
        {"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits", "limit": 50},
        poll_seconds=0.2,
        timeout=60,
        on_update=lambda evaluation: updates.append(evaluation["status"]),
    )

    assert body["status"] == "succeeded" and body["result"]["accuracy"]["count"] == 50
    assert updates[-1] == "succeeded"
    with pytest.raises(HubError) as refused:
        evaluate_remote(hub.url, hub.token, {"model": "digits-cnn", "framework": "onnxruntime"})
    assert refused.value.status == 400 and "dataset" in str(refused.value)


def test_the_mlms_cli_submits_to_the_hub_and_follows_the_run(hub: LiveHub) -> None:
    command = [sys.executable, "-m", "predictors.cli", "evaluate", "digits-cnn"]
    command += ["--framework", "onnxruntime", "--dataset", "digits:validation"]
    command += ["--batch-sizes", "1,32", "--hub", hub.url, "--format", "json", "--no-progress"]
    env = {k: v for k, v in hub.env.items() if k != "DATABASE_URL"} | {"MLMS_TOKEN": hub.token}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)

    assert done.returncode == 0, done.stderr
    (evaluation,) = json.loads(done.stdout)["evaluations"]
    assert evaluation["status"] == "succeeded"
    assert evaluation["result"]["accuracy"]["top1"] >= 0.95
    assert set(evaluation["result"]["latency"]) == {"1", "32"}
    assert {"p50_ms", "p90_ms", "p99_ms"} <= set(evaluation["result"]["latency"]["32"])
    assert "succeeded" in done.stderr  # the progress it followed, on stderr

    refused = subprocess.run(
        [*command[:-5], "--hub", hub.url, "--token", "mlms_not-a-token"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("mlms: error:") and len(refused.stderr.splitlines()) == 1

    # The history, from the command line: the run just made, found by its batch size and
    # shown with its latency per batch size; a filter the hub does not know is refused.
    history = [sys.executable, "-m", "predictors.cli", "evaluations"]
    listed = subprocess.run(
        [*history, "list", "--hub", hub.url, "--where", "batch_size=32", "--format", "json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert evaluation["id"] in [e["id"] for e in json.loads(listed.stdout)["results"]]
    shown = subprocess.run(
        [*history, "show", evaluation["id"], "--hub", hub.url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "succeeded" in shown.stdout and "batch size" in shown.stdout
    assert any(line.split()[:1] == ["32"] for line in shown.stdout.splitlines())
    unknown = subprocess.run(
        [*history, "list", "--hub", hub.url, "--where", "speed=fast"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert unknown.returncode == 1 and "speed" in unknown.stderr

    # Published from the command line, the run is on the public leaderboard, for anyone.
    published = subprocess.run(
        [*history, "publish", evaluation["id"], "--hub", hub.url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    assert published.stdout.strip() == f"evaluation {evaluation['id']} is published"
    boards = requests.get(hub.url + "/api/v1/leaderboards/", timeout=30).json()  # anonymous
    assert [(b["task"], b["dataset"]) for b in boards] == [("image_classification", "digits")]
    board = requests.get(hub.url + boards[0]["api_url"], timeout=30).json()
    assert [row["evaluation"] for row in board["results"]] == [evaluation["id"]]
    assert board["results"][0]["p50_ms"] is not None


def test_a_loadgen_server_run_through_the_hub_keeps_its_summary(hub: LiveHub) -> None:
    """`mlms evaluate … --scenario server --target-qps … --latency-bound … --hub`: the agent
    runs LoadGen after the fixed batches, the hub stores its summary and log with the result,
    and the command prints the summary as the hub stored it. Options that do not fit the
    scenario, and models LoadGen cannot drive, are refused at launch naming the field."""
    command = [sys.executable, "-m", "predictors.cli", "evaluate", "digits-cnn"]
    command += ["--framework", "onnxruntime", "--dataset", "digits", "--limit", "32"]
    command += ["--scenario", "server", "--target-qps", "40", "--latency-bound", "80"]
    command += ["--min-duration-ms", "300", "--min-query-count", "24"]
    command += ["--hub", hub.url, "--no-progress"]
    env = {k: v for k, v in hub.env.items() if k != "DATABASE_URL"} | {"MLMS_TOKEN": hub.token}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "LoadGen server (onnxruntime, performance mode, 32 samples):" in done.stdout
    assert "MLPerf Results Summary" in done.stdout and "target_qps : 40" in done.stdout

    evaluation_id = done.stdout.split()[0]
    body = hub.finished(evaluation_id)
    loadgen = body["result"]["details"]["loadgen"]
    assert loadgen["summary"]["Scenario"] == "Server"
    assert loadgen["settings"]["latency_bound_ms"] == 80
    assert int(loadgen["summary"]["target_latency (ns)"]) == 80_000_000
    assert loadgen["calls"] >= 1 and loadgen["log"]
    assert body["request"]["scenario"] == "server"

    status, refused = hub.request(
        "POST",
        "/api/v1/evaluations/",
        {"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits",
         "scenario": "server", "target_qps": 5},
    )  # fmt: skip
    assert status == 400 and "latency_bound_ms" in json.dumps(refused), refused
    status, refused = hub.request(
        "POST",
        "/api/v1/evaluations/",
        {"model": "toggle-gru", "framework": "onnxruntime", "dataset": "toggle-clicks",
         "scenario": "offline"},
    )  # fmt: skip
    assert status == 400 and "state or constant inputs" in json.dumps(refused), refused


def test_curl_launches_an_evaluation_with_a_bearer_token(hub: LiveHub) -> None:
    body = json.dumps(
        {
            "model": "digits-cnn",
            "framework": "onnxruntime",
            "dataset": "digits",
            "device": "cpu",
            "batch_sizes": [1, 32],
        }
    )
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "-X",
            "POST",
            f"{hub.url}/api/v1/evaluations/",
            "-H",
            f"Authorization: Bearer {hub.token}",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (launched,) = json.loads(done.stdout)["evaluations"]
    finished = hub.finished(launched["id"])
    assert finished["status"] == "succeeded"
    assert finished["result"]["accuracy"]["top1"] >= 0.95


def test_a_model_file_that_cannot_be_fetched_fails_the_evaluation_saying_why(
    hub: LiveHub,
) -> None:
    text = (ROOT / "manifests/models/digits-cnn/onnxruntime.yaml").read_text()
    text = text.replace("name: digits-cnn", "name: digits-unreachable")
    text = text.replace(
        "graph_path: repo://models/digits-cnn/1.0.0/digits-cnn.onnx",
        f"graph_path: https://127.0.0.1:9/digits.onnx\n  graph_sha256: {'ab' * 32}",
    )
    response = requests.post(
        f"{hub.url}/api/v1/manifests/",
        data=text.encode(),
        headers={**hub.auth_headers(), "Content-Type": "application/x-yaml"},
        timeout=30,
    )
    assert response.status_code == 201, response.text

    body = hub.finished(hub.launch(model="digits-unreachable"))

    assert body["status"] == "failed"
    assert body["reason"].startswith(
        f"failed on host {body['host']}: cannot fetch https://127.0.0.1:9/"
    )
    assert "connection refused" in body["reason"]


def _otlp_spans(hub: LiveHub, path: str) -> list[dict[str, Any]]:
    status, body = hub.get(f"{path}?format=otlp")
    assert status == 200, body
    return [
        span
        for resource in body.get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def test_a_framework_level_evaluations_spans_reach_the_hub_under_its_trace(
    hub: LiveHub,
) -> None:
    evaluation_id = hub.launch(batch_sizes=[1, 8], limit=16, trace_level="framework")
    body = hub.finished(evaluation_id)
    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"

    # The agent flushes its spans before it posts the result: they are all there now.
    spans = _otlp_spans(hub, f"evaluations/{evaluation_id}/trace")
    assert {span["traceId"] for span in spans} == {body["trace_id"]}
    (root,) = [span for span in spans if span["name"] == "evaluation"]
    assert not root.get("parentSpanId")
    assert _attributes(root)["mlms.evaluation"] == evaluation_id
    levels = [_attributes(span).get("mlms.level") for span in spans]
    assert levels.count("model") >= 2 + 16  # a batch span per batch, both batch sizes
    layers = [span for span in spans if _attributes(span).get("mlms.level") == "framework"]
    assert layers and all(_attributes(span).get("mlms.op_type") for span in layers)
    batch_ids = {s["spanId"] for s in spans if _attributes(s).get("mlms.level") == "model"}
    assert {span["parentSpanId"] for span in layers} <= batch_ids
    assert "trace_export" not in json.dumps(body["result"])
    # The result says how many spans the agent sent; the hub stored as many.
    assert body["spans"] == {"sent": len(spans), "stored": len(spans)}
    assert body["result"]["details"]["spans"]["refused"] == 0


def test_a_traceparent_puts_the_evaluation_under_the_callers_span(hub: LiveHub) -> None:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    response = requests.post(
        f"{hub.url}/api/v1/evaluations/",
        json={"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits", "limit": 8},
        headers={**hub.auth_headers(), "traceparent": f"00-{trace_id}-{span_id}-01"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    evaluation_id = response.json()["evaluations"][0]["id"]
    body = hub.finished(evaluation_id)
    assert body["status"] == "succeeded" and body["trace_id"] == trace_id

    spans = _otlp_spans(hub, f"traces/{trace_id}")
    assert spans and {span["traceId"] for span in spans} == {trace_id}
    (root,) = [span for span in spans if span["name"] == "evaluation"]
    assert root["parentSpanId"] == span_id
    assert spans == _otlp_spans(hub, f"evaluations/{evaluation_id}/trace")

    malformed = requests.post(
        f"{hub.url}/api/v1/evaluations/",
        json={"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits"},
        headers={**hub.auth_headers(), "traceparent": f"00-{trace_id}-{span_id}"},
        timeout=30,
    )
    assert malformed.status_code == 400
    assert [e["path"] for e in malformed.json()["errors"]] == ["traceparent"]


# Bob's hosts beside the pool, each run by the stock agent: his own, and one lent to each of
# three groups of his that invited Alice, who did not answer (a forced group), declined, or
# accepted without trusting the group's hosts.
BOBS_HOSTS = {
    "bob-box": None,
    "lab-forced": "not answered",
    "lab-declined": "declined",
    "lab-untrusted": "accepted",
}


def test_hosts_of_another_user_own_or_lent_to_a_group_receive_none_of_20_private_jobs(
    hub: LiveHub,
) -> None:
    """Bob runs the stock agent with the best token he can get (every scope, agent included),
    on his own host and on hosts lent to groups that invited Alice; Alice launches 20
    evaluations of her private model. None reaches any of Bob's agents: not the job, not the
    model file, not a span; Bob's own jobs run on his own host."""
    bob_token = hub.create_token("bob", "read,write,evaluate,agent")
    bob_token_file = hub.folder / "bob.token"
    bob_token_file.write_text(bob_token)
    bob = {"Authorization": f"Bearer {bob_token}"}
    for host, answer in BOBS_HOSTS.items():
        if answer is None:
            hub.start_agent(host, token_file=bob_token_file)
            continue
        status, _ = hub.request("POST", "/api/v1/groups/", {"name": host}, token=bob_token)
        assert status == 201
        status, _ = hub.request(
            "POST", f"/api/v1/groups/{host}/invitations/", {"username": "alice"}, token=bob_token
        )
        assert status == 201
        if answer == "declined":
            assert hub.request("DELETE", f"/api/v1/invitations/{host}/")[0] == 204
        elif answer == "accepted":
            assert hub.request("POST", f"/api/v1/invitations/{host}/accept/")[0] == 200
        hub.start_agent(host, token_file=bob_token_file, options=["--group", host])

    def bobs_hosts_live() -> bool:
        listed = requests.get(f"{hub.url}/api/v1/hosts/?live=1", headers=bob, timeout=10)
        return set(BOBS_HOSTS) <= {h["name"] for h in listed.json()["results"]}

    hub.wait(bobs_hosts_live, "Bob's agents to register", 90)
    store = Path(hub.env["ARTIFACT_ROOT"])
    graph = (store / "models/digits-cnn/1.0.0/digits-cnn.onnx").read_bytes()
    text = (ROOT / "manifests/models/digits-cnn/onnxruntime.yaml").read_text()
    text = text.replace("name: digits-cnn", "name: alice-digits")
    text = text.replace("visibility: public", "visibility: private")
    text = text.replace("repo://models/digits-cnn/", "repo://models/alice-digits/")
    response = requests.post(
        f"{hub.url}/api/v1/manifests/",
        data={"manifest": text},
        files={"files": ("digits-cnn.onnx", graph)},
        headers=hub.auth_headers(),
        timeout=30,
    )
    assert response.status_code == 201, response.text

    ids = [hub.launch(model="alice-digits", limit=20) for _ in range(20)]
    bodies = [hub.finished(evaluation_id) for evaluation_id in ids]

    assert [b["status"] for b in bodies] == ["succeeded"] * 20, hub.logs()
    assert {b["host"] for b in bodies} <= set(hub.pool_agents)
    for host in BOBS_HOSTS:
        log = (hub.folder / f"{host}.log").read_text(errors="replace")
        assert not [evaluation_id for evaluation_id in ids if evaluation_id in log], host
        cached = [p for p in (hub.folder / f"cache-{host}").rglob("*") if p.is_file()]
        assert not [p for p in cached if p.read_bytes() == graph or "alice" in str(p)], host
    for evaluation_id, body in zip(ids, bodies, strict=True):
        assert (
            requests.get(
                f"{hub.url}/api/v1/evaluations/{evaluation_id}/", headers=bob, timeout=10
            ).status_code
            == 404
        )
        assert (
            requests.get(
                f"{hub.url}/api/v1/traces/{body['trace_id']}/", headers=bob, timeout=10
            ).status_code
            == 404
        )
    # Bob's agent is not deaf: Bob's own job runs on it.
    launched = requests.post(
        f"{hub.url}/api/v1/evaluations/",
        json={"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits", "limit": 20},
        headers=bob,
        timeout=30,
    )
    assert launched.status_code == 201, launched.text
    own = launched.json()["evaluations"][0]["id"]
    for _ in range(600):
        mine = requests.get(f"{hub.url}/api/v1/evaluations/{own}/", headers=bob, timeout=10).json()
        if mine["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.2)
    assert mine["status"] == "succeeded" and mine["host"] == "bob-box", hub.logs()
    for host in BOBS_HOSTS:
        hub.kill(host)


def test_a_message_the_broker_delivers_twice_runs_once(hub: LiveHub) -> None:
    from celery import Celery

    evaluation_id = hub.launch(batch_sizes=[1], repeat=40)
    running = hub.wait(
        lambda: (body := hub.evaluation(evaluation_id))["status"] == "running" and body,
        "the job to start",
        60,
    )
    # The same message again, on the queue both agents consume, from the broker the hub names.
    agent_token = hub.agent_token
    _, hosts = hub.get("hosts/?live=1")
    host_id = next(h["id"] for h in hosts["results"] if h["name"] == running["host"])
    config = requests.get(
        f"{hub.url}/api/v1/agent/config/?host={host_id}",
        headers={"Authorization": f"Bearer {agent_token}"},
        timeout=10,
    ).json()
    sender = Celery("duplicate", broker=config["broker_url"], fixups=[], set_as_current=False)
    sender.conf.broker_transport_options = config["broker_transport_options"]
    sender.send_task(config["task_name"], args=[evaluation_id, 1], queue="pool.onnxruntime.cpu")

    body = hub.finished(evaluation_id)
    hub.wait(
        lambda: any(
            f"evaluation {evaluation_id} not claimed" in path.read_text(errors="replace")
            for path in hub.folder.glob("e2e-*.log")
        ),
        "an agent to refuse the duplicate",
        30,
    )

    assert body["status"] == "succeeded" and body["attempts"] == 1
    assert body["host"] == running["host"]
    assert [h["status"] for h in body["history"]].count("running") == 1
    assert hub.result_rows(evaluation_id) == 1


def test_a_killed_agents_job_completes_on_the_other_with_exactly_one_result(hub: LiveHub) -> None:
    evaluation_id = hub.launch(batch_sizes=[1], repeat=100)
    running = hub.progressing(evaluation_id)
    victim = running["host"]
    assert running["status"] == "running" and victim in hub.pool_agents

    hub.kill(victim)
    body = hub.finished(evaluation_id, timeout=120)

    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    (survivor,) = set(hub.pool_agents) - {victim}
    assert body["host"] == survivor and body["result"]["host"] == survivor
    assert body["attempts"] == 2
    history = [(h["status"], h["host"]) for h in body["history"]]
    assert history == [
        ("queued", None),
        ("dispatched", None),
        ("running", victim),
        ("dispatched", None),
        ("running", survivor),
        ("succeeded", survivor),
    ]
    assert body["history"][3]["reason"].startswith(f"host {victim} stopped heartbeating")
    assert hub.result_rows(evaluation_id) == 1
