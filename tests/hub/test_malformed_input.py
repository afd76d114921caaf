"""Malformed input to the registry's API and to the server in front of it: a 4xx in the API's
JSON error format naming the problem, nothing stored on refusal; a chunked upload read whole.

The server tests run the hub under daphne in a process of its own (tests.livehub),
since what they cover happens in daphne (Twisted) and Django's ASGI handler, before any view.
"""

from __future__ import annotations

import http.client
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator

from hub.models import ApiToken, Artifact, Host, Manifest
from mlmodelscope.asgi import application
from tests.helpers import error_of
from tests.hub.factories import HOSTS_URL, TOKENS_URL, model_yaml, onnx_graph, upload
from tests.livehub import LiveHub, running_hub

JSON = "application/json"


def store_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# --- JSON bodies ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "named"), [("[]", "an array"), ("true", "a boolean"), ("1.5", "a number")]
)
def test_a_token_request_whose_body_is_not_a_json_object_is_refused(
    alice_full_client, body, named
) -> None:  # type: ignore[no-untyped-def]
    before = ApiToken.objects.count()

    response = alice_full_client.generic("POST", TOKENS_URL, body, content_type=JSON)

    assert response.status_code == 400
    assert error_of(response)["message"] == f"The request body must be a JSON object, not {named}."
    assert ApiToken.objects.count() == before


@pytest.mark.django_db
def test_a_host_registration_whose_body_is_not_a_json_object_is_refused(alice_agent) -> None:  # type: ignore[no-untyped-def]
    response = alice_agent.generic("POST", HOSTS_URL, '["cpu-1"]', content_type=JSON)

    assert response.status_code == 400
    assert "must be a JSON object, not an array" in error_of(response)["message"]
    assert not Host.objects.exists()


@pytest.mark.django_db
def test_a_token_request_nested_too_deep_is_refused(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    before = ApiToken.objects.count()
    body = '{"name": "t", "scopes": ' + "[" * 100_000 + "]" * 100_000 + "}"

    response = alice_full_client.generic("POST", TOKENS_URL, body, content_type=JSON)

    assert response.status_code == 400
    assert "more than 64 levels deep" in error_of(response)["message"]
    assert ApiToken.objects.count() == before


# --- repo:// paths that are not files ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("with_upload", [False, True], ids=["in-store", "uploaded"])
def test_a_repo_path_naming_a_folder_of_the_store_is_refused(
    alice_full_client, artifact_root, with_upload
) -> None:  # type: ignore[no-untyped-def]
    folder = artifact_root / "models" / "dirm" / "1.0.0" / "graph.onnx"
    (folder / "inside").mkdir(parents=True)
    (folder / "inside" / "file").write_bytes(b"x")
    files = {"graph.onnx": b"graph"} if with_upload else None

    response = upload(alice_full_client, model_yaml("dirm", graph_file="graph.onnx"), files)

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == "model.graph_path"
    assert error["message"] == (
        "repo://models/dirm/1.0.0/graph.onnx names a folder of the artifact store, not a file"
    )
    assert not Manifest.objects.exists() and not Artifact.objects.exists()
    assert store_files(artifact_root) == [folder / "inside" / "file"]


@pytest.mark.django_db
def test_a_repo_path_below_a_file_of_the_store_is_refused(alice_full_client, artifact_root) -> None:  # type: ignore[no-untyped-def]
    file = artifact_root / "models" / "below" / "1.0.0"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"not a folder")

    response = upload(
        alice_full_client, model_yaml("below", graph_file="graph.onnx"), {"graph.onnx": b"graph"}
    )

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == "model.graph_path"
    assert "lies below repo://models/below/1.0.0, which is a file" in error["message"]
    assert not Manifest.objects.exists()
    assert store_files(artifact_root) == [file]


# --- A body without a Content-Length, in process ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_json_body_without_content_length_is_read_by_the_asgi_handler(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    """What a chunked request looks like once the server has undone the chunking: headers
    without a Content-Length, the body in several `http.request` messages."""
    body = json.dumps({"name": "chunked", "scopes": ["read"]}).encode()
    headers = [
        (b"authorization", f"Bearer {alice_full_client.raw_token}".encode()),
        (b"content-type", b"application/json"),
        (b"transfer-encoding", b"chunked"),
        (b"host", b"testserver"),
    ]

    async def run() -> dict[str, Any]:
        communicator = HttpCommunicator(application, "POST", TOKENS_URL, headers=headers)
        for index in range(0, len(body), 7):
            await communicator.send_input(
                {
                    "type": "http.request",
                    "body": body[index : index + 7],
                    "more_body": index + 7 < len(body),
                }
            )
        start = await communicator.receive_output(5)
        content = await communicator.receive_output(5)
        return {"status": start["status"], "body": json.loads(content["body"])}

    answer = async_to_sync(run)()

    assert answer["status"] == 201, answer
    assert answer["body"]["name"] == "chunked"
    assert ApiToken.objects.filter(name="chunked").exists()


# --- Under daphne ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    with running_hub(tmp_path_factory.mktemp("hub"), users=True) as live:
        yield live


def _connection(hub: LiveHub) -> http.client.HTTPConnection:
    address = urlsplit(hub.url)
    return http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)


def _answer(connection: http.client.HTTPConnection) -> tuple[int, Any]:
    response = connection.getresponse()
    content = response.read()
    return response.status, json.loads(content) if content else None


def _multipart(fields: dict[str, tuple[str | None, bytes]]) -> tuple[str, list[bytes]]:
    """A multipart/form-data body, in pieces: {name: (file name or None, content)}."""
    boundary = secrets.token_hex(16)
    pieces = []
    for name, (filename, content) in fields.items():
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        pieces.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode())
        pieces += [content[i : i + 1000] for i in range(0, len(content), 1000)] + [b"\r\n"]
    pieces.append(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", pieces


def test_a_chunked_multipart_upload_stores_the_manifest_and_its_file(hub) -> None:  # type: ignore[no-untyped-def]
    graph = onnx_graph(secrets.token_hex(2400))  # a real graph of some 5 KB
    content_type, pieces = _multipart(
        {
            "manifest": (None, model_yaml("chunked", graph_file="chunked.onnx").encode()),
            "files": ("chunked.onnx", graph),
        }
    )
    connection = _connection(hub)
    # An iterable body and no Content-Length: http.client sends it chunked.
    connection.request(
        "POST",
        "/api/v1/manifests/",
        body=iter(pieces),
        headers={"Content-Type": content_type, "Authorization": f"Bearer {hub.token}"},
    )

    status, body = _answer(connection)

    assert status == 201, (body, hub.logs())
    [artifact] = body["artifacts"]
    assert artifact["path"] == "models/chunked/1.0.0/chunked.onnx" and artifact["size"] == len(
        graph
    )
    stored = hub.folder / "var" / "artifacts" / artifact["path"]
    assert stored.read_bytes() == graph


def test_a_chunked_yaml_upload_is_stored(hub) -> None:  # type: ignore[no-untyped-def]
    text = model_yaml("chunkedyaml").encode()
    connection = _connection(hub)
    connection.request(
        "POST",
        "/api/v1/manifests/",
        body=iter([text[:100], text[100:]]),
        headers={"Content-Type": "application/x-yaml", "Authorization": f"Bearer {hub.token}"},
    )

    status, body = _answer(connection)

    assert status == 201, body
    assert body["name"] == "chunkedyaml"


def test_a_chunked_upload_over_the_manifest_limit_is_413(hub) -> None:  # type: ignore[no-untyped-def]
    connection = _connection(hub)
    connection.request(
        "POST",
        "/api/v1/manifests/",
        body=iter([b"# padding\n" * 30_000]),  # 300 kB: over MANIFEST_MAX_BYTES (256 KiB)
        headers={"Content-Type": "application/x-yaml", "Authorization": f"Bearer {hub.token}"},
    )

    status, body = _answer(connection)

    assert status == 413
    assert "larger than the limit" in error_of(body)["message"]


def test_a_20000_character_url_is_answered_414(hub) -> None:  # type: ignore[no-untyped-def]
    connection = _connection(hub)
    connection.request("GET", "/api/v1/manifests/?search=" + "a" * 20_000)

    status, body = _answer(connection)

    assert status == 414
    assert "The request line" in error_of(body)["message"]


def test_an_overlong_header_line_is_answered_431(hub) -> None:  # type: ignore[no-untyped-def]
    connection = _connection(hub)
    connection.request("GET", "/api/v1/manifests/", headers={"X-Padding": "a" * 20_000})

    status, body = _answer(connection)

    assert status == 431
    assert "header line" in error_of(body)["message"]


def test_the_hub_still_answers_after_an_overlong_url(hub) -> None:  # type: ignore[no-untyped-def]
    connection = _connection(hub)
    connection.request("GET", "/" + "x" * 30_000)
    assert _answer(connection)[0] == 414

    connection = _connection(hub)
    connection.request("GET", "/api/v1/manifests/")
    assert _answer(connection)[0] == 200
