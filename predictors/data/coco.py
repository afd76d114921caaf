"""A detection dataset from COCO: an annotations JSON file and its folder of images.

`convert(annotations, images, out, name, split)` reads COCO's `images`, `annotations` and
`categories`, checks them, and writes one Parquet split of the object-detection layout
(`predictors.data.DetectionReader`: `image`, `boxes`, `classes`), a row group at a time: the
images in the order of the JSON's `images`, each with its objects. The labels are the
categories' names in the order of their ids (class index = rank of the category id), so that
any id scheme works; the manifest records both.

What is refused, naming the entry: a JSON that is not COCO's shape; duplicate image or
category ids; an annotation of an unknown image or category; a box that is not four finite
numbers with a positive width and height; an image file that is missing, outside the images
folder (a `file_name` with `..` or an absolute path), neither PNG nor JPEG, or of another kind
than the first (a dataset has one encoding). Crowd annotations (`iscrowd: 1`) are left out, and
said so: COCO's evaluation treats them as regions to ignore, which this layout has no column
for.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictors.data.folder import ROW_GROUP_SIZE, FolderError, check_image
from predictors.data.formats import image_encoding

MAX_JSON_BYTES = 2 * 1024**3
MAX_CATEGORIES = 10_000


class CocoError(ValueError):
    """What is wrong with the COCO files, naming the entry."""


@dataclass
class Converted:
    labels: list[str]
    category_ids: list[int]
    encoding: str
    images: int
    objects: int
    crowd: int


def _entries(document: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = document.get(key)
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise CocoError(f"'{key}' must be a list of objects, as in COCO's annotation files")
    return value


def _integer(entry: dict[str, Any], key: str, where: str) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CocoError(f"{where}: '{key}' must be an integer; got {value!r}")
    return value


def read(annotations: Path) -> dict[str, Any]:
    if not annotations.is_file():
        raise CocoError(f"{annotations} is not a file")
    if annotations.stat().st_size > MAX_JSON_BYTES:
        raise CocoError(f"{annotations} is larger than {MAX_JSON_BYTES} bytes")
    try:
        document = json.loads(annotations.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CocoError(f"{annotations.name} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CocoError(f"{annotations.name} holds {type(document).__name__}, not an object")
    return document


def convert(annotations: Path, images: Path, out: Path, *, split: str) -> Converted:
    """Write `out/<split>.parquet` from the COCO files; what it holds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    document = read(annotations)
    if not images.is_dir():
        raise CocoError(f"{images} is not a folder")
    categories = _entries(document, "categories")
    if not categories:
        raise CocoError("'categories' is empty: a detection dataset needs at least one class")
    if len(categories) > MAX_CATEGORIES:
        raise CocoError(f"'categories' has {len(categories)} entries; at most {MAX_CATEGORIES}")
    names: dict[int, str] = {}
    for index, category in enumerate(categories):
        where = f"categories[{index}]"
        category_id = _integer(category, "id", where)
        name = category.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 256:
            raise CocoError(f"{where}: 'name' must be a non-empty string of at most 256 characters")
        if category_id in names:
            raise CocoError(f"{where}: category id {category_id} is given twice")
        names[category_id] = name
    ids = sorted(names)
    index_of = {category_id: index for index, category_id in enumerate(ids)}

    pictures = _entries(document, "images")
    if not pictures:
        raise CocoError("'images' is empty")
    objects: dict[int, tuple[list[list[float]], list[int]]] = {}
    files: list[tuple[int, str]] = []
    for index, picture in enumerate(pictures):
        where = f"images[{index}]"
        image_id = _integer(picture, "id", where)
        file_name = picture.get("file_name")
        if not isinstance(file_name, str) or not file_name:
            raise CocoError(f"{where}: 'file_name' must be a non-empty string")
        if image_id in objects:
            raise CocoError(f"{where}: image id {image_id} is given twice")
        objects[image_id] = ([], [])
        files.append((image_id, file_name))

    crowd = 0
    for index, annotation in enumerate(_entries(document, "annotations")):
        where = f"annotations[{index}]"
        image_id = _integer(annotation, "image_id", where)
        category_id = _integer(annotation, "category_id", where)
        if image_id not in objects:
            raise CocoError(f"{where}: image_id {image_id} is no image of 'images'")
        if category_id not in index_of:
            raise CocoError(f"{where}: category_id {category_id} is no category of 'categories'")
        box = annotation.get("bbox")
        if (
            not isinstance(box, list)
            or len(box) != 4
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in box)
            or not all(math.isfinite(v) for v in box)
            or not (box[2] > 0 and box[3] > 0)
        ):
            raise CocoError(
                f"{where}: 'bbox' must be [x, y, width, height], four finite numbers with a "
                f"positive width and height; got {box!r}"
            )
        if annotation.get("iscrowd"):
            crowd += 1
            continue
        boxes, classes = objects[image_id]
        boxes.append([float(v) for v in box])
        classes.append(index_of[category_id])

    schema = pa.schema(
        [
            pa.field("image", pa.binary()),
            pa.field("boxes", pa.list_(pa.list_(pa.float64(), 4))),
            pa.field("classes", pa.list_(pa.int64())),
        ]
    )
    root = images.resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{split}.parquet"
    partial = target.with_suffix(".parquet.partial")
    encoding: str | None = None
    count = 0
    try:
        with pq.ParquetWriter(partial, schema, compression="none") as writer:
            rows: dict[str, list[Any]] = {"image": [], "boxes": [], "classes": []}
            for image_id, file_name in files:
                if "\x00" in file_name:
                    raise CocoError(f"images: file_name {file_name!r} holds a NUL character")
                path = (root / file_name).resolve()
                if not path.is_relative_to(root):
                    raise CocoError(f"{file_name}: lies outside the images folder")
                if not path.is_file():
                    raise CocoError(f"{file_name}: no such file in {images}")
                data = path.read_bytes()
                kind = image_encoding(data)
                if kind is None:
                    raise CocoError(f"{file_name}: is neither a PNG nor a JPEG image")
                try:
                    check_image(data, file_name)
                except FolderError as error:
                    raise CocoError(f"{file_name}: {error.message}") from None
                encoding = encoding or kind
                if kind != encoding:
                    raise CocoError(
                        f"{file_name}: is {kind.upper()}, but the images before it are "
                        f"{encoding.upper()} (a dataset has one encoding)"
                    )
                boxes, classes = objects[image_id]
                rows["image"].append(data)
                rows["boxes"].append(boxes)
                rows["classes"].append(classes)
                count += 1
                if len(rows["image"]) == ROW_GROUP_SIZE:
                    writer.write_table(pa.table(rows, schema=schema))
                    rows = {"image": [], "boxes": [], "classes": []}
            if rows["image"]:
                writer.write_table(pa.table(rows, schema=schema))
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    assert encoding is not None
    return Converted(
        labels=[names[category_id] for category_id in ids],
        category_ids=ids,
        encoding=encoding,
        images=count,
        objects=sum(len(classes) for _, classes in objects.values()),
        crowd=crowd,
    )


def manifest(
    name: str,
    version: str,
    split: str,
    converted: Converted,
    path: str,
    *,
    description: str,
    license: str,
) -> dict[str, Any]:
    """The dataset manifest of a converted split (its file at `path`, a repo:// URL)."""
    return {
        "kind": "dataset",
        "name": name,
        "version": version,
        "description": description,
        "license": license,
        "task": "object_detection",
        "format": "parquet",
        "encoding": converted.encoding,
        "labels": converted.labels,
        "splits": {split: {"path": path, "count": converted.images}},
        "attributes": {
            "source": "COCO annotations (mlms datasets from-coco)",
            "coco_category_ids": converted.category_ids,
            "crowd_annotations_left_out": converted.crowd,
        },
    }
