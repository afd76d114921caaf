"""Publishing, sharing with groups, and the privacy of evaluations through every path.

An evaluation is private to its owner until published (only when its model and dataset are
public) or shared with a group (only when its model and dataset are public or shared with that
group too). A walk over every GET endpoint of the API and every page checks that an evaluation of
a private model reaches nobody else: not anonymous callers, not another user, not another user's
agent token, not the members of a group it was not shared with.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from evaluations.models import Evaluation
from hub.models import Manifest
from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    result_body,
    url,
)
from tests.helpers import error_of

pytestmark = pytest.mark.django_db


def finish(client: APIClient, agent: APIClient, host: Any, **fields: Any) -> str:
    evaluation_id = launched_id(launch(client, batch_sizes=[1, 4], **fields))
    claimed = claim(agent, evaluation_id, host).json()
    body = result_body(claimed["claim"], batch_sizes=(1, 4))
    assert post_result(agent, evaluation_id, body).status_code == 201
    return evaluation_id


@pytest.fixture
def public_run(alice_evaluator_client, agent, hosts) -> str:  # type: ignore[no-untyped-def]
    """Alice's succeeded evaluation of the public model m on the public dataset d."""
    return finish(alice_evaluator_client, agent, hosts["cpu-1"])


@pytest.fixture
def private_run(bob_client, agent, hosts) -> str:  # type: ignore[no-untyped-def]
    """Bob's succeeded evaluation of his private model `secret` on the public dataset d."""
    return finish(bob_client, agent, hosts["cpu-1"], model="secret")


# --- Publishing ----------------------------------------------------------------------------


def test_the_owner_publishes_and_anyone_then_reads_it_and_sees_it_on_the_board(
    alice_evaluator_client, public_run
) -> None:
    anonymous = APIClient()
    assert anonymous.get(url(public_run)).status_code == 404
    published = alice_evaluator_client.post(url(public_run, "publish"))
    assert published.status_code == 200, published.content
    assert published.json()["published"] is True and published.json()["published_at"]
    evaluation = Evaluation.objects.get(pk=public_run)
    assert evaluation.published and evaluation.task == "image_classification"

    detail = anonymous.get(url(public_run))
    assert detail.status_code == 200 and detail.json()["id"] == public_run
    listed = anonymous.get("/api/v1/evaluations/", {"published": "true"}).json()
    assert [row["id"] for row in listed["results"]] == [public_run]

    boards = anonymous.get("/api/v1/leaderboards/").json()
    assert [(b["task"], b["dataset"], b["entries"]) for b in boards] == [
        ("image_classification", "d", 1)
    ]
    rows = anonymous.get(boards[0]["api_url"]).json()["results"]
    assert [row["evaluation"] for row in rows] == [public_run]
    row = rows[0]
    assert row["p50_ms"] == 1.4 and row["throughput"] == 2400.0
    assert row["throughput_batch_size"] == 4
    assert row["content_hash"] == "a" * 64 and row["agreeing_runs"] == 1

    csv = anonymous.get(boards[0]["api_url"], {"format": "csv"})
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    lines = b"".join(csv.streaming_content).decode().splitlines()
    assert lines[0].startswith("model,model_version,framework") and public_run in lines[1]

    assert alice_evaluator_client.delete(url(public_run, "publish")).json()["published"] is False
    assert anonymous.get(url(public_run)).status_code == 404
    assert anonymous.get("/api/v1/leaderboards/").json() == []


def test_two_published_runs_of_one_configuration_that_agree_say_so(
    alice_evaluator_client, bob_client, agent, hosts, public_run
) -> None:
    second = finish(bob_client, agent, hosts["cpu-1"])
    for client, evaluation_id in ((alice_evaluator_client, public_run), (bob_client, second)):
        assert client.post(url(evaluation_id, "publish")).status_code == 200
    rows = APIClient().get("/api/v1/leaderboards/image_classification/d/").json()["results"]
    assert [row["agreeing_runs"] for row in rows] == [2, 2]


def test_an_evaluation_of_a_private_model_can_never_be_published(bob_client, private_run) -> None:
    refused = bob_client.post(url(private_run, "publish"))
    assert refused.status_code == 400
    error = error_of(refused)
    assert "model 'secret' is private" in error["message"]
    assert refused.json()["code"] == "not_publishable"
    assert not Evaluation.objects.get(pk=private_run).published


def test_only_a_succeeded_evaluation_of_ones_own_can_be_published(
    alice_evaluator_client, bob_client, public_run
) -> None:
    queued = launched_id(launch(alice_evaluator_client))
    refused = alice_evaluator_client.post(url(queued, "publish"))
    assert refused.status_code == 400 and "this one is dispatched" in error_of(refused)["message"]
    # Bob may not publish (nor even see) Alice's evaluation.
    assert bob_client.post(url(public_run, "publish")).status_code == 404
    assert not Evaluation.objects.get(pk=public_run).published


def test_a_board_filters_sorts_and_refuses_what_it_cannot_use(
    alice_evaluator_client, public_run
) -> None:
    alice_evaluator_client.post(url(public_run, "publish"))
    board = "/api/v1/leaderboards/image_classification/d/"
    anonymous = APIClient()
    assert anonymous.get(board, {"framework": "pytorch"}).json()["count"] == 0
    assert anonymous.get(board, {"framework": "onnxruntime"}).json()["count"] == 1
    assert anonymous.get(board, {"hardware": "test CPU", "ordering": "p99_ms"}).json()["count"] == 1
    for params, path in (
        ({"framework": "caffe"}, "framework"),
        ({"ordering": "speed"}, "ordering"),
        ({"device": ""}, "device"),
        ({"colour": "red"}, "colour"),
        ({"format": ""}, "format"),
    ):
        refused = anonymous.get(board, params)
        assert refused.status_code == 400, params
        assert error_of(refused)["path"] == path
    assert anonymous.get("/api/v1/leaderboards/image_classification/nothing/").json()["count"] == 0


# --- Groups --------------------------------------------------------------------------------


def test_groups_share_manifests_and_evaluations_with_their_members_only(
    make_client, django_user_model, bob_client, private_run
) -> None:
    carol = django_user_model.objects.create_user("carol")
    dave = django_user_model.objects.create_user("dave")
    carol_client = make_client(carol)
    dave_client = make_client(dave)
    created = bob_client.post("/api/v1/groups/", {"name": "vision-lab"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["members"] == ["bob"] and created.json()["owner"] == "bob"
    taken = carol_client.post("/api/v1/groups/", {"name": "vision-lab"}, format="json")
    assert taken.status_code == 409
    invited = bob_client.post(
        "/api/v1/groups/vision-lab/invitations/", {"username": "carol"}, format="json"
    )
    assert invited.status_code == 201, invited.content
    assert bob_client.get("/api/v1/groups/vision-lab/").json()["invited"] == ["carol"]
    assert carol_client.post("/api/v1/invitations/vision-lab/accept/").json()["members"] == [
        "bob",
        "carol",
    ]
    assert (
        bob_client.post(
            "/api/v1/groups/vision-lab/invitations/", {"username": "nobody"}, format="json"
        ).status_code
        == 400
    )
    # Only the owner invites; a non-member does not see the group at all.
    assert (
        carol_client.post(
            "/api/v1/groups/vision-lab/invitations/", {"username": "dave"}, format="json"
        ).status_code
        == 403
    )
    assert dave_client.get("/api/v1/groups/vision-lab/").status_code == 404

    # The evaluation of a private model cannot be shared before the model is.
    refused = bob_client.post(url(private_run, "shares"), {"group": "vision-lab"}, format="json")
    assert refused.status_code == 400
    assert (
        "model 'secret' is private and not shared with 'vision-lab'" in error_of(refused)["message"]
    )
    assert carol_client.get(url(private_run)).status_code == 404

    secret = Manifest.objects.get(name="secret")
    shared = bob_client.post(
        f"/api/v1/manifests/{secret.pk}/shares/", {"group": "vision-lab"}, format="json"
    )
    assert shared.status_code == 200 and shared.json() == {"groups": ["vision-lab"]}
    assert bob_client.post(
        url(private_run, "shares"), {"group": "vision-lab"}, format="json"
    ).json() == {"groups": ["vision-lab"]}

    assert carol_client.get(f"/api/v1/manifests/{secret.pk}/").status_code == 200
    assert carol_client.get(url(private_run)).status_code == 200
    assert carol_client.post(url(private_run, "publish")).status_code == 403
    assert dave_client.get(url(private_run)).status_code == 404
    # Shared is not published: the leaderboards do not show it.
    assert APIClient().get("/api/v1/leaderboards/").json() == []

    assert bob_client.delete("/api/v1/groups/vision-lab/members/carol/").status_code == 204
    assert carol_client.get(url(private_run)).status_code == 404
    assert carol_client.get(f"/api/v1/manifests/{secret.pk}/").status_code == 404


# --- The privacy walk ----------------------------------------------------------------------


def _patterns(resolver: URLResolver, prefix: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route.startswith("admin/"):
                continue
            found += _patterns(entry, route)
        else:
            found.append((route, entry))
    return found


def _fill(route: str, values: dict[str, str]) -> str | None:
    """`route` with its parameters replaced by `values`; None when one has no value."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(2)
        if name not in values:
            missing = True
            return ""
        return values[name]

    path = re.sub(r"<(?:(\w+):)?(\w+)>", value, route)
    if missing or path.startswith("^"):
        return None
    return "/" + path


def test_a_private_evaluation_reaches_nobody_else_through_any_get(
    make_client, django_user_model, bob_client, alice_evaluator_client, private_run, public_run
) -> None:
    """Every GET route of the API and the pages, with the private evaluation's ids filled in,
    asked by an anonymous caller, another user (token and session), another user's agent token
    and a member of a group the evaluation is not shared with: none answers with its id, its
    trace id, or a 5xx."""
    evaluation = Evaluation.objects.get(pk=private_run)
    alice_evaluator_client.post(url(public_run, "publish"))
    carol = django_user_model.objects.create_user("carol")
    outsider = django_user_model.objects.create_user("outsider", is_staff=False)
    bob_client.post("/api/v1/groups/", {"name": "bobs"}, format="json")
    bob_client.post("/api/v1/groups/bobs/invitations/", {"username": "carol"}, format="json")
    assert make_client(carol).post("/api/v1/invitations/bobs/accept/").status_code == 200
    session = APIClient()
    session.force_login(outsider)
    callers = {
        "anonymous": APIClient(),
        "another user's token": make_client(outsider, scopes=["read", "write", "evaluate"]),
        "another user's session": session,
        "another user's agent token": make_client(outsider, scopes=["agent"]),
        "a member of another of bob's groups": make_client(carol),
    }
    secret = Manifest.objects.get(name="secret")
    values = {
        "pk": private_run,
        "trace_id": evaluation.trace_id,
        "name": "secret",
        "task": "image_classification",
        "dataset": "d",
        "group": "bobs",
        "username": "bob",
        "path": f"models/secret/{secret.version}/model.onnx",
    }
    secrets = (private_run, evaluation.trace_id)
    walked = 0
    for route, _pattern in _patterns(get_resolver()):
        if "<int:pk>" in route:
            filled = _fill(route, {**values, "pk": str(secret.pk)})
        else:
            filled = _fill(route, values)
        if filled is None or filled.startswith(("/accounts/", "/static/")):
            continue
        for suffix in ("", "?format=csv", "?format=chrome", "?predictions=1"):
            for who, client in callers.items():
                response = client.get(filled + suffix)
                walked += 1
                assert response.status_code < 500, (who, filled + suffix, response.status_code)
                body = (
                    b"".join(response.streaming_content) if response.streaming else response.content
                ).decode(errors="replace")
                # A page may repeat the path it was asked for (a sign-in link's `next`).
                for asked in (filled + suffix, quote(filled + suffix, safe="/"), filled):
                    body = body.replace(asked, "")
                for secret_value in secrets:
                    assert secret_value not in body, (who, filled + suffix, secret_value)
    # Compare, which takes its ids from the query: never the private one.
    for who, client in callers.items():
        for path in (
            f"/api/v1/compare/?evaluations={private_run},{public_run}",
            f"/compare/?evaluations={public_run},{private_run}",
            f"/api/v1/evaluations/{private_run}/inputs/0/",
        ):
            response = client.get(path)
            assert response.status_code in (403, 404), (who, path, response.status_code)
            body = response.content.decode().replace(quote(path, safe="/"), "").replace(path, "")
            assert evaluation.trace_id not in body
    assert walked > 200
    # The owner does see it, so the walk above was looking at the right ids.
    assert private_run in bob_client.get("/api/v1/evaluations/").content.decode()
