"""`GET /api/v1/evaluations/` and `GET /api/v1/evaluations/<id>/`: you see your own evaluations,
staff see everyone's; filters by model, framework, dataset, host, status, user and group."""

from __future__ import annotations

import pytest

from tests.evaluations.factories import (
    EVALUATIONS_URL,
    claim,
    error_paths,
    launch,
    launched_id,
    url,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def launched(alice_evaluator_client, bob_client, agent, hosts) -> dict[str, str]:  # type: ignore[no-untyped-def]
    ids = {
        "alice-running": launched_id(launch(alice_evaluator_client)),
        "alice-gpu": launched_id(launch(alice_evaluator_client, device="gpu")),
        "bob": launched_id(launch(bob_client, model="secret", dataset="hidden")),
    }
    claim(agent, ids["alice-running"], hosts["cpu-1"])
    return ids


def _ids(response) -> set[str]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return {e["id"] for e in response.json()["results"]}


def test_a_user_lists_only_their_own_evaluations(alice_evaluator_client, launched) -> None:
    assert _ids(alice_evaluator_client.get(EVALUATIONS_URL)) == {
        launched["alice-running"],
        launched["alice-gpu"],
    }


def test_staff_list_everyones_and_filter_by_user(make_client, staff, launched) -> None:
    client = make_client(staff, scopes=["read"])

    assert _ids(client.get(EVALUATIONS_URL)) == set(launched.values())
    assert _ids(client.get(EVALUATIONS_URL, {"user": "bob"})) == {launched["bob"]}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "running"}, {"alice-running"}),
        ({"status": "dispatched"}, {"alice-gpu"}),
        ({"host": "cpu-1"}, {"alice-running"}),
        ({"model": "m"}, {"alice-running", "alice-gpu"}),
        ({"model": "other"}, set()),
        ({"framework": "onnxruntime", "dataset": "d"}, {"alice-running", "alice-gpu"}),
        ({"user": "bob"}, set()),  # not staff: only their own
    ],
)
def test_the_list_filters(alice_evaluator_client, launched, params, expected) -> None:
    assert _ids(alice_evaluator_client.get(EVALUATIONS_URL, params)) == {
        launched[key] for key in expected
    }


def test_an_unknown_status_filter_is_400(alice_evaluator_client, launched) -> None:
    response = alice_evaluator_client.get(EVALUATIONS_URL, {"status": "done"})

    assert response.status_code == 400
    assert error_paths(response) == ["status"]


def test_the_group_filter_lists_one_launch(alice_evaluator_client, hosts) -> None:
    group = launch(alice_evaluator_client, hosts="all").json()["group"]
    launch(alice_evaluator_client)

    assert len(_ids(alice_evaluator_client.get(EVALUATIONS_URL, {"group": group}))) == 3
    assert error_paths(alice_evaluator_client.get(EVALUATIONS_URL, {"group": "nope"})) == ["group"]


def test_the_detail_shows_request_history_and_progress(alice_evaluator_client, launched) -> None:
    body = alice_evaluator_client.get(url(launched["alice-running"])).json()

    assert body["status"] == "running" and body["host"] == "cpu-1"
    assert body["request"]["batch_sizes"] == [1] and body["request"]["hosts"] == "one"
    assert [h["status"] for h in body["history"]] == ["queued", "dispatched", "running"]
    assert body["progress"] == {"done": 0, "total": 0}
    assert body["result"] is None and body["attempts"] == 1


def test_another_users_evaluation_is_404(alice_evaluator_client, launched) -> None:
    assert alice_evaluator_client.get(url(launched["bob"])).status_code == 404


def test_anonymous_callers_see_no_unpublished_evaluation(client, launched) -> None:  # type: ignore[no-untyped-def]
    listed = client.get(EVALUATIONS_URL)
    assert listed.status_code == 200 and listed.json()["count"] == 0
    assert client.get(url(launched["bob"])).status_code == 404
    # Launching still needs a token.
    assert client.post(EVALUATIONS_URL, {}, content_type="application/json").status_code == 401


def test_an_agent_token_cannot_read_evaluations(agent, launched) -> None:
    assert agent.get(EVALUATIONS_URL).status_code == 403


@pytest.mark.parametrize(
    "url, name",
    [
        ("/api/v1/evaluations/?started_after=2030-01-01", "started_after"),
        ("/api/v1/evaluations/?status=running&sort=-p50", "sort"),
        ("/api/v1/manifests/?framwork=pytorch", "framwork"),
        ("/api/v1/hosts/?live=true&arch=arm64", "arch"),
        ("/api/v1/tokens/?scope=read", "scope"),
    ],
)
def test_a_list_request_with_an_unknown_filter_is_refused_naming_it(
    alice_evaluator_client, launched, url, name
) -> None:
    response = alice_evaluator_client.get(url)

    assert response.status_code == 400, response.content
    assert error_paths(response) == [name]
    assert "unknown query parameter" in response.json()["detail"]


def test_the_query_parameters_each_endpoint_takes_are_those_its_schema_declares(client) -> None:  # type: ignore[no-untyped-def]
    """The schema is what callers read; the endpoint refuses every other parameter."""
    import yaml
    from django.urls import Resolver404, resolve

    from hub.permissions import known_query_parameters

    schema = yaml.safe_load(client.get("/api/schema/").content)
    checked = 0
    for path, operations in schema["paths"].items():
        if "get" not in operations or not path.startswith("/api/"):
            continue
        declared = {
            p["name"] for p in operations["get"].get("parameters", []) if p["in"] == "query"
        }
        concrete = path.replace("{trace_id}", "0" * 32).replace("{path}", "a/b")
        for name in ("{digest}", "{other}"):
            concrete = concrete.replace(name, "sha256:" + "0" * 64)
        for name, value in (("{index}", "0"), ("{name}", "g"), ("{task}", "t"), ("{dataset}", "d")):
            concrete = concrete.replace(name, value)
        try:
            match = resolve(concrete.replace("{id}", "1"))
        except Resolver404:
            match = resolve(concrete.replace("{id}", "00000000-0000-0000-0000-000000000000"))
        view = match.func.view_class(**getattr(match.func, "initkwargs", {}))
        view.request = None
        view.format_kwarg = None
        assert known_query_parameters(view) == declared, path
        checked += 1
    assert checked >= 8
