"""Builders of the evaluations tests: the catalog, hosts, launches, an agent's calls, and a
reader of the hub's broker."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from evaluations import broker_access
from hub.models import Host
from predictors.protocol import queue_scope
from tests.hub.factories import dataset_yaml, model_yaml, register_host, upload

EVALUATIONS_URL = "/api/v1/evaluations/"
GIB = 2**30


def catalog_manifests(owner: APIClient) -> dict[str, Any]:
    for version in ("1.0.0", "1.1.0"):
        assert upload(owner, model_yaml("m", version, visibility="public")).status_code == 201
    assert upload(owner, model_yaml("secret", "1.0.0")).status_code == 201
    assert upload(owner, dataset_yaml("d", visibility="public")).status_code == 201
    assert upload(owner, dataset_yaml("hidden")).status_code == 201
    return {"model": "m", "dataset": "d"}


def register_hosts(agent: APIClient) -> dict[str, Host]:
    cpu = {"architecture": "amd64", "memory_bytes": 16 * GIB, "gpus": []}
    gpu = {
        "architecture": "arm64",
        "memory_bytes": 64 * GIB,
        "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "memory_bytes": 40 * GIB}],
    }
    for name, frameworks, hardware, queues in (
        ("cpu-1", [("onnxruntime", "1.17.0")], cpu, ["onnxruntime.cpu"]),
        ("cpu-2", [("onnxruntime", "1.17.0")], cpu, ["onnxruntime.cpu"]),
        (
            "gpu-1",
            [("onnxruntime", "1.18.0", ["cpu", "gpu"])],
            gpu,
            ["onnxruntime.cpu", "onnxruntime.gpu"],
        ),
    ):
        response = register_host(
            agent, name, frameworks, hardware=hardware, queues=[f"host.{name}", *queues], pool=True
        )
        assert response.status_code == 201, response.content
    return {host.name: host for host in Host.objects.all()}


def launch(client: APIClient, **fields: Any) -> Any:
    body = {"model": "m", "framework": "onnxruntime", "dataset": "d", **fields}
    return client.post(EVALUATIONS_URL, body, format="json")


def launched_id(response: Any) -> str:
    assert response.status_code == 201, response.content
    return str(response.json()["evaluations"][0]["id"])


def url(evaluation_id: Any, action: str = "") -> str:
    return f"{EVALUATIONS_URL}{evaluation_id}/" + (f"{action}/" if action else "")


def claim(agent: APIClient, evaluation_id: Any, host: Host, dispatch: int = 1) -> Any:
    return agent.post(
        url(evaluation_id, "claim"), {"host": host.pk, "dispatch": dispatch}, format="json"
    )


def progress(agent: APIClient, evaluation_id: Any, claim_id: str, done: int, total: int) -> Any:
    body = {"claim": claim_id, "done": done, "total": total}
    return agent.post(url(evaluation_id, "progress"), body, format="json")


def result_body(claim_id: str, batch_sizes: tuple[int, ...] = (1,), count: int = 2) -> dict:
    latency = {
        "mean_ms": 1.5,
        "p50_ms": 1.4,
        "p90_ms": 2.0,
        "p99_ms": 2.5,
        "min_ms": 1.0,
        "max_ms": 2.6,
        "std_ms": 0.3,
        "count": count,
    }
    return {
        "claim": claim_id,
        "accuracy": {"top1": 0.5, "top5": 1.0, "count": count},
        "latency": {str(size): latency for size in batch_sizes},
        "throughput": {str(size): 600.0 * size for size in batch_sizes},
        "predictions": {
            "top_k": 2,
            "labels": [0, 1][:count],
            "classes": [[0, 1], [0, 1]][:count],
            "probabilities": [[0.9, 0.1], [0.6, 0.4]][:count],
        },
        "content_hash": "a" * 64,
        "stack": {"cpu": {"model": "test CPU"}},
        "details": {"device": "cpu"},
    }


def post_result(agent: APIClient, evaluation_id: Any, body: dict) -> Any:
    return agent.post(url(evaluation_id, "result"), body, format="json")


def error_paths(response: Any) -> list[str]:
    return [error["path"] for error in response.json()["errors"]]


class Broker:
    """Reads (and so removes) the messages the hub sent to a queue."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def take(self, queue: str) -> list[tuple[str, list[Any]]]:
        """(task name, args) of every message waiting on `queue`, oldest first."""
        taken = []
        scope = queue_scope(queue)
        options = dict(self.app.conf.broker_transport_options or {})
        options.update(broker_access.scope_options(self.app.conf.broker_url, scope))
        with self.app.connection_for_read(transport_options=options) as connection:
            simple = connection.SimpleQueue(queue)
            try:
                while True:
                    try:
                        message = simple.get(block=False)
                    except simple.Empty:
                        break
                    taken.append((message.headers["task"], list(message.payload[0])))
                    message.ack()
            finally:
                simple.close()
        return taken

    def drain(self, *queues: str) -> None:
        for queue in queues:
            self.take(queue)
