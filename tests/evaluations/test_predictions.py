"""A result's per-input outputs live in a columnar file in the artifact store, not in the
database, and are served a page at a time."""

from __future__ import annotations

from typing import Any

import pytest

from evaluations import outputs
from evaluations.models import Result
from hub import storage
from tests.evaluations.factories import (
    claim,
    error_paths,
    launch,
    launched_id,
    post_result,
    result_body,
    url,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(alice_evaluator_client, agent, hosts) -> str:  # type: ignore[no-untyped-def]
    evaluation_id = launched_id(launch(alice_evaluator_client))
    claimed = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    assert post_result(agent, evaluation_id, result_body(claimed["claim"])).status_code == 201
    return evaluation_id


def test_the_predictions_are_a_file_in_the_store_served_in_pages(
    alice_evaluator_client, finished
) -> None:
    result = Result.objects.get(evaluation_id=finished)
    assert result.predictions_path == f"results/{finished}/predictions.parquet"
    assert storage.resolve(result.predictions_path).is_file()
    assert not hasattr(result, "predictions")  # no JSON column any more

    first = alice_evaluator_client.get(url(finished, "predictions"), {"page_size": 1})
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["count"] == 2 and body["next"]
    assert body["results"] == [
        {"index": 0, "label": 0, "classes": [0, 1], "probabilities": [0.9, 0.1]}
    ]
    second = alice_evaluator_client.get(
        url(finished, "predictions"), {"page_size": 1, "page": 2}
    ).json()
    assert second["results"][0]["index"] == 1 and second["results"][0]["probabilities"] == [
        0.6,
        0.4,
    ]
    # The whole set, as before, on the evaluation itself.
    full = alice_evaluator_client.get(url(finished) + "?predictions=1").json()["result"][
        "predictions"
    ]
    assert full == {
        "top_k": 2,
        "labels": [0, 1],
        "classes": [[0, 1], [0, 1]],
        "probabilities": [[0.9, 0.1], [0.6, 0.4]],
    }


def test_the_predictions_of_a_large_split_are_read_a_page_at_a_time(tmp_path: Any) -> None:
    count = 200_000
    path = outputs.write(
        "big",
        {
            "labels": [i % 10 for i in range(count)],
            "classes": [[i % 10, (i + 1) % 10] for i in range(count)],
            "probabilities": [[0.75, 0.25]] * count,
        },
    )
    assert outputs.count(path) == count
    rows = outputs.page(path, 131_070, 5)  # across two row groups
    assert [r["index"] for r in rows] == list(range(131_070, 131_075))
    assert rows[0]["classes"] == [131_070 % 10, 131_071 % 10]
    assert outputs.page(path, count - 1, 50)[0]["index"] == count - 1
    outputs.remove("big")


def test_another_users_predictions_and_a_missing_result_are_404(
    bob_client, alice_evaluator_client, finished
) -> None:  # type: ignore[no-untyped-def]
    assert bob_client.get(url(finished, "predictions")).status_code == 404
    pending = launched_id(launch(alice_evaluator_client))
    missing = alice_evaluator_client.get(url(pending, "predictions"))
    assert missing.status_code == 404 and "no result" in missing.json()["detail"]
    refused = alice_evaluator_client.get(url(finished, "predictions"), {"offset": 5})
    assert refused.status_code == 400 and error_paths(refused) == ["offset"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_stored_predictions_into_the_store() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("evaluations", "0009_evaluation_overrides")]
    after = [("evaluations", "0010_predictions_in_the_store")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("auth", "User").objects.create(username="old")
    evaluation = old.get_model("evaluations", "Evaluation").objects.create(
        user=user,
        model_name="m",
        model_version="1.0.0",
        framework="onnxruntime",
        dataset_name="d",
        dataset_version="1.0.0",
        split="validation",
        device="cpu",
        request={},
    )
    old.get_model("evaluations", "Result").objects.create(
        evaluation=evaluation,
        top1=1.0,
        top5=1.0,
        count=2,
        predictions={
            "top_k": 1,
            "labels": [3, 4],
            "classes": [[3], [4]],
            "probabilities": [[1.0], [0.5]],
        },
        content_hash="c" * 64,
        stack={},
        details={},
    )

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    result = new.get_model("evaluations", "Result").objects.get(evaluation_id=evaluation.pk)
    assert result.top_k == 1
    assert outputs.read_all(result.predictions_path) == {
        "labels": [3, 4],
        "classes": [[3], [4]],
        "probabilities": [[1.0], [0.5]],
    }
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
