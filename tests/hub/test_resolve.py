"""`GET /api/v1/resolve/`: manifests × live hosts that satisfy the request, highest version
first; when nothing does, a 4xx whose first error names the constraint that is not met."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from hub.models import Host
from tests.hub.factories import (
    DATASETS_URL,
    RESOLVE_URL,
    dataset_yaml,
    error_paths,
    model_yaml,
    register_host,
    upload,
)

# (name, version, framework, the framework range the manifest states)
CATALOG = [
    ("resnet", "1.0.0", "onnxruntime", ">=1.16.0 <2.0.0"),
    ("resnet", "1.1.0", "onnxruntime", ">=1.16.0 <2.0.0"),
    ("resnet", "2.0.0", "onnxruntime", ">=1.18.0 <2.0.0"),
    ("resnet", "1.1.0", "pytorch", ">=2.0.0 <3.0.0"),
    ("legacy", "1.0.0", "onnxruntime", "<1.10.0"),
    ("tf-only", "1.0.0", "tensorflow", "^2.15.0"),
]
# (host name, frameworks)
HOSTS = [
    ("ort-old", [("onnxruntime", "1.15.0", ["cpu"])]),
    ("ort-cpu", [("onnxruntime", "1.17.0", ["cpu"])]),
    ("ort-gpu", [("onnxruntime", "1.18.1", ["cpu", "gpu"])]),
    ("torch-gpu", [("pytorch", "2.1.0+cu121", ["gpu"])]),
]


@pytest.fixture
def catalog(alice_full_client, operator_agent) -> None:  # type: ignore[no-untyped-def]
    for name, version, framework, framework_range in CATALOG:
        text = model_yaml(name, version, framework, framework_range, visibility="public")
        assert upload(alice_full_client, text).status_code == 201
    for host, frameworks in HOSTS:
        response = register_host(operator_agent, host, frameworks, pool=True)
        assert response.status_code == 201


def _resolve(client, **params):  # type: ignore[no-untyped-def]
    return client.get(RESOLVE_URL, params)


def _pairs(response) -> list[tuple[str, str, str, str]]:  # type: ignore[no-untyped-def]
    """(version, framework, host, device) of every match, in the order of the answer."""
    assert response.status_code == 200, response.content
    return [
        (m["manifest"]["version"], m["manifest"]["framework"], m["host"]["name"], m["device"])
        for m in response.json()["matches"]
    ]


def test_resolve_returns_every_runnable_pair_highest_version_first(anonymous, catalog) -> None:
    response = _resolve(anonymous, model="resnet")

    pairs = _pairs(response)
    assert sorted(pairs) == sorted(
        [
            ("2.0.0", "onnxruntime", "ort-gpu", "cpu"),
            ("2.0.0", "onnxruntime", "ort-gpu", "gpu"),
            ("1.1.0", "onnxruntime", "ort-cpu", "cpu"),
            ("1.1.0", "onnxruntime", "ort-gpu", "cpu"),
            ("1.1.0", "onnxruntime", "ort-gpu", "gpu"),
            ("1.1.0", "pytorch", "torch-gpu", "gpu"),
            ("1.0.0", "onnxruntime", "ort-cpu", "cpu"),
            ("1.0.0", "onnxruntime", "ort-gpu", "cpu"),
            ("1.0.0", "onnxruntime", "ort-gpu", "gpu"),
        ]
    )
    versions = [version for version, *_ in pairs]
    assert versions == ["2.0.0"] * 2 + ["1.1.0"] * 4 + ["1.0.0"] * 3
    body = response.json()
    assert body["version"] == "2.0.0"
    assert body["count"] == 9
    first = body["matches"][0]
    assert first["framework_version"] == "1.18.1"
    assert first["manifest"]["framework_range"] == ">=1.18.0 <2.0.0"


def test_resolve_applies_version_and_framework_constraints(anonymous, catalog) -> None:
    pairs = _pairs(_resolve(anonymous, model="resnet", version="^1.0", framework="onnxruntime"))

    assert pairs == [
        ("1.1.0", "onnxruntime", "ort-cpu", "cpu"),
        ("1.1.0", "onnxruntime", "ort-gpu", "cpu"),
        ("1.1.0", "onnxruntime", "ort-gpu", "gpu"),
        ("1.0.0", "onnxruntime", "ort-cpu", "cpu"),
        ("1.0.0", "onnxruntime", "ort-gpu", "cpu"),
        ("1.0.0", "onnxruntime", "ort-gpu", "gpu"),
    ]


def test_resolve_applies_a_tilde_range(anonymous, catalog) -> None:
    pairs = _pairs(_resolve(anonymous, model="resnet", version="~1.0"))

    assert {version for version, *_ in pairs} == {"1.0.0"}


def test_resolve_applies_the_device_constraint(anonymous, catalog) -> None:
    pairs = _pairs(_resolve(anonymous, model="resnet", device="gpu"))

    assert pairs == [
        ("2.0.0", "onnxruntime", "ort-gpu", "gpu"),
        ("1.1.0", "onnxruntime", "ort-gpu", "gpu"),
        ("1.1.0", "pytorch", "torch-gpu", "gpu"),
        ("1.0.0", "onnxruntime", "ort-gpu", "gpu"),
    ]


def test_resolve_applies_the_framework_version_constraint(anonymous, catalog) -> None:
    response = _resolve(
        anonymous, model="resnet", framework="onnxruntime", framework_version=">=1.18"
    )

    assert {host for _, _, host, _ in _pairs(response)} == {"ort-gpu"}


def test_resolve_leaves_out_hosts_that_are_not_live(anonymous, catalog, settings) -> None:
    Host.objects.filter(name="ort-gpu").update(
        last_heartbeat=timezone.now() - timedelta(seconds=settings.HOST_LIVE_SECONDS + 1)
    )

    pairs = _pairs(_resolve(anonymous, model="resnet", framework="onnxruntime"))

    assert {host for _, _, host, _ in pairs} == {"ort-cpu"}
    assert {version for version, *_ in pairs} == {"1.1.0", "1.0.0"}


@pytest.mark.parametrize(
    "params, path, words",
    [
        ({"model": "inception"}, "model", "no model named 'inception'"),
        ({"model": "resnet", "version": "^3.0.0"}, "version", "1.0.0, 1.1.0, 2.0.0"),
        ({"model": "resnet", "framework": "tensorflow"}, "framework", "onnxruntime, pytorch"),
        (
            {"model": "resnet", "version": "1.0.0", "framework": "pytorch"},
            "framework",
            "onnxruntime",
        ),
        ({"model": "tf-only"}, "framework", "tensorflow"),
        (
            {"model": "resnet", "framework": "pytorch", "framework_version": "^3.0.0"},
            "framework_version",
            "^3.0.0",
        ),
        ({"model": "legacy"}, "framework_range", "<1.10.0"),
        ({"model": "resnet", "framework": "pytorch", "device": "cpu"}, "device", "cpu"),
        (
            {"model": "resnet", "version": "2.0.0", "framework_version": "<1.18"},
            "framework_range",
            "resnet 2.0.0 needs onnxruntime >=1.18.0 <2.0.0 (host ort-cpu has 1.17.0)",
        ),
    ],
)
def test_an_unmet_constraint_is_named_in_the_error(anonymous, catalog, params, path, words) -> None:
    response = _resolve(anonymous, **params)

    assert response.status_code == 404, response.content
    assert error_paths(response)[0] == path
    assert words in response.json()["detail"]


def test_resolve_says_when_no_host_is_live(anonymous, catalog, settings) -> None:
    Host.objects.update(last_heartbeat=timezone.now() - timedelta(hours=1))

    response = _resolve(anonymous, model="resnet")

    assert response.status_code == 404
    assert error_paths(response) == ["hosts"]


def test_a_dataset_is_not_a_model_to_resolve(alice_full_client, catalog) -> None:
    assert upload(alice_full_client, dataset_yaml("imagenet"), url=DATASETS_URL).status_code == 201

    response = _resolve(alice_full_client, model="imagenet")

    assert response.status_code == 404
    assert error_paths(response) == ["model"]


@pytest.mark.parametrize(
    "params, path",
    [
        ({}, "model"),
        ({"model": "  "}, "model"),
        ({"model": "res\x00net"}, "model"),
        ({"model": "resnet", "version": "^^1"}, "version"),
        ({"model": "resnet", "version": "1.2.3.4"}, "version"),
        ({"model": "resnet", "version": "latest"}, "version"),
        ({"model": "resnet", "framework_version": ">>1"}, "framework_version"),
        ({"model": "resnet", "framework_version": "1.0.0 -"}, "framework_version"),
        ({"model": "resnet", "framework_version": "x" * 5000}, "framework_version"),
        ({"model": "resnet", "device": "tpu"}, "device"),
    ],
)
def test_a_malformed_request_gets_400_naming_the_parameter(
    anonymous, catalog, params, path
) -> None:
    response = _resolve(anonymous, **params)

    assert response.status_code == 400, response.content
    assert error_paths(response) == [path]
    assert response.json()["detail"]


def test_a_malformed_range_is_reported_even_for_an_unknown_model(anonymous, db) -> None:
    response = _resolve(anonymous, model="nothing-here", version="^^1")

    assert response.status_code == 400
    assert error_paths(response) == ["version"]


@pytest.fixture
def alices_private_versions(alice_full_client, catalog) -> None:  # type: ignore[no-untyped-def]
    """Alice, who owns the name `resnet`, adds a private 3.0.0 and a private model `hidden`."""
    assert (
        upload(
            alice_full_client, model_yaml("resnet", "3.0.0", framework_range="^1.15.0")
        ).status_code
        == 201
    )
    assert (
        upload(
            alice_full_client, model_yaml("hidden", "1.0.0", framework_range="^1.15.0")
        ).status_code
        == 201
    )


@pytest.mark.parametrize("who", ["bob", "anonymous"])
def test_another_users_private_manifests_never_resolve(
    bob_client, anonymous, alices_private_versions, who
) -> None:
    client = bob_client if who == "bob" else anonymous

    resnet = _resolve(client, model="resnet")
    pinned = _resolve(client, model="resnet", version="^3.0.0")
    hidden = _resolve(client, model="hidden")

    assert resnet.json()["version"] == "2.0.0"
    assert "3.0.0" not in {version for version, *_ in _pairs(resnet)}
    assert pinned.status_code == 404
    assert error_paths(pinned) == ["version"]
    assert pinned.json()["detail"].endswith("(available: 1.0.0, 1.1.0, 2.0.0)")
    assert hidden.status_code == 404
    assert error_paths(hidden) == ["model"]


def test_the_owner_resolves_their_private_versions(
    alice_full_client, alices_private_versions
) -> None:
    response = _resolve(alice_full_client, model="resnet")

    assert response.json()["version"] == "3.0.0"
    assert _pairs(_resolve(alice_full_client, model="hidden"))


def test_nobody_else_can_publish_a_version_under_a_taken_name(bob_client, catalog) -> None:
    response = upload(bob_client, model_yaml("resnet", "9.0.0", framework_range="^1.15.0"))

    assert response.status_code == 409
    assert error_paths(response) == ["name"]
    assert _resolve(bob_client, model="resnet").json()["version"] == "2.0.0"


@pytest.mark.parametrize(
    "params, path",
    [
        ({"model": "resnet", "arch": "riscv64"}, "arch"),
        ({"model": "resnet", "min_memory_gb": "4096"}, "min_memory_gb"),
        ({"model": "resnet", "device": "gpu", "gpu_model": "H200"}, "gpu_model"),
        ({"model": "resnet", "host": "nowhere"}, "host"),
    ],
)
def test_resolve_takes_the_hardware_constraints_of_a_launch(
    anonymous, catalog, params, path
) -> None:
    response = _resolve(anonymous, **params)

    assert response.status_code == 404, response.content
    assert error_paths(response)[0] == path
    assert params[path] in response.json()["detail"]


@pytest.mark.parametrize(
    "params, path",
    [
        ({"model": "resnet", "min_memory_gb": "lots"}, "min_memory_gb"),
        ({"model": "resnet", "min_memory_gb": "-1"}, "min_memory_gb"),
        ({"model": "resnet", "gpu_model": "A100"}, "gpu_model"),  # needs device gpu
        ({"model": "resnet", "memory": "16"}, "memory"),  # not a constraint: refused, not ignored
    ],
)
def test_a_bad_or_unknown_hardware_constraint_is_400_naming_it(
    anonymous, catalog, params, path
) -> None:
    response = _resolve(anonymous, **params)

    assert response.status_code == 400, response.content
    assert error_paths(response) == [path]
