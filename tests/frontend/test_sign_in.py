"""Signing in: back to the page the user came from, and to the catalog where there was none
(not to the tokens page)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

PASSWORD = "a long enough password 123"


def _sign_in(page: Any) -> None:
    page.get_by_label("User name").fill("carol")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()


def test_signing_in_lands_on_the_page_it_came_from_else_the_catalog(
    page: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("carol", password=PASSWORD)
    page.goto("/accounts/login/")
    _sign_in(page)
    page.wait_for_load_state()
    assert urlparse(page.url).path == "/"
    expect(page.get_by_role("heading", level=1)).not_to_have_text("API tokens")

    page.context.clear_cookies()
    page.goto("/leaderboards/")
    page.get_by_role("link", name="Sign in").click()
    _sign_in(page)
    page.wait_for_load_state()
    assert urlparse(page.url).path == "/leaderboards/"
