"""A dataset from a folder of images, one sub-folder per class: checked, then written as the
Parquet splits the evaluation loop reads, a row group at a time.

Two layouts are taken:

    DIR/<class>/<image>                 one split (named by `split`, `validation` by default)
    DIR/<split>/<class>/<image>         one split per top-level folder (train, validation, …)

The labels are the class folder names, sorted (a class is its index in that list); every split
must have the same classes. Images are PNG or JPEG, all of one kind (the manifest's `encoding`),
each decoded once by Pillow to be sure it can be (within Pillow's decompression-bomb limit).
With `raw`, the files are any files, kept byte for byte (`encoding: raw`, for a model that
reads a file's own bytes, such as a file-type classifier): none is decoded, none may be empty
or larger than MAX_RAW_FILE_BYTES.
Names starting with '.' are skipped (.DS_Store, editor files); anything else out of place (a
file beside the class folders, a folder inside a class folder, a symbolic link, an empty class)
is an error that names it. Nothing is read whole: the images go into the Parquet file in row
groups of ROW_GROUP_SIZE, read one at a time.

`mlms datasets from-folder` uses it locally (the files go into an artifact store, the manifest
into a manifests folder) and on a hub (`POST /api/v1/datasets/from-folder/`, an archive of the
folder that the hub unpacks with `unpack_archive`'s limits and converts the same way).
"""

from __future__ import annotations

import io
import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from predictors.data.formats import image_encoding

ROW_GROUP_SIZE = 256
# The largest file a dataset of raw files keeps (a row of its Parquet file).
MAX_RAW_FILE_BYTES = 64 * 1024**2
MAX_IMAGES = 1_000_000
MAX_CLASSES = 10_000
_SPLIT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class FolderError(ValueError):
    """The folder (or archive) cannot be made a dataset; `path` names the file or folder at
    fault, relative to the folder's root ("" for the whole)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Converted:
    labels: list[str]
    encoding: str
    splits: dict[str, int]  # split name → rows
    files: dict[str, Path]  # split name → the Parquet file written


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _check_entry(path: Path, root: Path) -> None:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        raise FolderError("is a symbolic link; give the file itself", _relative(path, root))
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise FolderError("is neither a file nor a folder", _relative(path, root))


def layout(root: Path, split: str | None) -> dict[str, dict[str, list[Path]]]:
    """{split: {class: [image files]}} of the folder, checked (see the module docstring).
    `split` names the one split of a folder of class folders (default: validation); a
    folder of split folders names its own, and a `split` given for it is refused."""
    if not root.is_dir():
        raise FolderError(f"{root} is not a folder")
    top = _visible(root)
    for entry in top:
        _check_entry(entry, root)
    if not top:
        raise FolderError("the folder is empty: give one sub-folder per class")
    loose = [entry for entry in top if entry.is_file()]
    if loose:
        raise FolderError(
            "is a file beside the class folders; images go inside a folder named by their class",
            _relative(loose[0], root),
        )
    # Split folders hold class folders only; class folders hold images only.
    holds_folders = []
    for entry in top:
        kinds = {child.is_dir() for child in _visible(entry)}
        if kinds == {True, False}:
            raise FolderError(
                "holds both images and folders: a class folder holds images, a split folder "
                "class folders",
                _relative(entry, root),
            )
        holds_folders.append(kinds == {True})
    nested = any(holds_folders)
    if nested and not all(holds_folders):
        flat = top[holds_folders.index(False)]
        raise FolderError(
            "holds images where the other top-level folders are splits (folders of class "
            "folders): give every split its class folders, or use one level of class folders",
            _relative(flat, root),
        )
    if nested and split is not None:
        raise FolderError(
            f"split {split!r} is given, but the folder holds split folders ("
            + ", ".join(entry.name for entry in top)
            + ") that name their splits: leave split out"
        )
    splits = {entry.name: entry for entry in top} if nested else {split or "validation": root}
    found: dict[str, dict[str, list[Path]]] = {}
    for name, folder in splits.items():
        if not _SPLIT.match(name):
            raise FolderError(
                "is not a split name: lowercase letters, digits, '_' and '-', up to 64",
                _relative(folder, root) or name,
            )
        classes: dict[str, list[Path]] = {}
        for class_folder in _visible(folder):
            _check_entry(class_folder, root)
            if not class_folder.is_dir():
                raise FolderError(
                    "is a file beside the class folders of its split",
                    _relative(class_folder, root),
                )
            images = []
            for item in _visible(class_folder):
                _check_entry(item, root)
                if item.is_dir():
                    raise FolderError(
                        "is a folder inside a class folder; a class folder holds images only",
                        _relative(item, root),
                    )
                images.append(item)
            if not images:
                raise FolderError("is an empty class folder", _relative(class_folder, root))
            classes[class_folder.name] = images
        if not classes:
            raise FolderError("holds no class folder", _relative(folder, root) or name)
        found[name] = classes
    names = [sorted(classes) for classes in found.values()]
    first_split, first = next(iter(found)), names[0]
    for split_name, labels in zip(found, names, strict=True):
        if labels != first:
            other = sorted(set(labels) ^ set(first))
            raise FolderError(
                f"has other classes than {first_split} (differing: {', '.join(other[:5])}); "
                "every split must have the same class folders",
                split_name,
            )
    if len(first) > MAX_CLASSES:
        raise FolderError(f"has {len(first)} classes, more than {MAX_CLASSES}")
    total = sum(len(files) for classes in found.values() for files in classes.values())
    if total > MAX_IMAGES:
        raise FolderError(f"holds {total} images, more than {MAX_IMAGES}")
    return found


def check_image(data: bytes, where: str) -> None:
    """`FolderError` naming `where` unless Pillow decodes the image `data`."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise FolderError(f"Pillow cannot decode it: {exc}", where) from None


def _rows(
    classes: dict[str, list[Path]], labels: list[str], root: Path, encoding: list[str | None]
) -> Iterator[tuple[bytes, int]]:
    for index, label in enumerate(labels):
        for file in classes.get(label, []):
            where = _relative(file, root)
            if encoding[0] == "raw":
                size = file.stat().st_size
                if not 0 < size <= MAX_RAW_FILE_BYTES:
                    raise FolderError(
                        "is empty"
                        if size == 0
                        else f"holds {size} bytes, more than a "
                        f"dataset's file may ({MAX_RAW_FILE_BYTES // 1024**2} MiB)",
                        where,
                    )
                yield file.read_bytes(), index
                continue
            data = file.read_bytes()
            kind = image_encoding(data)
            if kind is None:
                raise FolderError("is neither a PNG nor a JPEG image", where)
            if encoding[0] is None:
                encoding[0] = kind
            elif kind != encoding[0]:
                raise FolderError(
                    f"is a {kind.upper()} image, but the dataset's images are "
                    f"{encoding[0].upper()} (a dataset has one encoding): convert it",
                    where,
                )
            check_image(data, where)
            yield data, index


def convert(
    root: Path,
    out: Path,
    name: str,
    *,
    split: str | None = None,
    raw: bool = False,
    labels: list[str] | None = None,
) -> Converted:
    """Write the folder's splits as `<out>/<split>.parquet`; what was written. The files are
    written under temporary names and renamed when complete. With `raw`, the files are kept
    as they are (`encoding: raw`), not checked as images. With `labels` (a model's, in its
    order), the dataset's labels are those, each class folder one of them, so that a model
    with more classes than the folder holds scores it; else the class folders, sorted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    found = layout(root, split)
    folders = sorted(next(iter(found.values())))
    if labels is not None:
        if len(set(labels)) != len(labels) or not all(labels):
            raise FolderError("the labels given must be distinct and not empty", "labels")
        strangers = [folder for folder in folders if folder not in labels]
        if strangers:
            raise FolderError(
                f"is not one of the {len(labels)} labels given (a class folder is named by its "
                "label)",
                strangers[0],
            )
    labels = list(labels) if labels is not None else folders
    encoding: list[str | None] = ["raw" if raw else None]
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    counts: dict[str, int] = {}
    schema = pa.schema([pa.field("image", pa.binary()), pa.field("label", pa.int64())])
    temporaries: list[Path] = []
    try:
        for split_name, classes in found.items():
            temporary = out / f".{split_name}.parquet.partial"
            temporaries.append(temporary)
            rows = 0
            with pq.ParquetWriter(temporary, schema, compression="none") as writer:
                images: list[bytes] = []
                classes_of: list[int] = []
                for data, label in _rows(classes, labels, root, encoding):
                    images.append(data)
                    classes_of.append(label)
                    if len(images) == ROW_GROUP_SIZE:
                        writer.write_table(_table(images, classes_of, schema))
                        rows += len(images)
                        images, classes_of = [], []
                if images:
                    writer.write_table(_table(images, classes_of, schema))
                    rows += len(images)
            written[split_name] = temporary
            counts[split_name] = rows
        finals = {}
        for split_name, temporary in written.items():
            final = out / f"{split_name}.parquet"
            os.replace(temporary, final)
            finals[split_name] = final
    finally:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
    assert encoding[0] is not None
    return Converted(labels, encoding[0], counts, finals)


def _table(images: list[bytes], labels: list[int], schema: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_arrays(
        [pa.array(images, type=pa.binary()), pa.array(labels, type=pa.int64())], schema=schema
    )


def manifest(
    name: str,
    version: str,
    converted: Converted,
    *,
    description: str,
    license: str,
    visibility: str | None = None,
) -> dict[str, Any]:
    """The dataset manifest of a converted folder (its files at repo://datasets/NAME/VERSION/)."""
    data: dict[str, Any] = {
        "kind": "dataset",
        "name": name,
        "version": version,
        "description": description,
        "license": license,
        "task": "image_classification",
        "format": "parquet",
        "encoding": converted.encoding,
        "labels": converted.labels,
        "splits": {
            split: {"path": f"repo://datasets/{name}/{version}/{split}.parquet", "count": count}
            for split, count in converted.splits.items()
        },
    }
    if visibility is not None:
        data["visibility"] = visibility
    return data


# -- archives (a hub unpacks what a user uploads) --------------------------------------------


def unpack_archive(archive: Path, target: Path, *, max_bytes: int, max_entries: int) -> Path:
    """Unpack a zip or tar (gzip, bzip2, xz) archive into `target`, refusing what could escape
    or flood it: absolute paths, '..', links, devices, more than `max_entries` entries or
    `max_bytes` bytes unpacked (counted as written, not as the archive claims). The folder
    to convert: `target`, or its one top-level folder when the archive holds only that."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            _unzip(archive, target, max_bytes, max_entries)
        elif tarfile.is_tarfile(archive):
            _untar(archive, target, max_bytes, max_entries)
        else:
            raise FolderError("the archive is neither a zip nor a tar file", "archive")
    except FolderError:
        raise
    except (
        zipfile.BadZipFile,
        tarfile.TarError,
        EOFError,
        OSError,
        RuntimeError,  # an encrypted zip
        NotImplementedError,  # a zip compression method Python does not read
        zlib.error,
        lzma.LZMAError,
    ) as exc:
        raise FolderError(
            f"the archive cannot be unpacked: {type(exc).__name__}: {exc}", "archive"
        ) from None
    entries = _visible(target)
    if len(entries) == 1 and entries[0].is_dir():
        inner = _visible(entries[0])
        # One wrapping folder (zip of "mydata/"): its content is the dataset.
        if inner and all(entry.is_dir() for entry in inner):
            return entries[0]
    return target


def _member_path(name: str, target: Path) -> Path | None:
    """Where an archive member goes, or None for one to skip (a folder entry, macOS Finder's
    `__MACOSX` resource forks); FolderError when it would leave `target`."""
    posix = PurePosixPath(name.replace("\\", "/"))
    if posix.is_absolute() or ".." in posix.parts or (posix.parts and ":" in posix.parts[0]):
        raise FolderError("is a path outside the archive's folder", name)
    if not posix.parts or posix.parts[0] == "__MACOSX":
        return None
    return target.joinpath(*posix.parts)


class _Budget:
    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.bytes, self.entries = max_bytes, max_entries

    def place(self, name: str, target: Path, *, link: str | None, folder: bool) -> Path | None:
        """Count the entry `name` and check where it goes: the file to write it to, or None
        (an entry to skip, or a folder, made here). `link`: why it is refused, for a link."""
        self.entries -= 1
        if self.entries < 0:
            raise FolderError("the archive holds too many entries", "archive")
        destination = _member_path(name, target)
        if link is not None:
            raise FolderError(link, name)
        if destination is not None and folder:
            destination.mkdir(parents=True, exist_ok=True)
            return None
        return destination

    def copy(self, source: Any, destination: Path, name: str) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        with destination.open("wb") as out:
            while chunk := source.read(1 << 20):
                self.bytes -= len(chunk)
                if self.bytes < 0:
                    raise FolderError("the archive unpacks to more than its limit", name)
                out.write(chunk)


def _unzip(archive: Path, target: Path, max_bytes: int, max_entries: int) -> None:
    budget = _Budget(max_bytes, max_entries)
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            symbolic = stat.S_ISLNK(info.external_attr >> 16)
            destination = budget.place(
                info.filename,
                target,
                link="is a symbolic link; archive the file itself" if symbolic else None,
                folder=info.is_dir(),
            )
            if destination is not None:
                with zipped.open(info) as source:
                    budget.copy(source, destination, info.filename)


def _untar(archive: Path, target: Path, max_bytes: int, max_entries: int) -> None:
    budget = _Budget(max_bytes, max_entries)
    with tarfile.open(archive) as tarred:
        for member in tarred:
            linked = member.issym() or member.islnk()
            destination = budget.place(
                member.name,
                target,
                link="is a link; archive the file itself" if linked else None,
                folder=member.isdir(),
            )
            if destination is None:
                continue
            if not member.isfile():
                raise FolderError("is neither a file nor a folder", member.name)
            source = tarred.extractfile(member)
            assert source is not None
            with source:
                budget.copy(source, destination, member.name)
