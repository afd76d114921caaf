"""The artifact store: model files and datasets addressed by `repo://` paths.

`repo://P` names ARTIFACT_ROOT/P. Paths are checked segment by segment and the resolved file
must lie inside the root, so no path (`..`, absolute, symlink) escapes the store. Files are
written to a temporary name in the same folder and renamed into place, so a reader never sees a
half-written file.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_PATH_LENGTH = 255
CHUNK = 1024 * 1024


class StorePathError(ValueError):
    """A repo path that is malformed or would escape the store."""


def check_path(path: str) -> str:
    """Return `path` if it is a well-formed store-relative path, else raise StorePathError."""
    if not path or len(path) > MAX_PATH_LENGTH:
        raise StorePathError(f"store path must be 1–{MAX_PATH_LENGTH} characters long")
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise StorePathError(f"store path {path!r} must be relative, with '/' separators")
    for segment in path.split("/"):
        if segment in ("", ".", "..") or not _SEGMENT.match(segment):
            raise StorePathError(f"store path {path!r} has an invalid segment {segment!r}")
    return path


def root() -> Path:
    return Path(settings.ARTIFACT_ROOT)


def resolve(path: str) -> Path:
    """The absolute file for a store path; never outside the store, symlinks included."""
    check_path(path)
    base = root().resolve()
    target = (base / path).resolve()
    if not target.is_relative_to(base):
        raise StorePathError(f"store path {path!r} resolves outside the artifact store")
    return target


def check_file(path: str) -> Path:
    """The absolute file for a store path that names a file or nothing yet; StorePathError
    when it names a folder of the store, or a path below one of the store's files (neither can
    be read as, nor written to, a file)."""
    target = resolve(path)
    if target.is_dir():
        raise StorePathError(f"repo://{path} names a folder of the artifact store, not a file")
    base = root().resolve()
    for parent in target.parents:
        if parent == base or not parent.is_relative_to(base):
            break
        if parent.exists() and not parent.is_dir():
            raise StorePathError(
                f"repo://{path} lies below repo://{parent.relative_to(base)}, which is a file"
            )
    return target


def sha256_of(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def write(path: str, chunks: Iterable[bytes] | BinaryIO) -> tuple[str, int]:
    """Write a file atomically at a store path; return its sha256 and size."""
    target = resolve(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    source: Iterable[bytes] = (
        iter(lambda: chunks.read(CHUNK), b"") if hasattr(chunks, "read") else chunks  # type: ignore[union-attr]
    )
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for block in source:
                digest.update(block)
                size += len(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest.hexdigest(), size


def write_new(folder: Path, name: str, data: bytes) -> None:
    """`data` as a new file `name` in `folder` (a folder of the store, as `resolve` answers
    it), as `write` writes (to a temporary name, synced, then renamed), without its path
    checks and digest, which cost as much as writing a small file: for the many small files
    whose folders are resolved once (trace chunks). FileNotFoundError when the folder does
    not exist."""
    temporary = folder / f".{name}.part"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, folder / name)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def remove(path: str) -> None:
    try:
        resolve(path).unlink(missing_ok=True)
    except StorePathError:
        pass
