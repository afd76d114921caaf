"""Two evaluations of the built-in text classifier compared in a real browser: the inputs on
which they disagree are linked to their text (not drawn as images), and the page fits a phone's
width and a desktop's."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    register_hosts,
    result_body,
)
from tests.frontend.test_embedding_results import WIDTHS

pytestmark = pytest.mark.browser


@pytest.fixture
def two_runs(builtin_manifests, make_client, alice, agent, broker) -> list[str]:  # type: ignore[no-untyped-def]
    """Alice's two finished evaluations of review-sentiment on short-reviews (two reviews of
    it in the store), whose top-1 classes differ on the second review only."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from django.conf import settings

    hosts = register_hosts(agent)
    split = Path(settings.ARTIFACT_ROOT) / "datasets/short-reviews/1.0.0/validation.parquet"
    split.parent.mkdir(parents=True, exist_ok=True)
    reviews = ["the kettle is great", "the desk lamp is not awful"]
    pq.write_table(pa.table({"input": reviews, "label": [1, 1]}), split)
    ids = []
    for second in ([1, 0], [0, 1]):
        evaluation_id = launched_id(
            launch(
                make_client(alice),
                model="review-sentiment",
                framework="onnxruntime",
                dataset="short-reviews",
                batch_sizes=[1],
            )
        )
        broker.drain("onnxruntime.cpu", "host.cpu-1", "host.cpu-2", "host.gpu-1")
        claimed = claim(agent, evaluation_id, hosts["cpu-1"])
        assert claimed.status_code == 200, claimed.content
        body = result_body(claimed.json()["claim"])
        body["predictions"]["classes"] = [[1, 0], second]
        body["predictions"]["labels"] = [1, 1]
        assert post_result(agent, evaluation_id, body).status_code == 201
        ids.append(evaluation_id)
    return ids


def test_the_reviews_they_disagree_on_are_linked_to_their_text(  # type: ignore[no-untyped-def]
    page, sign_in, alice, two_runs: list[str], shoot
) -> None:
    sign_in(page, alice)
    for width in WIDTHS:  # each width loaded as it is (the plots size themselves on load)
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"/compare/?evaluations={two_runs[0]},{two_runs[1]}")
        row = page.locator("#disagreements tbody tr")
        expect(row).to_have_count(1)
        expect(row.locator("img")).to_have_count(0)
        link = row.get_by_role("link", name="#1")
        expect(link).to_have_attribute("href", f"/api/v1/evaluations/{two_runs[0]}/inputs/1/")
        expect(page.locator("#latency-plot .main-svg").first).to_be_visible()
        scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
        assert scroll_width <= width, (width, scroll_width)
        shoot(page, f"compare-text-inputs-{width}")
    response = page.request.get(link.get_attribute("href") or "")
    assert response.status == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.text() == "the desk lamp is not awful"


@pytest.fixture
def two_readings(make_client, alice, agent, broker) -> list[str]:  # type: ignore[no-untyped-def]
    """Alice's two finished evaluations of a text recognizer on two lines, which read the
    second line otherwise (a long one, as a page of text gives)."""
    from tests.evaluations.test_text_recognition_results import _upload, reading

    client = make_client(alice)
    _upload(client)
    hosts = register_hosts(agent)
    long = "Beautiful is better than ugly; explicit is better than implicit, " * 3
    ids = []
    for second in (long, long.replace("implicit", "implied")):
        evaluation_id = launched_id(
            launch(client, model="reader", dataset="lines", batch_sizes=[1])
        )
        broker.drain("onnxruntime.cpu", "host.cpu-1", "host.cpu-2", "host.gpu-1")
        claimed = claim(agent, evaluation_id, hosts["cpu-1"])
        assert claimed.status_code == 200, claimed.content
        body = reading(claimed.json()["claim"], ["ab", second], [0.97, 0.88])
        assert post_result(agent, evaluation_id, body).status_code == 201
        ids.append(evaluation_id)
    return ids


def test_the_lines_two_readings_disagree_on_show_each_text(  # type: ignore[no-untyped-def]
    page, sign_in, alice, two_readings: list[str], shoot
) -> None:
    sign_in(page, alice)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"/compare/?evaluations={two_readings[0]},{two_readings[1]}")
        row = page.locator("#disagreements tbody tr")
        expect(row).to_have_count(1)
        expect(row.locator("td").nth(1)).to_have_text("—")  # a line has no class
        expect(row).to_contain_text("implied")
        expect(
            page.get_by_text("lines whose decoded text equals the baseline's").first
        ).to_be_visible()
        scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
        assert scroll_width <= width, (width, scroll_width)
        shoot(page, f"compare-text-lines-{width}")


def test_a_model_fed_its_texts_features_says_each_on_its_page(  # type: ignore[no-untyped-def]
    page, make_client, alice, shoot
) -> None:
    """A BERT-style model's page, at a phone's width and a desktop's: each input and what of
    the text it is fed, in words, within the page."""
    from tests.hub.factories import to_yaml, upload
    from tests.predictors.test_text_features import NAME, document, model_files
    from tests.predictors.zoo_store import zoo_store

    built = model_files(zoo_store(("review-sentiment",)))
    files = {name: built[name] for name in ("tokenizer.json", "model.onnx")}
    stored = upload(make_client(alice), to_yaml(document()), files, visibility="public")
    assert stored.status_code == 201, stored.content
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"/models/{NAME}/")
        expect(page.get_by_text("attention mask (1 for a token, 0 for padding)")).to_be_visible()
        expect(page.get_by_text("type ids (each token's segment)")).to_be_visible()
        scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
        assert scroll_width <= width, (width, scroll_width)
        shoot(page, f"model-text-features-{width}")
