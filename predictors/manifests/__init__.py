"""Manifests: the YAML documents that describe a model or a dataset.

`load` turns YAML text into a validated `Manifest` or raises a `ManifestError` that names the
field path and the YAML line of every problem. The package's rooms:

- `loader`: size limits, YAML measured as it is composed (no alias bombs, no constructors),
  plain JSON values with their lines;
- `json_schema`: each kind's JSON Schema and its errors in plain words;
- `rules`: validation, the schema then the cross-field rules;
- `document`: the `Manifest` and `load`; `overrides`: `PATH=VALUE` overrides;
- `versioning` (semver and npm ranges), `catalog` (a folder of manifests), `graph_check` (a
  model's graph against its manifest).

The format is documented in docs/manifest.md. This package never imports Django.
"""

from __future__ import annotations

from predictors.manifests.document import Manifest, load, load_file
from predictors.manifests.errors import ManifestError
from predictors.manifests.json_schema import KINDS, PUBLISHED_SCHEMA_ID, published_schema, schema
from predictors.manifests.loader import MAX_DEPTH, MAX_MANIFEST_BYTES, MAX_NODES, parse_with_lines
from predictors.manifests.overrides import apply_overrides
from predictors.manifests.rules import MAX_CONSTANT_ELEMENTS, file_urls

__all__ = [
    "KINDS",
    "MAX_CONSTANT_ELEMENTS",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "MAX_NODES",
    "PUBLISHED_SCHEMA_ID",
    "Manifest",
    "ManifestError",
    "apply_overrides",
    "file_urls",
    "load",
    "load_file",
    "parse_with_lines",
    "published_schema",
    "schema",
]
