"""`/api/v1/manifests/` and `/api/v1/datasets/`: list, read, upload and delete manifests.

Upload with `Content-Type: application/x-yaml` (the body is the manifest), or as
`multipart/form-data` with a `manifest` part (file or text), any number of `files` parts (each
stored at the manifest's namespace under its file name) and an optional `visibility`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, parsers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from hub import actions
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.api.parsers import MultiPartParser, read_body
from hub.api.query import choice
from hub.api.serializers import ManifestSerializer, ManifestSummarySerializer
from hub.errors import TooLarge
from hub.models import Manifest
from predictors import manifests as spec

YAML_TYPES = ("application/x-yaml", "application/yaml", "text/yaml")


def _too_large(limit: int) -> TooLarge:
    return TooLarge(f"the manifest is larger than the limit of {limit} bytes", code="invalid")


class YamlParser(parsers.BaseParser):
    """Hands the raw YAML text to the view, refusing bodies over the manifest limit."""

    media_type = "application/x-yaml"

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> dict[str, Any]:
        limit = settings.MANIFEST_MAX_BYTES
        return {"manifest": read_body(stream, limit, _too_large(limit))}


class ApplicationYamlParser(YamlParser):
    media_type = "application/yaml"


class TextYamlParser(YamlParser):
    media_type = "text/yaml"


_FILTERS = [
    OpenApiParameter("name", OpenApiTypes.STR, description="exact name"),
    OpenApiParameter("kind", OpenApiTypes.STR, enum=[Manifest.MODEL, Manifest.DATASET]),
    OpenApiParameter(
        "framework", OpenApiTypes.STR, description="pytorch, tensorflow or onnxruntime"
    ),
    OpenApiParameter("task", OpenApiTypes.STR),
    OpenApiParameter("version", OpenApiTypes.STR, description="exact version"),
    OpenApiParameter(
        "search", OpenApiTypes.STR, description="words in the name, task or description"
    ),
]


def _read_manifest_text(request: Request) -> bytes:
    content_length = int(request.META.get("CONTENT_LENGTH") or 0)
    if (
        request.content_type.split(";")[0].strip() in YAML_TYPES
        and content_length > settings.MANIFEST_MAX_BYTES
    ):
        raise _too_large(settings.MANIFEST_MAX_BYTES)
    if content_length > settings.UPLOAD_MAX_BYTES:
        raise ApiError(
            [
                {
                    "path": "",
                    "message": f"the upload is larger than the limit of {settings.UPLOAD_MAX_BYTES} bytes",
                }
            ],
            status_code=413,
        )
    try:
        data = request.data
    except RequestDataTooBig:
        raise _too_large(settings.MANIFEST_MAX_BYTES) from None
    part = data.get("manifest") if hasattr(data, "get") else None
    if part is None:
        raise ApiError([{"path": "manifest", "message": "the manifest is missing"}])
    if hasattr(part, "read"):
        if part.size > settings.MANIFEST_MAX_BYTES:
            raise _too_large(settings.MANIFEST_MAX_BYTES)
        return bytes(part.read())
    return part.encode() if isinstance(part, str) else bytes(part)


def create_manifest(request: Request, *, kind: str | None) -> Response:
    """Validate and register the uploaded manifest; shared by the manifests and datasets views."""
    text = _read_manifest_text(request)
    try:
        doc = spec.load(text, max_bytes=settings.MANIFEST_MAX_BYTES, kind=kind)
    except spec.ManifestError as error:
        raise ApiError(error.errors, status_code=error.status) from None
    uploads = {}
    files = request.FILES.getlist("files") if hasattr(request, "FILES") else []
    for upload in files:
        if upload.name in uploads:
            raise ApiError(
                [
                    {
                        "path": f"files.{upload.name}",
                        "message": f"file '{upload.name}' is uploaded twice",
                    }
                ]
            )
        uploads[upload.name] = upload
    visibility = choice(request, "visibility", VISIBILITIES) or (
        request.data.get("visibility")
        if hasattr(request.data, "get") and "visibility" in request.data
        else None
    )
    manifest = actions.register_manifest(
        doc,
        owner=request.user,
        visibility=visibility,
        uploads=uploads,  # type: ignore[arg-type]
    )
    body = ManifestSerializer(manifest, context={"request": request}).data
    return Response(body, status=status.HTTP_201_CREATED)


def filter_manifests(queryset: QuerySet[Manifest], params: Any) -> QuerySet[Manifest]:
    for field in ("name", "kind", "framework", "task", "version"):
        value = params.get(field)
        if value:
            queryset = queryset.filter(**{field: value})
    search = params.get("search")
    if search:
        for word in search.split()[:8]:
            queryset = queryset.filter(
                Q(name__icontains=word) | Q(description__icontains=word) | Q(task__icontains=word)
            )
    return queryset


def visible_of_kind(request: Request, kind: str | None) -> QuerySet[Manifest]:
    """The manifests `request`'s user may see, of one kind when `kind` is given."""
    queryset = Manifest.objects.visible_to(request.user).select_related("owner")
    return queryset.filter(kind=kind) if kind else queryset


VISIBILITIES = (Manifest.PUBLIC, Manifest.PRIVATE)
_YAML_BODY = {
    "type": "object",
    "description": "The manifest in YAML: a mapping, as /api/v1/schema/manifest.json describes.",
}
_MULTIPART_BODY = {
    "type": "object",
    "properties": {
        "manifest": {"type": "string", "description": "The manifest, in YAML (a file or text)."},
        "files": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "description": "Files the manifest names as repo://, each stored at the "
            "manifest's namespace under its file name.",
        },
        "visibility": {"type": "string", "enum": list(VISIBILITIES)},
    },
    "required": ["manifest"],
}


class _ManifestParsers:
    parser_classes = [YamlParser, ApplicationYamlParser, TextYamlParser, MultiPartParser]


@extend_schema_view(
    get=extend_schema(parameters=_FILTERS, summary="List the manifests you can see"),
    post=extend_schema(
        summary="Upload a manifest (YAML body, or multipart with model files)",
        parameters=[
            OpenApiParameter(
                "visibility",
                OpenApiTypes.STR,
                enum=list(VISIBILITIES),
                description="private unless the manifest or this says otherwise",
            )
        ],
        request={
            **{media_type: _YAML_BODY for media_type in YAML_TYPES},
            "multipart/form-data": _MULTIPART_BODY,
        },
        responses={
            201: ManifestSerializer,
            409: error_response(
                409,
                "The manifest's name belongs to another publisher, its identity (name, "
                "version, framework) exists already, or a file exists with other content.",
            ),
        },
    ),
)
class ManifestList(_ManifestParsers, generics.ListAPIView[Manifest]):
    query_parameters = {
        "GET": ("name", "kind", "framework", "task", "version", "search"),
        "POST": ("visibility",),
    }
    serializer_class = ManifestSummarySerializer
    anonymous_methods = ("GET", "HEAD", "OPTIONS")
    kind: str | None = None

    def get_queryset(self) -> QuerySet[Manifest]:
        choice(self.request, "kind", (Manifest.MODEL, Manifest.DATASET))
        queryset = visible_of_kind(self.request, self.kind)
        return filter_manifests(queryset, self.request.query_params).order_by(
            "kind", "name", "framework", "id"
        )

    def post(self, request: Request) -> Response:
        return create_manifest(request, kind=self.kind)


@extend_schema_view(
    get=extend_schema(summary="Read one manifest"),
    delete=extend_schema(summary="Delete a manifest you own (its unreferenced files go too)"),
)
class ManifestDetail(generics.RetrieveDestroyAPIView[Manifest]):
    serializer_class = ManifestSerializer
    anonymous_methods = ("GET", "HEAD", "OPTIONS")
    kind: str | None = None

    def get_queryset(self) -> QuerySet[Manifest]:
        return visible_of_kind(self.request, self.kind).prefetch_related("artifacts")

    def perform_destroy(self, instance: Manifest) -> None:
        user = self.request.user
        if instance.owner_id != user.pk and not user.is_staff:
            raise PermissionDenied("Only the manifest's owner can delete it.")
        actions.delete_manifest(instance)


class DatasetList(ManifestList):
    kind = Manifest.DATASET


class DatasetDetail(ManifestDetail):
    kind = Manifest.DATASET
