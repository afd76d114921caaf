"""`manage.py reference_results`, which `make run` runs in the background: the built-in zoo,
evaluated by real agents in every framework they have, published as reference results, so
that a fresh hub's leaderboards are not empty; run again, it launches nothing that exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both_stacks]


def test_the_zoo_is_evaluated_and_published_once(tmp_path: Path, agents_hub: Any) -> None:
    with agents_hub(tmp_path / "hub") as hub:
        # Before any agent is live the command waits; here both pool agents are up.
        output = hub.manage(
            "reference_results", "--model", "digits-cnn", "--limit", "64", "--timeout", "300"
        )
        assert "digits-cnn [onnxruntime] on digits: launched 2" in output, output
        assert output.splitlines()[-1] == (
            "reference results: 2 published, 0 failed, 0 still running"
        ), output

        boards = requests.get(hub.url + "/api/v1/leaderboards/", timeout=30).json()
        assert [(b["dataset"], b["entries"]) for b in boards] == [("digits", 2)]
        rows = requests.get(hub.url + boards[0]["api_url"], timeout=30).json()["results"]
        assert sorted(row["host"] for row in rows) == ["e2e-a", "e2e-b"]
        assert {row["framework"] for row in rows} == {"onnxruntime"}
        assert all(row["count"] == 64 and row["p50_ms"] > 0 for row in rows)
        # The same configuration on two equal hosts: each row says whether the other agrees
        # (top-1 is equal; latency may differ by more than the tolerance on a loaded machine).
        assert all(row["agreeing_runs"] in (1, 2) for row in rows)
        page = requests.get(hub.url + "/leaderboards/image_classification/digits/", timeout=30)
        assert page.status_code == 200 and page.text.count('data-framework="onnxruntime"') == 2

        again = hub.manage("reference_results", "--model", "digits-cnn")
        assert "digits-cnn [onnxruntime]: reference exists" in again
        assert again.splitlines()[-1].startswith("reference results: 0 published")

        # A detector that keeps each image's size, on images of many sizes: launched at batch
        # size 1 (a batch holds images of one size), and it succeeds.
        detector = hub.manage(
            "reference_results", "--model", "shapes-detector", "--limit", "24", "--timeout", "300"
        )
        assert detector.splitlines()[-1] == (
            "reference results: 2 published, 0 failed, 0 still running"
        ), detector
        status, listed = hub.get("evaluations/?model=shapes-detector")
        assert status == 200, listed
        batch_sizes = {
            tuple(hub.evaluation(e["id"])["request"]["batch_sizes"]) for e in listed["results"]
        }
        assert batch_sizes == {(1,)} and len(listed["results"]) == 2, listed
        boards = requests.get(hub.url + "/api/v1/leaderboards/", timeout=30).json()
        assert ("shapes-boxes", 2) in [(b["dataset"], b["entries"]) for b in boards]
