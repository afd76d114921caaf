"""What the zoo's builders share: shapes drawn on noisy backgrounds, a dataset's cells (PNG
images, ``.npy`` arrays), its Parquet files with the dataset's metadata, its splits written
into the store, images made into the input a model trains on, and a trained model's record.

pyarrow and Pillow are imported only by the functions that need them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from predictors.zoo.store import VERSION, Staging


def canvas(rng: np.random.Generator, width: int, height: int) -> tuple[Any, np.ndarray]:
    """An RGB image of one random colour, and that colour."""
    from PIL import Image

    background = rng.integers(0, 256, 3)
    return Image.new("RGB", (width, height), tuple(int(v) for v in background)), background


def contrasting_color(rng: np.random.Generator, background: np.ndarray) -> tuple[int, ...]:
    """A random colour whose channels differ from `background`'s by 150 or more in all."""
    color = rng.integers(0, 256, 3)
    while np.abs(color - background).sum() < 150:
        color = rng.integers(0, 256, 3)
    return tuple(int(v) for v in color)


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


def with_noise(image: Any, rng: np.random.Generator) -> np.ndarray:
    """An RGB image's pixels with Gaussian noise (standard deviation 8) added, as uint8."""
    pixels = np.asarray(image, np.int16) + rng.normal(0, 8, (image.height, image.width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


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
    columns: Sequence[tuple[str, Any, Any]],
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


def model_record(files: list, dataset: str, model: Any, training: dict, **measured: Any) -> dict:
    """A trained model's record: its files, its dataset, its number of parameters, how it was
    trained and what its build `measured`."""
    return {
        "files": files,
        "trained": True,
        "dataset": dataset,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": training,
        **measured,
    }
