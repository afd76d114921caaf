"""The evaluations page in a real browser: the history's filters and sorting (the API's own),
pagination, the boxes that choose what to compare, and rows that update live."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from evaluations.models import Evaluation
from tests.frontend.test_leaderboards import published_result
from tests.livehub import PASSWORD, LiveHub

pytestmark = pytest.mark.browser


def _rows(page: Any) -> list[str]:
    return page.locator("#evaluations tbody tr[data-evaluation]").evaluate_all(
        "rows => rows.map(r => r.dataset.evaluation)"
    )


def test_the_history_filters_sorts_and_chooses_what_to_compare(  # type: ignore[no-untyped-def]
    page, builtin_manifests, django_user_model, sign_in, shoot
) -> None:
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    runs = {
        "ort": published_result(alice, "onnxruntime", 0.97, 0.03, 50_000.0, published=False),
        "pt": published_result(alice, "pytorch", 0.99, 0.09, 20_000.0, published=False),
        "tf": published_result(alice, "tensorflow", 0.95, 0.80, 9_000.0),
        "bobs": published_result(bob, "pytorch", 0.50, 0.05, 1_000.0, published=False),
    }
    Evaluation.objects.filter(pk=runs["tf"].pk).update(trace_level="framework")
    sign_in(page, alice)
    page.goto("/evaluations/")
    assert set(_rows(page)) == {str(runs[k].pk) for k in ("ort", "pt", "tf")}  # not bob's

    page.select_option("#h-framework", "pytorch")
    page.get_by_role("button", name="Filter").click()
    assert _rows(page) == [str(runs["pt"].pk)]
    page.get_by_role("link", name="Clear").click()

    page.select_option("#h-published", "true")
    page.get_by_role("button", name="Filter").click()
    assert _rows(page) == [str(runs["tf"].pk)]
    page.goto("/evaluations/?trace_level=framework")
    assert _rows(page) == [str(runs["tf"].pk)]

    page.goto("/evaluations/")
    page.select_option("#h-ordering", "-top1")
    page.get_by_role("button", name="Filter").click()
    assert _rows(page) == [str(runs[k].pk) for k in ("pt", "ort", "tf")]
    page.fill("#h-batch-size", "1")
    page.select_option("#h-ordering", "p50_ms")
    page.get_by_role("button", name="Filter").click()
    assert _rows(page) == [str(runs[k].pk) for k in ("ort", "pt", "tf")]

    # Every filter looks alike: text and date fields styled as the selects are.
    style = (
        "id => { const s = getComputedStyle(document.getElementById(id));"
        " return [s.borderTopColor, s.borderTopLeftRadius, s.paddingLeft]; }"
    )
    looks = page.evaluate(style, "h-ordering")
    for field in ("h-model", "h-after", "h-before", "h-batch-size"):
        assert page.evaluate(style, field) == looks, field

    # The choices are in words; a latency without a batch size sorts at batch size 1, saying so.
    expect(page.locator("#h-ordering option[value='-p50_ms']")).to_have_text(
        "median latency (p50), highest first"
    )
    expect(page.locator("#h-ordering option[value='-created_at']")).to_have_text(
        "launched, newest first"
    )
    page.goto("/evaluations/")
    page.select_option("#h-ordering", "-p50_ms")
    page.get_by_role("button", name="Filter").click()
    assert _rows(page) == [str(runs[k].pk) for k in ("tf", "pt", "ort")]
    expect(page.locator(".messages")).to_contain_text(
        "Sorted by median latency (p50) at batch size 1: only evaluations with a result at "
        "batch size 1 are listed; set Batch size to sort at another."
    )
    expect(page.locator("#h-batch-size")).to_have_value("1")

    # A bad value is refused, naming it, and the page still lists everything.
    response = page.goto("/evaluations/?ordering=fastest")
    assert response.status == 400
    expect(page.locator("#history-error")).to_contain_text("ordering must be one of")

    # Tick two rows and compare them.
    page.goto("/evaluations/")
    order = _rows(page)
    expect(page.locator("#compare-button")).to_be_disabled()
    page.locator(f'input[value="{runs["ort"].pk}"]').check()
    expect(page.locator("#compare-button")).to_be_disabled()
    page.locator(f'input[value="{runs["pt"].pk}"]').check()
    expect(page.locator("#compare-button")).to_be_enabled()
    shoot(page, "evaluations-history")
    page.locator("#compare-button").click()
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    expect(page.locator("#compared tbody tr")).to_have_count(2)
    # The baseline is the first of them on the page.
    first = min((str(runs["ort"].pk), str(runs["pt"].pk)), key=order.index)
    expect(page.locator("#compared tbody tr.current")).to_have_attribute("data-evaluation", first)


def test_rows_update_live_and_new_evaluations_are_announced(  # type: ignore[no-untyped-def]
    hub: LiveHub, model_and_host, hub_page
) -> None:
    page = hub_page
    page.goto("/accounts/login/?next=/evaluations/")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#live")).to_have_class("live on")

    status, launched = hub.request(
        "POST", "/api/v1/evaluations/", {"model": "m", "framework": "onnxruntime", "dataset": "d"}
    )
    assert status == 201, launched
    evaluation = launched["evaluations"][0]
    expect(page.locator("#new-evaluations")).to_contain_text("1 evaluation changed or launched")
    page.locator("#new-evaluations a").click()
    row = page.locator(f'tr[data-evaluation="{evaluation["id"]}"]')
    expect(row.locator('[data-field="status"]')).to_have_text("dispatched")
    expect(page.locator("#live")).to_have_class("live on")

    # The agent claims it: the row says so without a reload.
    status, claimed = hub.request(
        "POST",
        f"/api/v1/evaluations/{evaluation['id']}/claim/",
        {"host": model_and_host["id"], "dispatch": 1},
        token=hub.agent_token,
    )
    assert status == 200, claimed
    expect(row.locator('[data-field="status"]')).to_have_text("running")
    assert row.get_attribute("data-updated") == "1"
    expect(row.locator('[data-field="run"]')).to_have_text("batch 1 · model")
    expect(row.locator('[data-field="latency"]')).to_have_text("—")

    # Its result: the row shows its median latency with that median's interval, live.
    from tests.evaluations.factories import result_body

    body = result_body(claimed["claim"])
    samples = [1.0 + index / 100 for index in range(20)]
    body["latency"]["1"] = {**body["latency"]["1"], "count": 20, "samples_ms": samples}
    status, stored = hub.request(
        "POST", f"/api/v1/evaluations/{evaluation['id']}/result/", body, token=hub.agent_token
    )
    assert status == 201, stored
    expect(row.locator('[data-field="status"]')).to_have_text("succeeded")
    expect(row.locator('[data-field="latency"]')).to_contain_text(" ms [")
    expect(row.locator('[data-field="latency"]')).to_contain_text("at 1")
    assert row.get_attribute("data-refreshed") == "1"


def test_the_history_and_a_board_page_through_their_rows(  # type: ignore[no-untyped-def]
    builtin_manifests, django_user_model
) -> None:
    from django.test import Client

    alice = django_user_model.objects.create_user("alice")
    for index in range(53):
        published_result(alice, "onnxruntime", 0.9 + index / 1000, 0.03 + index / 1000, 1e4)
    client = Client()
    client.force_login(alice)
    first = client.get("/evaluations/", {"framework": "onnxruntime"}).content.decode()
    assert first.count('name="evaluations" value=') == 50
    assert "Page 1 of 2" in first and "framework=onnxruntime&amp;page=2" in first
    second = client.get("/evaluations/", {"framework": "onnxruntime", "page": 2}).content.decode()
    assert second.count('name="evaluations" value=') == 3 and "← Previous" in second
    board = Client().get("/leaderboards/image_classification/digits/", {"page": 2})
    assert board.status_code == 200
    assert board.content.decode().count("data-evaluation=") == 3
