"""Per-input outputs of a result, kept as a columnar file in the artifact store rather than in
the database, so that a dataset of a million inputs does not bloat it; read back a page at a
time.

`results/<evaluation id>/predictions.parquet` holds a row per input, in dataset order:
`index` (int64), `label` (the dataset's class, int64; -1 for a detector's image), `classes` (the
top-k classes, list<int64>) and `probabilities` (their probabilities, list<float32>), and for a
detector `boxes` (each class's [x, y, w, h], list<list<float32>>), for a text recognizer `text`
(the decoded line, string; its `probabilities` empty where the model emitted token ids, which
carry no confidence), zstd-compressed.

Predictions too large for one result body come first in pages (`write_page`, staged under
`results/<evaluation id>/pages/<claim>/`), which the result's arrival assembles into that file
one page at a time (`assemble`); staged pages are removed once the evaluation finishes,
whichever way (`remove_pages`).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from django.conf import settings

from hub import storage
from predictors import protocol

if TYPE_CHECKING:
    from predictors.analysis.divergence import Capture

__all__ = [
    "MAX_PAGES",
    "SCHEMA",
    "PagesError",
    "assemble",
    "classes",
    "count",
    "head",
    "page",
    "page_path_of",
    "path_of",
    "read_all",
    "remove",
    "remove_pages",
    "write",
    "write_page",
]

SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("label", pa.int64()),
        ("classes", pa.list_(pa.int64())),
        ("probabilities", pa.list_(pa.float32())),
    ]
)
BOXES = pa.field("boxes", pa.list_(pa.list_(pa.float32(), 4)))
TEXTS = pa.field("text", pa.string())
ROW_GROUP = 65_536


def path_of(evaluation_id: Any) -> str:
    return f"results/{evaluation_id}/predictions.parquet"


def _table(predictions: dict[str, Any], first: int = 0) -> pa.Table:
    """Predictions (`{"labels", "classes", "probabilities"}`, one row per input, with a
    detector's `boxes`, a text recognizer's `texts`) as the file's table, its rows the inputs
    from `first` on."""
    labels = predictions["labels"]
    columns = {
        "index": pa.array(range(first, first + len(labels)), pa.int64()),
        "label": pa.array(labels, pa.int64()),
        "classes": pa.array(predictions["classes"], pa.list_(pa.int64())),
        "probabilities": pa.array(predictions["probabilities"], pa.list_(pa.float32())),
    }
    schema = SCHEMA
    if predictions.get("boxes") is not None:
        columns["boxes"] = pa.array(predictions["boxes"], BOXES.type)
        schema = SCHEMA.append(BOXES)
    if predictions.get("texts") is not None:
        columns["text"] = pa.array(predictions["texts"], TEXTS.type)
        schema = schema.append(TEXTS)
    return pa.table(columns, schema=schema)


def write(evaluation_id: Any, predictions: dict[str, Any]) -> str:
    """Store a result's predictions (`{"labels", "classes", "probabilities"}`, one row per
    input); the store path."""
    buffer = io.BytesIO()
    pq.write_table(_table(predictions), buffer, compression="zstd", row_group_size=ROW_GROUP)
    path = path_of(evaluation_id)
    storage.write(path, [buffer.getvalue()])
    return path


def remove(evaluation_id: Any) -> None:
    """A result's files (not its staged pages, which stay until the evaluation finishes)."""
    storage.remove(path_of(evaluation_id))
    storage.remove(layers_path_of(evaluation_id))


# -- predictions posted in pages before their result -------------------------------------------

# The most pages a result's predictions may come in.
MAX_PAGES = protocol.MAX_PAGES


def _pages_folder(evaluation_id: Any) -> str:
    return f"results/{evaluation_id}/pages"


def page_path_of(evaluation_id: Any, claim: str, page: int) -> str:
    """A staged page's store path: a claim's own pages, apart from another claim's."""
    return f"{_pages_folder(evaluation_id)}/{claim}/{page:05d}.parquet"


def write_page(
    evaluation_id: Any, claim: str, page: int, first: int, predictions: dict[str, Any]
) -> str:
    """Stage page `page` of a result's predictions (its rows the inputs from `first` on), as
    `assemble` reads it; posting it again replaces it. The store path."""
    buffer = io.BytesIO()
    pq.write_table(_table(predictions, first), buffer, compression="zstd")
    path = page_path_of(evaluation_id, claim, page)
    folder = storage.resolve(path).parent
    # Only the current claim posts pages: those of a claim before it will never be read.
    pages = storage.resolve(_pages_folder(evaluation_id))
    if pages.is_dir():
        for other in pages.iterdir():
            if other.name != claim:
                shutil.rmtree(other, ignore_errors=True)
    staged = (
        sum(f.stat().st_size for f in folder.glob("*.parquet") if f.name != Path(path).name)
        if folder.is_dir()
        else 0
    )
    limit = settings.RESULT_PAGES_MAX_BYTES
    if staged + buffer.tell() > limit:
        raise PagesError(
            f"the pages staged for this result would take {staged + buffer.tell()} bytes, more "
            f"than RESULT_PAGES_MAX_BYTES ({limit})"
        )
    storage.write(path, [buffer.getvalue()])
    return path


class PagesError(ValueError):
    """The staged pages do not make the result's predictions (a page missing, out of order,
    of another shape)."""


def assemble(evaluation_id: Any, claim: str, pages: int, top_k: int) -> tuple[str, int]:
    """The predictions file made of the claim's `pages` staged pages, in order, one page in
    memory at a time; the store path and the rows it holds. PagesError naming the page at
    fault: missing, unreadable, out of order, of other columns, or with more than `top_k`
    classes in a row (nothing is written then)."""
    path = path_of(evaluation_id)
    target = storage.resolve(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{claim}.part")
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for page in range(pages):
            file = storage.resolve(page_path_of(evaluation_id, claim, page))
            if not file.is_file():
                raise PagesError(f"page {page} of {pages} was not posted")
            try:
                table = pq.read_table(file)
                first = table.column("index")[0].as_py() if table.num_rows else rows
                widest = pc.max(pc.list_value_length(table.column("classes"))).as_py() or 0
            except (OSError, KeyError, pa.ArrowException):
                raise PagesError(f"page {page} cannot be read: post it again") from None
            if widest > top_k:
                raise PagesError(
                    f"page {page} has a row of {widest} classes; the result's top_k is {top_k}"
                )
            if first != rows:
                raise PagesError(
                    f"page {page} starts at input {first}; the pages before it end at input {rows}"
                )
            if writer is None:
                writer = pq.ParquetWriter(temporary, table.schema, compression="zstd")
            elif not table.schema.equals(writer.schema):
                raise PagesError(
                    f"page {page} has the columns {table.schema.names}; page 0 has "
                    f"{writer.schema.names}"
                )
            writer.write_table(table, row_group_size=ROW_GROUP)
            rows += table.num_rows
        if writer is None:
            raise PagesError("no page: a result in pages has at least one")
        writer.close()
        writer = None
        os.replace(temporary, target)
    finally:
        if writer is not None:
            writer.close()
        temporary.unlink(missing_ok=True)
    return path, rows


def remove_pages(evaluation_id: Any) -> None:
    """Every staged page of the evaluation, of any claim."""
    shutil.rmtree(storage.resolve(_pages_folder(evaluation_id)), ignore_errors=True)


# -- the layer outputs of a job's `capture_inputs` --------------------------------------------


def layers_path_of(evaluation_id: Any) -> str:
    return f"results/{evaluation_id}/layers.npz"


def read_capture(data: bytes, indices: list[int]) -> Capture:
    """The capture file an agent sent, read strictly (no pickles, bounded) and checked against
    the inputs the job named; ValueError saying what is wrong."""
    from predictors.analysis.divergence import Capture

    capture = Capture.from_bytes(data, max_bytes=settings.LAYER_OUTPUTS_MAX_BYTES)
    if list(capture.indices) != list(indices):
        raise ValueError(
            f"holds the layer outputs of inputs {list(capture.indices)}; the job asked for "
            f"{list(indices)}"
        )
    return capture


def write_layers(evaluation_id: Any, data: bytes) -> str:
    """Keep a result's capture file (as read by `read_capture`); the store path."""
    path = layers_path_of(evaluation_id)
    storage.write(path, [data])
    return path


def layers(evaluation_id: Any) -> Capture | None:
    """A result's layer outputs; None where it kept none."""
    path = layers_path_of(evaluation_id)
    file = storage.resolve(path)
    if not file.is_file():
        return None
    from predictors.analysis.divergence import Capture

    return Capture.from_bytes(file.read_bytes(), max_bytes=settings.LAYER_OUTPUTS_MAX_BYTES)


# The most rows a result's predictions may hold to be read whole into one answer (`read_all`,
# `?predictions=1`); larger ones are read a page at a time (`page`).
INLINE_ROWS = 1_000_000


def count(path: str) -> int:
    """How many inputs the file holds (read from its footer)."""
    with pq.ParquetFile(storage.resolve(path)) as parquet:
        return int(parquet.metadata.num_rows)


def page(path: str, offset: int, limit: int) -> list[dict[str, Any]]:
    """Rows `offset` to `offset + limit` (reading only the row groups they lie in)."""
    rows: list[dict[str, Any]] = []
    with pq.ParquetFile(storage.resolve(path)) as parquet:
        start = 0
        for group in range(parquet.metadata.num_row_groups):
            size = parquet.metadata.row_group(group).num_rows
            if start + size > offset and start < offset + limit:
                table = parquet.read_row_group(group)
                first = max(offset - start, 0)
                rows.extend(table.slice(first, offset + limit - start - first).to_pylist())
            start += size
    return [_rounded(row) for row in rows[:limit]]


def classes(path: str, limit: int) -> list[list[int]]:
    """The first `limit` rows' classes alone, read a row group at a time."""
    found: list[list[int]] = []
    with pq.ParquetFile(storage.resolve(path)) as parquet:
        for batch in parquet.iter_batches(columns=["classes"]):
            found.extend(batch.column(0).to_pylist()[: limit - len(found)])
            if len(found) >= limit:
                break
    return found


def head(path: str, columns: list[str], limit: int) -> pa.Table:
    """The first `limit` rows of `columns`, read a row group at a time."""
    with pq.ParquetFile(storage.resolve(path)) as parquet:
        names = [name for name in columns if name in parquet.schema_arrow.names]
        batches, taken = [], 0
        for batch in parquet.iter_batches(columns=names):
            batches.append(batch.slice(0, limit - taken))
            taken += min(batch.num_rows, limit - taken)
            if taken >= limit:
                break
        schema = parquet.schema_arrow
    if not batches:
        return pa.table({name: pa.array([], schema.field(name).type) for name in names})
    return pa.Table.from_batches(batches)


def read_all(path: str) -> dict[str, Any]:
    """The whole file as the result's `predictions` object."""
    table = pq.read_table(storage.resolve(path))
    rows = [_rounded(row) for row in table.to_pylist()]
    whole = {
        "labels": [row["label"] for row in rows],
        "classes": [row["classes"] for row in rows],
        "probabilities": [row["probabilities"] for row in rows],
    }
    if "boxes" in table.column_names:
        whole["boxes"] = [row["boxes"] for row in rows]
    if "text" in table.column_names:
        whole["texts"] = [row["text"] for row in rows]
    return whole


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    """float32 read back as the 5 decimals the agent sent, not float32's binary noise."""
    row["probabilities"] = [round(p, 5) for p in row["probabilities"] or []]
    if "boxes" in row:
        row["boxes"] = [[round(v, 2) for v in box] for box in row["boxes"] or []]
    return row
