"""The catalog (`/`): search and filters, in a real browser, over the built-in manifests."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from hub import actions
from predictors import manifests as spec
from tests.hub.factories import model_yaml

pytestmark = pytest.mark.browser


def _names(page) -> list[str]:  # type: ignore[no-untyped-def]
    return page.locator("#models tbody tr[data-name]").evaluate_all(
        "rows => rows.map(r => r.dataset.name)"
    )


def test_the_catalog_lists_the_builtin_models_and_datasets(page, builtin_manifests, shoot) -> None:
    page.goto("/")

    expect(page.get_by_role("heading", name="Catalog")).to_be_visible()
    assert _names(page) == [
        "alexnet",
        "basic-pitch",
        "diabetes-mlp",
        "digits-cnn",
        "file-type",
        "mobilenet-v2",
        "resnet-18",
        "resnet-50",
        "review-sentiment",
        "shapes-color",
        "shapes-detector",
        "shapes-segmenter",
        "shapes-tagger",
        "silero-vad",
        "speaker-encoder",
        "text-detector",
        "text-direction",
        "text-recognizer",
        "toggle-gru",
    ]
    digits = page.locator('#models tr[data-name="digits-cnn"]')
    for framework in ("PyTorch", "TensorFlow", "ONNX Runtime"):
        expect(digits.locator(".badge", has_text=framework)).to_be_visible()
    expect(digits.get_by_role("link", name="digits", exact=True)).to_have_attribute(
        "href", "/datasets/digits/"
    )
    expect(page.locator("#datasets tbody tr[data-name]")).to_have_count(15)
    # Every dataset a model links to opens: a pretrained model's training data that the hub
    # does not hold is named, not linked.
    links = page.locator('#models a[href^="/datasets/"]').evaluate_all(
        "links => links.map(a => a.getAttribute('href'))"
    )
    assert links and all(page.request.get(href).status == 200 for href in set(links)), links
    expect(page.locator("#models span[title='Not a dataset of this hub']").first).to_be_visible()
    shoot(page, "catalog")


def test_the_catalog_filters_by_framework_task_and_dataset(page, builtin_manifests, shoot) -> None:
    page.goto("/")

    page.get_by_label("Framework", exact=True).select_option("tensorflow")
    page.get_by_role("button", name="Filter").click()

    expect(page).to_have_url("/?search=&framework=tensorflow&task=&dataset=")
    assert _names(page) == ["basic-pitch", "digits-cnn", "shapes-color"]
    expect(page.locator("#datasets")).to_have_count(0)  # datasets have no framework

    page.get_by_label("Framework", exact=True).select_option("")
    page.get_by_label("Dataset", exact=True).select_option("digits")
    page.get_by_role("button", name="Filter").click()

    assert _names(page) == ["digits-cnn"]
    expect(page.locator("#datasets tbody tr[data-name]")).to_have_count(1)
    shoot(page, "catalog-filtered-by-dataset")

    page.get_by_label("Dataset", exact=True).select_option("")
    page.get_by_label("Task", exact=True).select_option("image_classification")
    page.get_by_label("Search", exact=True).fill("mobilenet")
    page.get_by_label("Search", exact=True).press("Enter")

    assert _names(page) == ["mobilenet-v2"]

    page.get_by_label("Search", exact=True).fill("no such model anywhere")
    page.get_by_label("Search", exact=True).press("Enter")

    expect(page.locator("#models tr.empty")).to_contain_text("No model matches these filters")
    page.get_by_role("link", name="Clear").click()
    assert len(_names(page)) == 19

    # The tasks of the zoo's models, each a filter of its own.
    page.get_by_label("Task", exact=True).select_option("regression")
    page.get_by_role("button", name="Filter").click()
    assert _names(page) == ["diabetes-mlp"]
    expect(page.locator("#models tbody tr[data-name]")).to_contain_text("Regression")


def test_a_private_model_is_in_its_owners_catalog_only(
    page, sign_in, django_user_model, shoot
) -> None:
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    actions.register_manifest(spec.load(model_yaml("secret-net")), owner=alice)
    actions.register_manifest(spec.load(model_yaml("open-net", visibility="public")), owner=alice)

    page.goto("/")
    assert _names(page) == ["open-net"]
    response = page.goto("/models/secret-net/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    shoot(page, "not-found")

    sign_in(page, bob)
    page.goto("/")
    assert _names(page) == ["open-net"]
    assert page.goto("/models/secret-net/").status == 404

    page.context.clear_cookies()
    sign_in(page, alice)
    page.goto("/")
    assert _names(page) == ["open-net", "secret-net"]
    expect(page.locator('#models tr[data-name="secret-net"] .badge.private')).to_be_visible()
    assert page.goto("/models/secret-net/").status == 200
    expect(page.get_by_role("heading", level=1)).to_contain_text("secret-net")
