"""The tokens page: create (the value shown once), list, revoke."""

from __future__ import annotations

import hashlib

import pytest
from playwright.sync_api import expect

from hub.models import ApiToken
from tests.hub.factories import TOKENS_URL, bearer_client

pytestmark = pytest.mark.browser


def test_a_new_token_is_shown_once_and_works(page, sign_in, alice, shoot) -> None:
    sign_in(page, alice)
    page.goto("/tokens/")
    expect(page.locator("#token-list tr.empty")).to_have_text("No tokens yet.")

    page.get_by_label("Name").fill("laptop")
    page.get_by_role("checkbox", name="evaluate").check()
    page.get_by_label("Expires in (days)").fill("30")
    page.get_by_role("button", name="Create token").click()

    notice = page.locator("#new-token")
    expect(notice).to_contain_text("it will not be shown again")
    raw = page.get_by_label("The new token").input_value()
    row = ApiToken.objects.get(user=alice, name="laptop")
    assert row.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert row.scopes == ["read", "evaluate"]
    assert row.expires_at is not None
    assert bearer_client(raw).get(TOKENS_URL).status_code == 200
    page.get_by_role("button", name="Copy").click()
    expect(notice.locator(".copied")).not_to_be_empty()
    expect(page.locator("#token-list tbody tr")).to_have_count(1)
    shoot(page, "tokens-created")

    page.reload()  # a reload neither mints a second token nor shows this one again
    expect(page.locator("#token-list tbody tr")).to_have_count(1)
    assert ApiToken.objects.filter(user=alice).count() == 1
    page.goto("/tokens/")

    expect(page.locator("#new-token")).to_have_count(0)
    assert raw not in page.content()
    expect(page.locator(f'#token-list tr[data-token="{row.pk}"]')).to_contain_text(row.prefix)


def test_revoking_a_token_stops_it_working(page, sign_in, alice, shoot) -> None:
    row, raw = ApiToken.issue(alice, name="old", scopes=["read"])
    sign_in(page, alice)
    page.goto("/tokens/")

    # Revoking asks first: declined, the token still works.
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Revoke token old").click()
    expect(page.locator(f'#token-list tr[data-token="{row.pk}"] .status')).not_to_have_text(
        "revoked"
    )
    assert bearer_client(raw).get(TOKENS_URL).status_code == 200
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke token old").click()

    expect(page.locator(f'#token-list tr[data-token="{row.pk}"] .status')).to_have_text("revoked")
    expect(page.get_by_role("button", name="Revoke token old")).to_have_count(0)
    assert bearer_client(raw).get(TOKENS_URL).status_code == 401
    shoot(page, "tokens-revoked")


def test_a_token_without_scopes_is_refused_beside_the_field(page, sign_in, alice) -> None:
    sign_in(page, alice)
    page.goto("/tokens/")
    page.get_by_label("Name").fill("nothing")
    page.get_by_role("checkbox", name="read").uncheck()
    page.get_by_role("button", name="Create token").click()

    expect(page.locator("#scopes-errors")).to_contain_text("This field is required.")
    expect(page.get_by_label("Name")).to_have_value("nothing")
    assert not ApiToken.objects.exists()


def test_the_tokens_page_can_be_used_with_the_keyboard(page, sign_in, alice) -> None:
    sign_in(page, alice)
    page.goto("/tokens/")
    page.get_by_label("Name").focus()
    page.keyboard.type("keys")
    page.keyboard.press("Tab")  # the first scope, read, checked by default
    page.keyboard.press("Tab")
    page.keyboard.press("Space")  # write
    page.get_by_label("Expires in (days)").focus()
    page.keyboard.press("Enter")

    expect(page.locator("#new-token")).to_be_visible()
    assert ApiToken.objects.get(name="keys").scopes == ["read", "write"]
