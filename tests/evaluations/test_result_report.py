"""A result upload is read by the protocol's strict `ResultUpload.from_dict` before anything
else: an unknown key at any level, or a value of another type in the loop's report, is 400
naming its path, and nothing is stored; the loop's own upload is stored as it was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluations.models import Evaluation, Result
from predictors.agent.results import result_upload
from predictors.data import DataManager
from predictors.evaluation import EvaluationOptions, evaluate
from predictors.manifests.catalog import Catalog
from predictors.protocol import Job
from tests.evaluations.factories import claim, launch, launched_id, post_result, result_body
from tests.helpers import error_of
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.django_db


def _claimed(client: Any, agent: Any, hosts: Any) -> tuple[str, dict[str, Any]]:
    evaluation_id = launched_id(launch(client))
    claimed = claim(agent, evaluation_id, hosts["cpu-1"])
    assert claimed.status_code == 200, claimed.content
    return evaluation_id, claimed.json()


def _stored_nothing(evaluation_id: str) -> bool:
    return (
        not Result.objects.filter(evaluation_id=evaluation_id).exists()
        and Evaluation.objects.get(pk=evaluation_id).status == "running"
    )


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (lambda b: b.update(colour="blue"), "colour", "unknown field"),
        (lambda b: b["accuracy"].update(map=0.5), "accuracy.map", "unknown field"),
        (lambda b: b["latency"]["1"].update(p95_ms=2.0), "latency.1.p95_ms", "unknown field"),
        (lambda b: b["predictions"].update(scores=[]), "predictions.scores", "unknown field"),
        (lambda b: b["details"].update(colour="blue"), "details.colour", "unknown field"),
        (
            lambda b: b["details"].update(
                batch_sizes=[{"batch_size": 1, "latency": {"p50_ms": 1.4, "p95_ms": 2.0}}]
            ),
            "details.batch_sizes.0.latency.p95_ms",
            "unknown field",
        ),
        (
            lambda b: b["details"].update(accuracy={"top1": 0.5, "sharpness": 1}),
            "details.accuracy.sharpness",
            "unknown field",
        ),
        (
            lambda b: b["details"].update(hygiene=[{"code": "spread", "batch_size": "one"}]),
            "details.hygiene.0.batch_size",
            "must be an integer; got 'one'",
        ),
        (
            lambda b: b["details"].update(model={"name": ["m"]}),
            "details.model.name",
            "must be a string",
        ),
        (lambda b: b["accuracy"].update(top1="0.5"), "accuracy.top1", "must be a finite number"),
    ],
)
def test_an_unknown_key_or_a_wrong_type_at_any_level_is_400_naming_its_path(
    alice_evaluator_client, agent, hosts, change: Any, path: str, message: str
) -> None:
    evaluation_id, job = _claimed(alice_evaluator_client, agent, hosts)
    body = result_body(job["claim"])
    change(body)

    response = post_result(agent, evaluation_id, body)

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == path and message in error["message"]
    assert response.json()["code"] == "invalid"
    assert _stored_nothing(evaluation_id)


def test_a_result_without_an_agent_token_is_refused_before_it_is_read(
    alice_evaluator_client, agent, hosts
) -> None:
    evaluation_id, job = _claimed(alice_evaluator_client, agent, hosts)
    body = result_body(job["claim"]) | {"colour": "blue"}

    response = post_result(alice_evaluator_client, evaluation_id, body)

    assert response.status_code == 403
    assert _stored_nothing(evaluation_id)


@pytest.mark.frameworks
def test_the_loops_own_upload_is_stored_as_it_was_sent(
    alice_evaluator_client, agent, hosts
) -> None:
    """The zoo's digits-cnn run as the agent runs the job: its report is stored key for
    key."""
    evaluation_id = launched_id(launch(alice_evaluator_client, batch_sizes=[1, 4], limit=8))
    claimed = claim(agent, evaluation_id, hosts["cpu-1"])
    assert claimed.status_code == 200, claimed.content
    job = Job.from_dict(claimed.json())
    catalog = Catalog()
    ran = evaluate(
        catalog.find_model("digits-cnn", "*", "onnxruntime"),
        catalog.find_dataset("digits"),
        EvaluationOptions.from_job(job.options, device="cpu"),
        DataManager(store_dir=zoo_store(("digits-cnn",))).fetch,
    )
    upload = json.loads(json.dumps(result_upload(job, ran).to_dict()))

    response = post_result(agent, evaluation_id, {"claim": job.claim, **upload})

    assert response.status_code == 201, response.content
    assert Result.objects.get(evaluation_id=evaluation_id).details == upload["details"]


def _capture_text(indices: list[int]) -> str:
    import base64

    import numpy as np

    from predictors.analysis.divergence import Capture
    from predictors.frameworks.layer_outputs import LayerOutput

    capture = Capture(
        "onnxruntime",
        np.zeros((len(indices), 2), np.float32),
        [LayerOutput("fc", "Gemm", np.ones((len(indices), 3), np.float32))],
        indices,
    )
    return base64.b64encode(capture.to_bytes()).decode("ascii")


@pytest.mark.parametrize(
    ("capture_inputs", "layer_outputs", "message"),
    [
        ([], lambda: _capture_text([0]), "must be left out"),
        ([0, 2], None, "is required"),
        ([0, 2], lambda: "not base64!", "is not a capture file"),
        ([0, 2], lambda: "bm90IGEgemlw", "is not a capture file"),
        ([0, 2], lambda: _capture_text([0, 1]), "the job asked for [0, 2]"),
    ],
)
def test_layer_outputs_must_be_what_the_job_captured(
    alice_evaluator_client, agent, hosts, capture_inputs, layer_outputs, message
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client, capture_inputs=capture_inputs))
    claimed = claim(agent, evaluation_id, hosts["cpu-1"])
    body = result_body(claimed.json()["claim"])
    if layer_outputs is not None:
        body["layer_outputs"] = layer_outputs()

    response = post_result(agent, evaluation_id, body)

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == "layer_outputs" and message in error["message"], error
    assert _stored_nothing(evaluation_id)


@pytest.mark.frameworks
def test_the_loops_capture_is_kept_with_the_result(
    alice_evaluator_client, bob_client, agent, hosts
) -> None:
    """digits-cnn run with `capture_inputs` as the agent runs it: the capture travels with the
    result and is kept, every layer of the two inputs asked for; its owner downloads it, and
    another user may not."""
    from evaluations import outputs

    evaluation_id = launched_id(
        launch(alice_evaluator_client, batch_sizes=[1], limit=4, capture_inputs=[1, 6])
    )
    claimed = claim(agent, evaluation_id, hosts["cpu-1"])
    job = Job.from_dict(claimed.json())
    catalog = Catalog()
    ran = evaluate(
        catalog.find_model("digits-cnn", "*", "onnxruntime"),
        catalog.find_dataset("digits"),
        EvaluationOptions.from_job(job.options, device="cpu"),
        DataManager(store_dir=zoo_store(("digits-cnn",))).fetch,
    )
    upload = json.loads(json.dumps(result_upload(job, ran).to_dict()))

    response = post_result(agent, evaluation_id, {"claim": job.claim, **upload})

    assert response.status_code == 201, response.content
    kept = outputs.layers(evaluation_id)
    assert kept is not None and kept.indices == [1, 6] and kept.framework == "onnxruntime"
    assert kept.input.shape[0] == 2 and len(kept.layers) >= 4
    assert all(layer.array.shape[0] == 2 for layer in kept.layers)
    download = alice_evaluator_client.get(f"/api/v1/evaluations/{evaluation_id}/layers/")
    assert download.status_code == 200
    data = b"".join(download.streaming_content)
    from predictors.analysis.divergence import Capture

    assert Capture.from_bytes(data).indices == [1, 6]
    assert bob_client.get(f"/api/v1/evaluations/{evaluation_id}/layers/").status_code == 404
    nothing = launched_id(launch(alice_evaluator_client))
    assert alice_evaluator_client.get(f"/api/v1/evaluations/{nothing}/layers/").status_code == 404
