"""Fixtures of the hub's tests (the users, `make_client` and the users' clients are suite-wide)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def artifact_root(tmp_path: Path, settings) -> Path:  # type: ignore[no-untyped-def]
    """Every test gets its own empty artifact store."""
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.ARTIFACT_ROOT = root
    return root


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def alice_agent(make_client, alice):  # type: ignore[no-untyped-def]
    """An agent of Alice's: a token with the agent scope only."""
    return make_client(alice, scopes=["agent"])


@pytest.fixture
def bob_agent(make_client, bob):  # type: ignore[no-untyped-def]
    return make_client(bob, scopes=["agent"])


@pytest.fixture
def operator_agent(make_client, django_user_model):  # type: ignore[no-untyped-def]
    """An agent of an operator (staff), whose hosts may join the shared pool."""
    return make_client(
        django_user_model.objects.create_user("ops", is_staff=True), scopes=["agent"]
    )
