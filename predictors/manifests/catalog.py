"""Find manifests by name, version range and framework in a folder of manifest files.

The folder holds YAML manifests anywhere below `models/` and `datasets/` (the built-in ones are
`manifests/models/<name>/<framework>.yaml` and `manifests/datasets/<name>.yaml`). A lookup takes
the highest version that satisfies an npm range (`predictors.manifests.versioning`). Files that fail to
load are skipped, and named in the error of a lookup that finds nothing.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from predictors.manifests import versioning
from predictors.manifests.document import Manifest, load_file
from predictors.manifests.errors import ManifestError

__all__ = ["DEFAULT_ROOT", "Catalog", "CatalogError"]

# The built-in manifests of this repository.
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "manifests"


class CatalogError(LookupError):
    """No manifest matches; the message says what there is instead."""


class Catalog:
    def __init__(self, root: Path = DEFAULT_ROOT) -> None:
        self.root = Path(root)
        self._manifests: list[Manifest] | None = None
        self.problems: list[str] = []  # "<file>: <error>" for each file that failed to load

    def manifests(self, kind: str) -> list[Manifest]:
        """Every manifest of `kind` ("model" or "dataset") that loads."""
        if self._manifests is None:
            if not self.root.is_dir():
                raise CatalogError(f"the manifest folder {self.root} does not exist")
            self._manifests = []
            for folder in ("models", "datasets"):
                for path in sorted((self.root / folder).rglob("*.y*ml")):
                    try:
                        self._manifests.append(load_file(path))
                    except (ManifestError, OSError) as exc:
                        self.problems.append(f"{path.relative_to(self.root)}: {exc}")
        return [m for m in self._manifests if m.kind == kind]

    def find_model(self, name: str, version_range: str, framework: str) -> Manifest:
        """The highest version of model `name` in `version_range` that has a manifest for
        `framework`."""
        named = self._named("model", name)
        versions = self._in_range(named, name, version_range)
        candidates = [m for m in named if m.version in versions and m.framework == framework]
        if not candidates:
            have = sorted({m.framework for m in named if m.version in versions})
            raise CatalogError(
                f"model {name} has no {framework} manifest in range {version_range!r} "
                f"(it has: {', '.join(have)})"
            )
        return max(candidates, key=lambda m: versioning.version_key(m.version))

    def model_frameworks(self, name: str, version_range: str) -> list[str]:
        """The frameworks model `name` has a manifest for within `version_range`."""
        named = self._named("model", name)
        versions = self._in_range(named, name, version_range)
        return sorted({m.framework for m in named if m.version in versions})

    def find_dataset(self, name: str, version_range: str = "*") -> Manifest:
        """The highest version of dataset `name` in `version_range`."""
        named = self._named("dataset", name)
        versions = self._in_range(named, name, version_range)
        best = versioning.max_satisfying(versions, version_range)
        return next(m for m in named if m.version == best)

    def _named(self, kind: str, name: str) -> list[Manifest]:
        every = self.manifests(kind)
        named = [m for m in every if m.name == name]
        if named:
            return named
        known = sorted({m.name for m in every})
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        message = f"unknown {kind} {name!r} in {self.root}{hint}; known: {', '.join(known)}"
        if self.problems:
            message += f"; {len(self.problems)} file(s) failed to load, the first: "
            message += self.problems[0]
        raise CatalogError(message)

    @staticmethod
    def _in_range(named: list[Manifest], name: str, version_range: str) -> set[str]:
        """The versions of `named` that satisfy the range; an error when there are none."""
        try:
            versions = {m.version for m in named if versioning.satisfies(m.version, version_range)}
        except versioning.InvalidRange as exc:
            raise CatalogError(f"{version_range!r} is not a valid version range: {exc}") from None
        if not versions:
            have = sorted({m.version for m in named}, key=versioning.version_key)
            raise CatalogError(
                f"no version of {name} satisfies {version_range!r} (versions: {', '.join(have)})"
            )
        return versions
