"""Upload → launch → live result, in a real browser against a real hub (daphne, WebSockets) and a
real agent (`python -m predictors.agent`) running ONNX Runtime: nothing is simulated."""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.livehub import PASSWORD
from tests.predictors.zoo_store import zoo_store

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.frameworks,
    pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime"),
]


def _upload(page, manifest: Path, files: list[Path]) -> None:  # type: ignore[no-untyped-def]
    page.goto("/upload/")
    page.get_by_label("…or the manifest file").set_input_files(str(manifest))
    page.get_by_label("Model or dataset files").set_input_files([str(f) for f in files])
    page.get_by_label("Who can see it").select_option("public")
    page.get_by_role("button", name="Validate and upload").click()
    expect(page.locator(".message.success")).to_contain_text("Uploaded")


def _wait_for_host(hub, name: str, agent, seconds: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status, body = hub.request("GET", "/api/v1/hosts/?live=1")
        if status == 200 and any(h["name"] == name for h in body["results"]):
            return
        assert agent.poll() is None, f"the agent stopped:\n{hub.logs()}"
        time.sleep(0.5)
    raise AssertionError(f"the agent did not register within {seconds} s:\n{hub.logs()}")


def test_upload_launch_and_watch_a_real_evaluation_live(hub, hub_page, shoot) -> None:
    page = hub_page
    store = zoo_store(("digits-cnn",))
    page.goto("/accounts/login/?next=/upload/")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    data = store / "datasets" / "digits" / "1.0.0"
    _upload(
        page,
        REPO / "manifests" / "datasets" / "digits.yaml",
        [data / "train.parquet", data / "validation.parquet"],
    )
    _upload(
        page,
        REPO / "manifests" / "models" / "digits-cnn" / "onnxruntime.yaml",
        [store / "models" / "digits-cnn" / "1.0.0" / "digits-cnn.onnx"],
    )
    expect(page).to_have_url("/models/digits-cnn/?version=1.0.0&framework=onnxruntime")
    expect(page.locator("#files .sha")).not_to_contain_text("not stored")

    agent = hub.start_agent("e2e-cpu")
    _wait_for_host(hub, "e2e-cpu", agent)
    page.goto("/evaluate/?model=digits-cnn")
    expect(page.locator("#live-hosts")).to_contain_text("e2e-cpu")
    expect(page.get_by_label("Dataset", exact=True)).to_have_value("digits")
    page.get_by_label("Limit").fill("64")
    page.get_by_label("Batch sizes").fill("1, 8")
    page.get_by_role("button", name="Launch").click()

    expect(page).to_have_url(re.compile(r"/evaluations/[0-9a-f-]{36}/$"))
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#live")).to_have_class(re.compile(r"live (connected|done)"))
    try:
        expect(page.locator("#status")).to_have_text("succeeded", timeout=120_000)
    except AssertionError:
        raise AssertionError(
            f"agent exit code {agent.poll()}; page: {page.locator('#status-card').inner_text()}"
            f"\n{hub.logs()}"
        ) from None
    assert page.evaluate("() => window.__notReloaded === true")
    # Progress counts predictions (batches, warm-up included): 2 + 64 at batch size 1, 2 + 8 at
    # 8 (the job's default warm-up, 2).
    expect(page.locator("#progress-text")).to_have_text("76 of 76 predictions (100 %)")
    expect(page.locator("#fact-host")).to_have_text("e2e-cpu")
    expect(page.locator("#latency tbody tr")).to_have_count(2)
    top1 = page.locator("#accuracy .metric-box").first.locator(".value").inner_text()
    assert float(top1.rstrip(" %")) > 80  # the trained digits model, on held-out digits
    expect(page.locator("#stack")).to_contain_text("onnxruntime")
    # The sharing panel and the span count follow the run without a reload: Publish is
    # offered once it has succeeded, and the spans stored are counted.
    expect(page.locator("#publish-button")).to_be_enabled()
    expect(page.locator("#publish-refusal")).to_have_count(0)
    expect(page.locator("#fact-spans")).not_to_have_text(re.compile(r"^0 stored"))
    assert page.evaluate("() => window.__notReloaded === true")
    shoot(page, "end-to-end-evaluation-succeeded")

    page.goto("/models/digits-cnn/")
    expect(page.locator("#evaluations tbody tr")).to_have_count(1)
    expect(page.locator("#evaluations")).to_contain_text("succeeded")
