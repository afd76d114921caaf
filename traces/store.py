"""Where a trace's spans are kept, and reading them fast.

`TraceStore` is what the rest of the app asks of a store: add an export's rows to a trace (one
*chunk*), take a chunk back (an export refused after it was written), read every span of a
trace, and read a timeline window. `ParquetTraceStore`, the one in use (`get_store()`), keeps
them as Parquet files in the artifact store, under `traces/<trace_id>/`, each export one
chunk (LZ4; compacted files are zstd): cheap to write, but a million-span trace sent in
512-span exports is about two thousand files, and opening them all for every timeline window
costs seconds.

**Compaction.** When an evaluation finishes, its trace's data files are merged (under a lock
on the folder, so that one process compacts and the others wait) into one file,
`compact-<id>.parquet`, sorted by start time in row groups of `ROW_GROUP` spans, whose metadata
lists the files it replaces; those are then removed (`traces.finishing`). A reader that lists
the folder between the two steps skips every file a compacted file lists, so it never reads a
span twice. Beside it goes `_overview-<id>.parquet`: the `OVERVIEW_SPANS` longest spans of the
trace (not counter samples), with every column. While a trace grows, a read that finds more
than `COMPACT_AT` data files merges the chunks among them into one more compacted file (and
everything once the compacted files are that many).

**Windows.** `window()` answers the timeline's question — how many spans overlap [start, end],
and which `max_spans` of them are the longest — reading the start, end, level and op type
columns only, then the other columns of just the rows it keeps (only their row groups). When
the trace is compacted and its overview holds at least `max_spans` spans overlapping the window,
those are the answer: a span the overview lacks is no longer than the overview's shortest, so
it cannot be among the longest `max_spans` (equal durations aside).
"""

from __future__ import annotations

import abc
import fcntl
import io
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hub import storage
from predictors.protocol import COUNTER_LEVEL, COUNTER_OP_TYPE, Attr

TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
T = TypeVar("T")
COUNTERS = pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())]))
SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("name", pa.string()),
        ("kind", pa.int32()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("attributes", pa.string()),
        ("resource", pa.string()),
        ("scope", pa.string()),
        ("status", pa.int32()),
        ("status_message", pa.string()),
        ("level", pa.string()),
        ("layer_index", pa.int64()),
        ("layer_name", pa.string()),
        ("op_type", pa.string()),
        # `mlms.device`, and a hardware counter span's `mlms.counter.<name>` values (null for
        # other spans, and in chunks written before these columns existed).
        ("device", pa.string()),
        ("counters", COUNTERS),
        # The span's `batch_size` attribute: the batch size a stage, batch, layer or kernel
        # span was measured at (null for spans outside a batch, and in older chunks).
        ("batch_size", pa.int64()),
    ]
)

COMPACT_AT = 16
_READ_ATTEMPTS = 4
ROW_GROUP = 16_384
OVERVIEW_SPANS = 20_000
_MERGED_KEY = Attr.MERGED.encode()
_LIGHT = ["start_ns", "end_ns", "level", "op_type", "device", "counters"]
_COUNTER_COLUMNS = ["start_ns", "end_ns", "device", "counters"]


def chunk_folder(trace_id: str) -> str:
    return f"traces/{trace_id}"


# The folders chunks were written to, resolved once per trace (`storage.resolve` checks a path
# component by component: as long as writing the chunk), up to this many traces.
_chunk_folders: dict[str, Path] = {}
_CHUNK_FOLDERS_KEPT = 4096


def _folder(trace_id: str) -> Path | None:
    if not TRACE_ID.match(trace_id):
        return None
    folder = storage.resolve(chunk_folder(trace_id))
    return folder if folder.is_dir() else None


def _merged(path: Path) -> list[str]:
    metadata = pq.read_schema(path).metadata or {}
    names = json.loads(metadata.get(_MERGED_KEY, b"[]"))
    return [str(name) for name in names]


def data_files(folder: Path) -> list[Path]:
    """The files holding the trace's spans, each span in exactly one: chunks and compacted
    files, less those a compacted file has replaced."""
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("_"))
    replaced: set[str] = set()
    for path in files:
        if path.name.startswith("compact-"):
            replaced.update(_merged(path))
    return [p for p in files if p.name not in replaced]


def _read(path: Path, columns: list[str] | None) -> pa.Table:
    return pq.read_table(path, columns=columns, schema=SCHEMA)


def _empty(columns: list[str] | None) -> pa.Table:
    return SCHEMA.empty_table().select(columns or SCHEMA.names)


def _read_table(trace_id: str, columns: list[str] | None) -> pa.Table:
    """Every stored span of a trace, as one table (compacting the trace first if it is spread
    over more than `COMPACT_AT` files)."""
    files = _files(trace_id)
    if not files:
        return _empty(columns)
    return pa.concat_tables([_read(path, columns) for path in files])


def _files(trace_id: str) -> list[Path]:
    folder = _folder(trace_id)
    if folder is None:
        return []
    files = data_files(folder)
    if len(files) > COMPACT_AT:
        # A trace still growing: the new chunks merged, not everything again each time.
        compact(folder, everything=False)
        files = data_files(folder)
    return files


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / ".compact.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _overview_of(path: Path) -> Path:
    return path.with_name("_overview-" + path.name.removeprefix("compact-"))


def compact(folder: Path, *, everything: bool = True) -> Path | None:
    """Merge the folder's data files into one compacted file (and its overview); the new file,
    or None if there was nothing to merge. With `everything=False` (a read of a trace that is
    still growing) only the chunks are merged, beside the compacted files there already are,
    unless those are `COMPACT_AT` or more: each span is then rewritten a few times over the
    trace's life, not once per compaction."""
    with _locked(folder):
        files = data_files(folder)
        if not everything:
            chunks = [p for p in files if not p.name.startswith("compact-")]
            if len(files) - len(chunks) < COMPACT_AT:
                files = chunks
        if len(files) <= 1:
            return None
        table = pa.concat_tables([_read(path, None) for path in files])
        table = table.sort_by([("start_ns", "ascending"), ("end_ns", "descending")])
        names = [p.name for p in files]
        for path in files:  # a compacted file stands for what it replaced, too
            if path.name.startswith("compact-"):
                names.extend(_merged(path))
        metadata = {_MERGED_KEY: json.dumps(sorted(set(names))).encode()}
        target = folder / f"compact-{secrets.token_hex(8)}.parquet"
        _write(table.replace_schema_metadata(metadata), target, ROW_GROUP)
        _write(_longest(table, OVERVIEW_SPANS), _overview_of(target), ROW_GROUP)
        for path in files:
            path.unlink(missing_ok=True)
            if path.name.startswith("compact-"):
                _overview_of(path).unlink(missing_ok=True)
        return target


def _write(table: pa.Table, target: Path, row_group: int) -> None:
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
    try:
        pq.write_table(table, temporary, compression="zstd", row_group_size=row_group)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _not_counter(table: pa.Table) -> pa.Array:
    is_counter = pc.and_(
        pc.equal(table["level"], COUNTER_LEVEL), pc.equal(table["op_type"], COUNTER_OP_TYPE)
    )
    return pc.invert(pc.fill_null(is_counter, False))


def _longest(table: pa.Table, count: int) -> pa.Table:
    """The `count` longest spans of `table` (counter samples left out), longest first, ties
    by start."""
    table = table.filter(_not_counter(table))
    duration = pc.subtract(table["end_ns"], table["start_ns"])
    table = table.append_column("duration", duration)
    ordered = table.sort_by([("duration", "descending"), ("start_ns", "ascending")])
    return ordered.slice(0, count).drop_columns(["duration"])


@dataclass
class Spans:
    """A window's spans: how many overlap it (counter samples aside), and the longest."""

    total: int
    longest: pa.Table  # every column, longest first
    # The trace's counter samples (start_ns, end_ns, device, counters), all of them, and the
    # earliest start and latest end of any span (None for an empty trace): read with the
    # window's columns, so that the timeline reads the trace once.
    counters: pa.Table
    start_ns: int | None = None
    end_ns: int | None = None


def _overlapping(table: pa.Table, start: int | None, end: int | None) -> pa.Array:
    mask = _not_counter(table)
    if start is not None:
        mask = pc.and_(mask, pc.greater_equal(table["end_ns"], start))
    if end is not None:
        mask = pc.and_(mask, pc.less_equal(table["start_ns"], end))
    return mask


@dataclass
class _Light:
    """The light columns of the row groups of one file that may hold spans of a window, and
    each row's number in the file."""

    table: pa.Table
    rows: np.ndarray


def _light(path: Path, start: int | None, end: int | None) -> tuple[_Light, int | None, int | None]:
    """The light columns of the file's row groups whose spans may overlap [start, end] (by the
    row groups' statistics: the earliest start and the latest end), and the file's earliest
    start and latest end. A compacted file is sorted by start, so a window of a long trace
    reads few of its row groups."""
    parquet = pq.ParquetFile(path)
    metadata = parquet.metadata
    names = parquet.schema_arrow.names
    first_ns: int | None = None
    last_ns: int | None = None
    wanted: list[int] = []
    offsets: list[int] = []
    offset = 0
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        earliest = _statistic(row_group, names, "start_ns", "min")
        latest = _statistic(row_group, names, "end_ns", "max")
        if earliest is not None:
            first_ns = earliest if first_ns is None else min(first_ns, earliest)
        if latest is not None:
            last_ns = latest if last_ns is None else max(last_ns, latest)
        unknown = earliest is None or latest is None
        if unknown or (
            (end is None or earliest <= end) and (start is None or latest >= start)  # type: ignore[operator]
        ):
            wanted.append(group)
            offsets.append(offset)
        offset += row_group.num_rows
    if first_ns is None or last_ns is None or len(wanted) == metadata.num_row_groups:
        table = _read(path, _LIGHT)
        rows = np.arange(table.num_rows, dtype=np.int64)
        if first_ns is None or last_ns is None:
            first_ns = pc.min(table["start_ns"]).as_py()
            last_ns = pc.max(table["end_ns"]).as_py()
        return _Light(table, rows), first_ns, last_ns
    present = [name for name in _LIGHT if name in names]
    table = _conform_columns(parquet.read_row_groups(wanted, columns=present), _LIGHT)
    counts = [metadata.row_group(group).num_rows for group in wanted]
    rows = (
        np.concatenate(
            [np.arange(o, o + n, dtype=np.int64) for o, n in zip(offsets, counts, strict=True)]
        )
        if wanted
        else np.zeros(0, dtype=np.int64)
    )
    return _Light(table, rows), first_ns, last_ns


def _statistic(row_group: Any, names: list[str], column: str, which: str) -> int | None:
    """A row group's min or max of an integer column, from its statistics (None if absent)."""
    if column not in names:
        return None
    statistics = row_group.column(names.index(column)).statistics
    if statistics is None or not statistics.has_min_max:
        return None
    return int(getattr(statistics, which))


def _conform_columns(table: pa.Table, columns: list[str]) -> pa.Table:
    """`table` with `columns` of `SCHEMA`'s types, those it lacks as nulls."""
    for name in columns:
        if name not in table.column_names:
            field = SCHEMA.field(name)
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(columns).cast(pa.schema([SCHEMA.field(name) for name in columns]))


def _window(trace_id: str, start: int | None, end: int | None, max_spans: int) -> Spans:
    """How many spans (counter samples aside) overlap [start, end], and the `max_spans`
    longest of them (longest first, ties by start), with every column. Only the row groups
    whose statistics allow spans of the window are read."""
    files = _files(trace_id)
    if not files:
        return Spans(0, _empty(None), _empty(_COUNTER_COLUMNS))
    read = [_light(path, start, end) for path in files]
    light = [item[0] for item in read]
    firsts = [item[1] for item in read if item[1] is not None]
    lasts = [item[2] for item in read if item[2] is not None]
    masks = [_overlapping(part.table, start, end) for part in light]
    total = sum(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0 for mask in masks)
    every = pa.concat_tables([part.table for part in light])
    # The counter samples of the row groups read: those in the window, and those before it
    # whose interval reaches into it.
    counters = every.filter(pc.invert(_not_counter(every))).select(_COUNTER_COLUMNS)
    bounds = {
        "start_ns": min(firsts) if firsts else None,
        "end_ns": max(lasts) if lasts else None,
    }
    if len(files) == 1 and files[0].name.startswith("compact-"):
        overview_file = _overview_of(files[0])
        if overview_file.is_file():
            overview = _read(overview_file, None)
            inside = overview.filter(_overlapping(overview, start, end))
            if inside.num_rows >= min(max_spans, total):
                return Spans(total, inside.slice(0, max_spans), counters, **bounds)
    # Rank the overlapping spans by the light columns, then read the rest of the kept rows.
    ranked = []
    for index, (part, mask) in enumerate(zip(light, masks, strict=True)):
        rows = pc.indices_nonzero(mask)
        if not len(rows):
            continue
        chosen = part.table.take(rows)
        ranked.append(
            pa.table(
                {
                    "file": pa.array(np.full(len(rows), index, dtype=np.int32)),
                    "row": pa.array(part.rows[rows.to_numpy()]),
                    "start_ns": chosen["start_ns"],
                    "duration": pc.subtract(chosen["end_ns"], chosen["start_ns"]),
                }
            )
        )
    if not ranked:
        return Spans(total, _empty(None), counters, **bounds)
    order = pa.concat_tables(ranked).sort_by(
        [("duration", "descending"), ("start_ns", "ascending")]
    )
    order = order.slice(0, max_spans)
    kept = _rows(files, order["file"].to_numpy(), order["row"].to_numpy())
    return Spans(total, kept, counters, **bounds)


def _conform(table: pa.Table) -> pa.Table:
    """A table read from one file in `SCHEMA`'s columns and types (columns added since the file
    was written come as nulls)."""
    for field in SCHEMA:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(SCHEMA.names).cast(SCHEMA)


def _rows(files: list[Path], file_of: np.ndarray, row_of: np.ndarray) -> pa.Table:
    """Rows by (file, row number), every column, in the order asked for: only the row groups
    that hold them are read."""
    pieces: list[pa.Table] = []
    positions: list[np.ndarray] = []
    for index in np.unique(file_of):
        wanted = np.nonzero(file_of == index)[0]
        rows = row_of[wanted]
        parquet = pq.ParquetFile(files[index])
        bounds = np.cumsum(
            [0] + [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
        )
        groups = np.unique(np.searchsorted(bounds, rows, side="right") - 1)
        table = _conform(parquet.read_row_groups(groups.tolist(), use_threads=False))
        # Row numbers within the groups read.
        offsets = np.cumsum([0] + [bounds[g + 1] - bounds[g] for g in groups])
        local = np.empty(len(rows), dtype=np.int64)
        for position, group in enumerate(groups):
            inside = (rows >= bounds[group]) & (rows < bounds[group + 1])
            local[inside] = rows[inside] - bounds[group] + offsets[position]
        pieces.append(table.take(pa.array(local)))
        positions.append(wanted)
    combined = pa.concat_tables(pieces)
    order = np.argsort(np.concatenate(positions), kind="stable")
    return combined.take(pa.array(order))


def parquet_bytes(rows: pa.Table | list[dict[str, Any]]) -> bytes:
    """`rows` (a table in `SCHEMA`, or mappings of its columns) as one LZ4 Parquet file: a
    chunk, written once per export. It keeps the statistics that reads use (the earliest start
    and the latest end, `_light`) and no others (those of the attribute texts were most of the
    file's footer), and no dictionaries. LZ4, not zstd: a chunk lives only until its trace's
    compaction rewrites it with zstd, and LZ4 writes it in 0.35 ms for 512 spans where zstd
    took 0.61 ms (29 KiB against 16 KiB); written with Parquet's defaults it took 0.95 ms."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(
        table,
        buffer,
        compression="lz4",
        use_dictionary=False,
        write_statistics=["start_ns", "end_ns"],
    )
    return buffer.getvalue()


def _listed_again(read: Callable[[], T]) -> T:
    """`read()`, listed and read again when a file it listed was gone when it opened it: a
    compaction (a finishing trace's, in the background) removed the chunks it merged in
    between, and the folder now lists the compacted file instead."""
    for attempt in range(_READ_ATTEMPTS):
        try:
            return read()
        except FileNotFoundError:
            if attempt == _READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# --- The interface, and the store in use ------------------------------------------------------


class TraceStore(abc.ABC):
    """Where the spans of traces are kept: what ingest, the exports, the timeline and the
    aggregates ask of it. Spans are rows of tables in `SCHEMA`."""

    @abc.abstractmethod
    def add_chunk(self, trace_id: str, rows: pa.Table) -> str:
        """Keep `rows` (spans of `trace_id`, in `SCHEMA`) as one more chunk of the trace, at once and whole;
        a handle that `remove_chunk` takes."""

    @abc.abstractmethod
    def remove_chunk(self, handle: str) -> None:
        """Take back a chunk that `add_chunk` kept (its export was refused after all)."""

    @abc.abstractmethod
    def read_table(self, trace_id: str, columns: list[str] | None = None) -> pa.Table:
        """Every stored span of a trace (these columns, else all), in no particular order; an
        empty table for a trace of no spans, or a malformed trace id."""

    @abc.abstractmethod
    def compact(self, trace_id: str) -> None:
        """Merge the trace's chunks into as few as reads are fastest from (a finished trace's
        are merged once, by `traces.finishing`)."""

    @abc.abstractmethod
    def window(self, trace_id: str, start: int | None, end: int | None, max_spans: int) -> Spans:
        """How many spans (counter samples aside) overlap [start, end], and the `max_spans`
        longest of them (longest first, ties by start), with every column; with the trace's
        counter samples and bounds."""


class ParquetTraceStore(TraceStore):
    """Parquet chunks in the artifact store (`hub.storage`), under `traces/<trace_id>/`,
    compacted as they are read (see the module's text)."""

    def add_chunk(self, trace_id: str, rows: pa.Table) -> str:
        name = f"{secrets.token_hex(8)}.parquet"
        data = parquet_bytes(rows)
        folder = _chunk_folders.get(trace_id)
        if folder is None:
            if len(_chunk_folders) >= _CHUNK_FOLDERS_KEPT:
                _chunk_folders.clear()
            folder = _chunk_folders[trace_id] = storage.resolve(chunk_folder(trace_id))
        try:
            storage.write_new(folder, name, data)
        except FileNotFoundError:  # the trace's first chunk (or its folder was removed since)
            folder.mkdir(parents=True, exist_ok=True)
            storage.write_new(folder, name, data)
        return f"{chunk_folder(trace_id)}/{name}"

    def remove_chunk(self, handle: str) -> None:
        storage.remove(handle)

    def read_table(self, trace_id: str, columns: list[str] | None = None) -> pa.Table:
        return _listed_again(lambda: _read_table(trace_id, columns))

    def compact(self, trace_id: str) -> None:
        folder = _folder(trace_id)
        if folder is not None:
            compact(folder)

    def window(self, trace_id: str, start: int | None, end: int | None, max_spans: int) -> Spans:
        return _listed_again(lambda: _window(trace_id, start, end, max_spans))


_STORE: TraceStore = ParquetTraceStore()


def get_store() -> TraceStore:
    """The store that keeps the hub's traces."""
    return _STORE


def read_table(trace_id: str, columns: list[str] | None = None) -> pa.Table:
    """`get_store().read_table`."""
    return get_store().read_table(trace_id, columns)


def window(trace_id: str, start: int | None, end: int | None, max_spans: int) -> Spans:
    """`get_store().window`."""
    return get_store().window(trace_id, start, end, max_spans)
