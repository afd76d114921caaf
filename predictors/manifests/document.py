"""The validated `Manifest`, and `load`, which makes one from YAML text.

`load` reads the text with `loader` (size, YAML, plain values) and checks it with `rules` (the
kind's JSON Schema, then the cross-field rules); it fails only with a `ManifestError` that names
the field path and the YAML line of every problem.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from predictors.manifests.errors import ManifestError, dotted
from predictors.manifests.json_schema import KINDS
from predictors.manifests.loader import MAX_MANIFEST_BYTES, decode, parse_with_lines, too_large
from predictors.manifests.rules import REPO, file_refs, namespace_of, validate

__all__ = ["Manifest", "load", "load_file"]


@dataclass(frozen=True)
class Manifest:
    """A validated manifest. `data` is the document as plain JSON types; `source` its YAML."""

    kind: str
    name: str
    version: str
    framework: str  # '' for datasets
    framework_range: str  # '' for datasets
    task: str
    visibility: str | None  # None when the document does not say
    data: dict[str, Any] = field(hash=False, repr=False)
    source: str = field(hash=False, repr=False)

    def namespace(self) -> str:
        """The manifest's folder in the artifact store: models/<name>/<version> or datasets/…."""
        return namespace_of(self.kind, self.name, self.version)

    def repo_paths(self) -> list[tuple[str, str]]:
        """(field path, store-relative path) for every repo:// file the manifest names."""
        return [
            (dotted(path), uri[len(REPO) :])
            for path, uri, _, _ in file_refs(self.data, self.kind)
            if isinstance(uri, str) and uri.startswith(REPO)
        ]

    def content_hash(self) -> str:
        """sha256 (hex) of the canonical JSON of `data`: sorted keys, no whitespace, UTF-8."""
        canonical = json.dumps(
            self.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @classmethod
    def from_document(cls, data: dict[str, Any], source: str) -> Manifest:
        """The manifest of a validated document `data`, written as `source`."""
        kind = data["kind"]
        framework = data.get("framework") or {}
        return cls(
            kind=kind,
            name=data["name"],
            version=data["version"],
            framework=framework.get("name", ""),
            framework_range=framework.get("version", ""),
            task=data["task"],
            visibility=data.get("visibility"),
            data=data,
            source=source,
        )


def load(
    text: str | bytes, *, max_bytes: int = MAX_MANIFEST_BYTES, kind: str | None = None
) -> Manifest:
    """Parse and validate a manifest; raise ManifestError listing every error found.

    `kind` ("model" or "dataset"), when given, is the kind the document must be.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    source = decode(text, max_bytes)
    data, lines = parse_with_lines(source)
    errors = validate(data, kind, lines)
    if errors:
        raise ManifestError(errors)
    return Manifest.from_document(data, source)


def load_file(path: str | PathLike[str], *, kind: str | None = None) -> Manifest:
    """`load` the manifest in a file."""
    file = Path(path)
    size = file.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError([too_large(size, MAX_MANIFEST_BYTES)], status=413)
    return load(file.read_bytes(), kind=kind)
