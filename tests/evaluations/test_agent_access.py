"""What an agent token may do: fetch the files of the jobs its hosts run (private ones included,
while they run), and read its broker configuration; nothing else."""

from __future__ import annotations

import pytest

from evaluations import broker_access
from tests.evaluations.factories import claim, launch, launched_id, post_result, result_body
from tests.hub.factories import model_yaml, onnx_graph, upload

WEIGHTS = onnx_graph("private weights")

pytestmark = pytest.mark.django_db

FILE_URL = "/api/v1/artifacts/models/private-net/1.0.0/net.onnx"


def test_an_agent_fetches_a_private_models_file_only_while_its_host_runs_the_job(
    bob_client, agent, make_client, django_user_model, hosts
) -> None:
    text = model_yaml("private-net", graph_file="net.onnx")
    assert upload(bob_client, text, {"net.onnx": WEIGHTS}).status_code == 201
    evaluation_id = launched_id(launch(bob_client, model="private-net"))
    other_agent = make_client(django_user_model.objects.create_user("other"), scopes=["agent"])

    assert agent.get(FILE_URL).status_code == 404  # dispatched, not claimed yet
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()

    response = agent.get(FILE_URL)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == WEIGHTS
    assert other_agent.get(FILE_URL).status_code == 404

    post_result(agent, evaluation_id, result_body(job["claim"]))
    assert agent.get(FILE_URL).status_code == 404  # finished


@pytest.mark.both_stacks  # the filesystem broker's configuration, then Redis's
def test_the_agent_config_names_the_broker_and_queues_of_its_host(
    agent, alice_evaluator_client, hosts, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HOST_LIVE_SECONDS = 30
    host = hosts["cpu-1"]

    response = agent.get(f"/api/v1/agent/config/?host={host.pk}")

    assert response.status_code == 200, response.content
    body = response.json()
    if settings.AGENT_BROKER_URL.startswith("redis"):
        # Credentials of the host's scope, and the key prefix of its jobs.
        namespace = broker_access.namespace()
        assert body["broker_url"].startswith(f"redis://mlms-{namespace}-pool:")
        assert body["broker_transport_options"]["global_keyprefix"] == f"{namespace}:pool:"
    else:
        assert body["broker_url"] == settings.AGENT_BROKER_URL
    assert body["queues"] == ["pool.host.cpu-1", "pool.onnxruntime.cpu"]
    assert body["scope"] == "pool"
    assert body["task_name"] == "mlmodelscope.evaluate"
    assert body["heartbeat_seconds"] == 6 and body["report_seconds"] == 2
    assert body["result_max_bytes"] == settings.RESULT_MAX_BYTES
    assert alice_evaluator_client.get(f"/api/v1/agent/config/?host={host.pk}").status_code == 403


def test_the_agent_config_needs_a_host_of_the_token(agent, make_client, bob, hosts) -> None:  # type: ignore[no-untyped-def]
    missing = agent.get("/api/v1/agent/config/")
    assert missing.status_code == 400
    assert missing.json()["errors"][0]["path"] == "host"
    bobs_agent = make_client(bob, scopes=["agent"])
    assert bobs_agent.get(f"/api/v1/agent/config/?host={hosts['cpu-1'].pk}").status_code == 403
