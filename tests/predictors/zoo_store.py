"""The zoo's files for the predictor tests, built once and kept.

`zoo_store(names)` returns a store that holds the named zoo entries (and the datasets they are
trained on): $ARTIFACT_ROOT when it already holds them all, else `tests/artifacts/` (ignored by
git), where the missing entries are built with the zoo's own `build` on first use. Building the
two trained models takes a few minutes on two cores; later runs find them there.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_STORE = REPO_ROOT / "tests" / "artifacts"


def _complete(store: Path, names: tuple[str, ...]) -> bool:
    from predictors.zoo.build import select

    entries, _ = select(names)
    return all(
        (store / entry.directory / name).is_file() for entry in entries for name in entry.files
    )


@functools.cache
def zoo_store(names: tuple[str, ...]) -> Path:
    root = os.environ.get("ARTIFACT_ROOT")
    if root and _complete(Path(root), names):
        return Path(root)
    if not _complete(TEST_STORE, names):
        from predictors.zoo.build import build

        build(TEST_STORE, only=names)
    return TEST_STORE
