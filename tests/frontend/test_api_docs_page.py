"""The API reference pages (ReDoc, Swagger UI) load their scripts, styles and fonts from the
hub itself (ReDoc's template asked Google for web fonts)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("path", ["/api/redoc/", "/api/docs/"])
def test_the_api_reference_loads_its_code_and_fonts_from_the_hub(
    page: Any, live_server: Any, path: str
) -> None:
    fetched: set[tuple[str, str]] = set()

    def seen(request: Any) -> None:
        url = urlparse(request.url)
        if url.scheme in ("http", "https"):  # not the blob: of a worker, nor data:
            fetched.add((request.resource_type, url.netloc))

    page.on("request", seen)
    page.goto(path)
    expect(page.get_by_text("MLModelScope").first).to_be_visible(timeout=20_000)
    page.wait_for_load_state("networkidle")
    here = urlparse(live_server.url).netloc
    elsewhere = {
        (kind, host)
        for kind, host in fetched
        if kind in ("script", "stylesheet", "font", "xhr", "fetch") and host != here
    }
    assert not elsewhere, elsewhere
