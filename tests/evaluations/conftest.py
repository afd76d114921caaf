"""Fixtures of the evaluations tests: users and their clients, a small catalog, hosts, the
hub's broker, from which a test reads what the hub sent, and a live hub on a Redis server of the
test's own (`outage_hub`), for the fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.evaluations.factories import catalog_manifests, register_hosts


@pytest.fixture(autouse=True)
def _evaluation_settings(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No sweep loop in the test process (tests call the sweep themselves); an empty store."""
    settings.EVALUATION_SWEEP_SECONDS = 0
    settings.EVALUATION_MAX_ATTEMPTS = 2
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.ARTIFACT_ROOT = root


@pytest.fixture
def staff(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("root", is_staff=True)


@pytest.fixture
def alice_client(make_client, alice) -> APIClient:  # type: ignore[no-untyped-def]
    return make_client(alice, scopes=["read", "evaluate"])  # type: ignore[no-any-return]


@pytest.fixture
def bob_client(make_client, bob) -> APIClient:  # type: ignore[no-untyped-def]
    return make_client(bob, scopes=["read", "write", "evaluate"])  # type: ignore[no-any-return]


@pytest.fixture
def agent(make_client, django_user_model) -> APIClient:  # type: ignore[no-untyped-def]
    """The agent token of the operator who runs the hosts of the shared pool."""
    operator = django_user_model.objects.create_user("operator", is_staff=True)
    return make_client(operator, scopes=["agent"])  # type: ignore[no-any-return]


@pytest.fixture
def catalog(bob_client) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Public model `m` (1.0.0 and 1.1.0, onnxruntime), Bob's private model `secret`, public
    dataset `d` and Bob's private dataset `hidden`."""
    return catalog_manifests(bob_client)


@pytest.fixture
def hosts(agent, catalog) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Live hosts: cpu-1 and cpu-2 (onnxruntime 1.17 on cpu, 16 GiB, amd64, both consuming
    onnxruntime.cpu) and gpu-1 (onnxruntime 1.18 on cpu and an A100 40 GB, arm64, consuming
    onnxruntime.cpu and onnxruntime.cuda)."""
    return register_hosts(agent)


@pytest.fixture
def outage_hub(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A hub and two agents in real processes (`LiveHub`) on a Redis server of the test's own
    (`RedisServer`), which the test may kill and start again."""
    from tests.evaluations.test_broker_outage import RedisServer
    from tests.evaluations.test_end_to_end import LiveHub

    redis_server = RedisServer(tmp_path)
    redis_server.start()
    hub = LiveHub(tmp_path / "hub")
    (tmp_path / "hub").mkdir()
    hub.env["CELERY_BROKER_URL"] = redis_server.url
    # A message the outage took from the broker is sent again 10 s after its dispatch.
    hub.env["EVALUATION_DISPATCH_SECONDS"] = "10"
    try:
        hub.start()
        yield hub, redis_server
    finally:
        hub.stop()
        redis_server.kill()
