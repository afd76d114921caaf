"""The timeline page (`/evaluations/<id>/timeline/`): the evaluation's spans on a canvas, read
window by window from `/api/v1/traces/<id>/timeline`, and the per-layer table of `/layers`."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import expect

from evaluations.models import Evaluation
from tests.evaluations.factories import catalog_manifests, launch, launched_id, register_hosts

pytestmark = pytest.mark.browser

BASE = 1_700_000_000_000_000_000
MS = 1_000_000
# Each batch: (layer, op type, offset in the batch, duration), in ms.
LAYERS = [("conv1", "Conv", 0, 5), ("relu1", "Relu", 5, 1), ("fc1", "Gemm", 6, 3)]


@pytest.fixture
def launched(make_client, alice, django_user_model, broker) -> str:  # type: ignore[no-untyped-def]
    """Alice's evaluation of m on d, dispatched (so still live)."""
    operator = django_user_model.objects.create_user("operator", is_staff=True)
    bob = django_user_model.objects.create_user("bob")
    catalog_manifests(make_client(bob, scopes=["read", "write"]))
    register_hosts(make_client(operator, scopes=["agent"]))
    evaluation_id = launched_id(launch(make_client(alice), batch_sizes=[8], limit=2))
    broker.drain("onnxruntime.cpu")
    return evaluation_id


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(trace_id: str, name: str, start_ms: int, dur_ms: int, **attributes: Any) -> dict:
    return {
        "traceId": trace_id,
        "spanId": secrets.token_hex(8),
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(BASE + start_ms * MS),
        "endTimeUnixNano": str(BASE + (start_ms + dur_ms) * MS),
        "attributes": [_attribute(key.replace("__", "."), v) for key, v in attributes.items()],
    }


def batches(trace_id: str, first: int, count: int) -> list[dict]:
    """`count` batches of 10 ms every 12 ms from batch `first`, each with its three layers,
    and a softmax after the layers of the even batches."""
    spans = []
    for index in range(first, first + count):
        start = index * 12
        spans.append(_span(trace_id, "batch", start, 10, mlms__level="model", batch__index=index))
        for layer_index, (layer, op_type, offset, dur) in enumerate(LAYERS):
            spans.append(
                _span(
                    trace_id,
                    layer,
                    start + offset,
                    dur,
                    mlms__level="framework",
                    mlms__layer_index=layer_index,
                    mlms__layer_name=layer,
                    mlms__op_type=op_type,
                )
            )
        if index % 2 == 0:
            spans.append(_span(trace_id, "softmax", start + 9, 1, mlms__level="framework"))
    return spans


def ingest(client: Any, spans: list[dict]) -> None:
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    response = client.generic(
        "POST", "/v1/traces", json.dumps(body).encode(), content_type="application/json"
    )
    assert response.status_code == 200, response.content


def _window(page: Any) -> tuple[int, int]:
    canvas = page.locator("#timeline")
    return int(canvas.get_attribute("data-start")), int(canvas.get_attribute("data-end"))


def _timeline_requests(page: Any) -> list[str]:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/timeline?" in r.url else None)
    return requests


def test_the_timeline_draws_the_spans_zooms_and_shows_a_span(
    page, sign_in, alice, launched, make_client, shoot
) -> None:  # type: ignore[no-untyped-def]
    trace_id = Evaluation.objects.get(pk=launched).trace_id
    ingest(make_client(alice), batches(trace_id, 0, 4))
    sign_in(page, alice)
    requests = _timeline_requests(page)
    page.goto(f"/evaluations/{launched}/")
    page.get_by_role("link", name="Timeline and per-layer times").click()
    expect(page).to_have_url(f"/evaluations/{launched}/timeline/")

    canvas = page.get_by_role("img", name="Timeline of the evaluation's spans")
    # 4 batches, 12 layers, 2 softmaxes: all drawn, on one track per level.
    expect(canvas).to_have_attribute("data-drawn", "18")
    expect(canvas).to_have_attribute("data-tracks", "model framework")
    assert _window(page) == (BASE, BASE + 46 * MS)
    expect(page.locator("#timeline-status")).to_contain_text("18 spans drawn of 18")

    rows = page.locator("#layers tbody tr")
    expect(rows).to_have_count(5)
    counts = {
        rows.nth(i).get_attribute("data-name"): rows.nth(i)
        .locator('[data-key="count"]')
        .inner_text()
        for i in range(5)
    }
    assert counts == {"batch": "4", "conv1": "4", "relu1": "4", "fc1": "4", "softmax": "2"}
    # Largest total first, as the hub answers: the batches (40 ms), then conv1 (20 ms).
    expect(rows.first).to_have_attribute("data-name", "batch")
    expect(rows.nth(1).locator('[data-key="total_ns"]')).to_have_text("20.000")
    shoot(page, "timeline-whole")

    # Zoom with the wheel around the middle of batch 0: the window narrows and is fetched.
    box = canvas.bounding_box()
    assert box is not None
    plot = box["width"] - 118
    before = len(requests)
    page.mouse.move(box["x"] + 118 + plot * 5 / 46, box["y"] + 35)
    page.mouse.wheel(0, -600)
    page.wait_for_function(
        "() => Number(document.querySelector('#timeline').dataset.end)"
        f" - Number(document.querySelector('#timeline').dataset.start) < {20 * MS}"
    )
    start, end = _window(page)
    assert BASE <= start < BASE + 5 * MS < end and end - start < 20 * MS
    page.wait_for_function(
        f"() => Number(document.querySelector('#timeline').dataset.requests) > {before}"
    )
    expect(canvas).not_to_have_attribute("data-drawn", "18")
    page.wait_for_timeout(400)
    fetched = [url for url in requests[before:] if "start=" in url]
    assert fetched, requests
    assert f"start={start}" in fetched[-1] and f"end={end}" in fetched[-1]
    drawn = int(canvas.get_attribute("data-drawn") or 0)
    assert 0 < drawn < 18
    shoot(page, "timeline-zoomed")

    # Click batch 0 (the model track's first lane, left in the window): its attributes show.
    start, end = _window(page)
    x = box["x"] + 118 + plot * (BASE + 4 * MS - start) / (end - start)
    page.mouse.click(x, box["y"] + 35)
    details = page.locator("#details")
    expect(details).to_be_visible()
    expect(details).to_contain_text("batch")
    expect(details.locator("dt", has_text="batch.index")).to_be_visible()
    expect(details.locator("dd").filter(has_text="10.000 ms")).to_have_count(1)
    expect(page.locator("#details-none")).to_be_hidden()

    # Keys: 0 resets to the whole trace.
    canvas.focus()
    page.keyboard.press("0")
    expect(canvas).to_have_attribute("data-end", str(BASE + 46 * MS))
    expect(canvas).to_have_attribute("data-drawn", "18")

    # Search highlights the matching spans, and counts them over the whole trace.
    page.get_by_label("Find spans").fill("relu")
    expect(canvas).to_have_attribute("data-matches", "4")
    expect(page.locator("#search-count")).to_have_text("4 in the trace")
    page.get_by_role("button", name="Next match").click()
    expect(page.locator("#search-count")).to_have_text("1 of 4 in the trace")
    expect(page.locator("#details dd").first).to_have_text("relu1")
    shoot(page, "timeline-selected-search")


def test_the_layer_table_sorts_by_a_clicked_column(
    page, sign_in, alice, launched, make_client
) -> None:  # type: ignore[no-untyped-def]
    trace_id = Evaluation.objects.get(pk=launched).trace_id
    ingest(make_client(alice), batches(trace_id, 0, 4))
    sign_in(page, alice)
    page.goto(f"/evaluations/{launched}/timeline/")
    rows = page.locator("#layers tbody tr")
    expect(rows).to_have_count(5)

    page.get_by_role("button", name="Count").click()  # numbers: largest first
    expect(page.locator('#layers th[data-key="count"]')).to_have_attribute(
        "aria-sort", "descending"
    )
    expect(rows.last).to_have_attribute("data-name", "softmax")
    page.get_by_role("button", name="Count").click()
    expect(page.locator('#layers th[data-key="count"]')).to_have_attribute("aria-sort", "ascending")
    expect(rows.first).to_have_attribute("data-name", "softmax")

    page.get_by_role("button", name="Name").click()  # text: A to Z
    expect(page.locator('#layers th[data-key="name"]')).to_have_attribute("aria-sort", "ascending")
    expect(page.locator('#layers th[data-key="count"]')).to_have_attribute("aria-sort", "none")
    names = [rows.nth(i).get_attribute("data-name") for i in range(5)]
    assert names == ["batch", "conv1", "fc1", "relu1", "softmax"]
    page.get_by_role("button", name="p99").click()
    expect(rows.first).to_have_attribute("data-name", "batch")


def test_spans_that_arrive_while_the_page_is_open_are_drawn(
    page, sign_in, alice, launched, make_client
) -> None:  # type: ignore[no-untyped-def]
    trace_id = Evaluation.objects.get(pk=launched).trace_id
    client = make_client(alice)
    sign_in(page, alice)
    page.goto(f"/evaluations/{launched}/timeline/")
    canvas = page.locator("#timeline")
    expect(page.locator("#timeline-status")).to_have_text("Waiting for spans…")

    ingest(client, batches(trace_id, 0, 2))
    expect(canvas).to_have_attribute("data-drawn", "9")
    expect(page.locator('#layers tr[data-name="batch"] [data-key="count"]')).to_have_text("2")

    ingest(client, batches(trace_id, 2, 2))
    expect(canvas).to_have_attribute("data-drawn", "18")
    expect(canvas).to_have_attribute("data-end", str(BASE + 46 * MS))
    expect(page.locator('#layers tr[data-name="batch"] [data-key="count"]')).to_have_text("4")


def hardware(trace_id: str, until_ms: int) -> list[dict]:
    """Counter samples every ms: the GPU's power and SM use, and every 5 ms the process's RSS;
    and two kernels of conv1 in each of the first two batches."""
    spans = []
    for ms in range(until_ms):
        spans.append(
            _span(
                trace_id,
                "nvml cuda:0",
                ms,
                1,
                mlms__level="hardware",
                mlms__op_type="counter",
                mlms__device="cuda:0",
                mlms__counter__gpu__power_w=100.0 + (ms % 10) * 5,
                mlms__counter__gpu__sm_util_pct=float(ms % 4 * 25),
            )
        )
        if ms % 5 == 0:
            spans.append(
                _span(
                    trace_id,
                    "host",
                    ms,
                    5,
                    mlms__level="hardware",
                    mlms__op_type="counter",
                    mlms__device="cpu",
                    mlms__counter__process__rss_mib=512.0 + ms,
                )
            )
    for batch in range(2):
        for offset in (1, 3):
            spans.append(
                _span(
                    trace_id,
                    "implicit_gemm",
                    batch * 12 + offset,
                    1,
                    mlms__level="system_library",
                    mlms__op_type="kernel",
                    mlms__layer_name="conv1",
                    mlms__layer_index=0,
                    mlms__stream=7,
                    mlms__correlation_id=batch * 2 + offset,
                )
            )
    return spans


def _coloured_pixels(page: Any, top: int, height: int) -> int:
    """How many pixels of the plot (right of the labels) in rows [top, top + height) are
    neither white nor the tracks' background."""
    return int(
        page.evaluate(
            """([top, height]) => {
              const canvas = document.querySelector('#timeline');
              const ratio = canvas.width / canvas.clientWidth;
              const x = Math.round(120 * ratio), y = Math.round(top * ratio);
              const w = canvas.width - x, h = Math.round(height * ratio);
              const data = canvas.getContext('2d').getImageData(x, y, w, h).data;
              let count = 0;
              for (let i = 0; i < data.length; i += 4) {
                if (data[i] < 200 || data[i + 1] < 200 || data[i + 2] < 200) count++;
              }
              return count;
            }""",
            [top, height],
        )
    )


def test_the_hardware_counters_are_drawn_as_tracks_and_kernels_per_layer_listed(
    page, sign_in, alice, launched, make_client, shoot
) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched)
    client = make_client(alice)
    ingest(client, batches(evaluation.trace_id, 0, 4))
    ingest(client, hardware(evaluation.trace_id, 46))
    Evaluation.objects.filter(pk=launched).update(status=Evaluation.SUCCEEDED)
    sign_in(page, alice)
    requests = _timeline_requests(page)
    page.goto(f"/evaluations/{launched}/timeline/")

    canvas = page.locator("#timeline")
    expect(canvas).to_have_attribute("data-live", "done")
    # 18 spans and 4 kernels on the span tracks; the counters each on a track of their own.
    expect(canvas).to_have_attribute("data-drawn", "22")
    # The kernels (level system_library) get the "gpu" track.
    expect(canvas).to_have_attribute("data-tracks", "model framework gpu")
    expect(canvas).to_have_attribute("data-counters", "gpu.power_w gpu.sm_util_pct process.rss_mib")
    assert all("max_points=" in url for url in requests), requests
    # The counter tracks lie below the span tracks (model: 1 lane, framework: 1, kernels: 1),
    # and each draws its line.
    first = 26 + 3 * (20 + 8)
    for index in range(3):
        assert _coloured_pixels(page, first + index * 48 + 2, 36) > 50, index
    assert _window(page) == (BASE, BASE + 50 * MS)  # the last host sample lasts 5 ms

    # The per-layer table gets the kernels' time per layer.
    kernels = page.locator('#layers th[data-key="kernel_total_ns"]')
    expect(kernels).to_be_visible()
    expect(page.locator('#layers tr[data-name="conv1"] [data-key="kernel_total_ns"]')).to_have_text(
        "4.000"
    )
    expect(page.locator('#layers tr[data-name="relu1"] [data-key="kernel_total_ns"]')).to_have_text(
        "—"
    )
    page.get_by_role("button", name="Kernels").click()
    expect(kernels).to_have_attribute("aria-sort", "descending")
    expect(page.locator("#layers tbody tr").first).to_have_attribute("data-name", "conv1")
    # Counter samples are no rows; the level filter shows one level at a time.
    expect(page.locator('#layers tr[data-level="hardware"]')).to_have_count(0)
    level = page.locator("#layers-level")
    expect(level.locator("option")).to_have_text(
        ["All levels", "model", "framework", "gpu (kernels, copies)"]
    )
    level.select_option("gpu")
    expect(page.locator("#layers tbody tr")).to_have_count(1)
    expect(page.locator("#layers tbody tr").first).to_have_attribute("data-level", "system_library")
    level.select_option("framework")
    names = page.locator("#layers tbody tr")
    expect(names.first).to_have_attribute("data-level", "framework")
    assert set(names.evaluate_all("rows => rows.map(r => r.dataset.level)")) == {"framework"}
    level.select_option("")
    shoot(page, "timeline-counters")

    # Zooming asks for the counters of the new window too; the tracks stay.
    before = len(requests)
    canvas.focus()
    page.keyboard.press("+")
    page.keyboard.press("+")
    page.wait_for_function(
        f"() => Number(document.querySelector('#timeline').dataset.requests) > {before}"
    )
    page.wait_for_timeout(400)
    start, end = _window(page)
    assert end - start < 20 * MS
    assert f"start={start}" in requests[-1] and "max_points=" in requests[-1]
    expect(canvas).to_have_attribute("data-counters", "gpu.power_w gpu.sm_util_pct process.rss_mib")
    first = 26 + 3 * (20 + 8)
    assert _coloured_pixels(page, first + 2, 36) > 50
    shoot(page, "timeline-counters-zoomed")


def test_another_users_timeline_is_not_found(launched, django_user_model) -> None:  # type: ignore[no-untyped-def]
    mallory = django_user_model.objects.create_user("mallory")
    client = Client()
    client.force_login(mallory)

    assert client.get(f"/evaluations/{launched}/timeline/").status_code == 404
    # Anonymous: only a published evaluation's timeline; this one is not found, with a link
    # to sign in.
    anonymous = Client().get(f"/evaluations/{launched}/timeline/")
    assert anonymous.status_code == 404 and b"Sign in</a> if it is yours" in anonymous.content


def test_the_websockets_spans_event_brings_new_spans_without_polling(
    hub, model_and_host, hub_page
) -> None:  # type: ignore[no-untyped-def]
    page = hub_page
    status, launched = hub.request(
        "POST",
        "/api/v1/evaluations/",
        {"model": "m", "framework": "onnxruntime", "dataset": "d", "batch_sizes": [8]},
    )
    assert status == 201, launched
    evaluation = launched["evaluations"][0]
    evaluation_reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            evaluation_reads.append(request.url) if "/api/v1/evaluations/" in request.url else None
        ),
    )
    page.goto(f"/accounts/login/?next=/evaluations/{evaluation['id']}/timeline/")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill("correct-horse-battery-staple")
    page.get_by_role("button", name="Sign in").click()
    canvas = page.locator("#timeline")
    expect(canvas).to_have_attribute("data-live", "socket")

    def send(spans: list[dict]) -> None:
        body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
        status, answer = hub.request("POST", "/v1/traces", body)
        assert status == 200, answer

    send(batches(evaluation["trace_id"], 0, 2))
    expect(canvas).to_have_attribute("data-drawn", "9")
    send(batches(evaluation["trace_id"], 2, 2))
    expect(canvas).to_have_attribute("data-drawn", "18")
    expect(page.locator('#layers tr[data-name="batch"] [data-key="count"]')).to_have_text("4")
    # The socket said when spans came: the evaluation was never polled.
    assert evaluation_reads == [], evaluation_reads
    expect(canvas).to_have_attribute("data-live", "socket")


def test_an_area_selection_gives_the_statistics_of_every_span_in_it(
    page, sign_in, alice, launched, make_client
) -> None:  # type: ignore[no-untyped-def]
    """Shift+drag over the timeline selects a time range: the hub counts every span in it (not
    only those drawn); the overview strip shows where the window is and moves it."""
    trace_id = Evaluation.objects.get(pk=launched).trace_id
    ingest(make_client(alice), batches(trace_id, 0, 10))
    sign_in(page, alice)
    page.goto(f"/evaluations/{launched}/timeline/")
    canvas = page.locator("#timeline")
    expect(canvas).to_have_attribute("data-drawn", "45")
    box = canvas.bounding_box()
    assert box is not None
    plot = box["width"] - 118
    start, end = _window(page)

    def x_of(ns: int) -> float:
        return box["x"] + 118 + plot * (ns - start) / (end - start)

    # From 24 ms to 60 ms: batches 2, 3 and 4 whole (each 10 ms at 12 ms steps) and batch 5
    # from 60 ms.
    page.keyboard.down("Shift")
    page.mouse.move(x_of(BASE + 24 * MS), box["y"] + 35)
    page.mouse.down()
    page.mouse.move(x_of(BASE + 42 * MS), box["y"] + 35, steps=4)
    page.mouse.move(x_of(BASE + 60 * MS), box["y"] + 35, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")

    panel = page.locator("#selection")
    expect(panel).to_be_visible()
    chosen = canvas.get_attribute("data-area")
    assert chosen
    area_start, area_end = (int(v) for v in chosen.split("-"))
    answer = (
        make_client(alice)
        .get(f"/api/v1/traces/{trace_id}/selection", {"start": area_start, "end": area_end})
        .json()
    )
    expect(canvas).to_have_attribute("data-area-total", str(answer["total"]))
    assert answer["levels"]["model"] >= 3
    expect(page.locator("#selection-summary")).to_contain_text(f"{answer['total']} spans in")
    expect(page.locator('#selection-levels tr[data-level="model"] td').nth(1)).to_have_text(
        str(answer["levels"]["model"])
    )
    expect(page.locator("#selection-top tbody tr").first).to_have_attribute("data-name", "batch")

    page.get_by_role("button", name="Zoom to it").click()
    expect(canvas).to_have_attribute("data-start", str(area_start))
    overview = page.locator("#overview")
    expect(overview).to_have_attribute("data-window", f"{area_start}-{area_end}")
    # A click at the strip's left end moves the window to the start of the run.
    strip = overview.bounding_box()
    assert strip is not None
    page.mouse.click(strip["x"] + 119, strip["y"] + strip["height"] / 2)
    expect(canvas).to_have_attribute("data-start", str(BASE))
    page.get_by_role("button", name="Clear").click()
    expect(panel).to_be_hidden()
