"""Trust: a job runs only on hosts its launcher trusts (their own, their groups', the operators'
shared pool), and no other host, agent token or broker user learns of it or acts on it.

Bob is an ordinary user who runs a self-hosted agent with the best token he can mint from his
browser session (every scope, `agent` included). Alice launches evaluations of her private
model. The operators' pool (`hosts` fixture) runs them.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from evaluations.models import Evaluation, Result, StatusChange
from hub.models import Host, Manifest
from tests.evaluations.factories import (
    claim,
    error_paths,
    launch,
    launched_id,
    post_result,
    progress,
    result_body,
    url,
)
from tests.hub.factories import model_yaml, onnx_graph, register_host, upload
from tests.traces.factories import PROTOBUF, export

pytestmark = [pytest.mark.django_db, pytest.mark.both_stacks]

ONNX = [("onnxruntime", "1.17.0", ["cpu"])]
PRIVATE_FILE = "/api/v1/artifacts/models/alice-net/1.0.0/net.onnx"


@pytest.fixture
def bobs_agent(bob) -> APIClient:  # type: ignore[no-untyped-def]
    """The best token Bob's browser session can mint: every scope, agent included."""
    session = APIClient()
    session.force_login(bob)
    response = session.post(
        "/api/v1/tokens/",
        {"name": "my box", "scopes": ["read", "write", "evaluate", "agent"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {response.json()['token']}")
    return client


@pytest.fixture
def bobs_box(bobs_agent, hosts) -> Host:  # type: ignore[no-untyped-def]
    """Bob's self-hosted host, with the same capabilities as the pool's CPU hosts."""
    response = register_host(bobs_agent, "bob-box", ONNX, queues=["onnxruntime.cpu"])
    assert response.status_code == 201, response.content
    return Host.objects.get(name="bob-box")


@pytest.fixture
def alice_private(make_client, alice) -> APIClient:  # type: ignore[no-untyped-def]
    client = make_client(alice, scopes=["read", "write", "evaluate"])
    text = model_yaml("alice-net", graph_file="net.onnx")
    assert upload(client, text, {"net.onnx": onnx_graph("alice's weights")}).status_code == 201
    return client  # type: ignore[no-any-return]


def _snapshot(evaluation_id: str) -> tuple[Any, ...]:
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    return (
        evaluation.status,
        evaluation.dispatches,
        evaluation.attempts,
        evaluation.host_id,
        evaluation.claim,
        StatusChange.objects.filter(evaluation=evaluation).count(),
    )


def test_none_of_20_private_launches_reaches_a_self_hosted_agent_of_another_user(
    alice_private, bobs_box, broker, django_capture_on_commit_callbacks
) -> None:
    scope = bobs_box.scope
    assert scope == f"user-{bobs_box.owner_id}"
    broker.drain(*bobs_box.queues, "pool.onnxruntime.cpu")

    with django_capture_on_commit_callbacks(execute=True):
        ids = [launched_id(launch(alice_private, model="alice-net")) for _ in range(20)]

    evaluations = Evaluation.objects.filter(pk__in=ids)
    assert {e.queue.split(".", 1)[0] for e in evaluations} == {"pool"}
    assert all(e.target_host_id != bobs_box.pk for e in evaluations)
    for queue in bobs_box.queues:
        assert broker.take(queue) == []
    sent = [args[0] for _, args in broker.take("pool.onnxruntime.cpu")]
    assert sorted(sent) == sorted(ids)


def test_a_forged_claim_from_an_untrusted_host_is_refused_and_changes_nothing(
    alice_private, bobs_agent, bobs_box
) -> None:
    evaluation_id = launched_id(launch(alice_private, model="alice-net"))
    before = _snapshot(evaluation_id)

    response = claim(bobs_agent, evaluation_id, bobs_box)

    assert response.status_code == 403
    assert "alice-net" not in response.content.decode()
    assert "source" not in response.json()
    assert _snapshot(evaluation_id) == before
    assert bobs_agent.get(PRIVATE_FILE).status_code == 404


def test_forged_progress_result_status_and_spans_for_another_users_job_are_refused(
    alice_private, agent, bobs_agent, bobs_box, hosts
) -> None:
    evaluation_id = launched_id(launch(alice_private, model="alice-net"))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()  # the pool's host runs it
    before = _snapshot(evaluation_id)
    trace_id = Evaluation.objects.get(pk=evaluation_id).trace_id

    # Bob does not know the claim id; even with it, his token holds no claim on the job.
    for claim_id in ("f" * 32, job["claim"]):
        assert progress(bobs_agent, evaluation_id, claim_id, 1, 2).status_code == 403
        assert post_result(bobs_agent, evaluation_id, result_body(claim_id)).status_code == 403
        body = {"claim": claim_id, "status": "failed", "reason": "forged"}
        assert bobs_agent.post(url(evaluation_id, "status"), body, format="json").status_code == 403
    spans = bobs_agent.post(
        "/v1/traces", export(trace_id, ("forged", 0, 10, {})), content_type=PROTOBUF
    )
    assert spans.status_code == 403
    assert bobs_agent.get(PRIVATE_FILE).status_code == 404
    assert bobs_agent.get(url(evaluation_id)).status_code == 404
    assert bobs_agent.get(f"/api/v1/traces/{trace_id}/").status_code == 404

    assert _snapshot(evaluation_id) == before
    assert not Result.objects.exists()
    # The host that holds the claim still finishes it.
    assert post_result(agent, evaluation_id, result_body(job["claim"])).status_code == 201


def test_a_users_jobs_prefer_their_own_host_and_may_name_a_trusted_one(
    bobs_agent, bobs_box, hosts
) -> None:
    on_own = launched_id(launch(bobs_agent))
    assert Evaluation.objects.get(pk=on_own).queue == f"{bobs_box.scope}.onnxruntime.cpu"

    named = launched_id(launch(bobs_agent, host="cpu-2"))
    evaluation = Evaluation.objects.get(pk=named)
    assert evaluation.queue == "pool.host.cpu-2" and evaluation.target_host == hosts["cpu-2"]


def test_naming_a_host_the_launcher_may_not_use_is_refused(alice_private, bobs_box) -> None:
    count = Evaluation.objects.count()

    response = launch(alice_private, model="alice-net", host="bob-box")

    assert response.status_code == 400
    assert error_paths(response) == ["host"]
    assert "bob-box" in response.json()["errors"][0]["message"]
    assert Evaluation.objects.count() == count


def test_with_only_untrusted_hosts_live_the_launch_says_so(
    make_client, alice, bobs_agent, catalog
) -> None:
    assert register_host(bobs_agent, "bob-box", ONNX).status_code == 201
    alice_evaluator_client = make_client(alice, scopes=["read", "evaluate"])

    response = launch(alice_evaluator_client)

    assert response.status_code == 400
    assert error_paths(response) == ["hosts"]
    assert "you may use" in response.json()["errors"][0]["message"]
    assert not Evaluation.objects.exists()


# --- Groups: membership by consent, hosts trusted by choice -----------------------------------


def _answer(alice_evaluator_client: APIClient, answer: str) -> None:
    """Alice's answer to Bob's invitation to group `lab`."""
    if answer == "declined":
        assert alice_evaluator_client.delete("/api/v1/invitations/lab/").status_code == 204
    elif answer.startswith("accepted"):
        joined = alice_evaluator_client.post("/api/v1/invitations/lab/accept/")
        assert joined.status_code == 200, joined.content
        assert joined.json()["trust_hosts"] is False  # off until she turns it on
        if answer == "accepted, hosts trusted":
            trusted = alice_evaluator_client.patch(
                "/api/v1/groups/lab/membership/", {"trust_hosts": True}, format="json"
            )
            assert trusted.status_code == 200 and trusted.json() == {"trust_hosts": True}


@pytest.fixture
def labs_agent(make_client, bob) -> APIClient:  # type: ignore[no-untyped-def]
    """The agent token (scope agent alone) of Bob's host lent to group `lab`."""
    return make_client(bob, scopes=["agent"])  # type: ignore[no-any-return]


@pytest.fixture
def lab_box(bobs_agent, labs_agent, hosts) -> Host:  # type: ignore[no-untyped-def]
    """Bob's group `lab` (Bob alone), and Bob's host lent to it with the pool's capabilities
    (registered with `labs_agent`); Bob invites Alice."""
    assert bobs_agent.post("/api/v1/groups/", {"name": "lab"}, format="json").status_code == 201
    response = register_host(labs_agent, "lab-box", ONNX, queues=["onnxruntime.cpu"], group="lab")
    assert response.status_code == 201, response.content
    invited = bobs_agent.post(
        "/api/v1/groups/lab/invitations/", {"username": "alice"}, format="json"
    )
    assert invited.status_code == 201, invited.content
    assert invited.json()["invited_by"] == "bob"
    return Host.objects.get(name="lab-box")


@pytest.mark.parametrize(
    "answer", ["not answered (a forced group)", "declined", "accepted, hosts not trusted"]
)
def test_a_group_host_of_another_user_gets_none_of_20_private_jobs_files_or_traces(
    alice_private,
    bobs_agent,
    labs_agent,
    lab_box,
    broker,
    django_capture_on_commit_callbacks,
    answer,
) -> None:
    """Bob creates a group, invites Alice and lends it his host. Whatever Alice answers short
    of trusting the group's hosts, none of her 20 private jobs reaches his host: not in its
    queues, not by a claim, not its files or trace, and a result he forges is refused."""
    _answer(alice_private, answer)
    members = bobs_agent.get("/api/v1/groups/lab/").json()["members"]
    assert ("alice" in members) == answer.startswith("accepted")
    broker.drain(*lab_box.queues, "pool.onnxruntime.cpu")

    with django_capture_on_commit_callbacks(execute=True):
        ids = [launched_id(launch(alice_private, model="alice-net")) for _ in range(20)]

    evaluations = list(Evaluation.objects.filter(pk__in=ids))
    assert {e.queue for e in evaluations} == {"pool.onnxruntime.cpu"}
    assert all(e.target_host_id is None for e in evaluations)
    for queue in lab_box.queues:
        assert broker.take(queue) == []
    assert sorted(args[0] for _, args in broker.take("pool.onnxruntime.cpu")) == sorted(ids)
    for evaluation in evaluations:
        before = _snapshot(str(evaluation.pk))
        refused = claim(labs_agent, evaluation.pk, lab_box)
        assert refused.status_code == 403, refused.content
        assert "alice-net" not in refused.content.decode()
        assert post_result(labs_agent, evaluation.pk, result_body("f" * 32)).status_code == 403
        spans = labs_agent.post(
            "/v1/traces", export(evaluation.trace_id, ("forged", 0, 10, {})), content_type=PROTOBUF
        )
        assert spans.status_code == 403
        # Bob reads none of it either, with his token of every scope.
        assert bobs_agent.get(f"/api/v1/traces/{evaluation.trace_id}/").status_code == 404
        assert bobs_agent.get(url(evaluation.pk)).status_code == 404
        assert _snapshot(str(evaluation.pk)) == before
    assert labs_agent.get(PRIVATE_FILE).status_code == 404
    assert bobs_agent.get(PRIVATE_FILE).status_code == 404
    assert not Result.objects.exists()
    # Naming his host does not help where he may not read her model.
    named = launch(alice_private, model="alice-net", host="lab-box")
    assert named.status_code == 400
    assert error_paths(named) == ["host"]


def test_a_group_host_runs_a_members_job_when_named_and_its_owner_may_read_the_model(
    alice_private, labs_agent, lab_box, broker
) -> None:
    _answer(alice_private, "accepted, hosts not trusted")
    refused = launch(alice_private, model="alice-net", host="lab-box")
    assert refused.status_code == 400
    assert error_paths(refused) == ["host"]
    assert "its owner may not read its model or dataset" in refused.json()["errors"][0]["message"]

    alice_net = Manifest.objects.get(name="alice-net")
    shared = alice_private.post(
        f"/api/v1/manifests/{alice_net.pk}/shares/", {"group": "lab"}, format="json"
    )
    assert shared.status_code == 200, shared.content
    # Not named: the pool runs it (she does not trust the group's hosts).
    assert Evaluation.objects.get(
        pk=launched_id(launch(alice_private, model="alice-net"))
    ).queue == ("pool.onnxruntime.cpu")
    named = Evaluation.objects.get(
        pk=launched_id(launch(alice_private, model="alice-net", host="lab-box"))
    )
    assert named.queue == f"{lab_box.scope}.host.lab-box" and named.target_host == lab_box

    job = claim(labs_agent, named.pk, lab_box)
    assert job.status_code == 200, job.content
    assert labs_agent.get(PRIVATE_FILE).status_code == 200  # while his host holds the claim
    answer = post_result(labs_agent, named.pk, result_body(job.json()["claim"]))
    assert answer.status_code == 201, answer.content
    assert labs_agent.get(PRIVATE_FILE).status_code == 404  # and not after


def test_a_trusted_groups_hosts_run_a_members_jobs_after_the_pool(
    alice_private, labs_agent, lab_box, hosts
) -> None:
    _answer(alice_private, "accepted, hosts trusted")
    # With the pool live, the pool first: a group's host is never preferred to it.
    assert Evaluation.objects.get(pk=launched_id(launch(alice_private))).queue == (
        "pool.onnxruntime.cpu"
    )
    Host.objects.filter(pool=True).update(last_heartbeat=None)

    evaluation = Evaluation.objects.get(pk=launched_id(launch(alice_private)))

    assert evaluation.queue == f"{lab_box.scope}.onnxruntime.cpu"
    assert claim(labs_agent, evaluation.pk, lab_box).status_code == 200
    # Her private model is not his to read: even trusted, his host does not run it.
    refused = launch(alice_private, model="alice-net")
    assert refused.status_code == 400 and error_paths(refused) == ["hosts"]


@pytest.mark.parametrize(
    "how",
    ["she leaves", "he removes her", "she stops trusting its hosts", "she unshares her model"],
)
def test_access_withdrawn_during_a_job_takes_it_off_the_groups_host(
    alice_private, bobs_agent, labs_agent, lab_box, hosts, how
) -> None:
    _answer(alice_private, "accepted, hosts trusted")
    Host.objects.filter(pool=True).update(last_heartbeat=None)
    alice_net = Manifest.objects.get(name="alice-net")
    shares = f"/api/v1/manifests/{alice_net.pk}/shares/"
    alice_private.post(shares, {"group": "lab"}, format="json")
    evaluation_id = launched_id(launch(alice_private, model="alice-net"))
    job = claim(labs_agent, evaluation_id, lab_box).json()
    assert progress(labs_agent, evaluation_id, job["claim"], 1, 10).status_code == 200
    assert labs_agent.get(PRIVATE_FILE).status_code == 200

    if how == "she leaves":
        assert alice_private.delete("/api/v1/groups/lab/members/alice/").status_code == 204
    elif how == "he removes her":
        assert bobs_agent.delete("/api/v1/groups/lab/members/alice/").status_code == 204
    elif how == "she stops trusting its hosts":
        changed = alice_private.patch(
            "/api/v1/groups/lab/membership/", {"trust_hosts": False}, format="json"
        )
        assert changed.status_code == 200
    else:
        assert alice_private.delete(f"{shares}lab/").status_code == 204

    # Withdrawn: its spans are refused at once, its files, and its next report, which takes the
    # job back.
    trace_id = Evaluation.objects.get(pk=evaluation_id).trace_id
    at_once = labs_agent.post(
        "/v1/traces",
        export(trace_id, ("right after", 0, 10, {})),
        content_type=PROTOBUF,
        HTTP_X_MLMS_CLAIM=job["claim"],
    )
    assert at_once.status_code == 409, at_once.content
    assert "lab-box" in at_once.json()["detail"]
    assert labs_agent.get(PRIVATE_FILE).status_code == 404
    refused = progress(labs_agent, evaluation_id, job["claim"], 2, 10)
    assert refused.status_code == 409, refused.content
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == "dispatched" and evaluation.host is None
    assert "lab-box" in evaluation.history.last().reason
    assert labs_agent.get(PRIVATE_FILE).status_code == 404
    spans = labs_agent.post(
        "/v1/traces",
        export(evaluation.trace_id, ("late", 0, 10, {})),
        content_type=PROTOBUF,
        HTTP_X_MLMS_CLAIM=job["claim"],
    )
    assert spans.status_code == 403  # the job is no longer on his host
    assert post_result(labs_agent, evaluation_id, result_body(job["claim"])).status_code == 409


def test_only_members_register_a_host_to_a_group_and_invitations_answer_once(
    alice_private, bobs_agent, lab_box, make_client, alice
) -> None:
    alices_agent = make_client(alice, scopes=["agent"])
    refused = register_host(alices_agent, "alice-box", ONNX, group="lab")
    assert refused.status_code == 403  # invited is not a member
    assert alice_private.get("/api/v1/groups/lab/").status_code == 404
    invitation = alice_private.get("/api/v1/invitations/").json()["results"]
    assert [(i["group"], i["invited_by"]) for i in invitation] == [("lab", "bob")]
    assert "members" not in invitation[0]  # an invitee does not see who belongs

    assert alice_private.post("/api/v1/invitations/lab/accept/").status_code == 200
    assert alice_private.post("/api/v1/invitations/lab/accept/").status_code == 404
    assert alice_private.get("/api/v1/invitations/").json()["results"] == []
    assert register_host(alices_agent, "alice-box", ONNX, group="lab").status_code == 201
    again = bobs_agent.post("/api/v1/groups/lab/invitations/", {"username": "alice"}, format="json")
    assert again.status_code == 409


def test_another_users_self_hosted_host_is_not_listed(alice_private, bobs_box, hosts) -> None:
    names = [h["name"] for h in alice_private.get("/api/v1/hosts/").json()["results"]]

    assert "bob-box" not in names and {"cpu-1", "cpu-2", "gpu-1"} <= set(names)
    assert alice_private.get(f"/api/v1/hosts/{bobs_box.pk}/").status_code == 404


@pytest.mark.redis
def test_a_scopes_broker_credentials_reach_only_its_own_keys(
    bobs_agent, bobs_box, alice_private, broker, django_capture_on_commit_callbacks
) -> None:
    import redis

    from evaluations import broker_access

    with django_capture_on_commit_callbacks(execute=True):
        launched_id(launch(alice_private, model="alice-net"))
    config = bobs_agent.get(f"/api/v1/agent/config/?host={bobs_box.pk}").json()
    prefix = config["broker_transport_options"]["global_keyprefix"]
    assert prefix == f"{broker_access.namespace()}:{bobs_box.scope}:"
    client = redis.Redis.from_url(config["broker_url"])
    try:
        client.lpush(f"{prefix}{bobs_box.scope}.onnxruntime.cpu", b"mine")
        assert client.rpop(f"{prefix}{bobs_box.scope}.onnxruntime.cpu") == b"mine"
        pool = broker_access.key_prefix("pool")
        for key in (f"{pool}pool.onnxruntime.cpu", f"{pool}unacked", "_kombu.binding.x", "x"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.lrange(key, 0, -1)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.keys("*")
    finally:
        client.close()
    broker.drain("pool.onnxruntime.cpu")
