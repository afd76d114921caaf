"""A watch's series on the model page and on its own page, drawn by a real browser: each run's
median with its interval, the regression marked, and the table of verdicts naming what
changed. Runs are launched through the API and their results posted as an agent does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.evaluations.factories import (
    catalog_manifests,
    claim,
    post_result,
    register_hosts,
    result_body,
)

pytestmark = pytest.mark.browser

WATCHES = "/api/v1/watches/"


def _series(client: Any, agent: Any) -> str:
    """A watch of model m on cpu-1 with ten runs, the eighth with one thread and 1.8× slower."""
    hosts = register_hosts(agent)
    request = {"model": "m", "framework": "onnxruntime", "dataset": "d", "host": "cpu-1"}
    response = client.post(WATCHES, {"name": "nightly", "request": request}, format="json")
    assert response.status_code == 201, response.content
    watch_id = str(response.json()["id"])
    rng = np.random.default_rng(8)
    for number in range(1, 11):
        options = {"threads": 1} if number == 8 else {}
        launched = client.post(f"{WATCHES}{watch_id}/runs/", options, format="json")
        assert launched.status_code == 201, launched.content
        evaluation_id = launched.json()["evaluation"]["id"]
        job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
        samples = rng.lognormal(np.log(2.0), 0.05, 80) * (1.8 if number == 8 else 1.0)
        body = result_body(job["claim"])
        body["latency"]["1"] |= {"count": samples.size, "samples_ms": samples.tolist()}
        assert post_result(agent, evaluation_id, body).status_code == 201
    return watch_id


def test_the_model_page_plots_a_watch_and_marks_its_regression(
    page, sign_in, alice, alice_evaluator_client, bob_client, agent, shoot
) -> None:
    catalog_manifests(bob_client)
    watch_id = _series(alice_evaluator_client, agent)
    sign_in(page, alice)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto("/models/m/")
    plot = page.locator(f"#watch-plot-{watch_id}")
    expect(plot).to_have_attribute("data-drawn", "10")
    expect(plot).to_have_attribute("data-marked", "1")
    # The medians with their intervals, and the regression's marker on top.
    expect(plot.locator(".scatterlayer .trace")).to_have_count(2)
    expect(plot.locator(".scatterlayer .trace").nth(0).locator(".errorbar")).to_have_count(10)
    expect(plot.locator(".scatterlayer .trace").nth(1).locator(".point")).to_have_count(1)
    expect(plot.locator(".legend")).to_contain_text("regression")
    rows = page.locator(f"#watch-{watch_id} table.watch-runs tbody tr")
    expect(rows).to_have_count(10)
    eighth = rows.nth(7)
    expect(eighth).to_have_attribute("data-verdict", "regression")
    expect(eighth.locator("td.verdict")).to_contain_text("regression (×1.")
    expect(eighth.locator("td.changed")).to_contain_text("threads: — → 1 (against run 7)")
    assert page.locator(f'#watch-{watch_id} tr[data-verdict="noise"]').count() == 9
    shoot(page, "model-watch")

    page.locator(f"#watch-{watch_id}-heading a").click()
    expect(page).to_have_url(f"/watches/{watch_id}/")
    expect(page.locator(f"#watch-plot-{watch_id}")).to_have_attribute("data-marked", "1")
    # On a phone: the series' table scrolls in its frame; nothing runs past the page.
    page.set_viewport_size({"width": 390, "height": 844})
    for path in (f"/watches/{watch_id}/", "/models/m/"):
        page.goto(path)
        expect(page.locator(f"#watch-plot-{watch_id}")).to_have_attribute("data-marked", "1")
        wide = page.evaluate(
            """() => [...document.querySelectorAll('body *')]
                .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-frame, .scroll-x'))
                .map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 8)"""
        )
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, (path, wide)
    shoot(page, "model-watch-390px")
    assert not errors


def test_another_users_watch_page_is_not_found(
    page, sign_in, alice_evaluator_client, bob, bob_client, agent
) -> None:
    catalog_manifests(bob_client)
    watch_id = _series(alice_evaluator_client, agent)
    sign_in(page, bob)

    assert page.goto(f"/watches/{watch_id}/").status == 404
    page.goto("/models/m/")
    expect(page.locator("#watches-section")).to_have_count(0)
