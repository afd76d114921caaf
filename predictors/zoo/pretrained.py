"""Pretrained models the zoo takes from PyPI packages that ship their weights in their wheels.

Nothing is trained or downloaded here: the package is installed from PyPI with the rest of
the virtualenv (`requirements/pretrained/`, `--no-deps`), and its model file is copied into the
artifact store after checking that the installed package is the pinned version and that the
file's SHA-256 is the one recorded below, so that every store holds the same bytes. The
manifest brings the model in with parameters only; `docs/models.md` writes down the procedure
and how the package's own pipeline checks the accuracy MLModelScope reports.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from predictors.zoo.store import VERSION, Staging


@dataclass(frozen=True)
class Pretrained:
    name: str  # the zoo entry
    package: str  # the distribution on PyPI
    version: str  # pinned in requirements/pretrained/
    module: str  # the import package that holds the file
    resource: str  # the file, relative to the import package
    sha256: str
    file: str  # its name in the store
    license: str


PRETRAINED = {
    entry.name: entry
    for entry in (
        Pretrained(
            name="text-direction",
            package="rapidocr-onnxruntime",
            version="1.4.4",
            module="rapidocr_onnxruntime",
            resource="models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            file="text-direction.onnx",
            license="Apache-2.0",
        ),
        Pretrained(
            name="silero-vad",
            package="silero-vad",
            version="6.2.3",
            module="silero_vad",
            resource="data/silero_vad.onnx",
            sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            file="silero-vad.onnx",
            license="MIT",
        ),
    )
}


class PretrainedError(RuntimeError):
    """The package is missing, of another version, or its file is not the recorded one."""


def package_file(entry: Pretrained) -> bytes:
    """The model file's bytes, from the installed package, checked."""
    try:
        installed = metadata.version(entry.package)
    except metadata.PackageNotFoundError:
        raise PretrainedError(
            f"{entry.name} comes from the PyPI package {entry.package}=={entry.version}, which "
            "is not installed: run `make venv` (it installs requirements/pretrained/)"
        ) from None
    if installed != entry.version:
        raise PretrainedError(
            f"{entry.name} comes from {entry.package}=={entry.version}, but {installed} is "
            "installed: run `make venv`"
        )
    # Located through the distribution's files, without importing the package (which may
    # import a framework).
    data = Path(
        str(metadata.distribution(entry.package).locate_file(f"{entry.module}/{entry.resource}"))
    ).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise PretrainedError(
            f"{entry.package} {installed}'s {entry.resource} has SHA-256 {digest}, not the "
            f"recorded {entry.sha256}"
        )
    return data


def build_pretrained(store: str, name: str) -> dict:
    """Copy `name`'s model file from its package into the store; its record."""
    return store_pretrained(store, PRETRAINED[name])


def store_pretrained(store: str, entry: Pretrained) -> dict:
    """Copy `entry`'s model file from its package into the store entry of its name; its
    record."""
    name = entry.name
    with Staging(Path(store), f"models/{name}/{VERSION}") as staging:
        staging.write(entry.file, package_file(entry))
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "source": f"{entry.package}=={entry.version} ({entry.resource}, {entry.license})",
    }
