"""The model and dataset pages: the manifest in words, versions × frameworks, files."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from hub import actions
from predictors import manifests as spec
from tests.hub.factories import model_manifest, model_yaml, to_yaml

pytestmark = pytest.mark.browser


def _parameter(page, key: str) -> str:  # type: ignore[no-untyped-def]
    return page.locator(f'#input-0-parameters tr[data-key="{key}"] td.value').inner_text()


def test_the_model_page_renders_the_manifest(page, builtin_manifests, shoot) -> None:
    page.goto("/models/digits-cnn/")

    expect(page.get_by_role("heading", level=1)).to_have_text("digits-cnn 1.0.0")
    expect(page.locator(".tags .badge.fw")).to_have_text("ONNX Runtime")
    # Every processing parameter is a row of its own, in words, beside its manifest key.
    assert _parameter(page, "decoder") == "Pillow"
    assert _parameter(page, "color_mode") == "GRAY"
    assert _parameter(page, "resize_size") == "8 × 8"
    assert _parameter(page, "crop_method") == "none"
    assert _parameter(page, "normalization_order") == "convert, then normalize (in float space)"
    assert _parameter(page, "mean") == "Y 0.5"
    assert page.locator("#input-0-parameters tbody tr").count() == 14
    expect(page.locator("#outputs")).to_contain_text("10 classes")
    expect(page.locator("#files")).to_contain_text("repo://models/digits-cnn/1.0.0/digits-cnn.onnx")
    expect(page.locator("#no-evaluations")).to_be_visible()
    shoot(page, "model-digits-cnn")

    # The matrix links the other frameworks of the same version.
    expect(page.locator("#versions thead th")).to_have_text(
        ["Version", "ONNX Runtime", "PyTorch", "TensorFlow"]
    )
    page.get_by_role("link", name="digits-cnn 1.0.0 on TensorFlow").click()
    expect(page.locator(".tags .badge.fw")).to_have_text("TensorFlow")
    assert _parameter(page, "layout") == "NHWC"
    expect(page.locator("#files")).to_contain_text("digits-cnn.keras")

    page.get_by_role("link", name="digits", exact=True).click()
    expect(page).to_have_url("/datasets/digits/")


def _imagenet_style(version: str, framework: str) -> spec.Manifest:
    data = model_manifest("resnet-like", version, framework, visibility="public")
    data["inputs"][0]["parameters"].update(
        resize_size=[256, 256],
        keep_aspect_ratio=True,
        crop_method="center",
        crop_size=[224, 224],
        mean=[0.485, 0.456, 0.406],
        std=[0.229, 0.224, 0.225],
    )
    data["attributes"] = {"reported_accuracy": {"top1": 0.698, "top5": 0.891}, "tags": ["a", "b"]}
    return spec.load(to_yaml(data))


def test_the_model_page_shows_every_version_and_opens_on_the_highest_stable_one(
    page, django_user_model, shoot
) -> None:
    alice = django_user_model.objects.create_user("alice")
    for version, framework in [
        ("0.9.0", "pytorch"),
        ("1.0.0", "pytorch"),
        ("1.0.0", "onnxruntime"),
        ("1.1.0-rc.1", "onnxruntime"),
    ]:
        actions.register_manifest(_imagenet_style(version, framework), owner=alice)

    page.goto("/models/resnet-like/")

    assert page.locator("#versions tbody th").all_inner_texts() == ["1.1.0-rc.1", "1.0.0", "0.9.0"]
    assert page.locator("#versions tbody tr").nth(0).locator("td").all_inner_texts()[1] == "—"
    expect(page.get_by_role("heading", level=1)).to_have_text("resnet-like 1.0.0")
    expect(page.locator(".tags .badge.fw")).to_have_text("ONNX Runtime")
    assert _parameter(page, "resize_size") == "256 × 256"
    assert _parameter(page, "keep_aspect_ratio") == "yes"
    assert _parameter(page, "crop_size") == "224 × 224"
    assert _parameter(page, "mean") == "R 0.485 · G 0.456 · B 0.406"
    expect(page.locator("#attributes")).to_contain_text("top-1 69.8 %")
    expect(page.locator("#attributes")).to_contain_text("a, b")
    shoot(page, "model-imagenet-style")

    page.get_by_role("link", name="resnet-like 1.1.0-rc.1 on ONNX Runtime").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("resnet-like 1.1.0-rc.1")


def test_the_dataset_page_lists_splits_and_the_models_trained_on_it(
    page, builtin_manifests, shoot
) -> None:
    page.goto("/datasets/digits/")

    expect(page.get_by_role("heading", level=1)).to_have_text("digits 1.0.0")
    expect(page.locator("#splits tbody tr")).to_have_count(2)
    expect(page.locator("#splits")).to_contain_text("1437")
    expect(page.locator("#trained-models")).to_contain_text("digits-cnn")
    shoot(page, "dataset-digits")


def test_an_unknown_model_is_a_404(page, db) -> None:
    assert page.goto("/models/no-such-model/").status == 404
    assert page.goto("/datasets/no-such-dataset/").status == 404


def test_a_model_with_an_https_graph_shows_its_declared_checksum(page, django_user_model) -> None:
    alice = django_user_model.objects.create_user("alice")
    doc = spec.load(model_yaml("remote-net", visibility="public"))
    actions.register_manifest(doc, owner=alice)

    page.goto("/models/remote-net/")

    sha = doc.data["model"]["graph_sha256"]
    expect(page.locator("#files .sha")).to_have_text(sha)


def test_a_streaming_models_page_shows_its_constant_and_state_inputs(
    page, builtin_manifests, shoot
) -> None:
    page.goto("/models/toggle-gru/")
    expect(page.locator(".tags")).to_contain_text("Sequence labelling")
    expect(page.locator("#inputs-heading ~ h3")).to_have_text(
        ["Input 0: chunk tensor", "Input 1: gain constant", "Input 2: state state"]
    )
    state = page.locator("#input-2-parameters")
    expect(state.locator('tr[data-key="batch_axis"] td.value')).to_have_text("1")
    expect(state.locator('tr[data-key="from_output"] td.value')).to_have_text("next_state")
    expect(page.locator('#input-1-parameters tr[data-key="value"] td.value')).to_have_text("1.0")
    expect(page.locator("#outputs")).to_contain_text("carried to the next call of the stream")
    shoot(page, "model-toggle-gru")


def test_a_detectors_page_shows_its_three_outputs(page, builtin_manifests) -> None:
    page.goto("/models/shapes-detector/")
    outputs = page.locator("#outputs tbody tr")
    expect(outputs).to_have_count(3)
    expect(outputs.nth(2)).to_contain_text("3 classes: circle, square, triangle")
    expect(page.locator("#outputs")).not_to_contain_text("None")
