"""Fixtures of the evaluations tests (the users, their clients and the pool's agent are
suite-wide, in tests/conftest.py): a small catalog, hosts, and live hubs with two agents in real
processes (`agents_hub` for the end-to-end tests; `outage_hub`, on a Redis server of the test's
own, for the fault tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.evaluations.factories import catalog_manifests, register_hosts
from tests.livehub import LiveHub, RedisServer

# The agents of a live hub's shared pool (`hub.pool_agents`).
AGENTS = ("e2e-a", "e2e-b")


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
def catalog(bob_client) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Public model `m` (1.0.0 and 1.1.0, onnxruntime), Bob's private model `secret`, public
    dataset `d` and Bob's private dataset `hidden`."""
    return catalog_manifests(bob_client)


@pytest.fixture
def hosts(agent, catalog) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Live hosts: cpu-1 and cpu-2 (onnxruntime 1.17 on cpu, 16 GiB, amd64, both consuming
    onnxruntime.cpu) and gpu-1 (onnxruntime 1.18 on cpu and an A100 40 GB, arm64, consuming
    onnxruntime.cpu and onnxruntime.gpu)."""
    return register_hosts(agent)


@contextmanager
def _agents_hub(folder: Path, **settings: str) -> Iterator[LiveHub]:
    """A hub and two agents, each a process of its own, evaluating the zoo's digits-cnn on
    onnxruntime on the CPU: the hub on this process's services (`services="environ"`: its own
    PostgreSQL database and the Redis broker when the suite runs on them, else the embedded
    default), serving the zoo's store; the built-in manifests, a token of alice's (`hub.token`),
    the agent token `make run` writes; the pool agents e2e-a and e2e-b, both live. `settings`
    are more environment variables of the hub."""
    from tests.predictors.zoo_store import zoo_store

    env = {
        "ARTIFACT_ROOT": str(
            zoo_store(("digits", "digits-cnn", "toggle-gru", "shapes-detector", "diabetes-mlp"))
        ),
        "HOST_LIVE_SECONDS": "5",
        "EVALUATION_SWEEP_SECONDS": "1",
        "EVALUATION_MAX_ATTEMPTS": "3",
        **settings,
    }
    with LiveHub(folder, services="environ", settings=env) as hub:
        hub.migrate()
        hub.load_manifests()
        hub.token = hub.create_token("alice", "read,write,evaluate")
        hub.write_agent_token()
        hub.purge_queues()  # jobs of earlier runs that no hub knows any more
        hub.start()
        hub.start_pool(AGENTS)
        yield hub


@pytest.fixture(scope="session")
def agents_hub() -> Callable[..., AbstractContextManager[LiveHub]]:
    """`agents_hub(folder, **settings)`: a context manager of a live hub with two pool agents
    (see `_agents_hub`), for a fixture of whatever scope a test module needs."""
    return _agents_hub


@pytest.fixture
def outage_hub(tmp_path: Path) -> Iterator[tuple[LiveHub, RedisServer]]:
    """A hub and two agents in real processes (`agents_hub`) on a Redis server of the test's
    own (`RedisServer`), which the test may kill and start again."""
    if not RedisServer.installed():
        pytest.skip("redis-server is not installed")
    redis_server = RedisServer(tmp_path)
    redis_server.start()
    try:
        # A message the outage took from the broker is sent again 10 s after its dispatch.
        with _agents_hub(
            tmp_path / "hub",
            CELERY_BROKER_URL=redis_server.url,
            EVALUATION_DISPATCH_SECONDS="10",
        ) as hub:
            yield hub, redis_server
    finally:
        redis_server.kill()
