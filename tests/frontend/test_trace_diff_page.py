"""The diff of traces in Chromium (`/compare/traces/`): it opens on the largest contributor with
its waterfall drawn, a click on a layer lists its ops and a click on an op its kernels, and at
390 px nothing runs past the page's width. Traces of known durations (tests/evaluations/runs.py)
ingested through the OTLP receiver."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.evaluations.runs import MODEL, SEP, ingest_run, spans_of

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sides(bob, make_client) -> tuple[list[Any], list[Any]]:  # type: ignore[no-untyped-def]
    """Bob's runs: three of the model on side A, three on side B with conv1 twice as slow.
    Ingested in a thread of their own: the receiver's live events are sent from a thread with
    no event loop, as the hub's are (Playwright keeps one running in the test's thread)."""
    client = make_client(bob)

    def ingest() -> tuple[list[Any], list[Any]]:
        a = [ingest_run(client, spans_of(MODEL, run), bob) for run in range(3)]
        b = [
            ingest_run(client, spans_of(MODEL, run, scale={"conv1": 2.0}), bob) for run in range(3)
        ]
        return a, b

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(ingest).result()


def _url(a: list[Any], b: list[Any]) -> str:
    return "/compare/traces/?a={}&b={}".format(
        ",".join(str(e.pk) for e in a), ",".join(str(e.pk) for e in b)
    )


def _rows(page: Any) -> list[str]:
    return page.locator("#diff-items tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")


def test_the_diff_opens_on_the_largest_contributor_and_drills_down_to_kernels(
    page: Any, sign_in: Any, bob: Any, sides: Any, shoot: Any
) -> None:
    sign_in(page, bob)
    page.goto(_url(*sides))

    expect(page.locator("#diff-largest")).to_contain_text("Largest contributor: conv1")
    first = page.locator("#diff-items tbody tr").first
    expect(first).to_have_attribute("data-key", "conv1")
    expect(first).to_have_class("selected")
    waterfall = page.locator("#diff-waterfall")
    expect(waterfall).to_have_attribute("data-drawn", "4")  # three layers and the total
    expect(waterfall.locator("g.trace.bars, g.trace.waterfall").first).to_be_attached()
    # conv1 first; the others, no different, after it.
    assert _rows(page)[0] == "conv1" and sorted(_rows(page)) == ["conv1", "fc", "relu1"]
    expect(page.locator("#diff-levels button[aria-pressed=true]")).to_contain_text("layers")
    shoot(page, "trace-diff-layers")

    # A layer's row: its ops.
    page.locator('#diff-items tr[data-key="fc"]').click()
    expect(page.locator("#diff")).to_have_attribute("data-level", "op")
    expect(page.locator("#diff-items tbody tr").first).to_have_attribute(
        "data-key", f"fc{SEP}MatMul"
    )
    assert _rows(page) == [f"fc{SEP}MatMul"]
    expect(page.locator("#diff-crumbs")).to_contain_text("fc — its ops")
    # An op's row: its kernels.
    page.locator(f'#diff-items tr[data-key="fc{SEP}MatMul"]').click()
    expect(page.locator("#diff")).to_have_attribute("data-level", "kernel")
    expect(page.locator("#diff-items tbody tr").first).to_have_attribute(
        "data-key", f"fc{SEP}MatMul{SEP}gemm_kernel"
    )
    expect(page.locator("#diff-crumbs")).to_contain_text("MatMul — its kernels")
    shoot(page, "trace-diff-kernels")
    # Back to the layers by the trail.
    page.locator("#diff-crumbs button", has_text="layers").click()
    expect(page.locator("#diff")).to_have_attribute("data-level", "layer")
    expect(page.locator("#diff-items tbody tr").first).to_have_attribute("data-key", "conv1")


def test_at_390_px_nothing_runs_past_the_page(
    page: Any, sign_in: Any, bob: Any, sides: Any, shoot: Any
) -> None:
    sign_in(page, bob)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(_url(*sides))
    expect(page.locator("#diff-waterfall")).to_have_attribute("data-drawn", "4")
    page.locator('#diff-items tr[data-key="conv1"]').click()
    expect(page.locator("#diff")).to_have_attribute("data-level", "op")

    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "trace-diff-390px")


def test_the_compare_page_links_to_the_diff_with_the_baseline_on_side_a(
    page: Any, sign_in: Any, bob: Any, sides: Any
) -> None:
    a, b = sides
    sign_in(page, bob)
    page.goto("/compare/?evaluations=" + ",".join(str(e.pk) for e in [a[0], b[0]]))
    page.get_by_role("link", name="Diff traces").click()

    expect(page.locator("#diff-sides [data-side=a] li")).to_have_count(1)
    expect(page.locator("#diff-sides [data-side=b] li")).to_have_count(1)
    assert f"a={a[0].pk}" in page.url and f"b={b[0].pk}" in page.url
