"""The data manager: fetches model and dataset files into a checksum-keyed local cache, and
streams Parquet datasets in batches.

Where an asset comes from:
- `repo://P` with a local store (`store_dir`, local mode, no hub): the file `store_dir/P` itself,
  used in place (no copy), after the path has been checked to stay inside the store.
- `repo://P` otherwise: downloaded from `{hub_url}/api/v1/artifacts/P` with the agent's token
  (`Authorization: Bearer …`). The token is sent to the hub only, never to other servers.
- `https://…` (and `http://…`): downloaded with requests, streaming.

The cache (`cache_dir`, default `$MLMS_CACHE_DIR` or `~/.cache/mlmodelscope`):

    sha256/<hex>/<basename>     a verified file; <basename> is the URL's last path segment, kept
                                because frameworks tell formats by extension (`.keras`, `.onnx`)
    sha256/.download-*.part     downloads in progress (same filesystem, so the move is atomic)
    urls/<sha256 of URL>.json   index for URLs fetched without a known checksum: {url, sha256}
    locks/<key>.lock            one flock lock file per asset (key: the checksum, or the URL's
                                hash when no checksum is known); never deleted

Verification policy: a cached file is hashed again on every fetch (sha256 runs at over 1 GB/s,
small next to a download, and it catches corruption that keeps the size and modification time).
A cached file with the wrong checksum is fetched again and atomically replaced. A download is
written to a temporary file, fsynced, verified and only then moved into place with
`os.replace`; a checksum mismatch raises `AssetError` and leaves nothing in the cache.
Concurrent fetches of one asset, from threads or processes sharing the cache, serialise on the
asset's lock file, so it is downloaded once and the others find it cached.

A URL fetched without a checksum is looked up in the index and, when cached, not asked of the
server again: `repo://` paths name immutable versions, and the spec requires a checksum for
every `https://` asset, so a URL without one is trusted to keep its content.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import io
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import requests
import urllib3.exceptions

__all__ = ["AssetError", "DataManager", "DatasetError", "DatasetReader", "ProgressCallback"]

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int | None], None]
"""Called as `progress(bytes_done, bytes_total)` while downloading; the total may be unknown."""

_CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_REPO_PATH = 255
# mkstemp creates files only its owner can read; agents running as other users share the cache,
# and who may enter it is decided by the cache directory's own permissions.
_FILE_MODE = 0o644


class AssetError(RuntimeError):
    """An asset cannot be fetched, or does not have the checksum it should."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class DatasetError(ValueError):
    """A dataset file cannot be read, or is not in the expected format."""


def default_cache_dir() -> Path:
    """`$MLMS_CACHE_DIR`, else `~/.cache/mlmodelscope`."""
    env = os.environ.get("MLMS_CACHE_DIR")
    return (Path(env) if env else Path.home() / ".cache" / "mlmodelscope").expanduser()


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _repo_path(url: str) -> str:
    """The store-relative path of a `repo://` URL, checked against the spec's path rules."""
    path = url[len("repo://") :]

    def invalid(reason: str) -> AssetError:
        return AssetError(f"{url} is not a valid repo:// path: {reason}", url=url)

    if not path:
        raise invalid("the path is empty")
    if len(path) > _MAX_REPO_PATH:
        raise invalid(f"longer than {_MAX_REPO_PATH} characters")
    if path.startswith("/"):
        raise invalid("it starts with '/'")
    if "\\" in path:
        raise invalid("it contains a backslash")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise invalid(f"it has an empty, '.' or '..' segment ({segment!r})")
        if not _SEGMENT.match(segment):
            raise invalid(f"segment {segment!r} may only use A-Z a-z 0-9 . _ -")
    return path


def _basename(path: str) -> str:
    name = unquote(path.rsplit("/", 1)[-1])
    if name in ("", ".", "..") or not _SEGMENT.match(name):
        return "asset"
    return name


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything it wraps (urllib3 nests the real cause a few levels deep)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = [getattr(current, "reason", None), current.__cause__, current.__context__]
        wrapped += list(current.args)
        todo.extend(e for e in wrapped if isinstance(e, BaseException))


def _connection_reason(exc: requests.RequestException, source: str, timeout: float) -> str:
    """Why a request failed, in plain words."""
    if isinstance(exc, requests.Timeout):
        return f"the server did not answer within {timeout:g} seconds (timed out)"
    if isinstance(exc, requests.exceptions.SSLError):
        return f"the TLS (https) connection failed: {exc}"
    if isinstance(exc, requests.exceptions.InvalidURL | requests.exceptions.MissingSchema):
        return f"the URL is not valid: {exc}"
    host = urlsplit(source).netloc
    for cause in _exception_chain(exc):
        if isinstance(cause, urllib3.exceptions.NameResolutionError):
            return f"the host name in {host!r} could not be resolved (DNS failure)"
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused: nothing is listening at {host}"
        if isinstance(cause, ConnectionResetError):
            return f"the connection to {host} was reset"
    return f"could not connect to {host}: {exc}"


def _http_reason(response: requests.Response) -> str:
    code = response.status_code
    if code == 404:
        return "not found (HTTP 404)"
    if code == 401:
        return "the server refused the credentials (HTTP 401 Unauthorized); check the token"
    if code == 403:
        return "access denied (HTTP 403 Forbidden)"
    return f"the server answered HTTP {code} {response.reason or ''}".rstrip()


class DataManager:
    """Fetches assets by URL into a local, checksum-verified cache (see the module docstring)."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        hub_url: str | None = None,
        token: str | None = None,
        store_dir: Path | None = None,
        timeout: float = 30,
        retry_seconds: float = 0,
    ) -> None:
        self.cache_dir = Path(cache_dir or default_cache_dir()).expanduser()
        self.hub_url = hub_url.rstrip("/") if hub_url else None
        self.token = token
        self.store_dir = Path(store_dir).expanduser() if store_dir is not None else None
        self.timeout = timeout
        # How long a download from the hub is tried again while the hub does not answer (a
        # restart): connection refused or reset, or 502/503/504 (0: not at all).
        self.retry_seconds = retry_seconds

    def fetch(
        self, url: str, sha256: str | None = None, *, progress: ProgressCallback | None = None
    ) -> Path:
        """A local path to the asset at `url`, verified against `sha256` when one is given."""
        expected = self._expected(url, sha256)
        if url.startswith("repo://"):
            relative = _repo_path(url)
            if self.store_dir is not None:
                return self._from_store(url, relative, expected)
            if self.hub_url is None:
                raise AssetError(
                    f"cannot fetch {url}: repo:// assets need a hub URL or a local store "
                    "directory, and neither is configured",
                    url=url,
                )
            source = f"{self.hub_url}/api/v1/artifacts/{relative}"
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            basename = _basename(relative)
        elif urlsplit(url).scheme in ("https", "http"):
            source, headers, basename = url, {}, _basename(urlsplit(url).path)
        else:
            raise AssetError(
                f"cannot fetch {url}: only repo://, https:// and http:// URLs are supported",
                url=url,
            )
        return self._cached(url, source, headers, basename, expected, progress)

    # -- local store -------------------------------------------------------------------------

    def _from_store(self, url: str, relative: str, expected: str | None) -> Path:
        assert self.store_dir is not None
        root = self.store_dir.resolve()
        path = (root / relative).resolve()
        if not path.is_relative_to(root):
            raise AssetError(f"cannot fetch {url}: it leads outside the store {root}", url=url)
        if not path.is_file():
            raise AssetError(f"cannot fetch {url}: not found in the store {root}", url=url)
        if expected is not None:
            actual = _sha256_of(path)
            if actual != expected:
                raise AssetError(
                    f"checksum mismatch for {url} ({path}): expected sha256 {expected}, "
                    f"got {actual}",
                    url=url,
                )
        return path

    # -- cache -------------------------------------------------------------------------------

    @staticmethod
    def _expected(url: str, sha256: str | None) -> str | None:
        if sha256 is None:
            return None
        if not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise AssetError(
                f"the sha256 given for {url} is not 64 hexadecimal digits: {sha256!r}", url=url
            )
        return sha256.lower()

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        lock_dir = self.cache_dir / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with (lock_dir / f"{key}.lock").open("a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _index_file(self, source: str) -> Path:
        return self.cache_dir / "urls" / f"{hashlib.sha256(source.encode()).hexdigest()}.json"

    def _indexed_sha256(self, source: str) -> str | None:
        try:
            entry = json.loads(self._index_file(source).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("url") != source:
            return None
        value = entry.get("sha256")
        return value if isinstance(value, str) and _SHA256.match(value) else None

    def _write_index(self, source: str, sha256: str) -> None:
        index = self._index_file(source)
        index.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=index.parent, prefix=".index-", suffix=".part")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), _FILE_MODE)
                json.dump({"url": source, "sha256": sha256}, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, index)
        finally:
            Path(temporary).unlink(missing_ok=True)

    def _is_valid(self, path: Path, sha256: str) -> bool:
        if not path.is_file():
            return False
        actual = _sha256_of(path)
        if actual == sha256:
            return True
        logger.warning(
            "cached %s has sha256 %s instead of %s; fetching it again", path, actual, sha256
        )
        return False

    def _cached(
        self,
        url: str,
        source: str,
        headers: dict[str, str],
        basename: str,
        expected: str | None,
        progress: ProgressCallback | None,
    ) -> Path:
        root = self.cache_dir / "sha256"
        key = expected or "url-" + hashlib.sha256(source.encode()).hexdigest()
        with self._lock(key):
            known = expected or self._indexed_sha256(source)
            if known is not None and self._is_valid(root / known / basename, known):
                return root / known / basename
            temporary, actual = self._download(url, source, headers, root, progress)
            try:
                if expected is not None and actual != expected:
                    raise AssetError(
                        f"checksum mismatch for {url}: expected sha256 {expected}, the download "
                        f"has {actual}; nothing was cached",
                        url=url,
                    )
                target = root / actual / basename
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(temporary, target)
                _fsync_directory(target.parent)
            finally:
                temporary.unlink(missing_ok=True)
            if expected is None:
                self._write_index(source, actual)
            return target

    def _download(
        self,
        url: str,
        source: str,
        headers: dict[str, str],
        directory: Path,
        progress: ProgressCallback | None,
    ) -> tuple[Path, str]:
        """Stream `source` into a fsynced temporary file in `directory`; (its path, its sha256)."""
        where = url if source == url else f"{url} (from {source})"
        from_hub = self.hub_url is not None and source.startswith(self.hub_url + "/")
        deadline = time.monotonic() + (self.retry_seconds if from_hub else 0)
        delay = 0.5
        while True:
            try:
                response = requests.get(source, headers=headers, stream=True, timeout=self.timeout)
            except requests.RequestException as exc:
                if time.monotonic() < deadline and not isinstance(exc, requests.Timeout):
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    continue
                reason = _connection_reason(exc, source, self.timeout)
                raise AssetError(f"cannot fetch {where}: {reason}", url=url) from exc
            if response.status_code in (502, 503, 504) and time.monotonic() < deadline:
                response.close()
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            break
        with response:
            if response.status_code >= 400:
                raise AssetError(f"cannot fetch {where}: {_http_reason(response)}", url=url)
            length = response.headers.get("Content-Length", "")
            total = int(length) if length.isdigit() else None
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=directory, prefix=".download-", suffix=".part")
            temporary = Path(name)
            digest = hashlib.sha256()
            done = 0
            try:
                with os.fdopen(fd, "wb") as handle:
                    os.fchmod(handle.fileno(), _FILE_MODE)
                    for chunk in response.iter_content(_CHUNK):
                        handle.write(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
                    handle.flush()
                    os.fsync(handle.fileno())
            except requests.RequestException as exc:
                temporary.unlink(missing_ok=True)
                raise AssetError(
                    f"the download of {where} broke off after {done} bytes: {exc}", url=url
                ) from exc
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
        return temporary, digest.hexdigest()


# What a dataset's rows are labelled with (`DatasetReader`'s `target`), by task: a class index
# (`label`, an integer), a set of classes (`label`, a list of class indices: multi-label
# classification), values (`target`, a number or a list of numbers: regression), or nothing
# (latency-only evaluations read no labels).
TARGETS = ("class", "classes", "values", "none")


def target_of(task: str | None) -> str:
    """The `TARGETS` entry a task's rows carry."""
    return {"multi_label_classification": "classes", "regression": "values"}.get(str(task), "class")


class DatasetReader:
    """Streams `(images, labels)` batches from a Parquet dataset file.

    The file has an `image` column (binary: the encoded file bytes) and the labels `target`
    says (`TARGETS`): a `label` column of integers (class indices, yielded as (N,) int64), of
    lists of class indices (yielded as (N, classes) 0/1 uint8, `classes` given), a `target`
    column of numbers or of lists of `classes` numbers (yielded as (N, classes) float64), or
    none (yielded as (N,) int64 of -1). Rows are read with `ParquetFile.iter_batches`, a batch at
    a time, never the whole file; every batch holds `batch_size` rows except possibly the last.
    `limit` reads only the first rows. The reader can be iterated more than once.
    """

    def __init__(
        self,
        path: Path,
        batch_size: int,
        *,
        limit: int | None = None,
        target: str = "class",
        classes: int | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
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
        try:
            with pq.ParquetFile(self.path) as parquet:
                schema = parquet.schema_arrow
                self.rows: int = parquet.metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{self.path} is not a readable Parquet file: {exc}") from exc
        names = set(schema.names)
        # The input column: `image` (encoded images, or .npy tensors), or `input`.
        self.column = "image" if "image" in names or "input" not in names else "input"
        # The labels' column: `label` (classes), `target` (values), none.
        self.label_column = {"values": "target", "none": None}.get(target, "label")
        needed = [self.column] + ([self.label_column] if self.label_column else [])
        if not all(name in names for name in needed):
            raise DatasetError(
                f"{self.path} needs the columns "
                + " and ".join(
                    "'image' (or 'input')" if name == self.column else repr(name) for name in needed
                )
                + f"; it has {sorted(names)}"
            )
        image_type = schema.field(self.column).type
        if not (pa.types.is_binary(image_type) or pa.types.is_large_binary(image_type)):
            raise DatasetError(f"{self.path}: column '{self.column}' is {image_type}, not binary")
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
        images: list[bytes] = []
        labels = self._labels(None, 0)
        columns = [self.column] + ([self.label_column] if self.label_column else [])
        with pq.ParquetFile(self.path) as parquet:
            for record_batch in parquet.iter_batches(batch_size=self.batch_size, columns=columns):
                record_batch = record_batch.slice(0, remaining)
                remaining -= record_batch.num_rows
                image_column = record_batch.column(0)
                label_column = record_batch.column(1) if self.label_column else None
                if image_column.null_count or label_column is not None and label_column.null_count:
                    raise DatasetError(f"{self.path} has rows without an image or a label")
                images.extend(image_column.to_pylist())
                labels = np.concatenate([labels, self._labels(label_column, record_batch.num_rows)])
                while len(images) >= self.batch_size:
                    yield images[: self.batch_size], labels[: self.batch_size]
                    images, labels = images[self.batch_size :], labels[self.batch_size :]
                if remaining == 0:
                    break
        if images:
            yield images, labels

    def _labels(self, column: pa.Array | None, rows: int) -> np.ndarray:
        """A batch's labels as `target` says (see the class docstring)."""
        if self.target == "none":
            return np.full(rows, -1, np.int64)
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


def _is_list(kind: pa.DataType, element: Callable[[pa.DataType], bool]) -> bool:
    """Whether `kind` is a list whose items satisfy `element`."""
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and element(kind.value_type)


def _is_number(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))


def label_type_problem(target: str, kind: pa.DataType) -> str | None:
    """What is wrong with the type of a labels column for `target`, in words, or None."""
    if target == "class" and not pa.types.is_integer(kind):
        return f"is {kind}, not an integer"
    if target == "classes" and not _is_list(kind, pa.types.is_integer):
        return f"is {kind}, not a list of class indices (integers)"
    if target == "values" and not (_is_number(kind) or _is_list(kind, _is_number)):
        return f"is {kind}, not a number or a list of numbers"
    return None


class StreamReader:
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
        self.lengths: list[int] = []
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

    # The evaluation loop's width: how many streams run side by side (`with_batch_size`).
    batch_size = 1

    @property
    def streams(self) -> int:
        return len(self.lengths)

    def with_batch_size(self, batch_size: int) -> StreamReader:
        """The same reader (the checks are not made again), for `batch_size` streams side by
        side."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        twin = copy.copy(self)
        twin.batch_size = batch_size
        return twin

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


class ClipReader:
    """The rows of a split of audio clips: `(audio, segments, classes)` per clip, read a row
    group at a time: the columns `audio` (binary, the encoded clip), `segments` (a list of
    [start, end] in seconds per clip) and `segment_classes` (a class index per segment)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            with pq.ParquetFile(self.path) as parquet:
                schema = parquet.schema_arrow
                self.rows: int = parquet.metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{self.path} is not a readable Parquet file: {exc}") from exc
        missing = [c for c in ("audio", "segments", "segment_classes") if c not in schema.names]
        if missing:
            raise DatasetError(
                f"{self.path} is a split of audio clips without the column(s) "
                f"{', '.join(missing)}: audio (the encoded clip), segments ([start, end] in "
                f"seconds) and segment_classes (a class per segment); it has "
                f"{sorted(schema.names)}"
            )
        kinds = {
            "audio": pa.types.is_binary(schema.field("audio").type)
            or pa.types.is_large_binary(schema.field("audio").type),
            "segments": _is_list_of(schema.field("segments").type, pa.types.is_floating)
            or _is_list_of(schema.field("segments").type, pa.types.is_integer),
            "segment_classes": pa.types.is_list(schema.field("segment_classes").type)
            and pa.types.is_integer(schema.field("segment_classes").type.value_type),
        }
        for name, fits in kinds.items():
            if not fits:
                raise DatasetError(
                    f"{self.path}: column '{name}' is {schema.field(name).type}, not "
                    + {
                        "audio": "binary",
                        "segments": "a list of [start, end] pairs",
                        "segment_classes": "a list of integers",
                    }[name]
                )

    def __iter__(self) -> Iterator[tuple[bytes, list[list[float]], list[int]]]:
        row = 0
        with pq.ParquetFile(self.path) as parquet:
            for batch in parquet.iter_batches(
                batch_size=64, columns=["audio", "segments", "segment_classes"]
            ):
                for audio, segments, classes in zip(
                    batch.column("audio").to_pylist(),
                    batch.column("segments").to_pylist(),
                    batch.column("segment_classes").to_pylist(),
                    strict=True,
                ):
                    problem = segment_problem(audio, segments, classes, None)
                    if problem:
                        raise DatasetError(f"{self.path}: row {row} {problem}")
                    yield audio, segments, classes
                    row += 1


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


class _BatchedSplit:
    """What the readers of one row per input share: the file opened and its schema read,
    `batch_size` and `limit` checked, `count` (rows, capped by `limit`) and `len` (batches)."""

    path: Path
    batch_size: int
    limit: int | None
    rows: int

    def _open(self, path: Path, batch_size: int, limit: int | None) -> pa.Schema:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        self.path, self.batch_size, self.limit = Path(path), batch_size, limit
        try:
            with pq.ParquetFile(self.path) as parquet:
                self.rows = parquet.metadata.num_rows
                return parquet.schema_arrow
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{self.path} is not a readable Parquet file: {exc}") from exc

    def _require(
        self, schema: pa.Schema, columns: tuple[str, ...], what: str, described: str
    ) -> None:
        missing = [name for name in columns if name not in schema.names]
        if missing:
            raise DatasetError(
                f"{self.path} is {what} without the column(s) {', '.join(missing)}: "
                f"{described}; it has {sorted(schema.names)}"
            )

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
        self._require(
            schema,
            ("image", "boxes", "classes"),
            "an object_detection split",
            "image (the encoded image), boxes ([x, y, w, h] per object) and classes (a class "
            "index per object)",
        )
        checks = {
            "image": pa.types.is_binary(schema.field("image").type)
            or pa.types.is_large_binary(schema.field("image").type),
            "boxes": _is_list_of(schema.field("boxes").type, pa.types.is_floating)
            or _is_list_of(schema.field("boxes").type, pa.types.is_integer),
            "classes": pa.types.is_list(schema.field("classes").type)
            and pa.types.is_integer(schema.field("classes").type.value_type),
        }
        for name, fits in checks.items():
            if not fits:
                wanted = {
                    "image": "binary",
                    "boxes": "a list of lists of 4 numbers",
                    "classes": "a list of integers",
                }[name]
                raise DatasetError(
                    f"{self.path}: column '{name}' is {schema.field(name).type}, not {wanted}"
                )

    def __iter__(self) -> Iterator[tuple[list[bytes], list[dict[str, np.ndarray]]]]:
        remaining = self.count
        row = 0
        with pq.ParquetFile(self.path) as parquet:
            for batch in parquet.iter_batches(
                batch_size=self.batch_size, columns=["image", "boxes", "classes"]
            ):
                if remaining <= 0:
                    break
                batch = batch.slice(0, remaining)
                remaining -= batch.num_rows
                images = batch.column("image").to_pylist()
                annotations = []
                for offset, (boxes, classes) in enumerate(
                    zip(
                        batch.column("boxes").to_pylist(),
                        batch.column("classes").to_pylist(),
                        strict=True,
                    )
                ):
                    problem = _annotation_problem(boxes, classes, None)
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
                row += batch.num_rows
                yield images, annotations


class MaskReader(_BatchedSplit):
    """`(images, masks)` batches of a semantic-segmentation split: the columns `image` (binary,
    encoded) and `mask` (binary: a PNG of 8-bit class indices, the image's size). A mask is
    decoded to an (H, W) uint8 array. Read a batch at a time; `limit` keeps the first rows."""

    def __init__(self, path: Path, batch_size: int, *, limit: int | None = None) -> None:
        schema = self._open(path, batch_size, limit)
        self._require(
            schema,
            ("image", "mask"),
            "a semantic_segmentation split",
            "image (the encoded image) and mask (a PNG of class indices)",
        )
        for name in ("image", "mask"):
            kind = schema.field(name).type
            if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
                raise DatasetError(f"{self.path}: column '{name}' is {kind}, not binary")

    def __iter__(self) -> Iterator[tuple[list[bytes], list[np.ndarray]]]:
        remaining = self.count
        row = 0
        with pq.ParquetFile(self.path) as parquet:
            for batch in parquet.iter_batches(
                batch_size=self.batch_size, columns=["image", "mask"]
            ):
                if remaining <= 0:
                    break
                batch = batch.slice(0, remaining)
                remaining -= batch.num_rows
                images = batch.column("image").to_pylist()
                masks = []
                for offset, data in enumerate(batch.column("mask").to_pylist()):
                    mask, problem = decode_mask(data)
                    if problem or images[offset] is None:
                        raise DatasetError(
                            f"{self.path}: row {row + offset} {problem or 'has no image'}"
                        )
                    masks.append(mask)
                row += batch.num_rows
                yield images, masks


def decode_mask(data: bytes | None) -> tuple[np.ndarray, str | None]:
    """A mask's class indices (H, W uint8), or what is wrong with it in words."""
    from PIL import Image

    if data is None:
        return np.zeros((0, 0), np.uint8), "has no mask"
    if not data.startswith(_MAGIC["png"][0]):
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


def _is_list_of(kind: pa.DataType, element: Callable[[pa.DataType], bool]) -> bool:
    return (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and (
            pa.types.is_list(kind.value_type)
            or pa.types.is_fixed_size_list(kind.value_type)
            or pa.types.is_large_list(kind.value_type)
        )
        and element(kind.value_type.value_type)
    )


def _annotation_problem(boxes: Any, classes: Any, labels: int | None) -> str | None:
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


def lockstep_calls(lengths: list[int], width: int) -> int:
    """How many calls run `lengths` streams side by side, `width` at a time, each slot taking
    the next stream as soon as its stream ends (`predictors.evaluation.streams`)."""
    import heapq

    slots = [0] * min(width, len(lengths))
    heapq.heapify(slots)
    for length in lengths:
        heapq.heappush(slots, heapq.heappop(slots) + length)
    return max(slots, default=0)


# Magic bytes of the encodings a dataset manifest may state.
_MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "npy": (b"\x93NUMPY",),
    "flac": (b"fLaC",),
    "wav": (b"RIFF",),
}
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
    list of them; `target`, a number or a list of `labels` numbers; none) without nulls, every
    class index below `labels`, every value finite, every image starting as `encoding` says
    (PNG or JPEG magic bytes), and `count` rows when the manifest states a count. Read a row
    group at a time; at most _MAX_PROBLEMS problems, each naming the row."""
    if detection:
        return _detection_problems(path, labels=labels, encoding=encoding, count=count)
    if clips:
        return _clip_problems(path, labels=labels, encoding=encoding, count=count)
    if masks:
        return _mask_problems(
            path, labels=labels, encoding=encoding, count=count, ignore_label=ignore_label
        )
    try:
        reader = DatasetReader(
            path,
            batch_size=1024,
            target=target,
            classes=(labels or 1) if target in ("classes", "values") else None,
        )
    except (DatasetError, ValueError) as error:
        return [str(error).replace(f"{path}: ", "").replace(f"{path} ", "the file ")]
    problems: list[str] = []
    if count is not None and reader.rows != count:
        problems.append(f"the file holds {reader.rows} rows, but the manifest's count is {count}")
    magic = _MAGIC.get(encoding or "")
    try:
        if streams:
            try:
                StreamReader(path)
            except DatasetError as error:
                problems.append(
                    str(error).replace(f"{path}: ", "").replace(f"{path} ", "the file ")
                )
        problems += _row_problems(path, reader, labels, encoding, magic)
    except (OSError, pa.ArrowException) as exc:  # a page that does not decode
        problems.append(f"the file cannot be read through: {exc}")
    return problems[:_MAX_PROBLEMS]


def _clip_problems(
    path: Path, *, labels: int | None, encoding: str | None, count: int | None
) -> list[str]:
    """`split_problems` of a split of audio clips: its columns, every clip's segments and
    classes, its encoding's magic bytes, and a header libsndfile reads."""
    from predictors.processing import ProcessingError
    from predictors.processing.audio import clip_info

    try:
        reader = ClipReader(path)
    except DatasetError as error:
        return [str(error).replace(f"{path}: ", "").replace(f"{path} ", "the file ")]
    problems: list[str] = []
    if count is not None and reader.rows != count:
        problems.append(f"the file holds {reader.rows} rows, but the manifest's count is {count}")
    magic = _MAGIC.get(encoding or "")
    row = 0
    try:
        with pq.ParquetFile(path) as parquet:
            for batch in parquet.iter_batches(
                batch_size=64, columns=["audio", "segments", "segment_classes"]
            ):
                for audio, segments, classes in zip(
                    batch.column("audio").to_pylist(),
                    batch.column("segments").to_pylist(),
                    batch.column("segment_classes").to_pylist(),
                    strict=True,
                ):
                    problem = segment_problem(audio, segments, classes, labels)
                    if problem is None and magic is not None and not audio.startswith(magic):
                        problem = (
                            f"'s audio is not {str(encoding).upper()} (the manifest's encoding)"
                        )
                    if problem is None:
                        try:
                            if clip_info(audio)[0] == 0:
                                problem = "has audio without any sample"
                        except ProcessingError as error:
                            problem = f"has audio that {error}".replace("that the clip ", "that ")
                    if problem:
                        joiner = "" if problem.startswith("'") else " "
                        problems.append(f"row {row}{joiner}{problem}")
                        if len(problems) >= _MAX_PROBLEMS:
                            return problems
                    row += 1
    except (OSError, pa.ArrowException) as exc:
        problems.append(f"the file cannot be read through: {exc}")
    return problems[:_MAX_PROBLEMS]


def _mask_problems(
    path: Path,
    *,
    labels: int | None,
    encoding: str | None,
    count: int | None,
    ignore_label: int | None,
) -> list[str]:
    """`split_problems` of a semantic-segmentation split: its columns, every mask a PNG of
    8-bit class indices of its image's size, each value a class index or the ignore label."""
    from PIL import Image

    try:
        reader = MaskReader(path, batch_size=1)
    except DatasetError as error:
        return [str(error).replace(f"{path}: ", "").replace(f"{path} ", "the file ")]
    problems: list[str] = []
    if count is not None and reader.rows != count:
        problems.append(f"the file holds {reader.rows} rows, but the manifest's count is {count}")
    magic = _MAGIC.get(encoding or "")
    row = 0
    try:
        with pq.ParquetFile(path) as parquet:
            for batch in parquet.iter_batches(batch_size=256, columns=["image", "mask"]):
                for image, data in zip(
                    batch.column("image").to_pylist(), batch.column("mask").to_pylist(), strict=True
                ):
                    mask, problem = decode_mask(data)
                    if problem is None and image is not None:
                        try:
                            with Image.open(io.BytesIO(image)) as opened:
                                width, height = opened.size
                        except (OSError, ValueError, Image.DecompressionBombError):
                            width = height = -1
                            problem = "has an image Pillow cannot read"
                        values = np.unique(mask)
                        wrong = (
                            values[values != ignore_label] if ignore_label is not None else values
                        )
                        wrong = wrong[wrong >= (labels if labels is not None else 256)]
                        if problem:
                            pass
                        elif mask.shape != (height, width):
                            problem = (
                                f"has a mask of {mask.shape[0]}x{mask.shape[1]} for an image of "
                                f"{height}x{width}"
                            )
                        elif wrong.size:
                            problem = (
                                f"has mask value {int(wrong[0])}, but the dataset has {labels} "
                                "labels"
                                + (
                                    f" and ignore_label {ignore_label}"
                                    if ignore_label is not None
                                    else " and no ignore_label"
                                )
                            )
                    if image is None:
                        problem = "has no image"
                    elif magic is not None and not image.startswith(magic):
                        problem = (
                            f"'s image is not {str(encoding).upper()} (the manifest's encoding)"
                        )
                    if problem:
                        joiner = "" if problem.startswith("'") else " "
                        problems.append(f"row {row}{joiner}{problem}")
                        if len(problems) >= _MAX_PROBLEMS:
                            return problems
                    row += 1
    except (OSError, pa.ArrowException) as exc:
        problems.append(f"the file cannot be read through: {exc}")
    return problems[:_MAX_PROBLEMS]


def _detection_problems(
    path: Path, *, labels: int | None, encoding: str | None, count: int | None
) -> list[str]:
    """`split_problems` of an object-detection split: its columns, every image's objects (a
    box of four numbers with a positive width and height, and a class within the labels, per
    object), the encoding's magic bytes and the count."""

    def words(error: DatasetError) -> str:
        return str(error).replace(f"{path}: ", "").replace(f"{path} ", "the file ")

    try:
        reader = DetectionReader(path, batch_size=1024)
    except DatasetError as error:
        return [words(error)]
    problems: list[str] = []
    if count is not None and reader.rows != count:
        problems.append(f"the file holds {reader.rows} rows, but the manifest's count is {count}")
    magic = _MAGIC.get(encoding or "")
    row = 0
    try:
        with pq.ParquetFile(path) as parquet:
            for batch in parquet.iter_batches(
                batch_size=1024, columns=["image", "boxes", "classes"]
            ):
                images = batch.column("image").to_pylist()
                for offset, (boxes, classes) in enumerate(
                    zip(
                        batch.column("boxes").to_pylist(),
                        batch.column("classes").to_pylist(),
                        strict=True,
                    )
                ):
                    problem = _annotation_problem(boxes, classes, labels)
                    if problem:
                        problems.append(f"row {row + offset} {problem}")
                    image = images[offset]
                    if image is None:
                        problems.append(f"row {row + offset} has no image")
                    elif magic is not None and not image.startswith(magic):
                        problems.append(
                            f"row {row + offset}'s image is not {str(encoding).upper()} "
                            "(the manifest's encoding)"
                        )
                    if len(problems) >= _MAX_PROBLEMS:
                        return problems
                row += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        problems.append(f"the file cannot be read through: {exc}")
    return problems[:_MAX_PROBLEMS]


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
                problems.append(
                    f"rows {row} to {row + batch.num_rows - 1} include a null image or label"
                )
            if classes is not None:
                problems += _label_problems(reader.target, classes, row, labels)
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


def _label_problems(target: str, column: pa.Array, row: int, labels: int | None) -> list[str]:
    """The rows of a batch (the first is `row`) whose labels are wrong for `target`."""
    problems = []
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
