"""API tokens: created through the API, the /tokens/ page and `manage.py create_token`; shown
once, stored as a sha256, scoped, revocable and expiring."""

from __future__ import annotations

import hashlib
import io
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from hub.models import ApiToken
from tests.hub.factories import TOKENS_URL, bearer_client, error_paths


def _create(client: APIClient, **body):  # type: ignore[no-untyped-def]
    return client.post(TOKENS_URL, body, format="json")


# -- the API ---------------------------------------------------------------------------------


def test_a_created_token_is_returned_once_and_works(alice_full_client) -> None:
    response = _create(
        alice_full_client, name="laptop", scopes=["read", "write"], expires_in_days=30
    )

    assert response.status_code == 201, response.content
    body = response.json()
    raw = body["token"]
    assert raw.startswith("mlms_")
    assert body["scopes"] == ["read", "write"]
    assert body["active"] is True
    row = ApiToken.objects.get(pk=body["id"])
    assert row.user.username == "alice"
    assert timedelta(days=29) < row.expires_at - timezone.now() <= timedelta(days=30)
    assert bearer_client(raw).get(TOKENS_URL).status_code == 200


def test_the_token_list_and_detail_never_show_a_token(alice_full_client) -> None:
    created = _create(alice_full_client, name="laptop", scopes=["read"]).json()
    raw = created["token"]

    listing = alice_full_client.get(TOKENS_URL)
    detail = alice_full_client.get(f"{TOKENS_URL}{created['id']}/")

    assert listing.status_code == detail.status_code == 200
    assert {t["name"] for t in listing.json()["results"]} == {"test", "laptop"}
    for response in (listing, detail):
        assert raw.encode() not in response.content
        assert b'"token"' not in response.content
    assert detail.json()["prefix"] == raw[: len(detail.json()["prefix"])]


def test_the_database_holds_only_the_tokens_sha256(alice_full_client) -> None:
    raw = _create(alice_full_client, name="laptop", scopes=["read"]).json()["token"]

    row = ApiToken.objects.get(name="laptop")

    assert row.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    stored = [str(getattr(row, field.attname)) for field in ApiToken._meta.concrete_fields]
    assert not any(raw in value for value in stored)
    assert len(row.prefix) < len(raw) // 2


def test_a_users_token_list_holds_only_their_own_tokens(alice_full_client, bob_client) -> None:
    _create(bob_client, name="bobs", scopes=["read"])

    names = [t["name"] for t in alice_full_client.get(TOKENS_URL).json()["results"]]

    assert names == ["test"]


def test_a_revoked_token_gets_401(alice_full_client) -> None:
    created = _create(alice_full_client, name="laptop", scopes=["read"]).json()
    token = bearer_client(created["token"])
    assert token.get(TOKENS_URL).status_code == 200

    response = alice_full_client.delete(f"{TOKENS_URL}{created['id']}/")

    assert response.status_code == 204
    row = ApiToken.objects.get(pk=created["id"])
    assert row.revoked_at is not None
    assert token.get(TOKENS_URL).status_code == 401
    listed = {t["name"]: t for t in alice_full_client.get(TOKENS_URL).json()["results"]}
    assert listed["laptop"]["active"] is False


def test_a_token_can_revoke_itself(alice_full_client) -> None:
    own = ApiToken.objects.get(user__username="alice")

    assert alice_full_client.delete(f"{TOKENS_URL}{own.pk}/").status_code == 204
    assert alice_full_client.get(TOKENS_URL).status_code == 401


def test_another_users_token_cannot_be_read_or_revoked(alice_full_client, bob_client) -> None:
    created = _create(bob_client, name="bobs", scopes=["read"]).json()

    assert alice_full_client.get(f"{TOKENS_URL}{created['id']}/").status_code == 404
    assert alice_full_client.delete(f"{TOKENS_URL}{created['id']}/").status_code == 404
    assert ApiToken.objects.get(pk=created["id"]).revoked_at is None
    assert bearer_client(created["token"]).get(TOKENS_URL).status_code == 200


def test_an_expired_token_gets_401(alice_full_client) -> None:
    created = _create(alice_full_client, name="old", scopes=["read"]).json()
    ApiToken.objects.filter(pk=created["id"]).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )

    response = bearer_client(created["token"]).get(TOKENS_URL)

    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


@pytest.mark.parametrize(
    "scopes, wanted", [(["read", "write"], ["agent"]), (["read", "write"], ["read", "evaluate"])]
)
def test_a_token_cannot_create_a_token_with_scopes_it_lacks(
    make_client, alice, scopes, wanted
) -> None:
    client = make_client(alice, scopes=scopes)

    response = _create(client, name="wider", scopes=wanted)

    assert response.status_code == 403
    assert (set(wanted) - set(scopes)).pop() in response.json()["detail"]
    assert not ApiToken.objects.filter(name="wider").exists()


def test_a_token_can_create_a_narrower_token(make_client, alice) -> None:
    client = make_client(alice, scopes=["read", "write", "agent"])

    response = _create(client, name="agent", scopes=["agent"])

    assert response.status_code == 201
    assert ApiToken.objects.get(name="agent").scopes == ["agent"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "x", "scopes": ["root"]}, "scopes"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x", "scopes": "read"}, "scopes"),
        ({"name": "x", "scopes": [["read"]]}, "scopes"),
        ({"name": "x"}, "scopes"),
        ({"scopes": ["read"]}, "name"),
        ({"name": "", "scopes": ["read"]}, "name"),
        ({"name": "x" * 101, "scopes": ["read"]}, "name"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": 0}, "expires_in_days"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": -3}, "expires_in_days"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": 100000}, "expires_in_days"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": "soon"}, "expires_in_days"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": 1.5}, "expires_in_days"),
    ],
)
def test_an_invalid_token_request_gets_400_naming_the_field(alice_full_client, body, field) -> None:
    response = alice_full_client.post(TOKENS_URL, body, format="json")

    assert response.status_code == 400
    assert error_paths(response)[0].split(".")[0] == field
    assert ApiToken.objects.count() == 1


def test_a_token_request_that_is_not_an_object_gets_400(alice_full_client) -> None:
    response = alice_full_client.post(TOKENS_URL, ["read"], format="json")

    assert response.status_code == 400
    assert ApiToken.objects.count() == 1


# -- manage.py create_token ------------------------------------------------------------------


def _command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_token_prints_a_working_token_on_its_last_line(alice) -> None:
    out, _ = _command("--user", "alice", "--scopes", "read,write,evaluate")

    raw = out.strip().splitlines()[-1]
    row = ApiToken.objects.get(user=alice)
    assert row.scopes == ["read", "write", "evaluate"]
    assert row.expires_at is None
    response = bearer_client(raw).get(TOKENS_URL)
    assert response.status_code == 200
    assert [t["id"] for t in response.json()["results"]] == [row.pk]


def test_create_token_with_create_user_and_expiry(db) -> None:
    out, err = _command(
        "--user", "agent-7", "--scopes", "agent", "--create-user", "--expires-in", "7"
    )

    user = get_user_model().objects.get(username="agent-7")
    row = ApiToken.objects.get(user=user)
    assert row.scopes == ["agent"]
    assert timedelta(days=6) < row.expires_at - timezone.now() <= timedelta(days=7)
    assert row.key_hash == hashlib.sha256(out.strip().splitlines()[-1].encode()).hexdigest()
    assert "created user agent-7" in err


def test_create_token_refuses_an_unknown_user_without_create_user(db) -> None:
    with pytest.raises(CommandError, match="--user"):
        _command("--user", "nobody", "--scopes", "read")

    assert not get_user_model().objects.filter(username="nobody").exists()
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    "args, option",
    [
        (["--scopes", "read,admin"], "--scopes"),
        (["--scopes", ","], "--scopes"),
        (["--scopes", "read", "--expires-in", "0"], "--expires-in"),
        (["--scopes", "read", "--expires-in", "5000"], "--expires-in"),
        (["--scopes", "read", "--expires-in", "soon"], "--expires-in"),
    ],
)
def test_create_token_refuses_bad_options_naming_them(alice, args, option) -> None:
    with pytest.raises(CommandError, match=option):
        _command("--user", "alice", *args)

    assert not ApiToken.objects.exists()


# -- the /tokens/ page -----------------------------------------------------------------------


@pytest.fixture
def browser(alice) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(alice)
    return client


def test_the_tokens_page_needs_a_signed_in_user(db) -> None:
    response = Client().get("/tokens/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/tokens/"


def test_the_tokens_page_shows_a_new_token_once(browser) -> None:
    response = browser.post("/tokens/", {"name": "ci", "scopes": ["read", "evaluate"]}, follow=True)

    # Post, redirect, get: a reload of the page that shows it mints nothing.
    assert response.redirect_chain == [("/tokens/", 302)]
    assert response.status_code == 200
    row = ApiToken.objects.get(name="ci")
    assert row.scopes == ["read", "evaluate"]
    raw = response.context["created"]["raw"]
    assert raw.encode() in response.content
    assert row.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert bearer_client(raw).get(TOKENS_URL).status_code == 200

    reloaded = browser.get("/tokens/")

    assert raw.encode() not in reloaded.content
    assert row.prefix.encode() in reloaded.content
    assert ApiToken.objects.count() == 1


def test_the_tokens_page_refuses_a_token_without_scopes(browser) -> None:
    response = browser.post("/tokens/", {"name": "ci"})

    assert response.status_code == 200
    assert response.context["form"].errors["scopes"]
    assert not ApiToken.objects.exists()


def test_the_tokens_page_revokes_a_token(browser, alice) -> None:
    row, raw = ApiToken.issue(alice, name="old", scopes=["read"])

    response = browser.post("/tokens/", {"revoke": str(row.pk)})

    assert response.status_code == 200
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert bearer_client(raw).get(TOKENS_URL).status_code == 401


@pytest.mark.parametrize("revoke", ["other-user", "not-a-number", "", "\u00b2", "99999"])
def test_the_tokens_page_revokes_only_the_users_own_tokens(browser, bob, revoke) -> None:
    row, raw = ApiToken.issue(bob, name="bobs", scopes=["read"])
    value = str(row.pk) if revoke == "other-user" else revoke

    response = browser.post("/tokens/", {"revoke": value})

    assert response.status_code == 404
    row.refresh_from_db()
    assert row.revoked_at is None
    assert bearer_client(raw).get(TOKENS_URL).status_code == 200
