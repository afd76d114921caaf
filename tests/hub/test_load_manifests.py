"""`manage.py load_manifests` loads the built-in manifests, and loading again changes nothing."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from hub.models import Artifact, Manifest
from tests.hub.factories import model_yaml

BUILTIN = Path(__file__).resolve().parents[2] / "manifests"


def _load(path: Path | None = None) -> str:
    out = StringIO()
    call_command("load_manifests", *([str(path)] if path else []), stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_the_builtin_manifests_load_public_and_ownerless() -> None:
    files = sorted(BUILTIN.rglob("*.yaml"))
    summary = _load()
    assert f"{len(files)} loaded" in summary
    assert Manifest.objects.count() == len(files)
    assert set(Manifest.objects.values_list("visibility", flat=True)) == {"public"}
    assert not Manifest.objects.exclude(owner=None).exists()
    assert Manifest.objects.filter(name="digits-cnn", kind="model").count() == 3


@pytest.mark.django_db
def test_loading_twice_is_idempotent() -> None:
    _load()
    before = list(Manifest.objects.order_by("pk").values_list("pk", "content_hash"))
    summary = _load()
    assert "0 loaded" in summary
    assert list(Manifest.objects.order_by("pk").values_list("pk", "content_hash")) == before


@pytest.mark.django_db
def test_files_built_after_loading_are_recorded_on_the_next_load(
    tmp_path: Path, artifact_root: Path
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "late.yaml").write_text(
        model_yaml(name="late", graph_file="late.onnx", visibility="public")
    )
    _load(folder)
    assert Artifact.objects.count() == 0
    built = artifact_root / "models/late/1.0.0/late.onnx"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"model")
    _load(folder)
    [artifact] = Manifest.objects.get(name="late").artifacts.all()
    assert artifact.path == "models/late/1.0.0/late.onnx" and artifact.size == 5


@pytest.mark.django_db
def test_a_changed_manifest_with_a_registered_identity_is_reported_and_left_unchanged(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.yaml").write_text(model_yaml(name="same"))
    _load(tmp_path)
    (tmp_path / "a.yaml").write_text(model_yaml(name="same", description="Changed."))
    err = StringIO()
    call_command("load_manifests", str(tmp_path), stdout=StringIO(), stderr=err)
    assert "registered with other content" in err.getvalue()
    assert Manifest.objects.get(name="same").description == "A test model."


@pytest.mark.django_db
def test_an_invalid_file_fails_the_command_naming_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        model_yaml(name="bad").replace("layout: NCHW", "layout: NCWH")
    )
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("load_manifests", str(tmp_path), stdout=StringIO(), stderr=err)
    assert "bad.yaml:" in err.getvalue() and "inputs.0.parameters.layout" in err.getvalue()
    assert Manifest.objects.count() == 0


@pytest.mark.django_db
def test_a_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        _load(tmp_path / "nowhere")
