"""The history: results as rows (one per batch size, with the keys people compare on as
columns) and `GET /api/v1/evaluations/` filtered and ordered by them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from evaluations.models import BatchResult, Evaluation
from tests.evaluations.factories import (
    EVALUATIONS_URL,
    claim,
    error_paths,
    launch,
    launched_id,
    post_result,
    result_body,
)

pytestmark = pytest.mark.django_db


def _finish(agent: Any, evaluation_id: str, host: Any, p50: float, sizes: tuple[int, ...]) -> None:
    claimed = claim(agent, evaluation_id, host)
    assert claimed.status_code == 200, claimed.content
    body = result_body(claimed.json()["claim"], batch_sizes=sizes)
    for size in sizes:
        body["latency"][str(size)] = {**body["latency"][str(size)], "p50_ms": p50 * size}
    body["stack"] = {"cpu": {"model": "Xeon Gold"}, "gpus": [{"name": "NVIDIA A100"}]}
    assert post_result(agent, evaluation_id, body).status_code == 201


@pytest.fixture
def finished(alice_evaluator_client, agent, hosts) -> dict[str, str]:  # type: ignore[no-untyped-def]
    ids = {
        "slow": launched_id(
            launch(alice_evaluator_client, batch_sizes=[1, 8], trace_level="framework")
        ),
        "fast": launched_id(launch(alice_evaluator_client, batch_sizes=[1, 8], seed=7, threads=2)),
        "only-32": launched_id(launch(alice_evaluator_client, batch_sizes=[32])),
        "queued": launched_id(launch(alice_evaluator_client)),
    }
    _finish(agent, ids["slow"], hosts["cpu-1"], 3.0, (1, 8))
    _finish(agent, ids["fast"], hosts["cpu-1"], 1.0, (1, 8))
    _finish(agent, ids["only-32"], hosts["cpu-1"], 2.0, (32,))
    return ids


def _list(client: Any, **params: Any) -> list[str]:
    response = client.get(EVALUATIONS_URL, params)
    assert response.status_code == 200, response.content
    return [e["id"] for e in response.json()["results"]]


def test_a_result_is_stored_as_a_row_per_batch_size_with_its_keys_as_columns(
    alice_evaluator_client, finished
) -> None:
    rows = BatchResult.objects.filter(evaluation_id=finished["slow"]).order_by("batch_size")
    assert [(r.batch_size, r.p50_ms, r.throughput_ips) for r in rows] == [
        (1, 3.0, 600.0),
        (8, 24.0, 4800.0),
    ]
    fast = Evaluation.objects.get(pk=finished["fast"])
    assert (fast.trace_level, fast.threads, fast.seed) == ("model", 2, 7)
    assert (fast.result.cpu_model, fast.result.gpu_model) == ("Xeon Gold", "NVIDIA A100")
    # The API shows them as before: by batch size.
    shown = alice_evaluator_client.get(f"{EVALUATIONS_URL}{finished['slow']}/").json()["result"]
    assert shown["latency"]["8"]["p50_ms"] == 24.0 and shown["throughput"]["1"] == 600.0
    assert shown["cpu_model"] == "Xeon Gold"


def test_the_history_filters_on_the_result_rows_and_the_request_keys(
    alice_evaluator_client, finished
) -> None:
    assert set(_list(alice_evaluator_client, batch_size=8)) == {finished["slow"], finished["fast"]}
    assert _list(alice_evaluator_client, batch_size=32) == [finished["only-32"]]
    assert _list(alice_evaluator_client, trace_level="framework") == [finished["slow"]]
    assert set(_list(alice_evaluator_client, gpu_model="a100")) == {
        finished["slow"],
        finished["fast"],
        finished["only-32"],
    }
    assert _list(alice_evaluator_client, cpu_model="epyc") == []
    assert len(_list(alice_evaluator_client, device="cpu", status="succeeded")) == 3
    assert _list(alice_evaluator_client, created_after="2030-01-01") == []
    assert (
        len(
            _list(
                alice_evaluator_client,
                created_after=(timezone.now() - timedelta(hours=1)).isoformat(),
            )
        )
        == 4
    )
    assert len(_list(alice_evaluator_client, created_before="2000-01-01T00:00:00Z")) == 0


def test_the_history_sorts_by_a_metric_at_one_batch_size(alice_evaluator_client, finished) -> None:
    assert _list(alice_evaluator_client, batch_size=1, ordering="p50_ms") == [
        finished["fast"],
        finished["slow"],
    ]
    assert _list(alice_evaluator_client, batch_size=8, ordering="-p50_ms") == [
        finished["slow"],
        finished["fast"],
    ]
    # Evaluations without a result come last.
    assert _list(alice_evaluator_client, ordering="-top1")[-1] == finished["queued"]


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"ordering": "p50_ms"}, "ordering"),  # which batch size?
        ({"ordering": "speed"}, "ordering"),
        ({"batch_size": "0"}, "batch_size"),
        ({"batch_size": "eight"}, "batch_size"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"trace_level": "everything"}, "trace_level"),
        ({"device": "tpu"}, "device"),
        ({"group": "not-a-uuid"}, "group"),
    ],
)
def test_a_bad_history_parameter_is_400_naming_it(
    alice_evaluator_client, finished, params, path
) -> None:
    response = alice_evaluator_client.get(EVALUATIONS_URL, params)

    assert response.status_code == 400, response.content
    assert error_paths(response) == [path]


def test_another_users_results_never_match_a_filter(bob_client, finished) -> None:
    assert _list(bob_client, batch_size=8) == []
    assert _list(bob_client, gpu_model="A100") == []


@pytest.mark.django_db(transaction=True)
def test_the_migration_turns_stored_results_into_rows() -> None:
    """Results stored before the rows existed get their rows, CPU and GPU, and their
    evaluations the request's keys as columns."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("evaluations", "0007_move_traces")]
    after = [("evaluations", "0008_results_as_rows")]
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
        request={"trace_level": "framework", "threads": 4, "seed": 9, "batch_sizes": [1, 4]},
    )
    latency = {name: 2.0 for name in BatchResult.LATENCY_FIELDS}
    old.get_model("evaluations", "Result").objects.create(
        evaluation=evaluation,
        top1=0.5,
        top5=1.0,
        count=2,
        predictions={},
        latency={"1": {**latency, "count": 10}, "4": {**latency, "p50_ms": 5.0, "count": 3}},
        throughput={"1": 500.0, "4": 800.0},
        content_hash="b" * 64,
        stack={"cpu": {"model": "Old CPU"}, "gpus": []},
        details={},
    )

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    migrated = new.get_model("evaluations", "Evaluation").objects.get(pk=evaluation.pk)
    assert (migrated.trace_level, migrated.threads, migrated.seed) == ("framework", 4, 9)
    result = new.get_model("evaluations", "Result").objects.get(evaluation_id=evaluation.pk)
    assert (result.cpu_model, result.gpu_model) == ("Old CPU", "")
    rows = new.get_model("evaluations", "BatchResult").objects.filter(result_id=result.pk)
    assert sorted((r.batch_size, r.p50_ms, r.count, r.throughput_ips) for r in rows) == [
        (1, 2.0, 10, 500.0),
        (4, 5.0, 3, 800.0),
    ]
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
