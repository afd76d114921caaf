"""Sequence-labelling splits as streams for the streaming loop
(`predictors.evaluation.scenarios.streams`): rows of inputs grouped by stream (`StreamReader`),
and audio clips framed into chunks (`ClipReader`, `ClipStreams`)."""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from predictors.data.readers import (
    CLIP_COLUMNS,
    DatasetError,
    DatasetReader,
    batches,
    check_batch_size,
    check_columns,
    open_split,
)

if TYPE_CHECKING:
    from predictors.processing.audio import AudioPreprocessor


class _Streams:
    """What the readers of streams share: `lengths` (each stream's items) and the evaluation
    loop's width, how many streams run side by side (`with_batch_size`)."""

    lengths: list[int]
    batch_size = 1

    @property
    def streams(self) -> int:
        return len(self.lengths)

    def with_batch_size(self, batch_size: int) -> Self:
        """The same reader (the checks are not made again), for `batch_size` streams side by
        side."""
        check_batch_size(batch_size)
        twin = copy.copy(self)
        twin.batch_size = batch_size
        return twin


class StreamReader(_Streams):
    """The ordered streams of a sequence-labelling split (`stream`, `position`, the input
    column and `label`), a stream at a time, never the whole file.

    A stream's rows are together and in order, with positions 0, 1, 2, …; anything else is a
    `DatasetError` naming the row, found when the reader is made (it reads the `stream` and
    `position` columns through once, and keeps every stream's length). `limit` keeps the first
    rows only (the last stream kept may end early). Iterating yields `(inputs, labels)`, one
    stream's input values and labels; it can be iterated more than once.
    """

    def __init__(self, path: Path, *, limit: int | None = None) -> None:
        rows = DatasetReader(path, 1, limit=limit)  # the columns, the limit's checks
        self.path, self.column, self.limit = rows.path, rows.column, limit
        self.count = rows.count
        missing = [name for name in ("stream", "position") if name not in rows.names]
        if missing:
            raise DatasetError(
                f"{self.path} is a sequence_labelling split without the column(s) "
                f"{', '.join(missing)}: every row names its stream and its position in it"
            )
        with pq.ParquetFile(self.path) as parquet:
            schema = parquet.schema_arrow
        stream_type, position_type = schema.field("stream").type, schema.field("position").type
        if not (
            pa.types.is_integer(stream_type)
            or pa.types.is_string(stream_type)
            or pa.types.is_large_string(stream_type)
        ):
            raise DatasetError(
                f"{self.path}: column 'stream' is {stream_type}, not an integer or a string"
            )
        if not pa.types.is_integer(position_type):
            raise DatasetError(f"{self.path}: column 'position' is {position_type}, not an integer")
        self.lengths = []
        seen: set[Any] = set()
        current: Any = None
        row = 0
        with pq.ParquetFile(self.path) as parquet:
            for batch in parquet.iter_batches(batch_size=65536, columns=["stream", "position"]):
                if row >= self.count:
                    break
                batch = batch.slice(0, self.count - row)
                if batch.column("stream").null_count or batch.column("position").null_count:
                    raise DatasetError(
                        f"{self.path}: rows from {row} include a null stream or position"
                    )
                streams = batch.column("stream").to_pylist()
                positions = batch.column("position").to_pylist()
                for stream, position in zip(streams, positions, strict=True):
                    if stream != current or not self.lengths:
                        if stream in seen:
                            raise DatasetError(
                                f"{self.path}: row {row} is of stream {stream!r}, whose rows "
                                "came earlier and stopped: a stream's rows must be together"
                            )
                        seen.add(stream)
                        current = stream
                        self.lengths.append(0)
                    if position != self.lengths[-1]:
                        raise DatasetError(
                            f"{self.path}: row {row} is at position {position!r} of stream "
                            f"{stream!r}, but {self.lengths[-1]} comes next: positions run "
                            "0, 1, 2, … in row order"
                        )
                    self.lengths[-1] += 1
                    row += 1

    def __iter__(self) -> Iterator[tuple[list[bytes], np.ndarray]]:
        lengths = iter(self.lengths)
        inputs: list[bytes] = []
        labels: list[np.ndarray] = []
        held = 0
        want = next(lengths, None)
        for values, classes in DatasetReader(self.path, 4096, limit=self.limit):
            inputs.extend(values)
            labels.append(classes)
            held += len(classes)
            while want is not None and held >= want:
                joined = np.concatenate(labels)
                yield inputs[:want], joined[:want]
                inputs, labels, held = inputs[want:], [joined[want:]], held - want
                want = next(lengths, None)


def lockstep_calls(lengths: list[int], width: int) -> int:
    """How many calls run `lengths` streams side by side, `width` at a time, each slot taking
    the next stream as soon as its stream ends (`predictors.evaluation.scenarios.streams`)."""
    slots = [0] * min(width, len(lengths))
    heapq.heapify(slots)
    for length in lengths:
        heapq.heappush(slots, heapq.heappop(slots) + length)
    return max(slots, default=0)


class ClipReader:
    """The rows of a split of audio clips: `(audio, segments, classes)` per clip, read a row
    group at a time: the columns `audio` (binary, the encoded clip), `segments` (a list of
    [start, end] in seconds per clip) and `segment_classes` (a class index per segment)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        schema, self.rows = open_split(self.path)
        check_columns(self.path, schema, "a split of audio clips", CLIP_COLUMNS)

    def clips(self) -> Iterator[tuple[int, tuple[Any, Any, Any]]]:
        """(row, (audio, segments, classes)) of every row, unchecked."""
        for row, columns in batches(self.path, CLIP_COLUMNS, 64):
            for offset, clip in enumerate(zip(*columns, strict=True)):
                yield row + offset, clip

    def __iter__(self) -> Iterator[tuple[bytes, list[list[float]], list[int]]]:
        for row, (audio, segments, classes) in self.clips():
            problem = segment_problem(audio, segments, classes, None)
            if problem:
                raise DatasetError(f"{self.path}: row {row} {problem}")
            yield audio, segments, classes


def segment_problem(audio: Any, segments: Any, classes: Any, labels: int | None) -> str | None:
    """What is wrong with one clip's row, in words (None when nothing is)."""
    if audio is None:
        return "has no audio"
    if segments is None or classes is None:
        return "has null segments or segment_classes (a clip without any has empty lists)"
    if len(segments) != len(classes):
        return f"has {len(segments)} segments but {len(classes)} segment_classes"
    for index, segment in enumerate(segments):
        if (
            segment is None
            or len(segment) != 2
            or any(v is None or not math.isfinite(v) for v in segment)
            or not 0 <= segment[0] < segment[1]
        ):
            return f"has segment {index} {segment!r}, not [start, end] with 0 <= start < end"
    for index, kind in enumerate(classes):
        if kind is None or kind < 0 or (labels is not None and kind >= labels):
            return f"has class {kind!r} for segment {index}, but the dataset has {labels} labels"
    return None


class ClipStreams(_Streams):
    """The clips of a sequence-labelling split as streams of chunks, for the streaming loop
    (what `StreamReader` is for rows of chunks): the columns `audio` (the encoded clip),
    `segments` ([start, end] in seconds) and `segment_classes`. `lengths` (each clip's chunks,
    from the headers), `streams`, `count` (chunks, capped by `limit`, which cuts the last clip
    short); iterating yields `([clip], (segments, classes))` per clip, which
    `AudioPreprocessor.stream` (`predictors.processing.audio`) frames."""

    def __init__(
        self, path: Any, preprocessor: AudioPreprocessor, *, limit: int | None = None
    ) -> None:
        self.reader = ClipReader(path)
        # Each clip's chunks by row; a clip shorter than one chunk (tail: drop) makes no stream.
        self.kept: list[int] = []
        remaining = limit
        for encoded, _, _ in self.reader:
            if remaining is not None and remaining <= 0:
                break
            length = preprocessor.chunks_in(encoded)
            if remaining is not None:
                length = min(length, remaining)
                remaining -= length
            self.kept.append(length)
        self.lengths = [length for length in self.kept if length]
        self.count = sum(self.lengths)

    def __iter__(self) -> Any:
        for (encoded, segments, classes), length in zip(self.reader, self.kept, strict=False):
            if length:
                yield [encoded], (segments, classes, length)
