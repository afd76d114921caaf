"""Fixtures of the browser pages' tests: Debian's Chromium driven by Playwright, signed in or not.

A test marked `browser` runs when /usr/bin/chromium exists and is skipped otherwise, except in
CI (CI=true), where a missing Chromium fails it. Playwright never downloads a browser here: it
launches the system's Chromium by path. Every test can save full-page screenshots with `shoot`
under tests/artifacts/screenshots/ (ignored by git) for a person to look at.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from tests.evaluations.factories import catalog_manifests, register_hosts
from tests.livehub import PASSWORD, LiveHub, running_hub

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
IN_CI = os.environ.get("CI") == "true"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("browser") and not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"CI requires it: needs Chromium at {CHROMIUM}")
        pytest.skip(f"needs Chromium at {CHROMIUM} (apt-get install chromium)")


@pytest.fixture(autouse=True)
def artifact_root(tmp_path: Path, settings: Any) -> Path:
    """Every test gets its own empty artifact store, and no sweep loop runs in the test
    process (the in-process live server is not the ASGI application anyway)."""
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.ARTIFACT_ROOT = root
    settings.EVALUATION_SWEEP_SECONDS = 0
    return root


@pytest.fixture
def builtin_manifests(transactional_db: None) -> None:
    """The built-in manifests of manifests/, as `make run` loads them (public, no owner)."""
    call_command("load_manifests", stdout=open(os.devnull, "w"))  # noqa: SIM115


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module (Debian's, never a downloaded one).

    Playwright's sync API keeps an event loop running in the test's thread while it is
    started, which Django takes for an async context and refuses ORM calls in. The tests call
    the ORM only between browser steps, never concurrently with them, so Django's check is
    turned off for as long as this browser lives, and Playwright is stopped after the module.
    """
    if not CHROMIUM.exists():
        pytest.skip(f"needs Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM),
                headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            yield chromium
            chromium.close()
    finally:
        if before is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


def _tab(browser: Any, base_url: str) -> Iterator[Any]:
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    tab.goto("about:blank")  # stop a page's polling before the database is flushed
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A fresh browser tab (own cookies) whose relative URLs go to the live server (Django's
    threaded WSGI server on the test database: HTTP only, no WebSockets)."""
    yield from _tab(browser, live_server.url)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LiveHub]:
    """A hub served by daphne in its own process, WebSockets included, on the embedded default
    in a fresh folder (tests.livehub), so that the test's browser, the test itself
    (over HTTP, as an agent or an API client would) and an agent process all talk to one hub.
    alice signs in with livehub.PASSWORD; `hub.token` is hers, `hub.agent_token` an operator's."""
    with running_hub(tmp_path, users=True) as running:
        yield running


@pytest.fixture
def model_and_host(hub: LiveHub) -> dict[str, Any]:
    """A public model `m` and dataset `d` (tests/hub/factories.py) on `hub`, and a registered
    host `cpu-1` running onnxruntime on cpu, so that an evaluation of `m` can be launched.
    The host as the API answered its registration."""
    from tests.hub.factories import dataset_yaml, model_yaml

    for text in (model_yaml("m", visibility="public"), dataset_yaml("d", visibility="public")):
        status, body = hub.request(
            "POST", "/api/v1/manifests/", text.encode(), content_type="application/x-yaml"
        )
        assert status == 201, body
    status, host = hub.request(
        "POST",
        "/api/v1/hosts/",
        {
            "name": "cpu-1",
            "frameworks": [{"name": "onnxruntime", "version": "1.17.0", "devices": ["cpu"]}],
            "queues": ["host.cpu-1", "onnxruntime.cpu"],
            "pool": True,
        },
        token=hub.agent_token,
    )
    assert status == 201, host
    return host  # type: ignore[no-any-return]


@pytest.fixture
def hub_page(browser: Any, hub: LiveHub) -> Iterator[Any]:
    """A fresh browser tab whose relative URLs go to `hub`."""
    yield from _tab(browser, hub.url)


def sign_in_to_hub(page: Any, next_path: str = "/evaluations/") -> None:
    """Sign alice in on a page of a live hub (`hub_page`), through the sign-in form."""
    page.goto(f"/accounts/login/?next={next_path}")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def sign_in(live_server: Any) -> Callable[[Any, Any], None]:
    """Sign `user` in on `page` with a real session cookie of the live server."""

    def sign(page: Any, user: Any) -> None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        page.context.add_cookies(
            [{"name": cookie.key, "value": cookie.value, "url": live_server.url}]
        )

    return sign


@pytest.fixture
def shoot() -> Callable[[Any, str], Path]:
    """Save a full-page screenshot as tests/artifacts/screenshots/<name>.png."""

    def save(page: Any, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def hosts(make_client, django_user_model, agent):  # type: ignore[no-untyped-def]
    """bob's catalog (`catalog_manifests`) and the pool's hosts, registered by `agent`."""
    bob = django_user_model.objects.create_user("bob")
    catalog_manifests(make_client(bob, scopes=["read", "write"]))
    return register_hosts(agent)
