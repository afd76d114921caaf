"""`manage.py agent_token`: the token of the agent `make run` starts, in a file of mode 600,
kept across restarts."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest
from django.core.management import call_command

from hub.authentication import authenticate_token

pytestmark = pytest.mark.django_db


def _run(path: Path) -> str:
    out = io.StringIO()
    call_command("agent_token", "--file", str(path), stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def test_the_command_writes_an_agent_token_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "agent.token"

    assert _run(path) == str(path)
    raw = path.read_text().strip()
    token = authenticate_token(raw)
    assert token.scopes == ["agent"] and token.user.username == "local-agent"
    assert not token.user.has_usable_password()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    _run(path)
    assert path.read_text().strip() == raw


def test_a_revoked_token_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "agent.token"
    _run(path)
    old = path.read_text().strip()
    authenticate_token(old).__class__.objects.update(revoked_at="2020-01-01T00:00:00Z")

    _run(path)

    assert path.read_text().strip() != old
