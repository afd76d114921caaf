"""Suite-wide fixtures and the service markers.

A test marked `postgres` or `redis` runs when that service is configured and reachable, and is
skipped otherwise, except in CI (CI=true), where a missing service fails the test instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.services import reachable

IN_CI = os.environ.get("CI") == "true"


def _require(condition: bool, why: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI requires it: {why}")
    pytest.skip(why)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres"):
        _require(
            os.environ.get("DATABASE_URL", "").startswith(("postgres", "pgsql"))
            and reachable("postgres"),
            "needs PostgreSQL (run with DATABASE_URL=postgres://…)",
        )
    if item.get_closest_marker("redis"):
        _require(
            os.environ.get("CHANNEL_LAYER_URL", "").startswith("redis") and reachable("redis"),
            "needs Redis (run with CHANNEL_LAYER_URL=redis://… and CELERY_BROKER_URL=redis://…)",
        )


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
