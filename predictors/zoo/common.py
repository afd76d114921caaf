"""What the zoo's builders share: shapes drawn on noisy backgrounds, a dataset's cells (PNG
images, ``.npy`` arrays), its Parquet files with the dataset's metadata, its splits written
into the store, images made into the input a model trains on, and a trained model's files
written into the store with its record.

pyarrow and Pillow are imported only by the functions that need them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from predictors.zoo.store import VERSION, Staging

Column = tuple[str, Any, Any]  # a table's column: its name, its values and their pyarrow type


def draw_shape(draw: Any, kind: int, x: int, y: int, size: int, fill: Any) -> None:
    """A filled circle (kind 0), square (1) or triangle (2) of `size` pixels, its top left
    corner at (x, y), drawn by the ``ImageDraw`` `draw`."""
    corners = (x, y, x + size - 1, y + size - 1)
    if kind == 0:
        draw.ellipse(corners, fill=fill)
    elif kind == 1:
        draw.rectangle(corners, fill=fill)
    else:
        draw.polygon(
            [(x + size / 2, y), (x, y + size - 1), (x + size - 1, y + size - 1)], fill=fill
        )


class Sketch:
    """An RGB image drawn from `rng`: a background of one random colour, shapes in colours
    that stand out from it (``draw`` is its ``ImageDraw``), and, once drawn, its pixels with
    noise added."""

    def __init__(self, rng: np.random.Generator, width: int, height: int) -> None:
        from PIL import Image, ImageDraw

        self.rng = rng
        self.background = rng.integers(0, 256, 3)
        self.image = Image.new("RGB", (width, height), tuple(int(v) for v in self.background))
        self.draw = ImageDraw.Draw(self.image)

    def color(self) -> tuple[int, ...]:
        """A random colour whose channels differ from the background's by 150 or more in all."""
        color = self.rng.integers(0, 256, 3)
        while np.abs(color - self.background).sum() < 150:
            color = self.rng.integers(0, 256, 3)
        return tuple(int(v) for v in color)

    def shape(self, kind: int, x: int, y: int, size: int) -> None:
        """A shape (`draw_shape`) in a colour that stands out from the background."""
        draw_shape(self.draw, kind, x, y, size, self.color())

    def pixels(self) -> np.ndarray:
        """The image's pixels with Gaussian noise (standard deviation 8) added, as uint8."""
        noise = self.rng.normal(0, 8, (self.image.height, self.image.width, 3))
        return np.clip(np.asarray(self.image, np.int16) + noise, 0, 255).astype(np.uint8)


def png_bytes(array: np.ndarray) -> bytes:
    """An image (H, W) or (H, W, 3) of uint8 as a PNG file."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    """An array as a ``.npy`` file (no pickled objects)."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def labels_text(labels: Iterable[str]) -> bytes:
    """A model's ``labels.txt``: one label a line."""
    return "".join(f"{label}\n" for label in labels).encode()


def image_tensor(images: Sequence[bytes], mean: float, std: float) -> np.ndarray:
    """Encoded images of one size as a model takes them: RGB, scaled to [0, 1], standardised
    as (x - mean) / std, NCHW float32."""
    from PIL import Image

    pixels = np.stack([np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) for data in images])
    return ((pixels.astype(np.float32) / 255.0 - mean) / std).transpose(0, 3, 1, 2).copy()


def dataset_metadata(name: str, labels: Sequence[str], encoding: str = "") -> dict[str, str]:
    """The Parquet metadata of a dataset's split: its name, the encoding of its cells (if
    given) and its labels."""
    metadata = {"mlmodelscope.dataset": name}
    if encoding:
        metadata["mlmodelscope.encoding"] = encoding
    metadata["mlmodelscope.labels"] = json.dumps(list(labels))
    return metadata


def parquet_bytes(
    columns: Sequence[Column],
    metadata: Mapping[str, str],
    row_group_size: int | None = None,
) -> bytes:
    """A table as an uncompressed Parquet file: `columns` are (name, values, pyarrow type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field(name, kind) for name, _, kind in columns], metadata=dict(metadata))
    table = pa.Table.from_arrays(
        [pa.array(values, type=kind) for _, values, kind in columns], schema=schema
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size, compression="none")
    return sink.getvalue()


def build_splits(
    store: str | Path,
    name: str,
    labels: Sequence[str],
    encoding: str,
    splits: Mapping[str, tuple[bytes, int]],
    **record: Any,
) -> dict:
    """Write a dataset's splits ({split: (its Parquet file, its number of rows)}, in the order
    given) into its store entry ``datasets/<name>/VERSION`` as ``<split>.parquet``, all of them
    or none; the dataset's record: its files, each with its row count, the encoding of its
    cells, its labels and `record`."""
    with Staging(Path(store), f"datasets/{name}/{VERSION}") as staging:
        for split, (data, _) in splits.items():
            staging.write(f"{split}.parquet", data)
        files = staging.commit()
    for file, (_, count) in zip(files, splits.values(), strict=True):
        file["count"] = count
    return {"files": files, "encoding": encoding, "labels": list(labels), **record}


def build_generated(
    store: str | Path,
    name: str,
    labels: Sequence[str],
    encoding: str,
    columns: Callable[[str], Sequence[Column]],
    splits: Iterable[str],
    row_group_size: int | None = None,
    **record: Any,
) -> dict:
    """Write a dataset its builder makes into the store as `build_splits` does: each of
    `splits` from its `columns(split)` (each a value a row), as a Parquet file whose metadata
    names the dataset and its labels."""
    tables = {split: columns(split) for split in splits}
    metadata = dataset_metadata(name, labels)
    files = {
        split: (parquet_bytes(table, metadata, row_group_size), len(table[0][1]))
        for split, table in tables.items()
    }
    return build_splits(store, name, labels, encoding, files, **record)


def store_model(
    store: str | Path,
    name: str,
    dataset: str,
    model: Any,
    training: dict,
    stage: Callable[[Staging], dict],
) -> dict:
    """Write a trained model's files into its store entry ``models/<name>/VERSION``, all of
    them or none: `stage` writes them into the ``Staging`` and checks them (raising where a
    check fails), and returns what it measured. The model's record: its files, its dataset,
    its number of parameters, how it was trained and what was measured."""
    with Staging(Path(store), f"models/{name}/{VERSION}") as staging:
        measured = stage(staging)
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "dataset": dataset,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": training,
        **measured,
    }
