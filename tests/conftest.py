"""Suite-wide fixtures and the service markers.

A test marked `postgres` or `redis` runs when that service is configured and reachable, and is
skipped otherwise, except in CI (CI=true), where a missing service fails the test instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest

from tests.services import reachable

IN_CI = os.environ.get("CI") == "true"
# `make test` runs a PostgreSQL + Redis pass after this one (see pytest_runtest_setup).
POSTGRES_PASS_FOLLOWS = os.environ.get("MLMS_POSTGRES_PASS_FOLLOWS") == "true"


def _require(condition: bool, why: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI requires it: {why}")
    pytest.skip(why)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Service tests belong to the pass that configures the service (see the Makefile).

    The SQLite pass skips them; the PostgreSQL + Redis pass runs them, and in CI a configured
    service that does not answer fails them. Tests marked `database_free` (the evaluation loop,
    processing, manifests, the zoo: nothing the services change) run in the SQLite pass only.

    Every other test uses the pass's database (and, in a live hub, its broker and channel
    layer). Where a PostgreSQL + Redis pass follows (`make test` says so:
    MLMS_POSTGRES_PASS_FOLLOWS=true), the SQLite pass leaves them to it, except those marked
    `both_stacks`: the end-to-end runs, fuzzing, trust and live WebSockets, which check the
    embedded default as `make run` serves it, SQLite and its filesystem broker, as well as the
    production stack. Without a PostgreSQL pass (no server reachable), the SQLite pass runs
    them all.
    """
    if item.get_closest_marker("postgres"):
        if not os.environ.get("DATABASE_URL", "").startswith(("postgres", "pgsql")):
            pytest.skip("runs in the PostgreSQL pass (DATABASE_URL=postgres://…)")
        _require(reachable("postgres"), "PostgreSQL does not answer")
    if item.get_closest_marker("redis"):
        if not os.environ.get("CHANNEL_LAYER_URL", "").startswith("redis"):
            pytest.skip("runs in the Redis pass (CHANNEL_LAYER_URL=redis://…)")
        _require(reachable("redis"), "Redis does not answer")
    if item.get_closest_marker("docker"):
        _require(*_docker_ready())
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres", "pgsql"))
    if item.get_closest_marker("database_free") and on_postgres:
        pytest.skip("touches no database, broker or hub: it runs once, in the SQLite pass")
    if (
        POSTGRES_PASS_FOLLOWS
        and not on_postgres
        and not item.get_closest_marker("database_free")
        and not item.get_closest_marker("both_stacks")
    ):
        pytest.skip("runs in the PostgreSQL + Redis pass that follows (the production stack)")


_DOCKER: tuple[bool, str] | None = None
# The images the docker tests run (`make images` builds them; `make test` does so first).
DOCKER_IMAGES = (
    "mlmodelscope/onnxruntime:1.31-cpu",
    "mlmodelscope/pytorch:2.13-cpu",
    "mlmodelscope/tensorflow:2.21-cpu",
)


def _docker_ready() -> tuple[bool, str]:
    """Whether the Docker daemon answers and has the images the docker tests run."""
    global _DOCKER
    if _DOCKER is None:
        from predictors.agent.images import DockerUnavailable, docker_client

        try:
            client = docker_client()
        except DockerUnavailable as exc:
            _DOCKER = (False, str(exc))
        else:
            missing = [image for image in DOCKER_IMAGES if not client.images.list(name=image)]
            _DOCKER = (
                (False, f"missing images {', '.join(missing)}: run `make images`")
                if missing
                else (True, "")
            )
    return _DOCKER


@pytest.fixture(autouse=True)
def _background_finishes_done() -> Iterator[None]:
    """After each test, the traces it finished in the background (`traces.finishing`, run on
    commit) are done: no finish outlives its test, holding a database connection when the
    next test, or the end of the session, clears the database."""
    yield
    finishing = sys.modules.get("traces.finishing")
    if finishing is not None:
        finishing.wait()


# Alice and Bob, the users most tests need; without a password (tests sign in with
# force_login or a token).
@pytest.fixture
def alice(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("bob")


@pytest.fixture
def make_user(db) -> Callable[..., object]:  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    def make(username: str = "alice", password: str = "correct-horse-battery"):  # type: ignore[no-untyped-def]
        return get_user_model().objects.create_user(username=username, password=password)

    return make


@pytest.fixture
def make_client(db) -> Iterator[Callable[..., object]]:  # type: ignore[no-untyped-def]
    """An API client authenticated with a fresh token of the given scopes for `user`."""
    from rest_framework.test import APIClient

    from hub.models import ApiToken

    def make(user=None, scopes=("read", "write", "evaluate")):  # type: ignore[no-untyped-def]
        client = APIClient()
        if user is not None:
            _token, raw = ApiToken.issue(user, name="test", scopes=list(scopes))
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
            client.raw_token = raw  # type: ignore[attr-defined]
        return client

    yield make


# The users' API clients. Alice has two, which differ in the `write` scope: the full one uploads
# manifests, the evaluator's launches and reads evaluations only.
@pytest.fixture
def alice_full_client(make_client, alice):  # type: ignore[no-untyped-def]
    """Alice with a read, write and evaluate token."""
    return make_client(alice)


@pytest.fixture
def alice_evaluator_client(make_client, alice):  # type: ignore[no-untyped-def]
    """Alice with a read and evaluate token (no write)."""
    return make_client(alice, scopes=["read", "evaluate"])


@pytest.fixture
def bob_client(make_client, bob):  # type: ignore[no-untyped-def]
    """Bob with a read, write and evaluate token."""
    return make_client(bob)


@pytest.fixture
def agent(make_client, django_user_model):  # type: ignore[no-untyped-def]
    """The agent token of the operator (staff) who runs the hosts of the shared pool."""
    operator = django_user_model.objects.create_user("operator", is_staff=True)
    return make_client(operator, scopes=["agent"])


@pytest.fixture
def signed_in(alice):  # type: ignore[no-untyped-def]
    """A browser's Django test client, alice signed in."""
    from django.test import Client

    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture(scope="session", autouse=True)
def broker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The hub's Celery broker, one for the whole session. On the embedded default (a
    filesystem broker) it is moved to a folder of the session's own, so that no agent of a hub
    running on this machine sees the tests' jobs. Set once, before any connection is pooled."""
    from mlmodelscope.celery import app
    from tests.evaluations.factories import Broker

    if str(app.conf.broker_url).startswith("filesystem"):
        folder = tmp_path_factory.mktemp("broker")
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir()
        app.conf.broker_transport_options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        }
    yield Broker(app)
