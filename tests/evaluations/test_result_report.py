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
