"""Lists take `?page=N&page_size=M` as the OpenAPI schema states (N ≥ 1, 1 ≤ M ≤ 500), flags
and enums only their values; anything else is 400 naming the parameter, and a URL under the
API that names nothing answers 404 in the API's error format."""

from __future__ import annotations

import pytest

from tests.hub.factories import HOSTS_URL, MANIFESTS_URL, error_paths

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "query",
    [
        "page_size=null",
        "page_size=",
        "page_size=0",
        "page_size=-3",
        "page_size=501",
        "page_size=1.5",
        "page_size=%EF%BC%95",
        "page=0",
        "page=abc",
        "page=",
        "page=last",
    ],
)
def test_a_bad_page_or_page_size_is_400_naming_it(anonymous, query) -> None:  # type: ignore[no-untyped-def]
    response = anonymous.get(f"{MANIFESTS_URL}?{query}")

    assert response.status_code == 400, response.content
    name = query.split("=")[0]
    assert error_paths(response) == [name]
    assert name in response.json()["detail"]


def test_page_sizes_in_range_are_served_and_a_page_past_the_last_is_404(anonymous) -> None:  # type: ignore[no-untyped-def]
    for size in (1, 500):
        assert anonymous.get(f"{MANIFESTS_URL}?page_size={size}").status_code == 200
    assert anonymous.get(f"{MANIFESTS_URL}?page=1").status_code == 200

    past = anonymous.get(f"{MANIFESTS_URL}?page=2")

    assert past.status_code == 404
    assert error_paths(past) == ["page"]


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (f"{HOSTS_URL}?live=yes", "live"),
        (f"{MANIFESTS_URL}?kind=modle", "kind"),
        ("/api/v1/evaluations/?status=done", "status"),
        ("/api/v1/evaluations/?group=", "group"),
        ("/api/v1/evaluations/1/?predictions=maybe", None),
    ],
)
def test_a_value_outside_a_parameters_choices_is_400_naming_it(
    alice_full_client, url, name
) -> None:  # type: ignore[no-untyped-def]
    response = alice_full_client.get(url)

    if name is None:  # no such evaluation: the path is checked first
        assert response.status_code == 404
        return
    assert response.status_code == 400, response.content
    assert error_paths(response) == [name]


def test_flags_take_true_false_1_and_0(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    for value in ("true", "false", "1", "0"):
        assert alice_full_client.get(f"{HOSTS_URL}?live={value}").status_code == 200


@pytest.mark.parametrize("path", ["/api/v1/manifests/abc/", "/api/v1/nothing/", "/v1/nothing"])
def test_a_url_of_the_api_that_names_nothing_is_404_in_the_error_format(anonymous, path) -> None:  # type: ignore[no-untyped-def]
    response = anonymous.get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"detail", "code", "errors"}


def test_other_pages_keep_the_sites_404(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/no-such-page/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("host", ["²", "١", "", "-1", "1.0"])
def test_agent_config_refuses_a_host_id_that_is_not_plain_digits(alice_agent, host) -> None:  # type: ignore[no-untyped-def]
    # "²".isdigit() is true, and int("²") raised: a 500 before.
    response = alice_agent.get("/api/v1/agent/config/", {"host": host})

    assert response.status_code == 400
    assert error_paths(response) == ["host"]
