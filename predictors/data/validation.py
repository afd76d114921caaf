"""What is wrong with a dataset's split files as its manifest describes them, in words, before
anything is evaluated on them: `split_problems`, which the hub runs on upload and the CLI on a
local store."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from predictors.data.formats import MAGIC
from predictors.data.readers import (
    DETECTION_COLUMNS,
    MASK_COLUMNS,
    DatasetError,
    DatasetReader,
    DetectionReader,
    MaskReader,
    annotation_problem,
    batches,
    decode_mask,
    is_string,
    text_problem,
)
from predictors.data.streams import ClipReader, StreamReader, segment_problem

# The most problems `split_problems` reports (a broken file would otherwise list every row).
_MAX_PROBLEMS = 5


def split_problems(
    path: Path,
    *,
    labels: int | None,
    encoding: str | None,
    count: int | None,
    streams: bool = False,
    detection: bool = False,
    masks: bool = False,
    ignore_label: int | None = None,
    clips: bool = False,
    target: str = "class",
) -> list[str]:
    """What is wrong with a split file as its dataset manifest describes it, in words: the
    columns `image` (binary) and the labels of `target` (`TARGETS`: `label`, an integer or a
    list of them; `target`, a number or a list of `labels` numbers; `text`, a string with a
    character other than whitespace; none) without nulls, every class index below `labels`,
    every value finite, every image starting as `encoding` says (PNG or JPEG magic bytes), and
    `count` rows when the manifest states a count. Read a row group at a time; at most
    _MAX_PROBLEMS problems, each naming the row."""
    magic = MAGIC.get(encoding or "")
    if detection:
        return _problems(
            path,
            count,
            lambda: DetectionReader(path, batch_size=1024),
            lambda _: _detection_rows(path, labels, encoding, magic),
        )
    if clips:
        return _problems(
            path,
            count,
            lambda: ClipReader(path),
            lambda reader: _clip_rows(reader, labels, encoding, magic),
        )
    if masks:
        return _problems(
            path,
            count,
            lambda: MaskReader(path, batch_size=1),
            lambda _: _mask_rows(path, labels, encoding, magic, ignore_label),
        )

    def rows(reader: DatasetReader) -> Iterator[list[str]]:
        if streams:
            try:
                StreamReader(path)
            except DatasetError as error:
                yield [_words(error, path)]
        # Read through before the first is reported: a file that breaks off reports only that.
        for problem in _row_problems(path, reader, labels, encoding, magic):
            yield [problem]

    return _problems(
        path,
        count,
        lambda: DatasetReader(
            path,
            batch_size=1024,
            target=target,
            classes=(labels or 1) if target in ("classes", "values") else None,
        ),
        rows,
    )


def _words(error: Exception, path: Path) -> str:
    return str(error).replace(f"{path}: ", "").replace(f"{path} ", "the file ")


def _problems(
    path: Path,
    count: int | None,
    open_reader: Callable[[], Any],
    rows: Callable[[Any], Iterable[list[str]]],
) -> list[str]:
    """What every check shares: the reader made (what it refuses is the one problem), its rows
    against `count`, then the problems `rows` finds (a list a row or a batch) until there are
    _MAX_PROBLEMS, and a file that cannot be read through."""
    try:
        reader = open_reader()
    except ValueError as error:  # DatasetError, or a reader's argument refused
        return [_words(error, path)]
    problems: list[str] = []
    if count is not None and reader.rows != count:
        problems.append(f"the file holds {reader.rows} rows, but the manifest's count is {count}")
    try:
        for found in rows(reader):
            problems += found
            if len(problems) >= _MAX_PROBLEMS:
                return problems
    except (OSError, pa.ArrowException) as exc:  # a page that does not decode
        problems.append(f"the file cannot be read through: {exc}")
    return problems[:_MAX_PROBLEMS]


def _row(row: int, problem: str) -> str:
    """`problem` said of row `row` ("row 3 has …", "row 3's image …")."""
    joiner = "" if problem.startswith("'") else " "
    return f"row {row}{joiner}{problem}"


def _clip_rows(
    reader: ClipReader, labels: int | None, encoding: str | None, magic: tuple[bytes, ...] | None
) -> Iterator[list[str]]:
    """The problems of a split of audio clips: every clip's segments and classes, its
    encoding's magic bytes, and a header libsndfile reads."""
    # Imported here: the processing package loads OpenCV, which checking other splits (on the
    # hub) need not load.
    from predictors.processing.audio import clip_info
    from predictors.processing.parameters import ProcessingError

    for row, (audio, segments, classes) in reader.clips():
        problem = segment_problem(audio, segments, classes, labels)
        if problem is None and magic is not None and not audio.startswith(magic):
            problem = f"'s audio is not {str(encoding).upper()} (the manifest's encoding)"
        if problem is None:
            try:
                if clip_info(audio)[0] == 0:
                    problem = "has audio without any sample"
            except ProcessingError as error:
                problem = f"has audio that {error}".replace("that the clip ", "that ")
        if problem:
            yield [_row(row, problem)]


def _mask_rows(
    path: Path,
    labels: int | None,
    encoding: str | None,
    magic: tuple[bytes, ...] | None,
    ignore_label: int | None,
) -> Iterator[list[str]]:
    """The problems of a semantic-segmentation split: every mask a PNG of 8-bit class indices
    of its image's size, each value a class index or the ignore label."""
    for row, (images, masks) in batches(path, MASK_COLUMNS, 256):
        for offset, (image, data) in enumerate(zip(images, masks, strict=True)):
            problem = _mask_problem(image, data, labels, ignore_label)
            if image is None:
                problem = "has no image"
            elif magic is not None and not image.startswith(magic):
                problem = f"'s image is not {str(encoding).upper()} (the manifest's encoding)"
            if problem:
                yield [_row(row + offset, problem)]


def _mask_problem(
    image: bytes | None, data: bytes | None, labels: int | None, ignore_label: int | None
) -> str | None:
    from PIL import Image

    mask, problem = decode_mask(data)
    if problem is not None or image is None:
        return problem
    try:
        with Image.open(io.BytesIO(image)) as opened:
            width, height = opened.size
    except (OSError, ValueError, Image.DecompressionBombError):
        return "has an image Pillow cannot read"
    values = np.unique(mask)
    wrong = values[values != ignore_label] if ignore_label is not None else values
    wrong = wrong[wrong >= (labels if labels is not None else 256)]
    if mask.shape != (height, width):
        return f"has a mask of {mask.shape[0]}x{mask.shape[1]} for an image of {height}x{width}"
    if wrong.size:
        return f"has mask value {int(wrong[0])}, but the dataset has {labels} labels" + (
            f" and ignore_label {ignore_label}"
            if ignore_label is not None
            else " and no ignore_label"
        )
    return None


def _detection_rows(
    path: Path, labels: int | None, encoding: str | None, magic: tuple[bytes, ...] | None
) -> Iterator[list[str]]:
    """The problems of an object-detection split, a list a row: every image's objects (a box
    of four numbers with a positive width and height, and a class within the labels, per
    object) and the encoding's magic bytes."""
    for row, (images, boxes_of, classes_of) in batches(path, DETECTION_COLUMNS, 1024):
        for offset, (image, boxes, classes) in enumerate(
            zip(images, boxes_of, classes_of, strict=True)
        ):
            found = []
            problem = annotation_problem(boxes, classes, labels)
            if problem:
                found.append(_row(row + offset, problem))
            if image is None:
                found.append(_row(row + offset, "has no image"))
            elif magic is not None and not image.startswith(magic):
                found.append(
                    _row(
                        row + offset,
                        f"'s image is not {str(encoding).upper()} (the manifest's encoding)",
                    )
                )
            yield found


def _row_problems(
    path: Path,
    reader: DatasetReader,
    labels: int | None,
    encoding: str | None,
    magic: tuple[bytes, ...] | None,
) -> list[str]:
    problems: list[str] = []
    row = 0
    column, label_column = reader.column, reader.label_column
    columns = [column] + ([label_column] if label_column else [])
    with pq.ParquetFile(path) as parquet:
        for batch in parquet.iter_batches(batch_size=1024, columns=columns):
            images = batch.column(0)
            classes = batch.column(1) if label_column else None
            if images.null_count or classes is not None and classes.null_count:
                what = "text" if reader.target == "text" else "label"
                problems.append(
                    f"rows {row} to {row + batch.num_rows - 1} include a null image or {what}"
                )
            if classes is not None:
                problems += _label_problems(reader.target, classes, row, labels)
            if is_string(images.type) and encoding != "text":
                problems.append(
                    f"column '{column}' holds strings, which only a dataset of encoding text may "
                    f"(this one's is {encoding or 'not given'}): store the inputs as binary"
                )
                break
            if encoding == "text":
                problem = _text_rows_problem(images, row, column)
                if problem:
                    problems.append(problem)
            if magic is not None:
                for index, image in enumerate(images.to_pylist()):
                    if image is not None and not image.startswith(magic):
                        problems.append(
                            f"row {row + index}'s {column} is not {str(encoding).upper()} "
                            "(the manifest's encoding)"
                        )
                        break
            row += batch.num_rows
            if len(problems) >= _MAX_PROBLEMS:
                break
    return problems


def _text_rows_problem(values: pa.Array, row: int, column: str) -> str | None:
    """The first row of a batch (the first is `row`) of an `encoding: text` split whose input
    is not UTF-8 text (a string column is; bytes must decode), or is longer than a text input
    reads (`MAX_TEXT_CHARACTERS`)."""
    from predictors.processing.text import MAX_TEXT_CHARACTERS

    if is_string(values.type):
        try:
            values.validate(full=True)  # a string column's bytes are not checked on reading
        except pa.ArrowInvalid as exc:
            last = row + len(values) - 1
            return f"rows {row} to {last}: the {column} column is not valid UTF-8 text ({exc})"
        lengths = pc.utf8_length(values).to_pylist()
    else:
        lengths = []
        for index, value in enumerate(values.to_pylist()):
            if value is None:
                lengths.append(None)
                continue
            try:
                lengths.append(len(value.decode("utf-8")))
            except UnicodeDecodeError as exc:
                return (
                    f"row {row + index}'s {column} is not UTF-8 text (byte {exc.start}; the "
                    "manifest's encoding is text)"
                )
    for index, length in enumerate(lengths):
        if length is not None and length > MAX_TEXT_CHARACTERS:
            return (
                f"row {row + index}'s {column} is {length} characters, more than a text input "
                f"reads ({MAX_TEXT_CHARACTERS})"
            )
    return None


def _label_problems(target: str, column: pa.Array, row: int, labels: int | None) -> list[str]:
    """The rows of a batch (the first is `row`) whose labels are wrong for `target`."""
    problems = []
    if target == "text":
        for index, text in enumerate(column.to_pylist()):
            problem = text_problem(text) if text is not None else None
            if problem:
                problems.append(f"row {row + index}'s {problem}")
                if len(problems) >= _MAX_PROBLEMS:
                    break
        return problems
    if target == "values":
        lists = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
        if lists:
            lengths = np.diff(column.offsets.to_numpy())
            for index in np.flatnonzero(lengths != (labels or 1))[:_MAX_PROBLEMS]:
                problems.append(
                    f"row {row + int(index)}'s target has {int(lengths[index])} values, but the "
                    f"dataset names {labels} (its labels)"
                )
            values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
            owner = np.repeat(np.arange(len(column)), lengths)
        else:
            if labels not in (None, 1):
                problems.append(
                    f"row {row}'s target is one number, but the dataset names {labels} values "
                    "(its labels): give each row a list"
                )
            values = column.to_numpy(zero_copy_only=False).astype(np.float64)
            owner = np.arange(len(values))
        for index in np.flatnonzero(~np.isfinite(values))[:1]:
            problems.append(f"row {row + int(owner[index])}'s target is not finite (NaN or inf)")
        return problems
    if target == "classes":
        flat = column.flatten()
        owner = np.repeat(np.arange(len(column)), np.diff(column.offsets.to_numpy()))
        if flat.null_count:
            index = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
            return [f"row {row + int(owner[index])} has a null class in its label"]
        values = flat.to_numpy(zero_copy_only=False)
        noun = "a class"
    else:
        values = column.to_numpy(zero_copy_only=False)
        owner = np.arange(len(values))
        noun = "label"
    wrong = values < 0
    if labels is not None:
        wrong |= values >= labels
    for index in np.flatnonzero(wrong)[:_MAX_PROBLEMS]:
        problems.append(
            f"row {row + int(owner[index])} has {noun} {int(values[index])}, but the dataset has "
            f"{labels} labels (a label is a class index from 0 to {(labels or 1) - 1})"
        )
    return problems
