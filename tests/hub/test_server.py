"""The hub as `make run` serves it: migrate, load the built-in manifests, daphne on a port."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.livehub import ROOT, running_hub


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback only)
        return response.status, response.read()


def test_daphne_serves_the_builtin_manifests_on_the_embedded_default(tmp_path: Path) -> None:
    builtin = sorted((ROOT / "manifests").rglob("*.yaml"))
    assert builtin, "the repository ships built-in manifests"

    with running_hub(tmp_path, manifests=True) as hub:
        status, body = _get(f"{hub.url}/api/v1/manifests/?page_size=500")
        assert status == 200
        listing = json.loads(body)
        assert listing["count"] == len(builtin)
        names = {item["name"] for item in listing["results"]}
        assert {"digits-cnn", "digits"} <= names
        status, page = _get(f"{hub.url}/")
        assert status == 200 and b"digits-cnn" in page
        status, docs = _get(f"{hub.url}/api/docs/")
        assert status == 200
