"""`mlms datasets from-folder`: a dataset from a folder of images, one sub-folder per class;
`mlms datasets from-coco`: an object-detection dataset from COCO annotations and their images.

mlms datasets from-folder DIR --name NAME --version VERSION [--split validation]
                          [--description TEXT] [--license SPDX]
    locally: the Parquet splits go into the artifact store (--store), the manifest into
    a YAML file (--out, default NAME-VERSION.yaml) that `mlms evaluate --dataset FILE`
    reads;
... --hub URL --token T [--visibility private|public]
    on a hub: the folder is sent as a zip to POST /api/v1/datasets/from-folder/, which
    checks and converts it the same way (`predictors.data.folder`).

mlms datasets from-coco ANNOTATIONS.json --images DIR --name NAME [--version V]
                        [--split validation] [--description T] [--license L]
                        [--store DIR --out FILE | --hub URL --token T --visibility V]
    converted here (`predictors.data.coco`); locally into the store with a manifest file,
    or sent to a hub as a manifest with its split (POST /api/v1/manifests/).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import requests
import yaml

from predictors.data import folder as folder_dataset
from predictors.manifests import ManifestError, load
from predictors.processing.labels import labels_from_text


class DatasetsCommandError(Exception):
    """A one-line error of the command; exit status 1."""


def add_commands(commands: Any) -> None:
    datasets = commands.add_parser("datasets", help="make datasets from your own data")
    actions = datasets.add_subparsers(dest="datasets_action", required=True)
    folder = actions.add_parser(
        "from-folder",
        help="a dataset from a folder of images, one sub-folder per class (or per split, then "
        "per class)",
    )
    folder.add_argument("folder", type=Path, metavar="DIR")
    folder.add_argument("--name", required=True, help="the dataset's name (a slug)")
    folder.add_argument("--version", default="1.0.0", help="its version (default: 1.0.0)")
    folder.add_argument(
        "--split",
        help="the split of a folder of class folders (default: validation); a folder of split "
        "folders names its own",
    )
    folder.add_argument(
        "--raw",
        action="store_true",
        help="the files are any files, kept byte for byte (encoding raw), for a model that reads "
        "a file's own bytes; default: PNG or JPEG images",
    )
    folder.add_argument(
        "--labels",
        type=Path,
        metavar="FILE",
        help="the labels, one per line (a model's labels file): the dataset's labels in that "
        "order, each class folder one of them; default: the class folders, sorted",
    )
    folder.add_argument(
        "--description",
        help="what the dataset is (default: images, or with --raw files, from a folder of class "
        "folders)",
    )
    folder.add_argument("--license", default="unknown", help="e.g. CC-BY-4.0")
    folder.add_argument(
        "--store",
        type=Path,
        help="locally: the artifact store to write into (default: $ARTIFACT_ROOT or var/)",
    )
    folder.add_argument(
        "--out",
        type=Path,
        help="locally: the manifest file to write (default: NAME-VERSION.yaml here)",
    )
    folder.add_argument("--hub", metavar="URL", help="upload to this hub instead")
    folder.add_argument("--token", help="with --hub: a token with the write scope ($MLMS_TOKEN)")
    folder.add_argument(
        "--visibility", choices=("private", "public"), help="with --hub (default: private)"
    )
    _add_coco(actions)


def _add_coco(actions: Any) -> None:
    coco = actions.add_parser(
        "from-coco",
        help="an object-detection dataset from COCO annotations and their images",
    )
    coco.add_argument("annotations", type=Path, metavar="ANNOTATIONS.json")
    coco.add_argument(
        "--images", type=Path, required=True, metavar="DIR", help="the folder of the images"
    )
    coco.add_argument("--name", required=True, help="the dataset's name (a slug)")
    coco.add_argument("--version", default="1.0.0", help="its version (default: 1.0.0)")
    coco.add_argument("--split", default="validation", help="the split (default: validation)")
    coco.add_argument("--description", default="Images with COCO box annotations.")
    coco.add_argument("--license", default="unknown", help="e.g. CC-BY-4.0")
    coco.add_argument("--store", type=Path, help="locally: the artifact store to write into")
    coco.add_argument("--out", type=Path, help="locally: the manifest file to write")
    coco.add_argument("--hub", metavar="URL", help="upload to this hub instead")
    coco.add_argument("--token", help="with --hub: a token with the write scope ($MLMS_TOKEN)")
    coco.add_argument(
        "--visibility", choices=("private", "public"), help="with --hub (default: private)"
    )


def run(args: argparse.Namespace) -> str:
    """The command's output; DatasetsCommandError for what the user must fix."""
    if args.datasets_action == "from-coco":
        return _coco(args)
    if not args.folder.is_dir():
        raise DatasetsCommandError(f"{args.folder} is not a folder")
    if args.hub:
        if args.store or args.out:
            raise DatasetsCommandError("--store and --out are for a local dataset, not --hub")
        return _upload(_described(args))
    if args.visibility or args.token:
        raise DatasetsCommandError("--visibility and --token go with --hub")
    return _local(_described(args))


def _described(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with its description, the default one where none is given."""
    if args.description is None:
        what = "Files" if args.raw else "Images"
        args.description = f"{what} from a folder of class folders."
    return args


def _labels(args: argparse.Namespace) -> list[str] | None:
    """The labels file given (--labels), read; None without one."""
    if args.labels is None:
        return None
    try:
        return labels_from_text(args.labels.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetsCommandError(f"--labels {args.labels}: {exc}") from None


def _local(args: argparse.Namespace) -> str:
    from predictors.zoo.build import default_store

    store = (args.store or default_store()).resolve()
    out = args.out or Path(f"{args.name}-{args.version}.yaml")
    probe = folder_dataset.Converted(["x"], "png", {args.split or "validation": 0}, {})
    _check(
        folder_dataset.manifest(
            args.name, args.version, probe, description=args.description, license=args.license
        )
    )
    target = store / "datasets" / args.name / args.version
    if target.exists():
        raise DatasetsCommandError(
            f"{target} exists already: choose another --version (or name), or remove it"
        )
    try:
        converted = folder_dataset.convert(
            args.folder, target, args.name, split=args.split, raw=args.raw, labels=_labels(args)
        )
    except folder_dataset.FolderError as error:
        raise DatasetsCommandError(f"{args.folder}/{error}") from None
    document = folder_dataset.manifest(
        args.name, args.version, converted, description=args.description, license=args.license
    )
    _check(document)
    out.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    counts = ", ".join(f"{split} {count}" for split, count in converted.splits.items())
    return (
        f"dataset {args.name} {args.version}: {len(converted.labels)} classes, {counts} "
        f"{'files' if args.raw else 'images'} "
        f"({converted.encoding}) in {target}; manifest {out}\n"
        f"evaluate it: mlms evaluate MODEL --framework F --dataset {out} --store {store}"
    )


def _coco(args: argparse.Namespace) -> str:
    """`mlms datasets from-coco`: the split converted here, into the local store with its
    manifest file, or sent to a hub with its manifest (`POST /api/v1/manifests/`, which
    checks it object by object again)."""
    from predictors.data import coco as coco_dataset

    if args.hub:
        if args.store or args.out:
            raise DatasetsCommandError("--store and --out are for a local dataset, not --hub")
    elif args.visibility or args.token:
        raise DatasetsCommandError("--visibility and --token go with --hub")
    token = args.token or os.environ.get("MLMS_TOKEN")
    if args.hub and not token:
        raise DatasetsCommandError("--hub needs --token (or $MLMS_TOKEN) with the write scope")
    path = f"repo://datasets/{args.name}/{args.version}/{args.split}.parquet"

    def manifest(converted: Any) -> dict[str, Any]:
        return coco_dataset.manifest(
            args.name,
            args.version,
            args.split,
            converted,
            path,
            description=args.description,
            license=args.license,
        )

    # The flags, checked as a manifest before anything is converted.
    _check(manifest(coco_dataset.Converted(["x"], [1], "png", 0, 0, 0)))
    with tempfile.TemporaryDirectory(prefix="mlms-coco-") as work:
        if args.hub:
            target = Path(work)
        else:
            from predictors.zoo.build import default_store

            store = (args.store or default_store()).resolve()
            target = store / "datasets" / args.name / args.version
            if target.exists():
                raise DatasetsCommandError(
                    f"{target} exists already: choose another --version (or name), or remove it"
                )
        try:
            converted = coco_dataset.convert(
                args.annotations, args.images, target, split=args.split
            )
        except (coco_dataset.CocoError, OSError, ValueError) as error:
            if not args.hub:
                shutil.rmtree(target, ignore_errors=True)
            raise DatasetsCommandError(str(error)) from None
        document = manifest(converted)
        try:
            _check(document)
        except DatasetsCommandError:
            if not args.hub:
                shutil.rmtree(target, ignore_errors=True)
            raise
        left = (
            f"; {converted.crowd} crowd annotations left out (no ignore regions here)"
            if converted.crowd
            else ""
        )
        summary = (
            f"{len(converted.labels)} classes, {converted.images} images "
            f"({converted.encoding}), {converted.objects} objects{left}"
        )
        if not args.hub:
            out = args.out or Path(f"{args.name}-{args.version}.yaml")
            out.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
            return (
                f"dataset {args.name} {args.version}: {summary} in {target}; manifest {out}\n"
                f"evaluate it: mlms evaluate MODEL --framework F --dataset {out} --store {store}"
            )
        split_file = target / f"{args.split}.parquet"
        query = f"?visibility={args.visibility}" if args.visibility else ""
        body = _post(
            args.hub,
            "/api/v1/manifests/" + query,
            str(token),
            {"manifest": yaml.safe_dump(document, sort_keys=False)},
            ("files", split_file, "application/octet-stream"),
        )
    return (
        f"dataset {body['name']} {body['version']} on {args.hub} ({body['visibility']}): {summary}"
    )


def _post(
    hub: str, path: str, token: str, fields: dict[str, Any], upload: tuple[str, Path, str]
) -> dict[str, Any]:
    """POST `fields` and one file (`(field, path, content type)`) to the hub; its 201 answer,
    or a DatasetsCommandError saying in one line why the hub did not answer or refused."""
    field, file, content_type = upload
    with file.open("rb") as handle:
        try:
            response = requests.post(
                hub.rstrip("/") + path,
                data=fields,
                files={field: (file.name, handle, content_type)},
                headers={"Authorization": f"Bearer {token}"},
                timeout=600,
            )
        except requests.RequestException as exc:
            raise DatasetsCommandError(f"the hub at {hub} does not answer: {exc}") from None
    if response.status_code != 201:
        try:
            body = response.json()
            errors = body.get("errors") or [{"path": "", "message": body.get("detail")}]
            shown = "; ".join(f"{e['path'] or 'request'}: {e['message']}" for e in errors)
        except ValueError:
            shown = response.text[:200]
        raise DatasetsCommandError(f"the hub refused it ({response.status_code}): {shown}")
    answer: dict[str, Any] = response.json()
    return answer


def _check(document: dict[str, Any]) -> None:
    try:
        load(yaml.safe_dump(document, sort_keys=False), kind="dataset")
    except ManifestError as error:
        first = error.errors[0]
        raise DatasetsCommandError(f"--{first['path'] or 'name'}: {first['message']}") from None


def _upload(args: argparse.Namespace) -> str:
    token = args.token or os.environ.get("MLMS_TOKEN")
    if not token:
        raise DatasetsCommandError("--hub needs --token (or $MLMS_TOKEN) with the write scope")
    with tempfile.TemporaryDirectory(prefix="mlms-folder-") as work:
        packed = Path(work) / f"{args.name}.zip"
        # Under one wrapping folder, which the hub takes away: the archive's layout is then
        # the folder's own, as a local conversion reads it.
        with zipfile.ZipFile(packed, "w", zipfile.ZIP_STORED) as archive:
            for path in sorted(args.folder.rglob("*")):
                relative = path.relative_to(args.folder)
                if path.is_file() and not any(p.startswith(".") for p in relative.parts):
                    archive.write(path, f"{args.name}/{relative.as_posix()}")
        fields = {
            "name": args.name,
            "version": args.version,
            **({"split": args.split} if args.split else {}),
            "description": args.description,
            "license": args.license,
            **({"visibility": args.visibility} if args.visibility else {}),
            **({"raw": "true"} if args.raw else {}),
            **({"labels": "\n".join(labels)} if (labels := _labels(args)) is not None else {}),
        }
        body = _post(
            args.hub,
            "/api/v1/datasets/from-folder/",
            token,
            fields,
            ("archive", packed, "application/zip"),
        )
    splits = body["manifest"]["splits"]
    counts = ", ".join(f"{split} {entry['count']}" for split, entry in splits.items())
    return (
        f"dataset {body['name']} {body['version']} on {args.hub} ({body['visibility']}): "
        f"{len(body['manifest']['labels'])} classes, {counts} {'files' if args.raw else 'images'}"
    )
