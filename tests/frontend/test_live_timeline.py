"""The timeline of an evaluation that is still running, run by a real agent on a live hub: its
spans are drawn while the model runs and new ones keep arriving before it finishes (the agent
streams them at least every second, the hub pushes a `spans` event); cancelled, its timeline
keeps the spans it measured, marked partial."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import sign_in_to_hub
from tests.livehub import LiveHub, running_hub
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    store = zoo_store(("digits", "digits-cnn", "resnet-18"))
    settings = {"ARTIFACT_ROOT": str(store), "HOST_LIVE_SECONDS": "5"}
    with running_hub(
        tmp_path_factory.mktemp("live-timeline"), manifests=True, users=True, settings=settings
    ) as running:
        running.start_agent("ort-a")
        running.wait(lambda: running.live_hosts() >= {"ort-a"}, "the agent", 90)
        yield running


SLOW_WINDOW_READS = """
(() => {
  const fetch = window.fetch.bind(window);
  window.fetch = (url, options) => String(url).includes("/timeline?")
    ? new Promise((done) => setTimeout(done, 1500)).then(() => fetch(url, options))
    : fetch(url, options);
})();
"""


def _open_timeline(page: Any, evaluation_id: str) -> None:
    sign_in_to_hub(page)
    page.goto(f"/evaluations/{evaluation_id}/timeline/")
    page.wait_for_function("Number(document.querySelector('#timeline').dataset.drawn) > 0")


def _drawn(page: Any) -> tuple[int, int]:
    canvas = page.locator("#timeline")
    return int(canvas.get_attribute("data-drawn") or 0), int(
        canvas.get_attribute("data-total") or 0
    )


def test_spans_are_drawn_while_the_evaluation_runs_and_kept_when_it_is_cancelled(
    hub: LiveHub, hub_page: Any
) -> None:
    # Far more passes than the test waits for: it is cancelled once the spans were seen.
    evaluation_id = hub.launch(batch_sizes=[4], repeat=10000, trace_level="model")
    hub.wait(lambda: hub.evaluation(evaluation_id)["status"] == "running", "the run to start", 90)
    # Every read of the window answers 1.5 s late, as on a loaded hub whose trace holds many
    # chunks: spans keep arriving meanwhile, and must not abort the read that would draw them.
    hub_page.add_init_script(SLOW_WINDOW_READS)
    sign_in_to_hub(hub_page)
    hub_page.goto(f"/evaluations/{evaluation_id}/timeline/")
    canvas = hub_page.locator("#timeline")

    hub_page.wait_for_function(
        "Number(document.querySelector('#timeline').dataset.drawn) > 0", timeout=30_000
    )
    _, first_total = _drawn(hub_page)
    assert hub.evaluation(evaluation_id)["status"] == "running"
    # More spans arrive, and are drawn, before the evaluation ends.
    hub_page.wait_for_function(
        f"Number(document.querySelector('#timeline').dataset.total) > {first_total}",
        timeout=30_000,
    )
    assert hub.evaluation(evaluation_id)["status"] == "running"
    expect(canvas).to_have_attribute("data-live", "socket")
    expect(hub_page.locator("#timeline-partial")).to_be_hidden()

    status, _ = hub.request("POST", f"/api/v1/evaluations/{evaluation_id}/cancel/")
    assert status == 200, status
    assert hub.finished(evaluation_id, timeout=120)["status"] == "cancelled"
    expect(hub_page.locator("#timeline-partial")).to_be_visible()

    hub_page.reload()
    hub_page.wait_for_function(
        "Number(document.querySelector('#timeline').dataset.drawn) > 0", timeout=30_000
    )
    _, total = _drawn(hub_page)
    assert total >= first_total
    expect(hub_page.locator("#timeline-partial")).to_contain_text("was cancelled")
    trace_id = hub.evaluation(evaluation_id)["trace_id"]
    status, window = hub.request("GET", f"/api/v1/traces/{trace_id}/timeline")
    assert status == 200 and window["partial"] is True and window["total"] >= total


def test_search_by_op_type_finds_spans_of_a_whole_onnxruntime_trace(
    hub: LiveHub, hub_page: Any
) -> None:
    """An ONNX Runtime trace at level framework: `Conv` finds every convolution of the trace,
    not only those in the window shown, and ↓ walks to matches outside it; a span links to its
    parent and selects its row of the per-layer table."""
    evaluation_id = hub.launch(batch_sizes=[1], limit=40, trace_level="framework")
    finished = hub.finished(evaluation_id, timeout=120)
    assert finished["status"] == "succeeded", finished["history"]
    trace_id = finished["trace_id"]
    status, layers = hub.request("GET", f"/api/v1/traces/{trace_id}/layers")
    assert status == 200
    convs = sum(
        row["count"]
        for row in layers["aggregates"]
        if row["op_type"] == "Conv" and row["level"] == "framework"
    )
    assert convs >= 80  # two convolutions per call, 40 timed calls at least

    sign_in_to_hub(hub_page)
    hub_page.goto(f"/evaluations/{evaluation_id}/timeline/")
    canvas = hub_page.locator("#timeline")
    hub_page.wait_for_function("Number(document.querySelector('#timeline').dataset.drawn) > 0")
    # Zoom into the first twentieth of the trace: most convolutions are outside the window.
    start = int(canvas.get_attribute("data-start"))
    end = int(canvas.get_attribute("data-end"))
    hub_page.goto("about:blank")
    hub_page.goto(
        f"/evaluations/{evaluation_id}/timeline/#window={start}-{start + (end - start) // 20}"
    )
    hub_page.wait_for_function("Number(document.querySelector('#timeline').dataset.drawn) > 0")
    window_end = int(canvas.get_attribute("data-end"))
    assert window_end < end

    hub_page.locator("#span-search").fill("Conv")
    hub_page.wait_for_function(
        "Number(document.querySelector('#timeline').dataset.found) > 0", timeout=10_000
    )
    found = int(canvas.get_attribute("data-found"))
    status, search = hub.request("GET", f"/api/v1/traces/{trace_id}/search?q=Conv&limit=1")
    assert status == 200 and found == search["total"] >= convs
    visible = int(canvas.get_attribute("data-matches"))
    assert visible < found  # the window shows a few; the search found them all
    expect(hub_page.locator("#search-count")).to_contain_text(f"{found} in the trace")

    # The last match is far outside the window: Shift+Enter goes there and selects it.
    hub_page.locator("#span-search").press("Shift+Enter")
    expect(hub_page.locator("#search-count")).to_contain_text(f"{min(found, 1000)} of {found}")
    hub_page.wait_for_function(
        "document.querySelector('#timeline').dataset.selected !== ''", timeout=10_000
    )
    assert int(canvas.get_attribute("data-start")) > window_end
    details = hub_page.locator("#details")
    expect(details).to_contain_text("Conv")
    expect(hub_page.locator("#layers tr.current")).to_have_count(1)

    # Its parent (the batch span) is a link: following it selects the batch span.
    conv_id = canvas.get_attribute("data-selected")
    hub_page.locator('#details button[data-role="parent"]').click()
    hub_page.wait_for_function(
        f"!['', '{conv_id}'].includes(document.querySelector('#timeline').dataset.selected)",
        timeout=10_000,
    )
    expect(details.locator("dd").first).to_have_text("predict")
    expect(details.locator('button[data-role="child"]').first).to_be_visible()


def test_the_per_layer_table_of_resnet_18_shows_every_number_at_1280_px_per_batch_size(
    hub: LiveHub, hub_page: Any, shoot: Any
) -> None:
    evaluation_id = hub.launch(
        model="resnet-18", batch_sizes=[1, 4], limit=8, trace_level="framework"
    )
    finished = hub.finished(evaluation_id, timeout=240)
    assert finished["status"] == "succeeded", finished["history"]

    _open_timeline(hub_page, evaluation_id)
    table = hub_page.locator("#layers")
    batch = hub_page.locator("#layers-batch")
    expect(batch.locator("option")).to_have_text(["1", "4", "outside batches"])
    expect(batch).to_have_value("1")
    hub_page.locator("#layers-level").select_option("framework")
    rows = table.locator("tbody tr")
    expect(rows.first).to_have_attribute("data-level", "framework")
    assert rows.count() > 20  # resnet-18's nodes after ONNX Runtime's fusions
    # Every number is on screen at 1280 px, none blank.
    hidden = hub_page.evaluate(
        """() => [...document.querySelectorAll('#layers tbody td.num')].filter((cell) => {
             const box = cell.getBoundingClientRect();
             return box.right > window.innerWidth || box.width < 8 || !cell.textContent.trim();
           }).length"""
    )
    assert hidden == 0
    # The layers' FLOP/s from their multiply-adds (counted from the graph), ONNX Runtime's
    # fused nodes included (named after their output tensors): every convolution has one.
    expect(table).not_to_have_attribute("data-gflops", "0")
    convolutions = table.locator("tbody tr", has=hub_page.locator("td", has_text="Conv"))
    gflops = [
        convolutions.nth(i).locator('[data-key="gflops"]').inner_text()
        for i in range(convolutions.count())
    ]
    assert len(gflops) >= 20 and all(float(value) > 0 for value in gflops), gflops
    # The evaluation page sets the same layer times against the counts: each convolution's
    # GFLOP/s in its table, and the layers on the roofline beside the model.
    hub_page.goto(f"/evaluations/{evaluation_id}/")
    expect(hub_page.locator("#theoretical-layers")).to_have_attribute("data-achieved", "21")
    points = hub_page.locator("#roofline-plot")
    expect(points).to_have_attribute("data-points", "23")  # the model at 1 and 4, 21 layers
    hub_page.goto(f"/evaluations/{evaluation_id}/timeline/")
    hub_page.wait_for_function("Number(document.querySelector('#timeline').dataset.drawn) > 0")
    hub_page.locator("#layers-level").select_option("framework")
    # One batch size at a time: eight calls of batch size 1, two of batch size 4.
    counts = {rows.nth(i).locator('[data-key="count"]').inner_text() for i in range(rows.count())}
    assert counts == {"8"}
    shoot(hub_page, "timeline-layers-resnet-18")
    batch.select_option("4")
    expect(table).to_have_attribute("data-batch", "4")
    counts = {rows.nth(i).locator('[data-key="count"]').inner_text() for i in range(rows.count())}
    assert counts == {"2"}

    # At 390 px the page keeps its width: the table scrolls inside its frame.
    hub_page.set_viewport_size({"width": 390, "height": 844})
    hub_page.reload()
    hub_page.wait_for_function("Number(document.querySelector('#timeline').dataset.drawn) > 0")
    assert hub_page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(hub_page, "timeline-390px")
