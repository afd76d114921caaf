"""Hosts whose agent runs jobs in containers (`mlms agent --docker`), as the hub sees them: the
images they register (kept once per digest, read by whoever may use the host), the solver's
match of a manifest's `container` image, the request's container limits, and the result's link
to the image it ran in. The containers themselves run in tests/docker/."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from evaluations.models import Result
from hub.models import ContainerImage
from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    result_body,
)
from tests.hub.factories import error_paths, model_manifest, register_host, to_yaml, upload

IMAGE = "mlmodelscope/onnxruntime:1.17-cpu"
DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
AMD64 = {"architecture": "amd64", "memory_bytes": 16 * 2**30, "gpus": []}


def _image(digest: str = DIGEST, tag: str = IMAGE, **environment: Any) -> dict[str, Any]:
    return {
        "digest": digest,
        "tags": [tag],
        "framework": "onnxruntime",
        "framework_version": "1.17.0",
        "device": "cpu",
        "labels": {"org.mlmodelscope.framework": "onnxruntime"},
        "environment": {
            "python": "3.11.2",
            "python_packages": {"onnxruntime": "1.17.0", "numpy": "2.4.6"},
            "debian_packages": {"libc6": "2.36-9"},
        }
        | environment,
    }


def _docker_host(
    agent: APIClient, name: str = "dock", *images: dict[str, Any], **fields: Any
) -> Any:
    images = images or (_image(),)
    software = {
        "docker": {
            "limits": {"cpus": None, "memory_bytes": None},
            "images": [{k: v for k, v in i.items() if k != "environment"} for i in images],
        }
    }
    fields.setdefault("pool", True)
    return register_host(
        agent,
        name,
        [("onnxruntime", "1.17.0")],
        hardware=AMD64,
        software=software,
        images=list(images),
        **fields,
    )


@pytest.fixture
def boxed(bob_client: APIClient, catalog: dict[str, Any]) -> str:
    """Public model `boxed`, whose manifest names IMAGE for amd64/cpu."""
    manifest = model_manifest("boxed", visibility="public")
    manifest["container"] = {"amd64": {"cpu": IMAGE}}
    assert upload(bob_client, to_yaml(manifest)).status_code == 201
    return "boxed"


def test_a_docker_host_runs_only_the_manifests_whose_image_it_has(
    agent: APIClient, alice_evaluator_client: APIClient, boxed: str
) -> None:
    assert _docker_host(agent).status_code == 201

    assert launch(alice_evaluator_client, model=boxed).status_code == 201
    refused = launch(alice_evaluator_client, model="m")  # names no image
    assert refused.status_code == 400, refused.content
    assert error_paths(refused) == ["container"]
    message = refused.json()["errors"][0]["message"]
    assert "dock lacks no image for amd64/cpu" in message and "make images" in message


def test_container_limits_run_only_in_containers_and_reach_the_job(
    agent: APIClient, alice_evaluator_client: APIClient, boxed: str
) -> None:
    plain = register_host(agent, "plain", [("onnxruntime", "1.17.0")], hardware=AMD64, pool=True)
    assert plain.status_code == 201
    refused = launch(alice_evaluator_client, model="m", container_memory_mb=512)
    assert refused.status_code == 400, refused.content
    assert error_paths(refused) == ["container_limits"]
    assert "plain" in refused.json()["errors"][0]["message"]

    assert _docker_host(agent).status_code == 201
    evaluation_id = launched_id(
        launch(alice_evaluator_client, model=boxed, container_memory_mb=512, container_cpus=1.5)
    )
    from hub.models import Host

    job = claim(agent, evaluation_id, Host.objects.get(name="dock"))
    assert job.status_code == 200, job.content
    assert job.json()["limits"] == {"cpus": 1.5, "memory_mb": 512}
    # Without limits the job carries none.
    plain_id = launched_id(launch(alice_evaluator_client, model="m", host="plain"))
    assert claim(agent, plain_id, Host.objects.get(name="plain")).json()["limits"] is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("container_memory_mb", 5), ("container_memory_mb", "lots"), ("container_cpus", 0)],
)
def test_bad_container_limits_are_refused_naming_them(
    alice_evaluator_client: APIClient, catalog: dict[str, Any], field: str, value: Any
) -> None:
    refused = launch(alice_evaluator_client, **{field: value})
    assert refused.status_code == 400
    assert error_paths(refused) == [field]


def test_an_image_is_kept_once_per_digest_and_read_by_the_hosts_users(
    agent: APIClient,
    alice_evaluator_client: APIClient,
    bob_client: APIClient,
    make_client: Any,
    bob: Any,
    catalog: dict[str, Any],
) -> None:
    assert _docker_host(agent).status_code == 201
    assert _docker_host(agent, "dock-2").status_code == 201  # the same digest again
    assert ContainerImage.objects.filter(digest=DIGEST).count() == 1

    answer = alice_evaluator_client.get(f"/api/v1/images/{DIGEST}/")
    assert answer.status_code == 200
    assert answer.json()["environment"]["python_packages"]["onnxruntime"] == "1.17.0"
    assert [
        i["digest"] for i in alice_evaluator_client.get("/api/v1/images/").json()["results"]
    ] == [DIGEST]

    # Bob's own host (not in the pool) and its image: Bob reads it, Alice does not.
    bob_agent = make_client(bob, scopes=["agent"])
    mine = _docker_host(
        bob_agent, "bobs-box", _image(OTHER, "mlmodelscope/onnxruntime:1.18-cpu"), pool=False
    )
    assert mine.status_code == 201, mine.content
    assert bob_client.get(f"/api/v1/images/{OTHER}/").status_code == 200
    assert alice_evaluator_client.get(f"/api/v1/images/{OTHER}/").status_code == 404
    assert alice_evaluator_client.get(f"/api/v1/images/{DIGEST}/diff/{OTHER}/").status_code == 404

    diff = bob_client.get(f"/api/v1/images/{DIGEST}/diff/{OTHER}/")
    assert diff.status_code == 200, diff.content
    assert diff.json()["differing"] == 0  # the same packages, said of both


def test_the_diff_of_two_images_lists_what_was_added_removed_and_changed(
    agent: APIClient, alice_evaluator_client: APIClient, catalog: dict[str, Any]
) -> None:
    newer = _image(
        OTHER,
        "mlmodelscope/onnxruntime:1.18-cpu",
        python="3.11.9",
        python_packages={"onnxruntime": "1.18.0", "protobuf": "7.36.2"},
    )
    assert _docker_host(agent, "dock", _image(), newer).status_code == 201
    diff = alice_evaluator_client.get(f"/api/v1/images/{DIGEST}/diff/{OTHER}/").json()
    assert diff["python_packages"] == {
        "added": {"protobuf": "7.36.2"},
        "removed": {"numpy": "2.4.6"},
        "changed": {"onnxruntime": ["1.17.0", "1.18.0"]},
    }
    assert diff["python"] == ["3.11.2", "3.11.9"]
    assert diff["debian_packages"] == {"added": {}, "removed": {}, "changed": {}}
    assert diff["differing"] == 3


@pytest.mark.parametrize(
    ("image", "path"),
    [
        (_image(digest="sha256:xyz"), "images.0.digest"),
        (_image(tag="has space"), "images.0.tags.0"),
        ({**_image(), "framework": "caffe"}, "images.0.framework"),
        (_image(python_packages={f"p{i}": "1" for i in range(20_001)}), "images.0.environment"),
        (_image(debian_packages={"bad\x00name": "1"}), "images.0.environment.debian_packages"),
    ],
)
def test_a_bad_image_registration_is_refused_naming_it(
    agent: APIClient, catalog: dict[str, Any], image: dict[str, Any], path: str
) -> None:
    refused = _docker_host(agent, "dock", image)
    assert refused.status_code == 400, refused.content
    assert any(found.startswith(path) for found in error_paths(refused)), error_paths(refused)
    assert not ContainerImage.objects.exists()


def test_a_result_links_the_image_only_when_its_host_registered_it(
    agent: APIClient, alice_evaluator_client: APIClient, boxed: str
) -> None:
    from hub.models import Host

    assert _docker_host(agent).status_code == 201
    host = Host.objects.get(name="dock")
    for digest, linked in ((DIGEST, True), (OTHER, False)):
        evaluation_id = launched_id(launch(alice_evaluator_client, model=boxed))
        claim_id = claim(agent, evaluation_id, host).json()["claim"]
        body = result_body(claim_id)
        body["stack"]["container"] = {"image": IMAGE, "digest": digest}
        assert post_result(agent, evaluation_id, body).status_code == 201
        result = Result.objects.get(evaluation_id=evaluation_id)
        assert (result.image is not None) is linked
        assert result.stack["container"]["digest"] == digest  # kept as the agent said


def test_a_users_word_on_an_image_reaches_no_other_users_view_of_it(
    agent: APIClient,
    alice_evaluator_client: APIClient,
    make_client: Any,
    bob: Any,
    bob_client: APIClient,
    catalog: dict[str, Any],
) -> None:
    # Bob's agent says first that the digest holds other packages (the hub cannot check).
    bob_agent = make_client(bob, scopes=["agent"])
    forged = _image(python_packages={"onnxruntime": "9.9.9"})
    assert _docker_host(bob_agent, "bobs-box", forged, pool=False).status_code == 201
    assert _docker_host(agent).status_code == 201  # the operator's pool agent, same digest
    assert ContainerImage.objects.filter(digest=DIGEST).count() == 2

    said = alice_evaluator_client.get(f"/api/v1/images/{DIGEST}/").json()
    assert said["environment"]["python_packages"]["onnxruntime"] == "1.17.0"
    assert said["registered_by_operator"] is True
    listed = alice_evaluator_client.get("/api/v1/images/").json()["results"]
    assert [image["digest"] for image in listed] == [DIGEST]  # Bob's record is not hers to see

    # Bob reads his own agent's word first.
    said = bob_client.get(f"/api/v1/images/{DIGEST}/").json()
    assert said["environment"]["python_packages"]["onnxruntime"] == "9.9.9"
    assert said["registered_by_operator"] is False
