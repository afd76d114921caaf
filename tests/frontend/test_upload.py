"""The upload form: a manifest (pasted or as a file) with its files, through `register_manifest`."""

from __future__ import annotations

import hashlib

import pytest
from playwright.sync_api import expect

from hub import actions
from hub.models import Artifact, Manifest
from predictors import manifests as spec
from tests.hub.factories import model_yaml, onnx_graph

pytestmark = pytest.mark.browser

GRAPH = onnx_graph("the upload test")


@pytest.fixture
def alice(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("alice")


def _submit(page) -> None:  # type: ignore[no-untyped-def]
    page.get_by_role("button", name="Validate and upload").click()


def test_uploading_a_manifest_with_its_file_registers_it(
    page, sign_in, alice, artifact_root, tmp_path, shoot
) -> None:
    sign_in(page, alice)
    graph = tmp_path / "tiny.onnx"
    graph.write_bytes(GRAPH)

    page.goto("/upload/")
    shoot(page, "upload-empty")
    page.get_by_label("Manifest (YAML)").fill(model_yaml("tiny-net", graph_file="tiny.onnx"))
    page.get_by_label("Model or dataset files").set_input_files(str(graph))
    page.get_by_label("Who can see it").select_option("public")
    _submit(page)

    expect(page).to_have_url("/models/tiny-net/?version=1.0.0&framework=onnxruntime")
    expect(page.locator(".message.success")).to_have_text("Uploaded model tiny-net 1.0.0 (public).")
    row = Manifest.objects.get(kind="model", name="tiny-net")
    assert (row.owner, row.visibility, row.version) == (alice, "public", "1.0.0")
    sha = hashlib.sha256(GRAPH).hexdigest()
    artifact = Artifact.objects.get(path="models/tiny-net/1.0.0/tiny.onnx")
    assert artifact.sha256 == sha
    assert (artifact_root / artifact.path).read_bytes() == GRAPH
    expect(page.locator("#files .sha")).to_have_text(sha)
    shoot(page, "upload-done-model-page")


def test_an_invalid_manifest_shows_each_error_beside_its_line_and_stores_nothing(
    page, sign_in, alice, artifact_root, tmp_path, shoot
) -> None:
    sign_in(page, alice)
    text = model_yaml("bad-net", graph_file="bad.onnx")
    text = text.replace("layout: NCHW", "layout: NCWH").replace("version: 1.0.0", "version: '1.0'")
    lines = text.splitlines()
    layout_line = next(i for i, line in enumerate(lines, 1) if "NCWH" in line)
    version_line = next(i for i, line in enumerate(lines, 1) if line.startswith("version:"))
    graph = tmp_path / "bad.onnx"
    graph.write_bytes(GRAPH)

    page.goto("/upload/")
    page.get_by_label("Manifest (YAML)").fill(text)
    page.get_by_label("Model or dataset files").set_input_files(str(graph))
    _submit(page)

    expect(page.locator("#error-summary")).to_contain_text("The manifest was not stored")
    errors = page.locator("#field-manifest #manifest-errors li")
    expect(errors).to_have_count(2)
    expect(errors.nth(0)).to_contain_text(f"line {version_line}")
    expect(errors.nth(0)).to_contain_text("version")
    expect(errors.nth(0)).to_contain_text("is not a semantic version")
    expect(errors.nth(1)).to_contain_text(f"line {layout_line}")
    expect(errors.nth(1)).to_contain_text("inputs.0.parameters.layout")
    expect(errors.nth(1)).to_contain_text("'NCWH' is not one of NCHW, NHWC")
    # The numbered listing marks the two lines and carries their messages.
    listing = page.locator("#manifest-listing")
    expect(listing.locator("li.has-error")).to_have_count(2)
    expect(listing.locator(f"#line-{layout_line}")).to_contain_text("NCWH")
    expect(listing.locator(f"#line-{layout_line} .line-error")).to_contain_text(
        "inputs.0.parameters.layout"
    )
    # The textarea keeps the text, is marked invalid, and its gutter marks the lines.
    textarea = page.get_by_label("Manifest (YAML)")
    expect(textarea).to_have_value(text)
    expect(textarea).to_have_attribute("aria-invalid", "true")
    assert page.locator(".gutter .bad").all_inner_texts() == [str(version_line), str(layout_line)]
    shoot(page, "upload-invalid-manifest")

    # "line N" selects that line in the textarea.
    errors.nth(1).get_by_role("link").click()
    selected = textarea.evaluate("t => t.value.slice(t.selectionStart, t.selectionEnd)")
    assert selected == lines[layout_line - 1]
    expect(textarea).to_be_focused()

    assert not Manifest.objects.exists()
    assert not Artifact.objects.exists()
    assert not any(artifact_root.rglob("*.*"))


def test_a_yaml_syntax_error_points_at_its_line(page, sign_in, alice) -> None:
    sign_in(page, alice)
    page.goto("/upload/")
    page.get_by_label("Manifest (YAML)").fill("kind: model\nname: [unclosed\nversion: 1.0.0\n")
    _submit(page)

    error = page.locator("#manifest-errors li")
    expect(error).to_have_count(1)
    expect(error.locator(".line-ref")).to_have_text("line 3")
    expect(page.locator("#manifest-listing li.has-error")).to_have_count(1)
    assert not Manifest.objects.exists()


def test_the_manifest_can_come_from_a_file(page, sign_in, alice, tmp_path) -> None:
    sign_in(page, alice)
    manifest = tmp_path / "remote-net.yaml"
    manifest.write_text(model_yaml("remote-net"))

    page.goto("/upload/")
    page.get_by_label("…or the manifest file").set_input_files(str(manifest))
    _submit(page)

    expect(page).to_have_url("/models/remote-net/?version=1.0.0&framework=onnxruntime")
    assert Manifest.objects.get(name="remote-net").visibility == "private"


def test_an_invalid_manifest_file_is_shown_in_the_textarea_with_its_errors(
    page, sign_in, alice, tmp_path
) -> None:
    sign_in(page, alice)
    manifest = tmp_path / "m.yaml"
    manifest.write_text(model_yaml("m").replace("color_mode: RGB", "colour_mode: RGB"))

    page.goto("/upload/")
    page.get_by_label("…or the manifest file").set_input_files(str(manifest))
    _submit(page)

    expect(page.locator("#manifest-errors")).to_contain_text("did you mean color_mode?")
    expect(page.get_by_label("Manifest (YAML)")).to_have_value(manifest.read_text())
    assert not Manifest.objects.exists()


def test_registry_errors_are_shown_beside_their_field_with_a_line(
    page, sign_in, alice, tmp_path, shoot
) -> None:
    sign_in(page, alice)
    actions.register_manifest(spec.load(model_yaml("taken")), owner=alice)
    stray = tmp_path / "stray.bin"
    stray.write_bytes(b"not named by the manifest")

    page.goto("/upload/")
    page.get_by_label("Manifest (YAML)").fill(model_yaml("needs-file", graph_file="g.onnx"))
    page.get_by_label("Model or dataset files").set_input_files(str(stray))
    _submit(page)

    files_errors = page.locator("#field-files #files-errors")
    expect(files_errors).to_contain_text("files.stray.bin")
    expect(files_errors).to_contain_text("uploaded file 'stray.bin' is not referenced")
    graph_error = page.locator("#manifest-errors li", has_text="model.graph_path")
    expect(graph_error).to_contain_text("is neither uploaded with the manifest nor in the store")
    line = next(
        i
        for i, text in enumerate(model_yaml("needs-file", graph_file="g.onnx").splitlines(), 1)
        if "graph_path" in text
    )
    expect(graph_error.locator(".line-ref")).to_have_text(f"line {line}")
    shoot(page, "upload-registry-errors")

    page.get_by_label("Manifest (YAML)").fill(model_yaml("taken"))
    page.get_by_label("Model or dataset files").set_input_files([])
    _submit(page)

    expect(page.locator("#manifest-errors")).to_contain_text(
        "model taken 1.0.0 for framework onnxruntime exists already"
    )
    assert Manifest.objects.count() == 1


def test_an_empty_form_asks_for_a_manifest(page, sign_in, alice) -> None:
    sign_in(page, alice)
    page.goto("/upload/")
    _submit(page)

    expect(page.locator("#manifest-form-errors")).to_have_text(
        "Paste a manifest or choose a manifest file."
    )


def test_the_upload_form_needs_a_signed_in_user(page, db) -> None:
    page.goto("/upload/")

    expect(page).to_have_url("/accounts/login/?next=/upload/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_signing_in_leads_back_to_the_upload_form(page, django_user_model, shoot) -> None:
    django_user_model.objects.create_user("carol", password="correct-horse-battery")
    page.goto("/upload/")
    page.get_by_label("User name").fill("carol")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#login-error")).to_be_visible()
    shoot(page, "sign-in-failed")

    page.get_by_label("Password").fill("correct-horse-battery")
    page.get_by_label("Password").press("Enter")

    expect(page).to_have_url("/upload/")
    expect(page.get_by_role("button", name="Sign out carol")).to_be_visible()
