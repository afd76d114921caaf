"""The first divergence, end to end: real evaluations on a live hub with a real agent, each
re-run by the agent with every layer's output captured (`capture_inputs`), compared by the
hub, shown on its page in Chromium and printed by `mlms diverge`.

- shapes-color with `color_mode=BGR` against RGB: the divergence is at the input, with the
  parameter named from "what differs";
- digits-cnn in PyTorch against ONNX Runtime: no layer diverges beyond float32 tolerance;
- digits-cnn against a copy of its ONNX file with one convolution's weights scaled: the first
  divergence is that convolution; against an unchanged run, none;
- bad requests: the same evaluation twice, another model, an unknown field, an evaluation
  another user may not read, another user's divergence."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import sign_in_to_hub
from tests.livehub import ROOT, LiveHub, running_hub
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    """A hub on the zoo's store with one agent offering the three frameworks."""
    store = zoo_store(("digits", "digits-cnn", "shapes-color"))
    settings = {"ARTIFACT_ROOT": str(store), "HOST_LIVE_SECONDS": "5"}
    with running_hub(
        tmp_path_factory.mktemp("divergence"), manifests=True, users=True, settings=settings
    ) as running:
        running.start_agent("all-a", frameworks="onnxruntime,pytorch,tensorflow")
        running.wait(lambda: "all-a" in running.live_hosts(), "the agent", 90)
        yield running


def _run(hub: LiveHub, **fields: Any) -> str:
    status, body = hub.request(
        "POST", "/api/v1/evaluations/", {"batch_sizes": [1], "limit": 64, "host": "all-a", **fields}
    )
    assert status == 201, body
    evaluation_id = str(body["evaluations"][0]["id"])
    finished = hub.finished(evaluation_id, timeout=180)
    assert finished["status"] == "succeeded", finished["history"]
    return evaluation_id


def _diverge(hub: LiveHub, a: str, b: str, **fields: Any) -> dict[str, Any]:
    status, body = hub.request("POST", "/api/v1/divergence/", {"a": a, "b": b, **fields})
    assert status == 201, body
    assert body["status"] == "pending" and len(body["inputs"]) >= 1

    def done() -> dict[str, Any] | None:
        status, found = hub.request("GET", f"/api/v1/divergence/{body['id']}/")
        assert status == 200, found
        return found if found["status"] != "pending" else None

    found: dict[str, Any] = hub.wait(done, "the divergence", 240)
    assert found["status"] == "done", found
    return found


def test_bgr_against_rgb_diverges_at_the_input_naming_color_mode(
    hub: LiveHub, hub_page: Any, shoot: Any
) -> None:
    common = {"model": "shapes-color", "framework": "onnxruntime", "dataset": "shapes-color"}
    rgb = _run(hub, **common)
    bgr = _run(hub, **common, overrides=["inputs.0.parameters.color_mode=BGR"])
    divergence = _diverge(hub, rgb, bgr)
    # The inputs chosen: first those the two disagree on (BGR gets some wrong).
    assert "disagreeing" in divergence["chosen_because"]
    first = divergence["report"]["first_divergence"]
    assert first["at"] == "input", first
    assert [row["key"] for row in first["parameters"]] == ["inputs.0.parameters.color_mode"]
    assert first["parameters"][0]["values"] == ["RGB", "BGR"]
    # The capture runs are the user's own evaluations, on the host A and B ran on.
    for key in ("capture_a", "capture_b"):
        run = hub.evaluation(divergence[key]["id"])
        assert run["host"] == "all-a" and run["status"] == "succeeded"

    page = hub_page
    sign_in_to_hub(page)
    # From the compare page's button.
    page.goto(f"/compare/?evaluations={rgb},{bgr}")
    page.locator(f'button[data-diverge="{bgr}"]').click()
    expect(page.locator("#divergence")).to_be_visible()
    expect(page.locator("#first-divergence")).to_have_attribute("data-at", "input", timeout=240_000)
    expect(page.locator("#differing-parameters")).to_contain_text("color_mode")
    shoot(page, "divergence-bgr")


def test_pytorch_against_onnxruntime_has_no_divergence(
    hub: LiveHub, hub_page: Any, shoot: Any
) -> None:
    common = {"model": "digits-cnn", "dataset": "digits"}
    ort = _run(hub, **common, framework="onnxruntime")
    torch = _run(hub, **common, framework="pytorch")
    divergence = _diverge(hub, ort, torch, inputs=[0, 5])
    assert divergence["inputs"] == [0, 5] and divergence["chosen_because"] == ["chosen"] * 2
    report = divergence["report"]
    assert report["first_divergence"] is None, report["first_divergence"]
    assert report["layers"], report
    assert all(row["relative_error"] < 1e-4 for row in report["layers"]), report["layers"]

    page = hub_page
    sign_in_to_hub(page)
    page.goto(divergence["url"])
    expect(page.locator("#first-divergence")).to_have_attribute("data-at", "")
    expect(page.locator("#divergence-layers tbody tr")).to_have_count(len(report["layers"]))
    expect(page.locator("#divergence-plot")).to_have_attribute(
        "data-drawn", str(len(report["layers"]))
    )
    # Nothing runs off a phone's screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("#divergence-plot")).to_have_attribute(
        "data-drawn", str(len(report["layers"]))
    )
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1
                && !e.closest('.scroll-x'))
            .map((e) => e.tagName + '#' + e.id + '.' + e.className).slice(0, 5)"""
    )
    assert wide == [], wide
    shoot(page, "divergence-none")

    # The CLI prints the same verdict.
    printed = subprocess.run(
        [sys.executable, "-m", "predictors.cli", "diverge", ort, torch, "--inputs", "0,5",
         "--hub", hub.url, "--token", hub.token],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert "no divergence beyond the tolerance" in printed.stdout


def test_a_copy_with_one_layer_changed_diverges_at_that_layer(hub: LiveHub) -> None:
    """digits-cnn against a copy of its ONNX file whose second convolution's weights are
    scaled by 1.01, uploaded as a model of alice's own: the first divergence is exactly that
    layer, and the layers before it agree to rounding."""
    import onnx
    import requests
    import yaml
    from onnx import numpy_helper

    store = zoo_store(("digits-cnn",))
    proto = onnx.load(str(store / "models/digits-cnn/1.0.0/digits-cnn.onnx"))
    node = next(n for n in proto.graph.node if n.name == "/2/Conv")
    weight = next(t for t in proto.graph.initializer if t.name == node.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.01, weight.name))
    manifest = yaml.safe_load((ROOT / "manifests/models/digits-cnn/onnxruntime.yaml").read_text())
    manifest.update(name="digits-cnn-changed", visibility="private")
    manifest["model"] = {"graph_path": "repo://models/digits-cnn-changed/1.0.0/changed.onnx"}
    uploaded = requests.post(
        f"{hub.url}/api/v1/manifests/",
        headers=hub.auth_headers(),
        data={"manifest": yaml.safe_dump(manifest)},
        files={"files": ("changed.onnx", proto.SerializeToString())},
        timeout=60,
    )
    assert uploaded.status_code == 201, uploaded.text
    common = {"framework": "onnxruntime", "dataset": "digits"}
    original = _run(hub, model="digits-cnn", **common)
    changed = _run(hub, model="digits-cnn-changed", **common)
    report = _diverge(hub, original, changed, inputs=[0, 1, 2])["report"]
    first = report["first_divergence"]
    assert first is not None and first["at"] == "layer", report
    assert first["name"] == "2", first  # the Sequential's third module, /2/Conv
    before = report["layers"][: first["row"]]
    assert before and all(row["relative_error"] < 1e-6 for row in before)
    # Against an unchanged run of the same model: no divergence.
    again = _run(hub, model="digits-cnn", **common)
    assert _diverge(hub, original, again, inputs=[0])["report"]["first_divergence"] is None


def test_bad_requests_are_refused_by_name(hub: LiveHub) -> None:
    a = _run(hub, model="digits-cnn", framework="onnxruntime", dataset="digits")
    a2 = _run(hub, model="digits-cnn", framework="onnxruntime", dataset="digits")
    b_other_dataset = _run(
        hub, model="shapes-color", framework="onnxruntime", dataset="shapes-color"
    )
    for body, status_code, field in (
        ({"a": a, "b": a}, 400, "b"),
        ({"a": a}, 400, "b"),
        ({"a": a, "b": "not-an-id"}, 400, "b"),
        ({"a": a, "b": "00000000-0000-0000-0000-000000000000"}, 404, None),
        ({"a": a, "b": a, "colour": 1}, 400, "colour"),
        ({"a": a, "b": a, "inputs": [-1]}, 400, "inputs"),
        ({"a": a, "b": a, "tolerance": 0}, 400, "tolerance"),
        ({"a": a, "b": b_other_dataset}, 400, "b"),
        ({"a": a, "b": a2, "inputs": [0, 99999]}, 400, "inputs"),
    ):
        status, answer = hub.request("POST", "/api/v1/divergence/", body)
        assert status == status_code, (body, answer)
        if field:
            assert field in str(answer), (body, answer)
    # Another user may read neither alice's evaluation nor her divergence.
    other = hub.create_token("mallory", "read,evaluate")
    status, answer = hub.request("POST", "/api/v1/divergence/", {"a": a, "b": a}, token=other)
    assert status == 404, answer
    status, mine = hub.request("GET", "/api/v1/divergence/")
    assert status == 200
    for found in mine["results"][:1]:
        status, answer = hub.request("GET", f"/api/v1/divergence/{found['id']}/", token=other)
        assert status == 404, answer
