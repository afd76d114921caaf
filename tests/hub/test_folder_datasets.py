"""`POST /api/v1/datasets/from-folder/`: a dataset from an archive of an image folder.

The images are real PNG and JPEG files made here; the end-to-end test takes the zoo's digits
validation images, files them into class folders, uploads them, and evaluates digits-cnn on
the dataset the hub made: the same accuracy as on the zoo's own split."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from rest_framework.test import APIClient

from hub.models import Artifact, Manifest

pytestmark = pytest.mark.django_db

URL = "/api/v1/datasets/from-folder/"


def png(level: int, size: tuple[int, int] = (6, 5)) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", size, level).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg(level: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 5), (level,) * 3).save(buffer, format="JPEG")
    return buffer.getvalue()


def zipped(files: dict[str, bytes | None]) -> bytes:
    """A zip of `files` (path → content; None for a folder entry)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in files.items():
            if content is None:
                archive.writestr(zipfile.ZipInfo(name.rstrip("/") + "/"), b"")
            else:
                archive.writestr(name, content)
    return buffer.getvalue()


def post(client: APIClient, archive: bytes, **fields: Any) -> Any:
    body = {"name": "my-data", "version": "1.0.0", **fields}
    body["archive"] = io.BytesIO(archive)
    body["archive"].name = "data.zip"
    return client.post(URL, body, format="multipart")


def error_of(response: Any) -> tuple[str, str]:
    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    return error["path"], error["message"]


def test_a_folder_of_class_folders_becomes_a_dataset(alice_full_client, artifact_root) -> None:  # type: ignore[no-untyped-def]
    from predictors.data import DatasetReader

    files = {
        f"{label}/{i}.png": png(40 * k + i)
        for k, label in enumerate(("cat", "dog"))
        for i in range(3)
    }
    files[".DS_Store"] = b"ignored"
    files["cat/.hidden"] = b"ignored too"
    response = post(alice_full_client, zipped(files), description="Two pets.", license="CC0-1.0")

    assert response.status_code == 201, response.content
    body = response.json()
    content = body["manifest"]
    assert content["labels"] == ["cat", "dog"]
    assert content["encoding"] == "png" and content["task"] == "image_classification"
    assert content["splits"] == {
        "validation": {"path": "repo://datasets/my-data/1.0.0/validation.parquet", "count": 6}
    }
    assert body["visibility"] == "private"
    stored = artifact_root / "datasets/my-data/1.0.0/validation.parquet"
    reader = DatasetReader(stored, batch_size=4)
    images, labels = zip(*reader, strict=True)
    assert [len(batch) for batch in images] == [4, 2]
    assert np.concatenate(labels).tolist() == [0, 0, 0, 1, 1, 1]
    assert images[0][0] == files["cat/0.png"]
    assert Artifact.objects.get(path="datasets/my-data/1.0.0/validation.parquet").size == (
        stored.stat().st_size
    )


def test_split_folders_become_splits_with_the_same_classes(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    files = {
        f"mydata/{split}/{label}/{i}.jpg": jpeg(10 * i)
        for split in ("train", "validation")
        for label in ("a", "b")
        for i in range(2 if split == "train" else 1)
    }
    response = post(alice_full_client, zipped(files), visibility="public")
    assert response.status_code == 201, response.content
    content = response.json()["manifest"]
    assert content["encoding"] == "jpeg" and content["labels"] == ["a", "b"]
    assert {name: split["count"] for name, split in content["splits"].items()} == {
        "train": 4,
        "validation": 2,
    }
    assert response.json()["visibility"] == "public"


def test_a_tar_archive_with_the_split_named_is_taken(alice_full_client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "folder"
    for label in ("x", "y"):
        (folder / label).mkdir(parents=True)
        (folder / label / "1.png").write_bytes(png(99))
    packed = tmp_path / "data.tar.gz"
    with tarfile.open(packed, "w:gz") as archive:
        archive.add(folder, arcname=".")
    response = post(alice_full_client, packed.read_bytes(), split="test")
    assert response.status_code == 201, response.content
    assert list(response.json()["manifest"]["splits"]) == ["test"]


@pytest.mark.parametrize(
    ("files", "words"),
    [
        (
            {"cat/a.png": png(1), "cat/notes.txt": b"hello"},
            "cat/notes.txt: is neither a PNG nor a JPEG",
        ),
        (
            {"cat/a.png": png(1), "dog/b.jpg": jpeg(2)},
            "dog/b.jpg: is a JPEG image, but the dataset's images are PNG",
        ),
        ({"cat/a.png": png(1), "dog/": None}, "dog: is an empty class folder"),
        (
            {"cat/a.png": png(1), "readme.png": png(2)},
            "readme.png: is a file beside the class folders",
        ),
        (
            {"cat/a.png": png(1), "cat/more/b.png": png(2)},
            "cat: holds both images and folders",
        ),
        ({"cat/a.png": png(1), "cat/b.png": png(3)[:30]}, "cat/b.png: Pillow cannot decode it"),
        ({"../evil/a.png": png(1)}, "../evil/a.png: is a path outside the archive's folder"),
        ({"/abs/a.png": png(1)}, "/abs/a.png: is a path outside the archive's folder"),
        (
            {"train/cat/a.png": png(1), "validation/dog/a.png": png(2)},
            "validation: has other classes than train (differing: cat, dog)",
        ),
        ({}, "the folder is empty"),
    ],
)
def test_a_folder_that_cannot_be_a_dataset_is_refused_naming_the_file(  # type: ignore[no-untyped-def]
    alice_full_client, artifact_root, settings, files, words
) -> None:
    response = post(alice_full_client, zipped(files))
    path, message = error_of(response)
    assert path == "archive"
    assert words in message, message
    # Nothing of it is kept: no manifest, no file, no unpacked leftovers.
    assert not Manifest.objects.filter(name="my-data").exists()
    assert not list(artifact_root.rglob("*.parquet"))
    assert not [p for p in os.listdir(settings.FILE_UPLOAD_TEMP_DIR) if p.startswith("folder-")]


def test_links_floods_and_non_archives_are_refused(alice_full_client, tmp_path, settings) -> None:  # type: ignore[no-untyped-def]
    packed = tmp_path / "link.tar"
    with tarfile.open(packed, "w") as archive:
        info = tarfile.TarInfo("cat/a.png")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        archive.addfile(info)
    assert error_of(post(alice_full_client, packed.read_bytes()))[1] == (
        "cat/a.png: is a link; archive the file itself"
    )

    # A small archive that unpacks to far more than the limit (a zip bomb, in miniature).
    settings.UPLOAD_MAX_BYTES = 2048
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("cat/a.png", b"\0" * 1_000_000)
    assert len(bomb.getvalue()) < 2048
    assert "unpacks to more than its limit" in error_of(post(alice_full_client, bomb.getvalue()))[1]

    assert error_of(post(alice_full_client, b"plain text"))[1] == (
        "archive: the archive is neither a zip nor a tar file"
    )


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"name": "Not A Slug"}, "name"),
        ({"version": "1.0"}, "version"),
        ({"visibility": "secret"}, "visibility"),
        ({"colour": "red"}, "colour"),
        ({"split": "../up"}, "splits"),
    ],
)
def test_bad_fields_are_refused_before_anything_is_unpacked(
    alice_full_client, fields, path
) -> None:  # type: ignore[no-untyped-def]
    response = post(alice_full_client, zipped({"cat/a.png": png(1)}), **fields)
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["path"].startswith(path), response.json()
    assert not Manifest.objects.exists()


def test_no_archive_no_name_and_no_write_scope(
    alice_full_client, make_client, alice, anonymous
) -> None:  # type: ignore[no-untyped-def]
    response = alice_full_client.post(URL, {"name": "x", "version": "1.0.0"}, format="multipart")
    assert error_of(response) == ("archive", "the archive is missing")
    archive = io.BytesIO(zipped({"cat/a.png": png(1)}))
    archive.name = "a.zip"
    response = alice_full_client.post(URL, {"archive": archive}, format="multipart")
    assert {e["path"] for e in response.json()["errors"]} == {"name", "version"}
    reader = make_client(alice, scopes=["read"])
    assert post(reader, zipped({"cat/a.png": png(1)})).status_code == 403
    assert post(anonymous, zipped({"cat/a.png": png(1)})).status_code == 401


def test_digits_filed_in_class_folders_score_as_the_zoos_own_split(  # type: ignore[no-untyped-def]
    alice_full_client, artifact_root, tmp_path
) -> None:
    """The dataset the hub makes is the one the loop reads: digits-cnn scores exactly as on
    the zoo's digits validation split."""
    from predictors import manifests
    from predictors.data import DataManager
    from predictors.evaluation import EvaluationOptions, evaluate
    from predictors.zoo.datasets import read_split
    from tests.predictors.zoo_store import REPO_ROOT, zoo_store

    zoo = zoo_store(("digits-cnn",))
    split = read_split(zoo / "datasets/digits/1.0.0/validation.parquet")
    files = {
        f"digits/{label}/{index:04d}.png": image
        for index, (image, label) in enumerate(zip(split.images, split.labels, strict=True))
    }
    response = post(alice_full_client, zipped(files), name="my-digits")
    assert response.status_code == 201, response.content
    uploaded = manifests.load(Manifest.objects.get(name="my-digits").source)
    assert uploaded.data["labels"] == [str(d) for d in range(10)]

    model = manifests.load_file(REPO_ROOT / "manifests/models/digits-cnn/onnxruntime.yaml")
    shutil.copytree(zoo / "models/digits-cnn", artifact_root / "models/digits-cnn")
    options = EvaluationOptions(batch_sizes=(32,), warmup=0)
    ours = evaluate(model, uploaded, options, DataManager(store_dir=artifact_root).fetch)
    builtin = manifests.load_file(REPO_ROOT / "manifests/datasets/digits.yaml")
    theirs = evaluate(model, builtin, options, DataManager(store_dir=zoo).fetch)
    assert ours.result["accuracy"] == theirs.result["accuracy"]
    assert ours.result["accuracy"]["count"] == 360


# -- `mlms datasets from-folder`, locally and against a running hub --------------------------


def _digits_folder(root: Path, count: int = 360) -> Path:
    from predictors.zoo.datasets import read_split
    from tests.predictors.zoo_store import zoo_store

    split = read_split(zoo_store(("digits-cnn",)) / "datasets/digits/1.0.0/validation.parquet")
    for index, (image, label) in enumerate(zip(split.images, split.labels, strict=True)):
        if index == count:
            break
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index:04d}.png").write_bytes(image)
    return root


def test_the_command_makes_a_local_dataset_that_mlms_evaluate_reads(  # type: ignore[no-untyped-def]
    tmp_path, capsys
) -> None:
    from predictors.cli import main
    from tests.predictors.zoo_store import zoo_store

    zoo = zoo_store(("digits-cnn",))
    store = tmp_path / "store"
    shutil.copytree(zoo / "models/digits-cnn", store / "models/digits-cnn")
    folder = _digits_folder(tmp_path / "digits")
    out = tmp_path / "my-digits.yaml"
    argv = ["datasets", "from-folder", str(folder), "--name", "my-digits", "--store", str(store)]
    assert main([*argv, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "dataset my-digits 1.0.0: 10 classes, validation 360 images (png)" in said

    evaluate = ["evaluate", "digits-cnn", "--framework", "onnxruntime", "--no-progress"]
    assert main([*evaluate, "--dataset", str(out), "--store", str(store), "--format", "json"]) == 0
    ours = json.loads(capsys.readouterr().out)["results"][0]["accuracy"]
    assert main([*evaluate, "--dataset", "digits", "--store", str(zoo), "--format", "json"]) == 0
    theirs = json.loads(capsys.readouterr().out)["results"][0]["accuracy"]
    assert ours == theirs

    # The same name and version again: refused, nothing overwritten.
    assert main([*argv, "--out", str(tmp_path / "again.yaml")]) == 1
    assert "exists already: choose another --version" in capsys.readouterr().err
    (folder / "3" / "bad.png").write_bytes(b"not an image")
    assert main([*argv, "--name", "broken"]) == 1
    assert "3/bad.png: is neither a PNG nor a JPEG image" in capsys.readouterr().err
    assert main([*argv, "--visibility", "public"]) == 1
    assert "--visibility and --token go with --hub" in capsys.readouterr().err


@pytest.mark.django_db(transaction=True)
def test_the_command_uploads_a_folder_to_a_hub(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from predictors.cli import main
    from tests.livehub import running_hub

    folder = _digits_folder(tmp_path / "digits", count=40)
    with running_hub(tmp_path / "hub", users=True) as hub:
        argv = ["datasets", "from-folder", str(folder), "--name", "shared-digits", "--hub", hub.url]
        assert main([*argv, "--token", hub.token, "--visibility", "public"]) == 0
        said = capsys.readouterr().out
        assert f"dataset shared-digits 1.0.0 on {hub.url} (public): 10 classes" in said
        status, listed = hub.get("datasets/?name=shared-digits")
        assert status == 200 and listed["count"] == 1
        # The same again: the hub's refusal, in one line.
        assert main([*argv, "--token", hub.token]) == 1
        assert "the hub refused it (409)" in capsys.readouterr().err
        assert main([*argv, "--token", "wrong"]) == 1
        assert "(401)" in capsys.readouterr().err


def test_archives_that_do_not_unpack_are_refused_not_a_server_error(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    good = zipped({"cat/a.png": png(1), "cat/b.png": png(2)})
    corrupt = bytearray(good)
    corrupt[good.index(png(1)) + 20] ^= 0xFF  # a flipped byte inside a member: a bad CRC
    clash = zipped({"cat": b"a file", "cat/a.png": png(1)})  # a file where a folder goes
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("cat/a.png")
        data = png(1) * 50
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    truncated = buffer.getvalue()[:-40]
    for archive_bytes in (bytes(corrupt), clash, truncated):
        path, message = error_of(post(alice_full_client, archive_bytes))
        assert path == "archive"
        assert "the archive cannot be unpacked" in message, message
    assert not Manifest.objects.exists()


def test_finder_resource_forks_are_skipped_and_split_folders_name_their_splits(  # type: ignore[no-untyped-def]
    alice_full_client,
) -> None:
    files = {
        "pets/cat/a.png": png(1),
        "pets/dog/b.png": png(2),
        "__MACOSX/pets/cat/._a.png": b"\x00\x05\x16\x07 resource fork",
    }
    response = post(alice_full_client, zipped(files))
    assert response.status_code == 201, response.content
    assert response.json()["manifest"]["labels"] == ["cat", "dog"]

    split_folders = zipped({"train/cat/a.png": png(1), "validation/cat/b.png": png(2)})
    path, message = error_of(post(alice_full_client, split_folders, name="other", split="test"))
    assert "split 'test' is given, but the folder holds split folders (train, validation)" in (
        message
    )


def test_an_archive_over_the_upload_limit_is_413(alice_full_client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_MAX_BYTES = 4096
    big = zipped({f"cat/{i}.png": png(i, size=(40, 40)) for i in range(40)})
    assert len(big) > 4096
    response = post(alice_full_client, big)
    assert response.status_code == 413, response.content
    assert response.json()["errors"][0]["path"] == "archive"


# -- a folder of any files, kept byte for byte (`raw`) ---------------------------------------


def test_a_folder_of_any_files_is_kept_byte_for_byte(alice_full_client, artifact_root) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    files: dict[str, bytes | None] = {
        "code/a.py": b"import os\nprint(os.getcwd())\n",
        "code/b.py": b"def f():\n    return 1\n",
        "data/x.json": b'{"a": [1, 2, 3]}',
        "blobs/y.bin": bytes(range(256)) * 3,
    }
    response = post(alice_full_client, zipped(files), name="my-files", raw="true")

    assert response.status_code == 201, response.content
    manifest = Manifest.objects.get(name="my-files")
    assert manifest.content["encoding"] == "raw"
    assert manifest.content["labels"] == ["blobs", "code", "data"]
    assert manifest.description == "Files uploaded as a folder of class folders."
    table = pq.read_table(artifact_root / "datasets/my-files/1.0.0/validation.parquet")
    labels, data = table.column("label").to_pylist(), table.column("image").to_pylist()
    assert sorted(zip(labels, data, strict=True)) == sorted(
        [
            (0, files["blobs/y.bin"]),
            (1, files["code/a.py"]),
            (1, files["code/b.py"]),
            (2, files["data/x.json"]),
        ]
    )


def test_raw_files_that_cannot_be_kept_and_a_bad_raw_are_refused(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    assert error_of(post(alice_full_client, zipped({"a/x.txt": b"x"}), raw="maybe")) == (
        "raw",
        "must be true or false, not 'maybe'",
    )
    path, message = error_of(
        post(alice_full_client, zipped({"a/x.txt": b"x", "a/empty.txt": b""}), raw="true")
    )
    assert (path, message) == ("archive", "a/empty.txt: is empty")
    # Without raw a folder of other files is refused as before, naming the file.
    path, message = error_of(post(alice_full_client, zipped({"a/x.txt": b"x"})))
    assert message == "a/x.txt: is neither a PNG nor a JPEG image"
    assert Manifest.objects.count() == 0 and Artifact.objects.count() == 0


def test_file_types_filed_in_folders_score_as_the_zoos_own_split(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A folder of files named by a model's labels (`--labels`, the model's own labels file),
    made a dataset of raw files locally: the file-type classifier scores it as the zoo's own
    split of the same files."""
    import pyarrow.parquet as pq

    from predictors.cli import main
    from tests.predictors.zoo_store import zoo_store

    zoo = zoo_store(("file-type", "file-types"))
    labels_file = zoo / "models/file-type/1.0.0/labels.txt"
    labels = labels_file.read_text(encoding="utf-8").splitlines()
    table = pq.read_table(zoo / "datasets/file-types/1.0.0/validation.parquet")
    folder = tmp_path / "files"
    for index, (data, label) in enumerate(
        zip(table.column("image").to_pylist(), table.column("label").to_pylist(), strict=True)
    ):
        (folder / labels[label]).mkdir(parents=True, exist_ok=True)
        (folder / labels[label] / f"{index:04d}").write_bytes(data)
    store = tmp_path / "store"
    shutil.copytree(zoo / "models/file-type", store / "models/file-type")
    out = tmp_path / "my-files.yaml"
    argv = ["datasets", "from-folder", str(folder), "--name", "my-files", "--raw"]
    assert (
        main([*argv, "--labels", str(labels_file), "--store", str(store), "--out", str(out)]) == 0
    )
    said = capsys.readouterr().out
    assert f"{len(labels)} classes, validation {table.num_rows} files (raw)" in said

    evaluate = ["evaluate", "file-type", "--framework", "onnxruntime", "--no-progress"]
    assert main([*evaluate, "--dataset", str(out), "--store", str(store), "--format", "json"]) == 0
    ours = json.loads(capsys.readouterr().out)["results"][0]["accuracy"]
    assert (
        main([*evaluate, "--dataset", "file-types", "--store", str(zoo), "--format", "json"]) == 0
    )
    theirs = json.loads(capsys.readouterr().out)["results"][0]["accuracy"]
    assert ours["top1"] == theirs["top1"] and ours["count"] == theirs["count"] == table.num_rows

    # A class folder that is none of the labels is named.
    (folder / "not-a-type").mkdir()
    (folder / "not-a-type" / "x").write_bytes(b"x")
    assert (
        main([*argv, "--name", "other", "--labels", str(labels_file), "--store", str(store)]) == 1
    )
    assert "not-a-type: is not one of the 214 labels given" in capsys.readouterr().err
