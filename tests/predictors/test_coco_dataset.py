"""`mlms datasets from-coco`: COCO annotations and their images made an object-detection dataset
(`predictors.data.coco`), checked entry by entry; the zoo's detector scores the same on it
as on the zoo's own split."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from predictors.data.coco import CocoError, convert
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("shapes-detector",))


def coco_files(store: Path, folder: Path, *, crowd: bool = False) -> Path:
    """The zoo's shapes-boxes validation split written out as COCO: image files and an
    annotations JSON whose category ids are 10, 20, 30 (not 0, 1, 2)."""
    rows = pq.read_table(store / "datasets/shapes-boxes/1.0.0/validation.parquet").to_pylist()
    images = folder / "images"
    images.mkdir(parents=True)
    document: dict[str, Any] = {
        "images": [],
        "annotations": [],
        "categories": [
            {"id": 30, "name": "triangle"},
            {"id": 10, "name": "circle"},
            {"id": 20, "name": "square"},
        ],
    }
    for index, row in enumerate(rows):
        name = f"{index:04d}.png"
        (images / name).write_bytes(row["image"])
        document["images"].append({"id": 1000 + index, "file_name": name})
        for box, kind in zip(row["boxes"], row["classes"], strict=True):
            document["annotations"].append(
                {
                    "id": len(document["annotations"]) + 1,
                    "image_id": 1000 + index,
                    "bbox": box,
                    "category_id": (kind + 1) * 10,
                    "iscrowd": 0,
                }
            )
    if crowd:
        document["annotations"].append(
            {"id": 0, "image_id": 1000, "bbox": [0, 0, 5, 5], "category_id": 10, "iscrowd": 1}
        )
    path = folder / "annotations.json"
    path.write_text(json.dumps(document))
    return path


def _mlms(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "predictors.cli", *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.frameworks
def test_a_coco_dataset_scores_as_the_zoos_own_split(store: Path, tmp_path: Path) -> None:
    annotations = coco_files(store, tmp_path / "coco", crowd=True)
    local = tmp_path / "store"
    manifest = tmp_path / "shapes-coco.yaml"
    made = _mlms(
        "datasets",
        "from-coco",
        str(annotations),
        "--images",
        str(tmp_path / "coco/images"),
        "--name",
        "shapes-coco",
        "--store",
        str(local),
        "--out",
        str(manifest),
    )
    assert made.returncode == 0, made.stderr
    assert "3 classes, 300 images (png)" in made.stdout
    assert "1 crowd annotations left out" in made.stdout
    for name in ("models/shapes-detector", "datasets/shapes-boxes"):
        target = local / name
        shutil.copytree(store / name, target)  # the store refuses links leading out
    ours = _mlms(
        "evaluate",
        "shapes-detector",
        "--framework",
        "onnxruntime",
        "--dataset",
        str(manifest),
        "--store",
        str(local),
        "--format",
        "json",
        "--no-progress",
    )
    zoo = _mlms(
        "evaluate",
        "shapes-detector",
        "--framework",
        "onnxruntime",
        "--dataset",
        "shapes-boxes",
        "--store",
        str(local),
        "--format",
        "json",
        "--no-progress",
    )
    assert ours.returncode == 0 and zoo.returncode == 0, ours.stderr + zoo.stderr
    mine = json.loads(ours.stdout)["results"][0]["accuracy"]
    theirs = json.loads(zoo.stdout)["results"][0]["accuracy"]
    assert mine["map"] == theirs["map"] and mine["objects"] == theirs["objects"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["annotations"][0].update(category_id=99),
            "annotations[0]: category_id 99 is no category",
        ),
        (lambda d: d["annotations"][1].update(bbox=[0, 0, 0, 4]), "annotations[1]: 'bbox' must be"),
        (
            lambda d: d["annotations"][2].update(image_id=5),
            "annotations[2]: image_id 5 is no image",
        ),
        (lambda d: d["images"][1].update(id=1000), "images[1]: image id 1000 is given twice"),
        (
            lambda d: d["categories"][1].update(id=30),
            "categories[1]: category id 30 is given twice",
        ),
        (lambda d: d["images"][0].update(file_name="../secret.png"), "../secret.png: lies outside"),
        (lambda d: d["images"][0].update(file_name="missing.png"), "missing.png: no such file"),
        (lambda d: d.update(images={}), "'images' must be a list of objects"),
    ],
)
def test_coco_files_that_do_not_fit_are_refused_naming_the_entry(
    store: Path, tmp_path: Path, change: Any, message: str
) -> None:
    annotations = coco_files(store, tmp_path / "coco")
    document = json.loads(annotations.read_text())
    change(document)
    annotations.write_text(json.dumps(document))
    (tmp_path / "secret.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(
        CocoError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
    ):
        convert(annotations, tmp_path / "coco/images", tmp_path / "out", split="validation")
    assert not (tmp_path / "out/validation.parquet").exists()


def test_images_of_two_kinds_are_refused(store: Path, tmp_path: Path) -> None:
    from PIL import Image

    annotations = coco_files(store, tmp_path / "coco")
    Image.new("RGB", (8, 8)).save(tmp_path / "coco/images/0001.png", format="JPEG")
    with pytest.raises(CocoError, match="0001.png: is JPEG, but the images before it are PNG"):
        convert(annotations, tmp_path / "coco/images", tmp_path / "out", split="validation")


def test_the_command_refuses_what_does_not_go_together(tmp_path: Path) -> None:
    done = _mlms(
        "datasets",
        "from-coco",
        "a.json",
        "--images",
        str(tmp_path),
        "--name",
        "x",
        "--token",
        "t",
    )
    assert done.returncode != 0 and "--visibility and --token go with --hub" in done.stderr
    done = _mlms(
        "datasets",
        "from-coco",
        str(tmp_path / "none.json"),
        "--images",
        str(tmp_path),
        "--name",
        "x",
        "--store",
        str(tmp_path / "s"),
    )
    assert done.returncode != 0 and "none.json is not a file" in done.stderr
