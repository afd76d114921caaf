"""`POST /api/v1/datasets/from-folder/`: a dataset from an archive of an image folder, one
sub-folder per class (`predictors.data.folder` says which layouts and what is checked).

The archive (zip or tar) is unpacked into a private temporary folder with limits (entries,
bytes as written), converted to Parquet splits a row group at a time, and registered like an
uploaded dataset manifest with its files; the temporary folder goes whatever happens. Every
refusal is a 400 naming the field, and for a file of the folder its path inside the archive.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

import yaml
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files import File
from django.core.files.uploadedfile import UploadedFile
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hub import actions
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.api.parsers import MultiPartParser
from hub.api.serializers import ManifestSerializer
from hub.models import Manifest
from predictors import manifests as spec
from predictors.data import folder as folder_dataset
from predictors.processing.labels import labels_from_text

# The most entries an archive may hold.
MAX_ENTRIES = 1_100_000
_FIELDS = (
    *("archive", "name", "version", "description", "license", "split", "visibility"),
    *("raw", "labels"),
)

_BODY = {
    "type": "object",
    "properties": {
        "archive": {
            "type": "string",
            "format": "binary",
            "description": "A zip or tar (.tar, .tar.gz, .tar.bz2, .tar.xz) of the folder: "
            "CLASS/IMAGE, or SPLIT/CLASS/IMAGE; PNG or JPEG images, all of one kind.",
        },
        "name": {"type": "string", "description": "The dataset's name (a slug)."},
        "version": {"type": "string", "description": "Its version (strict semver)."},
        "description": {"type": "string"},
        "license": {"type": "string"},
        "split": {
            "type": "string",
            "description": "The split of a folder of class folders (default: validation); "
            "refused for a folder of split folders, which name their own.",
        },
        "visibility": {"type": "string", "enum": [Manifest.PUBLIC, Manifest.PRIVATE]},
        "raw": {
            "type": "string",
            "enum": ["true", "false"],
            "description": "true: the files are any files, kept byte for byte (encoding raw, "
            "for a model that reads a file's own bytes); none is checked as an image. Each at "
            "most 64 MiB, none empty. Default false: PNG or JPEG images.",
        },
        "labels": {
            "type": "string",
            "description": "The labels, one per line (a model's labels file): the dataset's "
            "labels in that order, each class folder one of them. Default: the class folders, "
            "sorted.",
        },
    },
    "required": ["archive", "name", "version"],
}


def _field(data: Any, name: str, default: str | None = None) -> str | None:
    value = data.get(name) if hasattr(data, "get") else None
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise ApiError([{"path": name, "message": f"{name} must be text"}])
    return value


class DatasetFromFolder(APIView):
    parser_classes = [MultiPartParser]
    query_parameters: tuple[str, ...] = ()

    @extend_schema(
        summary="Make a dataset from an archive of an image folder (one sub-folder per class)",
        request={"multipart/form-data": _BODY},
        responses={
            201: ManifestSerializer,
            400: error_response(
                400,
                "A field is missing or wrong, or the archive cannot be made a dataset (the "
                "message names the file inside it).",
            ),
            409: error_response(
                409, "The name belongs to another publisher, or the version exists."
            ),
        },
    )
    def post(self, request: Request) -> Response:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > settings.UPLOAD_MAX_BYTES:
            raise ApiError(
                [
                    {
                        "path": "archive",
                        "message": f"the upload is larger than {settings.UPLOAD_MAX_BYTES} bytes",
                    }
                ],
                status_code=413,
                code="too_large",
            )
        try:
            data = request.data
        except RequestDataTooBig:
            raise ApiError(
                [{"path": "", "message": "the request is too large"}], status_code=413
            ) from None
        unknown = sorted(set(data) - set(_FIELDS)) if hasattr(data, "keys") else []
        if unknown:
            raise ApiError([{"path": name, "message": "unknown field"} for name in unknown])
        archive = request.FILES.get("archive") if hasattr(request, "FILES") else None
        if archive is None:
            raise ApiError([{"path": "archive", "message": "the archive is missing"}])
        name, version = _field(data, "name"), _field(data, "version")
        missing = [field for field, value in (("name", name), ("version", version)) if not value]
        if missing:
            raise ApiError(
                [{"path": field, "message": f"{field} is required"} for field in missing]
            )
        assert name is not None and version is not None
        split = _field(data, "split")
        visibility = _field(data, "visibility")
        raw_text = _field(data, "raw", "false")
        if raw_text not in ("true", "false"):
            raise ApiError([{"path": "raw", "message": f"must be true or false, not {raw_text!r}"}])
        raw = raw_text == "true"
        labels_text = _field(data, "labels")
        labels = labels_from_text(labels_text) if labels_text is not None else None
        description = _field(
            data,
            "description",
            f"{'Files' if raw else 'Images'} uploaded as a folder of class folders.",
        )

        license_ = _field(data, "license", "unknown")
        # The manifest's own rules on name and version, before anything is unpacked.
        probe = folder_dataset.manifest(
            name,
            version,
            folder_dataset.Converted(["x"], "png", {split or "validation": 0}, {}),
            description=str(description),
            license=str(license_),
            visibility=visibility,
        )
        _load(probe)

        work = Path(tempfile.mkdtemp(prefix="folder-", dir=settings.FILE_UPLOAD_TEMP_DIR))
        try:
            if hasattr(archive, "temporary_file_path"):  # on disk already: not copied again
                packed = Path(archive.temporary_file_path())
            else:
                packed = work / "archive"
                with packed.open("wb") as out:
                    for chunk in archive.chunks():
                        out.write(chunk)
            try:
                root = folder_dataset.unpack_archive(
                    packed,
                    work / "folder",
                    max_bytes=settings.UPLOAD_MAX_BYTES,
                    max_entries=MAX_ENTRIES,
                )
                converted = folder_dataset.convert(
                    root, work / "splits", name, split=split, raw=raw, labels=labels
                )
            except folder_dataset.FolderError as error:
                raise ApiError([{"path": "archive", "message": str(error)}]) from None
            document = folder_dataset.manifest(
                name,
                version,
                converted,
                description=str(description),
                license=str(license_),
                visibility=visibility,
            )
            doc = _load(document)
            handles = {
                f"{split_name}.parquet": File(path.open("rb"), name=f"{split_name}.parquet")
                for split_name, path in converted.files.items()
            }
            try:
                manifest = actions.register_manifest(
                    doc,
                    owner=request.user,
                    visibility=visibility,
                    uploads=cast(dict[str, UploadedFile], handles),
                )
            finally:
                for handle in handles.values():
                    handle.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        body = ManifestSerializer(manifest, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED)


def _load(document: dict[str, Any]) -> spec.Manifest:
    """The generated manifest, validated as an uploaded one; 400 naming the field."""
    try:
        return spec.load(
            yaml.safe_dump(document, sort_keys=False),
            max_bytes=settings.MANIFEST_MAX_BYTES,
            kind="dataset",
        )
    except spec.ManifestError as error:
        raise ApiError(
            [{"path": e["path"], "message": e["message"]} for e in error.errors],
            status_code=error.status,
        ) from None
