"""The file cache: `DataManager` fetches model and dataset files by URL into a checksum-keyed
local cache.

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
import fcntl
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import requests
import urllib3.exceptions

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


@dataclass(frozen=True)
class _Origin:
    """Where an asset is downloaded from: the URL asked for, the URL its bytes come from (the
    hub's for a `repo://` path), the headers sent there, and the file name it is cached as."""

    url: str
    source: str
    headers: dict[str, str]
    basename: str


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
        return self._cached(_Origin(url, source, headers, basename), expected, progress)

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
        self, origin: _Origin, expected: str | None, progress: ProgressCallback | None
    ) -> Path:
        url, source, basename = origin.url, origin.source, origin.basename
        root = self.cache_dir / "sha256"
        key = expected or "url-" + hashlib.sha256(source.encode()).hexdigest()
        with self._lock(key):
            known = expected or self._indexed_sha256(source)
            if known is not None and self._is_valid(root / known / basename, known):
                return root / known / basename
            temporary, actual = self._download(origin, root, progress)
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
        self, origin: _Origin, directory: Path, progress: ProgressCallback | None
    ) -> tuple[Path, str]:
        """Stream `origin.source` into a fsynced temporary file in `directory`; (its path, its
        sha256)."""
        url, source = origin.url, origin.source
        where = url if source == url else f"{url} (from {source})"
        from_hub = self.hub_url is not None and source.startswith(self.hub_url + "/")
        deadline = time.monotonic() + (self.retry_seconds if from_hub else 0)
        delay = 0.5
        while True:
            try:
                response = requests.get(
                    source, headers=origin.headers, stream=True, timeout=self.timeout
                )
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
