"""`/api/v1/images/`: the predictor images agents registered (`mlms agent --docker`), each kept
once per digest with its software environment, and the diff of two images.

- `GET /api/v1/images/` — the images you may see: those of the hosts you may use, and those
  that ran an evaluation you may read (staff: all);
- `GET /api/v1/images/<digest>/` — one image: tags, framework, labels, and every Python and
  Debian package with its version;
- `GET /api/v1/images/<digest>/diff/<other>/` — what differs from `digest` to `other`: the
  packages added, removed and changed (with both versions), and the OS and Python.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hub.models import ContainerImage

# An image's digest in a URL: the sha256 of its configuration.
DIGEST = r"sha256:[0-9a-f]{64}"


class ImageSerializer(serializers.ModelSerializer[ContainerImage]):
    class Meta:
        model = ContainerImage
        fields = [
            "digest",
            "tags",
            "framework",
            "framework_version",
            "device",
            "created_at",
        ]


class ImageDetailSerializer(serializers.ModelSerializer[ContainerImage]):
    class Meta:
        model = ContainerImage
        fields = [*ImageSerializer.Meta.fields, "labels", "environment"]


class PackageDiffSerializer(serializers.Serializer[dict[str, Any]]):
    added = serializers.DictField(child=serializers.CharField(), help_text="only in `other`")
    removed = serializers.DictField(child=serializers.CharField(), help_text="only in `digest`")
    changed = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="[version in `digest`, version in `other`]",
    )


class ImageDiffSerializer(serializers.Serializer[dict[str, Any]]):
    image = ImageSerializer()
    other = ImageSerializer()
    os = serializers.ListField(child=serializers.CharField(allow_null=True), allow_null=True)
    python = serializers.ListField(child=serializers.CharField(allow_null=True), allow_null=True)
    python_packages = PackageDiffSerializer()
    debian_packages = PackageDiffSerializer()
    differing = serializers.IntegerField(help_text="how many packages differ in all")


def _visible(request: Request) -> QuerySet[ContainerImage]:
    return ContainerImage.objects.visible_to(request.user)  # type: ignore[attr-defined, no-any-return]


class ImageList(generics.ListAPIView[ContainerImage]):
    serializer_class = ImageSerializer

    @extend_schema(summary="List the predictor images you may see")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[ContainerImage]:
        return _visible(self.request).order_by("-created_at", "pk")


class ImageDetail(APIView):
    @extend_schema(
        summary="Read one image's software environment", responses={200: ImageDetailSerializer}
    )
    def get(self, request: Request, digest: str) -> Response:
        image = get_object_or_404(_visible(request), digest=digest)
        return Response(ImageDetailSerializer(image).data)


def package_diff(old: Any, new: Any) -> dict[str, dict[str, Any]]:
    """Packages added, removed and changed from `old` to `new` ({name: version} each)."""
    before = old if isinstance(old, dict) else {}
    after = new if isinstance(new, dict) else {}
    return {
        "added": {name: after[name] for name in sorted(after.keys() - before.keys())},
        "removed": {name: before[name] for name in sorted(before.keys() - after.keys())},
        "changed": {
            name: [before[name], after[name]]
            for name in sorted(before.keys() & after.keys())
            if before[name] != after[name]
        },
    }


def image_diff(image: ContainerImage, other: ContainerImage) -> dict[str, Any]:
    mine, theirs = image.environment or {}, other.environment or {}
    answer: dict[str, Any] = {
        "image": ImageSerializer(image).data,
        "other": ImageSerializer(other).data,
    }
    for key in ("os", "python"):
        pair = [mine.get(key), theirs.get(key)]
        answer[key] = pair if pair[0] != pair[1] else None
    differing = 0
    for key in ("python_packages", "debian_packages"):
        answer[key] = package_diff(mine.get(key), theirs.get(key))
        differing += sum(len(part) for part in answer[key].values())
    answer["differing"] = differing
    return answer


class ImageDiff(APIView):
    @extend_schema(
        summary="What differs between two images' software", responses={200: ImageDiffSerializer}
    )
    def get(self, request: Request, digest: str, other: str) -> Response:
        visible = _visible(request)
        image = get_object_or_404(visible, digest=digest)
        against = get_object_or_404(visible, digest=other)
        return Response(image_diff(image, against))
