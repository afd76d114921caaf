"""Writing into the artifact store: staged under temporary names, moved into place atomically."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from types import TracebackType

VERSION = "1.0.0"  # every zoo entry's version


class Unavailable(RuntimeError):
    """An entry cannot be built on this machine (a program it needs is missing): the build
    goes on with the other entries and says why this one is missing."""


def file_record(store: Path, repo_path: str) -> dict:
    """path (relative to the store, as in ``repo://``), sha256 and size of a stored file."""
    digest = hashlib.sha256()
    path = store / repo_path
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return {"path": repo_path, "sha256": digest.hexdigest(), "bytes": path.stat().st_size}


class Staging:
    """The files of one store entry, written beside their final paths under temporary names.

    ``write`` puts bytes into a hidden temporary file in the entry's directory (same file
    system, same suffix, so a runtime that looks at the suffix can load it for checks) and
    returns its path; ``commit`` moves every file into place with ``os.replace``. Leaving the
    ``with`` block without committing (an exception, a failed check) removes the temporaries,
    so a reader never sees a half-written or unchecked file.
    """

    def __init__(self, store: Path, directory: str) -> None:
        self.store = store
        self.directory = directory
        self._staged: dict[str, tuple[Path, dict]] = {}

    def __enter__(self) -> Staging:
        (self.store / self.directory).mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for temporary, _ in self._staged.values():
            temporary.unlink(missing_ok=True)
        self._staged.clear()

    def write(self, name: str, data: bytes) -> Path:
        final = self.store / self.directory / name
        fd, temporary = tempfile.mkstemp(
            dir=final.parent, prefix=f".{name}.", suffix=f".tmp{final.suffix}"
        )
        record = {
            "path": f"{self.directory}/{name}",
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
        }
        self._staged[name] = (Path(temporary), record)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)
        return Path(temporary)

    def commit(self) -> list[dict]:
        """Move the staged files into place; their records, in the order they were written."""
        records = []
        for name, (temporary, record) in self._staged.items():
            os.replace(temporary, self.store / self.directory / name)
            records.append(record)
        self._staged.clear()
        return records
