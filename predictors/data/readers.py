"""Readers of Parquet dataset splits, a batch at a time, never the whole file: rows of an input
and its labels (`DatasetReader`), object-detection splits (`DetectionReader`) and
semantic-segmentation splits (`MaskReader`), with the checks of their columns and rows that
`predictors.data.validation` reports as well."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from predictors.data.formats import MAGIC


class DatasetError(ValueError):
    """A dataset file cannot be read, or is not in the expected format."""


# What a dataset's rows are labelled with (`DatasetReader`'s `target`), by task: a class index
# (`label`, an integer), a set of classes (`label`, a list of class indices: multi-label
# classification), values (`target`, a number or a list of numbers: regression), a text (`text`,
# a string: the line's true text, text recognition), or nothing (latency-only evaluations read
# no labels).
TARGETS = ("class", "classes", "values", "text", "none")
# The column of each target's labels (the others': `label`).
_LABEL_COLUMNS = {"values": "target", "text": "text", "none": None}


def target_of(task: str | None) -> str:
    """The `TARGETS` entry a task's rows carry."""
    return {
        "multi_label_classification": "classes",
        "regression": "values",
        "text_recognition": "text",
    }.get(str(task), "class")


def text_problem(text: str) -> str | None:
    """What is wrong with a row's true text, in words: a line without a character (or with
    only whitespace, which the error rates strip) has no characters or words to be wrong on."""
    if not text.strip():
        return f"text {text!r} is empty: a text line has at least one character"
    return None


def check_batch_size(batch_size: int) -> None:
    """A batch size is an integer >= 1 (ValueError otherwise)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")


def open_split(path: Path) -> tuple[pa.Schema, int]:
    """The schema and the number of rows of a Parquet file (`DatasetError` when it cannot be
    read)."""
    try:
        with pq.ParquetFile(path) as parquet:
            return parquet.schema_arrow, parquet.metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path} is not a readable Parquet file: {exc}") from exc


def is_binary(kind: pa.DataType) -> bool:
    return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind))


def is_string(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _is_list(kind: pa.DataType, element: Callable[[pa.DataType], bool]) -> bool:
    """Whether `kind` is a list whose items satisfy `element`."""
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and element(kind.value_type)


def _is_number(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))


def is_list_of_lists(kind: pa.DataType, element: Callable[[pa.DataType], bool]) -> bool:
    """Whether `kind` is a list of lists whose items satisfy `element`."""
    return (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and (
            pa.types.is_list(kind.value_type)
            or pa.types.is_fixed_size_list(kind.value_type)
            or pa.types.is_large_list(kind.value_type)
        )
        and element(kind.value_type.value_type)
    )


def is_list_of_pairs(kind: pa.DataType) -> bool:
    """Whether `kind` is a list of lists of numbers (boxes, segments)."""
    return is_list_of_lists(kind, pa.types.is_floating) or is_list_of_lists(
        kind, pa.types.is_integer
    )


def is_list_of_integers(kind: pa.DataType) -> bool:
    return bool(pa.types.is_list(kind) and pa.types.is_integer(kind.value_type))


# The columns of the splits of objects, masks and clips, by name: what a column holds, in
# words, the check of its type, and that type in words.
COLUMNS: dict[str, tuple[str, Callable[[pa.DataType], bool], str]] = {
    "image": ("the encoded image", is_binary, "binary"),
    "mask": ("a PNG of class indices", is_binary, "binary"),
    "boxes": ("[x, y, w, h] per object", is_list_of_pairs, "a list of lists of 4 numbers"),
    "classes": ("a class index per object", is_list_of_integers, "a list of integers"),
    "audio": ("the encoded clip", is_binary, "binary"),
    "segments": ("[start, end] in seconds", is_list_of_pairs, "a list of [start, end] pairs"),
    "segment_classes": ("a class per segment", is_list_of_integers, "a list of integers"),
}

# The columns of the splits of each kind, in `COLUMNS`.
DETECTION_COLUMNS = ("image", "boxes", "classes")
MASK_COLUMNS = ("image", "mask")
CLIP_COLUMNS = ("audio", "segments", "segment_classes")


def check_columns(path: Path, schema: pa.Schema, what: str, columns: Sequence[str]) -> None:
    """`DatasetError` unless the split `path` (`what`) has each of `columns` (`COLUMNS`), of
    the type it wants."""
    missing = [name for name in columns if name not in schema.names]
    if missing:
        held = [f"{name} ({COLUMNS[name][0]})" for name in columns]
        raise DatasetError(
            f"{path} is {what} without the column(s) {', '.join(missing)}: "
            f"{', '.join(held[:-1])} and {held[-1]}; it has {sorted(schema.names)}"
        )
    for name in columns:
        _, fits, wanted = COLUMNS[name]
        kind = schema.field(name).type
        if not fits(kind):
            raise DatasetError(f"{path}: column '{name}' is {kind}, not {wanted}")


def label_type_problem(target: str, kind: pa.DataType) -> str | None:
    """What is wrong with the type of a labels column for `target`, in words, or None."""
    if target == "class" and not pa.types.is_integer(kind):
        return f"is {kind}, not an integer"
    if target == "classes" and not _is_list(kind, pa.types.is_integer):
        return f"is {kind}, not a list of class indices (integers)"
    if target == "values" and not (_is_number(kind) or _is_list(kind, _is_number)):
        return f"is {kind}, not a number or a list of numbers"
    if target == "text" and not is_string(kind):
        return f"is {kind}, not a string (the line's text, UTF-8)"
    return None


def batches(
    path: Path, columns: Sequence[str], batch_size: int, rows: int | None = None
) -> Iterator[tuple[int, list[list[Any]]]]:
    """(the index of its first row, each of `columns` as a list) per batch of `batch_size` rows
    of a Parquet file; only the first `rows` rows, when given."""
    row = 0
    with pq.ParquetFile(path) as parquet:
        for batch in parquet.iter_batches(batch_size=batch_size, columns=list(columns)):
            if rows is not None:
                if row >= rows:
                    break
                batch = batch.slice(0, rows - row)
            yield row, [batch.column(name).to_pylist() for name in columns]
            row += batch.num_rows


def input_column(names: Iterable[str]) -> str:
    """A split's input column: `image` (encoded images, or .npy tensors), `audio` (whole
    clips), or `input`."""
    found = set(names)
    for name in ("image", "audio", "input"):
        if name in found:
            return name
    return "image"


def rows_at(path: Path, indices: Sequence[int], column: str | None = None) -> list[bytes]:
    """The input column's values (`column`, else `image`, else `input`) of the rows at
    `indices` (0-based, in that order) of a Parquet split, read a batch at a time; IndexError
    naming the first index beyond the split."""
    schema, rows = open_split(Path(path))
    column = column or input_column(schema.names)
    beyond = [index for index in indices if not 0 <= index < rows]
    if beyond:
        raise IndexError(f"input {beyond[0]} is beyond the split's {rows} rows (0 to {rows - 1})")
    wanted = set(indices)
    found: dict[int, bytes] = {}
    for first, (values,) in batches(Path(path), [column], 4096, rows=max(indices) + 1):
        for offset, value in enumerate(values):
            if first + offset in wanted:
                found[first + offset] = value
    return [found[index] for index in indices]


class DatasetReader:
    """Streams `(images, labels)` batches from a Parquet dataset file.

    The file has an `image` column (binary: the encoded file bytes) and the labels `target`
    says (`TARGETS`): a `label` column of integers (class indices, yielded as (N,) int64), of
    lists of class indices (yielded as (N, classes) 0/1 uint8, `classes` given), a `target`
    column of numbers or of lists of `classes` numbers (yielded as (N, classes) float64), a
    `text` column of strings (yielded as (N,) object of str, none empty), or none (yielded as
    (N,) int64 of -1). Rows are read with `ParquetFile.iter_batches`, a batch at a time, never
    the whole file; every batch holds `batch_size` rows except possibly the last. `limit`
    reads only the first rows. The reader can be iterated more than once.
    """

    def __init__(
        self,
        path: Path,
        batch_size: int,
        *,
        limit: int | None = None,
        target: str = "class",
        classes: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        check_batch_size(batch_size)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ValueError(f"limit must be an integer or None; got {limit!r}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0; got {limit}")
        if target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}; got {target!r}")
        if target in ("classes", "values") and (classes is None or classes < 1):
            raise ValueError(f"a reader of {target} needs the number of classes; got {classes!r}")
        self.path = Path(path)
        self.batch_size = batch_size
        self.limit = limit
        self.target = target
        self.classes = classes
        schema, self.rows = open_split(self.path)
        names = set(schema.names)
        # The inputs' columns: those the model's inputs name, else the split's input column.
        self.named = list(columns) if columns else []
        self.columns = self.named or [input_column(names)]
        self.column = self.columns[0]
        # The labels' column: `label` (classes), `target` (values), `text`, none.
        self.label_column = _LABEL_COLUMNS.get(target, "label")
        needed = self.columns + ([self.label_column] if self.label_column else [])
        if not all(name in names for name in needed):
            raise DatasetError(
                f"{self.path} needs the columns "
                + " and ".join(
                    "'image' (or 'audio', or 'input')"
                    if name == self.column and not self.named
                    else repr(name)
                    for name in needed
                )
                + f"; it has {sorted(names)}"
            )
        for column in self.columns:
            kind = schema.field(column).type
            # A text input's column may hold strings (`encoding: text`, or a column of its
            # own), yielded as their UTF-8 bytes, as every input is (a preprocessor of another
            # type refuses them as its own).
            text = (column == "input" or bool(self.named)) and is_string(kind)
            if not is_binary(kind) and not text:
                raise DatasetError(
                    f"{self.path}: column '{column}' is {kind}, not binary"
                    + (" (or, for a text input, string)" if column == "input" or self.named else "")
                )
        if self.label_column is not None:
            problem = label_type_problem(target, schema.field(self.label_column).type)
            if problem:
                raise DatasetError(f"{self.path}: column '{self.label_column}' {problem}")
        self.names = names

    @property
    def count(self) -> int:
        """The number of rows this reader yields (the file's rows, capped by `limit`)."""
        return self.rows if self.limit is None else min(self.rows, self.limit)

    def __len__(self) -> int:
        return math.ceil(self.count / self.batch_size)

    def __iter__(self) -> Iterator[tuple[list[bytes], np.ndarray]]:
        remaining = self.count
        if remaining == 0:
            return
        images: list[Any] = []
        labels = self._labels(None, 0)
        row = 0
        inputs = len(self.columns)
        columns = self.columns + ([self.label_column] if self.label_column else [])
        with pq.ParquetFile(self.path) as parquet:
            for record_batch in parquet.iter_batches(batch_size=self.batch_size, columns=columns):
                record_batch = record_batch.slice(0, remaining)
                remaining -= record_batch.num_rows
                values = []
                for index in range(inputs):
                    column = record_batch.column(index)
                    if is_string(column.type):
                        column = column.cast(pa.large_binary())
                    if column.null_count:
                        raise DatasetError(
                            f"{self.path} has rows without an input in column "
                            f"'{self.columns[index]}'"
                        )
                    values.append(column.to_pylist())
                label_column = record_batch.column(inputs) if self.label_column else None
                if label_column is not None and label_column.null_count:
                    raise DatasetError(f"{self.path} has rows without an image or a label")
                # Several columns: each row's values together, in the inputs' order.
                images.extend(values[0] if inputs == 1 else zip(*values, strict=True))
                labels = np.concatenate(
                    [labels, self._labels(label_column, record_batch.num_rows, row)]
                )
                row += record_batch.num_rows
                while len(images) >= self.batch_size:
                    yield images[: self.batch_size], labels[: self.batch_size]
                    images, labels = images[self.batch_size :], labels[self.batch_size :]
                if remaining == 0:
                    break
        if images:
            yield images, labels

    def _labels(self, column: pa.Array | None, rows: int, first: int = 0) -> np.ndarray:
        """A batch's labels as `target` says (see the class docstring); `first`: the index of
        its first row."""
        if self.target == "none":
            return np.full(rows, -1, np.int64)
        if self.target == "text":
            texts = np.empty(rows, object)
            texts[:] = [] if column is None else column.to_pylist()
            for offset, text in enumerate(texts):
                problem = text_problem(text)
                if problem:
                    raise DatasetError(f"{self.path}: row {first + offset}'s {problem}")
            return texts
        if self.target == "class":
            return np.empty(0, np.int64) if column is None else column.to_numpy().astype(np.int64)
        classes = int(self.classes or 0)
        if self.target == "classes":
            hot = np.zeros((rows, classes), np.uint8)
            if column is not None and rows:
                rows_of = np.repeat(np.arange(rows), np.diff(column.offsets.to_numpy()))
                if column.flatten().null_count:
                    raise DatasetError(f"{self.path} has a row with a null class in its label")
                values = column.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
                if values.size and (values.min() < 0 or values.max() >= classes):
                    wrong = values[(values < 0) | (values >= classes)][0]
                    raise DatasetError(
                        f"{self.path} has label {int(wrong)}, but the model reads {classes} classes"
                    )
                hot[rows_of, values] = 1
            return hot
        if column is None or not rows:
            return np.zeros((rows, classes), np.float64)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            lengths = np.diff(column.offsets.to_numpy())
            if np.any(lengths != classes):
                row = int(np.flatnonzero(lengths != classes)[0])
                raise DatasetError(
                    f"{self.path}: a row's target has {int(lengths[row])} values, but the model "
                    f"gives {classes}"
                )
            values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
            return values.reshape(rows, classes)
        if classes != 1:
            raise DatasetError(
                f"{self.path}: the target column holds one number per row, but the model gives "
                f"{classes} values"
            )
        return column.to_numpy(zero_copy_only=False).astype(np.float64).reshape(rows, 1)


class _BatchedSplit:
    """What the readers of one row per input share: the file opened and its schema read,
    `batch_size` and `limit` checked, `count` (rows, capped by `limit`) and `len` (batches)."""

    path: Path
    batch_size: int
    limit: int | None
    rows: int

    def _open(self, path: Path, batch_size: int, limit: int | None) -> pa.Schema:
        check_batch_size(batch_size)
        self.path, self.batch_size, self.limit = Path(path), batch_size, limit
        schema, self.rows = open_split(self.path)
        return schema

    @property
    def count(self) -> int:
        return self.rows if self.limit is None else min(self.rows, max(self.limit, 0))

    def __len__(self) -> int:
        return math.ceil(self.count / self.batch_size)


class DetectionReader(_BatchedSplit):
    """`(images, annotations)` batches of an object-detection split: the columns `image`
    (binary, encoded), `boxes` (a list of [x, y, width, height] in pixels per image, COCO's)
    and `classes` (a list of class indices, one per box). An annotation is
    `{"boxes": (n, 4) float64, "classes": (n,) int64}`. Read a batch at a time; `limit` keeps
    the first rows."""

    def __init__(self, path: Path, batch_size: int, *, limit: int | None = None) -> None:
        schema = self._open(path, batch_size, limit)
        check_columns(self.path, schema, "an object_detection split", DETECTION_COLUMNS)

    def __iter__(self) -> Iterator[tuple[list[bytes], list[dict[str, np.ndarray]]]]:
        for row, (images, boxes_of, classes_of) in batches(
            self.path, DETECTION_COLUMNS, self.batch_size, self.count
        ):
            annotations = []
            for offset, (boxes, classes) in enumerate(zip(boxes_of, classes_of, strict=True)):
                problem = annotation_problem(boxes, classes, None)
                if images[offset] is None or problem:
                    raise DatasetError(
                        f"{self.path}: row {row + offset} {problem or 'has no image'}"
                    )
                annotations.append(
                    {
                        "boxes": np.asarray(boxes, np.float64).reshape(-1, 4),
                        "classes": np.asarray(classes, np.int64),
                    }
                )
            yield images, annotations


def annotation_problem(boxes: Any, classes: Any, labels: int | None) -> str | None:
    """What is wrong with one image's objects, in words (None when nothing is)."""
    if boxes is None or classes is None:
        return "has null boxes or classes (an image without objects has empty lists)"
    if len(boxes) != len(classes):
        return f"has {len(boxes)} boxes but {len(classes)} classes (one class per box)"
    for index, box in enumerate(boxes):
        if box is None or len(box) != 4 or any(v is None for v in box):
            return f"has box {index} {box!r}, not [x, y, width, height]"
        if not (box[2] > 0 and box[3] > 0) or not all(math.isfinite(v) for v in box):
            return f"has box {index} {box!r}: its width and height must be finite and > 0"
    for index, kind in enumerate(classes):
        if kind is None or kind < 0 or (labels is not None and kind >= labels):
            return (
                f"has class {kind!r} for box {index}, but the dataset has {labels} labels "
                f"(a class is an index from 0 to {(labels or 1) - 1})"
            )
    return None


class MaskReader(_BatchedSplit):
    """`(images, masks)` batches of a semantic-segmentation split: the columns `image` (binary,
    encoded) and `mask` (binary: a PNG of 8-bit class indices, the image's size). A mask is
    decoded to an (H, W) uint8 array. Read a batch at a time; `limit` keeps the first rows."""

    def __init__(self, path: Path, batch_size: int, *, limit: int | None = None) -> None:
        schema = self._open(path, batch_size, limit)
        check_columns(self.path, schema, "a semantic_segmentation split", MASK_COLUMNS)

    def __iter__(self) -> Iterator[tuple[list[bytes], list[np.ndarray]]]:
        for row, (images, data_of) in batches(self.path, MASK_COLUMNS, self.batch_size, self.count):
            masks = []
            for offset, data in enumerate(data_of):
                mask, problem = decode_mask(data)
                if problem or images[offset] is None:
                    raise DatasetError(
                        f"{self.path}: row {row + offset} {problem or 'has no image'}"
                    )
                masks.append(mask)
            yield images, masks


def decode_mask(data: bytes | None) -> tuple[np.ndarray, str | None]:
    """A mask's class indices (H, W uint8), or what is wrong with it in words."""
    from PIL import Image

    if data is None:
        return np.zeros((0, 0), np.uint8), "has no mask"
    if not data.startswith(MAGIC["png"]):
        return np.zeros((0, 0), np.uint8), "has a mask that is not a PNG"
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.mode not in ("L", "P"):
                return np.zeros((0, 0), np.uint8), (
                    f"has a mask of mode {image.mode}, not 8-bit class indices (L or P)"
                )
            return np.asarray(image, np.uint8), None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        return np.zeros((0, 0), np.uint8), f"has a mask that does not decode: {exc}"
