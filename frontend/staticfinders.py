"""Static files that come inside Python packages rather than from this repository: the charting
library (Plotly's own build, shipped in the `plotly` wheel) served at
`/static/vendor/plotly.min.js`. Only the files named here are exposed, nothing else of the
packages' data."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

# URL path under STATIC_URL → (package, file inside it)
VENDOR_FILES = {"vendor/plotly.min.js": ("plotly", "package_data/plotly.min.js")}


def _source(package: str, inner: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / inner
    return path if path.is_file() else None


class _FileStorage(FileSystemStorage):
    """One file's folder, with `prefix` telling where it appears under STATIC_URL."""

    def __init__(self, location: Path, prefix: str):
        super().__init__(location=str(location))
        self.prefix = prefix


class VendorFinder(BaseFinder):
    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        where = VENDOR_FILES.get(path)
        found = _source(*where) if where else None
        if found is None:
            return [] if find_all or kwargs.get("all") else None
        return [str(found)] if find_all or kwargs.get("all") else str(found)

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        for url_path, where in VENDOR_FILES.items():
            found = _source(*where)
            if found is None:
                continue
            prefix, _, name = url_path.rpartition("/")
            yield name, _FileStorage(found.parent, prefix)
