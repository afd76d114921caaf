"""Comparisons of real evaluations, run by real agents on a live hub, through the API and in
Chromium: digits-cnn in the three frameworks (full agreement, the largest difference of the
outputs, latency with confidence intervals, layers matched across frameworks, only the
framework's rows in "what differs"); shapes-color with and without the `color_mode=BGR`
override (the accuracy drop, the disagreeing inputs with their images, `color_mode` the only
processing difference); and one launch over two hosts, normalised across systems."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from predictors import statistics
from tests.frontend.conftest import sign_in_to_hub
from tests.livehub import LiveHub, running_hub
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ALL = "onnxruntime,pytorch,tensorflow"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    """A hub on the zoo's store with two agents of the shared pool: `all-a` offers the three
    frameworks, `ort-b` ONNX Runtime only."""
    store = zoo_store(("digits", "digits-cnn", "shapes-color"))
    settings = {"ARTIFACT_ROOT": str(store), "HOST_LIVE_SECONDS": "5"}
    with running_hub(
        tmp_path_factory.mktemp("compare"), manifests=True, users=True, settings=settings
    ) as running:
        running.start_agent("all-a", frameworks=ALL)
        running.start_agent("ort-b")
        running.wait(lambda: running.live_hosts() >= {"all-a", "ort-b"}, "both agents", 90)
        yield running


def _run(hub: LiveHub, **fields: Any) -> list[str]:
    status, body = hub.request(
        "POST", "/api/v1/evaluations/", {"batch_sizes": [1, 8], "limit": 96, **fields}
    )
    assert status == 201, body
    ids = [evaluation["id"] for evaluation in body["evaluations"]]
    for evaluation_id in ids:
        finished = hub.finished(evaluation_id, timeout=180)
        assert finished["status"] == "succeeded", finished["history"]
    return ids


def _compare(hub: LiveHub, ids: list[str], **params: str) -> dict[str, Any]:
    query = "&".join([f"evaluations={','.join(ids)}", *(f"{k}={v}" for k, v in params.items())])
    status, body = hub.request("GET", f"/api/v1/compare/?{query}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_digits_cnn_in_three_frameworks(hub: LiveHub, hub_page: Any, shoot: Any) -> None:
    ids = [
        _run(hub, model="digits-cnn", framework=framework, dataset="digits", host="all-a",
             trace_level="framework")[0]
        for framework in ("onnxruntime", "pytorch", "tensorflow")
    ]  # fmt: skip
    report = _compare(hub, ids)
    assert report["baseline"] == ids[0]

    accuracy = report["accuracy"]
    assert accuracy["distributions"].startswith("estimated from the top 5")
    for row in accuracy["rows"]:
        assert row["agreement"] == 1.0 and row["disagreeing_inputs"] == 0
        assert row["max_abs_difference"] < 1e-3 and row["js_mean"] < 1e-6
    assert accuracy["disagreements"] == []

    # What differs: only what comes with the framework.
    differing = {(row["section"], row["key"]) for row in report["differs"]["rows"]}
    assert ("request", "framework") in differing
    assert ("stack", "framework version") in differing
    assert all(row["follows"] == "framework" for row in report["differs"]["rows"]), report[
        "differs"
    ]
    assert ("stack", "CPU") not in differing and ("stack", "host") not in differing
    # TensorFlow's model takes NHWC: a processing difference that comes with the framework.
    assert ("processing", "inputs.0.parameters.layout") in differing

    # Latency per batch size: the median with its interval, and against the baseline the
    # ratio of medians with its interval, the test and a verdict.
    sizes = report["latency"]["batch_sizes"]
    assert [size["batch_size"] for size in sizes] == [1, 8]
    assert report["latency"]["test"].startswith("Mann–Whitney U")
    for size in sizes:
        for cell in size["cells"]:
            assert cell["p50_low_ms"] <= cell["p50_ms"] <= cell["p50_high_ms"]
            assert cell["text"]["p50"] == statistics.ms(cell["p50_ms"])
        assert size["cells"][0]["verdict"] is None and size["cells"][0]["difference"] is None
        for cell in size["cells"][1:]:
            difference = cell["difference"]
            assert difference["verdict"] in statistics.VERDICTS
            assert difference["low"] <= difference["ratio"] <= difference["high"]
            assert 0 <= difference["p_value"] <= 1
            assert cell["ratio"] == pytest.approx(cell["p50_ms"] / size["cells"][0]["p50_ms"])

    # Per layer: matched across frameworks by op type and order.
    layers = report["layers"]
    assert layers["matched_by"] == "op type and order"
    convolutions = [row for row in layers["rows"] if "conv" in (row["op_type"] or "").lower()]
    assert convolutions and all(None not in row["p50_ms"] for row in convolutions)

    # Theoretical performance: the same work counted from three files, in three frameworks.
    theoretical = report["theoretical"]
    assert theoretical["macs_agree"] is True
    assert [cell["macs"] for cell in theoretical["cells"]] == [1_330_432] * 3
    assert [cell["framework"] for cell in theoretical["cells"]] == [
        "onnxruntime", "pytorch", "tensorflow"
    ]  # fmt: skip
    for cell in theoretical["cells"]:
        assert [a["batch_size"] for a in cell["achieved"]] == [1, 8]
        # Each share of its run's roof: at most 100 %, the roof holding every point.
        assert all(0 < a["of_peak"] <= 1 for a in cell["achieved"])
        assert cell["peak_why"]

    page = hub_page
    sign_in_to_hub(page)
    page.goto(f"/compare/?evaluations={','.join(ids)}")
    expect(page.locator("#theoretical-table tbody tr")).to_have_count(3)
    expect(page.locator("#theoretical")).to_contain_text("The multiply-adds agree.")
    expect(page.locator("#theoretical-table td[data-macs='1330432']")).to_have_count(3)
    expect(page.locator("#accuracy-table .agreement").nth(2)).to_have_text("100.00 %")
    expect(page.locator("#latency-plot")).to_have_attribute("data-drawn", "3")
    expect(page.locator("#throughput-plot")).to_have_attribute("data-drawn", "3")
    assert page.locator("#latency-plot .scatterlayer .trace").count() == 3
    assert page.locator("#latency-plot .errorbar").count() > 0
    expect(page.locator("#layers-note")).to_contain_text("op type and order")
    assert page.locator("#layers-table tbody tr").count() >= 4
    differing_rows = page.locator("#differs-table tbody tr").count()
    assert differing_rows == len(report["differs"]["rows"])
    page.locator("#differs-toggle").click()
    expect(page.locator("#differs-toggle")).to_have_text("Only what differs")
    assert page.locator("#differs-table tbody tr").count() > differing_rows
    assert page.locator("#differs-table tbody tr:not(.differs)").count() > 0
    shoot(page, "compare-digits")

    # Pin another baseline.
    page.goto(f"/compare/?evaluations={','.join(ids)}")
    page.locator("#compared tbody tr").nth(1).get_by_role("link", name="◎ pin").click()
    expect(page.locator("#compared tbody tr.current")).to_have_attribute("data-evaluation", ids[1])


def test_shapes_color_with_and_without_the_bgr_override(
    hub: LiveHub, hub_page: Any, shoot: Any
) -> None:
    plain = _run(
        hub, model="shapes-color", framework="onnxruntime", dataset="shapes-color", host="ort-b"
    )[0]
    bgr = _run(hub, model="shapes-color", framework="onnxruntime", dataset="shapes-color",
               host="ort-b", overrides=["inputs.0.parameters.color_mode=BGR"])[0]  # fmt: skip
    report = _compare(hub, [plain, bgr])
    rows = report["accuracy"]["rows"]
    assert rows[1]["delta_top1"] < -0.2, rows
    assert rows[1]["agreement"] < 0.8
    disagreements = report["accuracy"]["disagreements"]
    assert disagreements and all(len(entry["top"]) == 2 for entry in disagreements)
    image = requests.get(
        hub.url + disagreements[0]["input_url"], headers=hub.auth_headers(), timeout=30
    )
    assert image.status_code == 200 and image.headers["Content-Type"] == "image/jpeg"
    assert image.content[:2] == b"\xff\xd8"  # a JPEG

    processing = [row["key"] for row in report["differs"]["rows"] if row["section"] == "processing"]
    assert processing == ["inputs.0.parameters.color_mode"]
    assert [
        row["values"] for row in report["differs"]["rows"] if row["section"] == "processing"
    ] == [["RGB", "BGR"]]

    page = hub_page
    sign_in_to_hub(page)
    page.goto(f"/compare/?evaluations={plain},{bgr}")
    expect(page.locator('#differs-table tr[data-section="processing"]')).to_have_count(1)
    expect(page.locator('#differs-table tr[data-section="processing"]')).to_contain_text(
        "color_mode"
    )
    first = page.locator("#disagreements img.input-image").first
    expect(first).to_be_visible()
    assert page.evaluate("img => img.naturalWidth", first.element_handle()) == 32
    shoot(page, "compare-shapes-color-bgr")


def test_one_launch_over_two_hosts_is_normalised_across_systems(
    hub: LiveHub, hub_page: Any
) -> None:
    ids = _run(hub, model="digits-cnn", framework="onnxruntime", dataset="digits", hosts="all")
    assert len(ids) == 2
    report = _compare(hub, ids)
    systems = report["systems"]
    assert systems is not None and len(systems["series"]) == 2
    assert {serie["host"] for serie in systems["series"]} == {"all-a", "ort-b"}
    assert all(point["normalised"] == 1.0 for point in systems["series"][0]["points"])
    assert [p["batch_size"] for p in systems["series"][1]["points"]] == [1, 8]
    differing = {row["key"] for row in report["differs"]["rows"]}
    assert "host" in differing and "framework" not in differing

    page = hub_page
    sign_in_to_hub(page)
    page.goto(f"/compare/?evaluations={','.join(ids)}")
    expect(page.locator("#systems-plot")).to_have_attribute("data-drawn", "2")
    expect(page.locator("#systems-table tbody tr")).to_have_count(2)


def test_bad_comparisons_are_refused_naming_the_problem(hub: LiveHub, hub_page: Any) -> None:
    for query, path in (
        ("evaluations=", "evaluations"),
        ("evaluations=not-an-id,also-not", "evaluations"),
        ("evaluations=" + ",".join(["6f1e0d3c-0000-4000-8000-000000000000"] * 2), "evaluations"),
        ("evaluations=a&colour=red", "colour"),
    ):
        status, body = hub.request("GET", f"/api/v1/compare/?{query}")
        assert status == 400, (query, body)
        assert body["errors"][0]["path"] == path
    missing = "6f1e0d3c-0000-4000-8000-000000000000,6f1e0d3c-0000-4000-8000-000000000001"
    status, body = hub.request("GET", f"/api/v1/compare/?evaluations={missing}")
    assert status == 404 and "that you may read" in body["detail"]
    page = hub_page
    response = page.goto("/compare/?evaluations=x")
    assert response.status == 400
    expect(page.locator("#compare-error")).to_contain_text("2 to 8")


def test_runs_of_one_model_on_one_host_are_told_apart(hub: LiveHub, hub_page: Any) -> None:
    """Two runs of digits-cnn in ONNX Runtime on ort-b: headers, legends and rows name each by
    the first characters of its id beside model, framework and host."""
    ids = [
        _run(hub, model="digits-cnn", framework="onnxruntime", dataset="digits", host="ort-b")[0]
        for _ in range(2)
    ]
    report = _compare(hub, ids)
    labels = [entry["label"] for entry in report["evaluations"]]
    assert labels == [f"digits-cnn · onnxruntime · ort-b · {i[:8]}" for i in ids], labels
    assert [cell["label"] for cell in report["theoretical"]["cells"]] == labels
    sign_in_to_hub(hub_page, next_path=f"/compare/?evaluations={','.join(ids)}")
    for text in labels:
        expect(hub_page.get_by_role("link", name=text, exact=True)).to_be_visible()
