"""Who sees what: private and public manifests through every endpoint, and the token scopes.

A private manifest does not exist for anyone but its owner and the groups it is shared with:
the API answers 404 exactly as for a manifest that was never uploaded, and lists, search,
resolve and downloads leave it out.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from hub.models import ApiToken, Artifact, Host, Manifest
from tests.hub.factories import (
    ARTIFACTS_URL,
    DATASETS_URL,
    HOSTS_URL,
    MANIFESTS_URL,
    RESOLVE_URL,
    TOKENS_URL,
    bearer_client,
    dataset_yaml,
    error_paths,
    model_yaml,
    onnx_graph,
    parquet_split,
    register_host,
    upload,
)

GRAPH = onnx_graph("secret graph")
SPLIT = parquet_split("secret split")
MODEL_FILE = "models/secret-model/1.0.0/secret.onnx"
SPLIT_FILE = "datasets/secret-data/1.0.0/validation.parquet"

# (role, whether that role sees alice's private manifests)
ROLES = [("owner", True), ("group", True), ("other", False), ("anonymous", False)]


@pytest.fixture
def carol(django_user_model):  # type: ignore[no-untyped-def]
    """A member of the group alice shares her private manifests with."""
    user = django_user_model.objects.create_user("carol")
    user.groups.add(Group.objects.create(name="team"))
    return user


@pytest.fixture
def clients(alice_full_client, bob_client, anonymous, make_client, carol):  # type: ignore[no-untyped-def]
    return {
        "owner": alice_full_client,
        "group": make_client(carol),
        "other": bob_client,
        "anonymous": anonymous,
    }


def _share(manifest: Manifest) -> Manifest:
    manifest.shared_groups.add(Group.objects.get(name="team"))
    return manifest


@pytest.fixture
def private_model(alice_full_client, carol) -> Manifest:  # type: ignore[no-untyped-def]
    text = model_yaml("secret-model", graph_file="secret.onnx", description="classified weights")
    response = upload(alice_full_client, text, files={"secret.onnx": GRAPH})
    assert response.status_code == 201, response.content
    return _share(Manifest.objects.get(pk=response.json()["id"]))


@pytest.fixture
def private_dataset(alice_full_client, carol) -> Manifest:  # type: ignore[no-untyped-def]
    text = dataset_yaml("secret-data", split_file="validation.parquet")
    response = upload(
        alice_full_client, text, files={"validation.parquet": SPLIT}, url=DATASETS_URL
    )
    assert response.status_code == 201, response.content
    return _share(Manifest.objects.get(pk=response.json()["id"]))


@pytest.fixture
def public_model(alice_full_client) -> Manifest:  # type: ignore[no-untyped-def]
    text = model_yaml("open-model", graph_file="open.onnx", visibility="public")
    response = upload(alice_full_client, text, files={"open.onnx": onnx_graph("open graph")})
    assert response.status_code == 201, response.content
    return Manifest.objects.get(pk=response.json()["id"])


@pytest.fixture
def onnx_host(operator_agent) -> Host:  # type: ignore[no-untyped-def]
    """A host of the operators' shared pool, which every user's jobs may use."""
    response = register_host(operator_agent, "onnx-box", [("onnxruntime", "1.17.0")], pool=True)
    assert response.status_code == 201, response.content
    return Host.objects.get(name="onnx-box")


def _names(response) -> list[str]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


# -- uploads ---------------------------------------------------------------------------------


def test_an_upload_is_private_unless_it_says_otherwise(alice_full_client) -> None:
    assert upload(alice_full_client, model_yaml("a")).status_code == 201
    assert upload(alice_full_client, model_yaml("b", visibility="public")).status_code == 201
    assert upload(alice_full_client, model_yaml("c"), visibility="public").status_code == 201

    visibility = dict(Manifest.objects.values_list("name", "visibility"))
    assert visibility == {"a": "private", "b": "public", "c": "public"}
    assert set(Manifest.objects.values_list("owner__username", flat=True)) == {"alice"}


def test_a_multipart_visibility_part_sets_the_visibility(alice_full_client) -> None:
    response = alice_full_client.post(
        MANIFESTS_URL,
        {"manifest": model_yaml("a"), "visibility": "public"},
        format="multipart",
    )

    assert response.status_code == 201, response.content
    assert Manifest.objects.get(name="a").visibility == "public"


def test_an_unknown_visibility_is_refused(alice_full_client) -> None:
    response = upload(alice_full_client, model_yaml("a"), visibility="secret")

    assert response.status_code == 400
    assert error_paths(response) == ["visibility"]
    assert not Manifest.objects.exists()


# -- a private model through every endpoint --------------------------------------------------


@pytest.mark.parametrize("role, sees", ROLES)
def test_the_manifest_list_shows_a_private_model_to_owner_and_group_only(
    clients, private_model, public_model, role, sees
) -> None:
    names = _names(clients[role].get(MANIFESTS_URL))

    assert ("secret-model" in names) is sees
    assert "open-model" in names


@pytest.mark.parametrize(
    "query",
    [
        "name=secret-model",
        "kind=model",
        "framework=onnxruntime",
        "task=image_classification",
        "version=1.0.0",
        "search=secret",
        "search=classified",
        "search=image_classification",
    ],
)
@pytest.mark.parametrize("role, sees", ROLES)
def test_list_filters_and_search_find_a_private_model_for_owner_and_group_only(
    clients, private_model, role, sees, query
) -> None:
    names = _names(clients[role].get(f"{MANIFESTS_URL}?{query}"))

    assert names == (["secret-model"] if sees else [])


@pytest.mark.parametrize("role, sees", ROLES)
def test_a_private_model_detail_is_404_for_others_like_a_missing_one(
    clients, private_model, role, sees
) -> None:
    client = clients[role]

    response = client.get(f"{MANIFESTS_URL}{private_model.pk}/")

    if sees:
        assert response.status_code == 200
        assert response.json()["name"] == "secret-model"
        assert response.json()["artifacts"][0]["path"] == MODEL_FILE
    else:
        missing = client.get(f"{MANIFESTS_URL}{private_model.pk + 1000}/")
        assert response.status_code == missing.status_code == 404
        assert response.json() == missing.json()
        assert b"secret" not in response.content


@pytest.mark.parametrize("role, sees", ROLES)
def test_resolve_does_not_find_a_private_model_for_others(
    clients, private_model, onnx_host, role, sees
) -> None:
    client = clients[role]

    response = client.get(f"{RESOLVE_URL}?model=secret-model")

    if sees:
        assert response.status_code == 200, response.content
        assert [m["host"]["name"] for m in response.json()["matches"]] == ["onnx-box"]
    else:
        missing = client.get(f"{RESOLVE_URL}?model=never-uploaded")
        assert response.status_code == missing.status_code == 404
        assert error_paths(response) == error_paths(missing) == ["model"]
        assert response.json()["detail"] == "no model named 'secret-model'"


@pytest.mark.parametrize("role, sees", ROLES)
def test_a_private_models_file_downloads_for_owner_and_group_only(
    clients, private_model, role, sees
) -> None:
    client = clients[role]

    response = client.get(ARTIFACTS_URL + MODEL_FILE)

    if sees:
        assert response.status_code == 200
        assert b"".join(response.streaming_content) == GRAPH
    else:
        missing = client.get(ARTIFACTS_URL + "models/secret-model/1.0.0/other.onnx")
        assert response.status_code == missing.status_code == 404
        assert GRAPH not in response.content


def test_the_catalog_page_lists_a_private_model_for_its_owner_only(
    alice, bob, private_model, public_model
) -> None:
    owner, other, anonymous = Client(), Client(), Client()
    owner.force_login(alice)
    other.force_login(bob)

    assert b"secret-model" in owner.get("/").content
    for client in (other, anonymous):
        page = client.get("/").content
        assert b"secret-model" not in page
        assert b"open-model" in page


# -- a private dataset -----------------------------------------------------------------------


@pytest.mark.parametrize("role, sees", ROLES)
def test_the_dataset_list_and_its_filters_show_a_private_dataset_to_owner_and_group_only(
    clients, private_dataset, role, sees
) -> None:
    client = clients[role]
    expected = ["secret-data"] if sees else []

    assert _names(client.get(DATASETS_URL)) == expected
    assert _names(client.get(f"{DATASETS_URL}?name=secret-data")) == expected
    assert _names(client.get(f"{DATASETS_URL}?search=secret")) == expected
    assert _names(client.get(f"{MANIFESTS_URL}?kind=dataset")) == expected


@pytest.mark.parametrize("role, sees", ROLES)
def test_a_private_dataset_detail_and_file_are_404_for_others(
    clients, private_dataset, role, sees
) -> None:
    client = clients[role]

    detail = client.get(f"{DATASETS_URL}{private_dataset.pk}/")
    download = client.get(ARTIFACTS_URL + SPLIT_FILE)

    if sees:
        assert detail.status_code == 200
        assert detail.json()["name"] == "secret-data"
        assert download.status_code == 200
        assert b"".join(download.streaming_content) == SPLIT
    else:
        assert detail.status_code == 404
        assert download.status_code == 404
        assert client.get(f"{MANIFESTS_URL}{private_dataset.pk}/").status_code == 404


def test_the_dataset_endpoints_do_not_serve_models(alice_full_client, private_model) -> None:
    assert alice_full_client.get(f"{DATASETS_URL}{private_model.pk}/").status_code == 404
    assert _names(alice_full_client.get(DATASETS_URL)) == []


# -- deleting --------------------------------------------------------------------------------


@pytest.mark.parametrize("role, status", [("other", 404), ("anonymous", 401), ("group", 403)])
def test_only_the_owner_can_delete_a_private_model(
    clients, private_model, artifact_root, role, status
) -> None:
    response = clients[role].delete(f"{MANIFESTS_URL}{private_model.pk}/")

    assert response.status_code == status
    assert Manifest.objects.filter(pk=private_model.pk).exists()
    assert Artifact.objects.filter(path=MODEL_FILE).exists()
    assert (artifact_root / MODEL_FILE).read_bytes() == GRAPH


def test_the_owner_deletes_a_private_model_and_its_file(
    alice_full_client, private_model, artifact_root, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_full_client.delete(f"{MANIFESTS_URL}{private_model.pk}/")

    assert response.status_code == 204
    assert not Manifest.objects.filter(pk=private_model.pk).exists()
    assert not Artifact.objects.filter(path=MODEL_FILE).exists()
    assert not (artifact_root / MODEL_FILE).exists()


def test_another_user_cannot_delete_a_public_model(bob_client, public_model) -> None:
    response = bob_client.delete(f"{MANIFESTS_URL}{public_model.pk}/")

    assert response.status_code == 403
    assert Manifest.objects.filter(pk=public_model.pk).exists()


def test_another_user_cannot_delete_a_private_dataset(bob_client, private_dataset) -> None:
    response = bob_client.delete(f"{DATASETS_URL}{private_dataset.pk}/")

    assert response.status_code == 404
    assert Manifest.objects.filter(pk=private_dataset.pk).exists()


# -- public manifests ------------------------------------------------------------------------


def test_anyone_reads_a_public_model_without_a_token(anonymous, public_model, onnx_host) -> None:
    assert _names(anonymous.get(MANIFESTS_URL)) == ["open-model"]
    assert anonymous.get(f"{MANIFESTS_URL}{public_model.pk}/").status_code == 200
    assert anonymous.get(f"{RESOLVE_URL}?model=open-model").status_code == 200
    download = anonymous.get(ARTIFACTS_URL + "models/open-model/1.0.0/open.onnx")
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == onnx_graph("open graph")


# -- scopes ----------------------------------------------------------------------------------


@pytest.fixture
def reader(make_client, alice):  # type: ignore[no-untyped-def]
    return make_client(alice, scopes=["read"])


def test_a_read_only_token_cannot_upload(reader) -> None:
    for url, text in ((MANIFESTS_URL, model_yaml()), (DATASETS_URL, dataset_yaml())):
        response = upload(reader, text, url=url)

        assert response.status_code == 403
        assert "'write'" in response.json()["detail"]
    assert not Manifest.objects.exists()


def test_a_read_only_token_cannot_delete(reader, private_model) -> None:
    response = reader.delete(f"{MANIFESTS_URL}{private_model.pk}/")

    assert response.status_code == 403
    assert "'write'" in response.json()["detail"]
    assert Manifest.objects.filter(pk=private_model.pk).exists()


def test_a_read_only_token_sees_its_users_private_manifests(reader, private_model) -> None:
    assert _names(reader.get(MANIFESTS_URL)) == ["secret-model"]


@pytest.mark.parametrize("scopes", [["read"], ["read", "write", "evaluate"]])
def test_only_an_agent_token_registers_a_host(make_client, alice, scopes) -> None:
    response = register_host(make_client(alice, scopes=scopes), "box", [("pytorch", "2.1.0")])

    assert response.status_code == 403
    assert "'agent'" in response.json()["detail"]
    assert not Host.objects.exists()


def test_an_agent_token_cannot_manage_tokens_or_upload(alice_agent) -> None:
    listing = alice_agent.get(TOKENS_URL)
    minting = alice_agent.post(TOKENS_URL, {"name": "x", "scopes": ["agent"]}, format="json")
    uploading = upload(alice_agent, model_yaml())

    assert listing.status_code == 403
    assert "'read'" in listing.json()["detail"]
    assert minting.status_code == 403
    assert uploading.status_code == 403
    assert "'write'" in uploading.json()["detail"]
    assert ApiToken.objects.count() == 1
    assert not Manifest.objects.exists()


def test_an_agent_token_downloads_no_private_file_outside_a_job_not_even_its_users(
    make_client, alice, alice_agent, bob_agent, private_model
) -> None:
    # Outside any job its host claimed, an agent token reads what anonymous callers read.
    assert alice_agent.get(ARTIFACTS_URL + MODEL_FILE).status_code == 404
    assert bob_agent.get(ARTIFACTS_URL + MODEL_FILE).status_code == 404

    # The same user's token of scope read downloads it.
    response = make_client(alice, scopes=["read"]).get(ARTIFACTS_URL + MODEL_FILE)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == GRAPH


@pytest.mark.parametrize(
    "method, url, body",
    [
        ("post", MANIFESTS_URL, model_yaml()),
        ("post", DATASETS_URL, dataset_yaml()),
        ("post", TOKENS_URL, None),
        ("get", TOKENS_URL, None),
        ("get", HOSTS_URL, None),
        ("post", HOSTS_URL, None),
    ],
)
def test_an_anonymous_caller_gets_401_where_a_token_is_needed(
    db, anonymous, method, url, body
) -> None:
    if body is None:
        response = getattr(anonymous, method)(url, {}, format="json")
    else:
        response = getattr(anonymous, method)(url, body, content_type="application/x-yaml")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Manifest.objects.exists()


# -- tokens that do not authenticate ---------------------------------------------------------

PUBLIC_URLS = [
    MANIFESTS_URL,
    DATASETS_URL,
    f"{RESOLVE_URL}?model=open-model",
    ARTIFACTS_URL + "models/open-model/1.0.0/open.onnx",
]


@pytest.fixture
def token(alice) -> tuple[ApiToken, str]:  # type: ignore[no-untyped-def]
    return ApiToken.issue(alice, name="t", scopes=["read", "write", "evaluate"])


@pytest.mark.parametrize("url", PUBLIC_URLS)
def test_a_revoked_token_gets_401_even_where_anonymous_callers_are_welcome(
    token, public_model, onnx_host, url
) -> None:
    row, raw = token
    assert bearer_client(raw).get(url).status_code == 200
    row.revoked_at = timezone.now()
    row.save()

    response = bearer_client(raw).get(url)

    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


@pytest.mark.parametrize("url", PUBLIC_URLS)
def test_an_expired_token_gets_401_even_where_anonymous_callers_are_welcome(
    token, public_model, onnx_host, url
) -> None:
    row, raw = token
    row.expires_at = timezone.now() - timedelta(seconds=1)
    row.save()

    response = bearer_client(raw).get(url)

    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_a_token_of_an_inactive_user_gets_401(token, alice) -> None:
    alice.is_active = False
    alice.save()

    assert bearer_client(token[1]).get(MANIFESTS_URL).status_code == 401


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer ", "Bearer a b", "Bearer t\u00e9st", "bearer mlms_unknown", "Bearer mlms_"],
)
def test_a_malformed_or_unknown_bearer_token_gets_401(db, header) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get(MANIFESTS_URL)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="mlmodelscope"'
    assert response.json()["errors"][0]["message"]


def test_a_working_token_records_its_last_use(token) -> None:
    row, raw = token
    assert row.last_used_at is None

    assert bearer_client(raw).get(MANIFESTS_URL).status_code == 200

    row.refresh_from_db()
    assert row.last_used_at is not None
