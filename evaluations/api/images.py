"""`/api/v1/images/`: the predictor images agents registered (`mlms agent --docker`), each kept
once per digest with its software environment, and the diff of two images.

- `GET /api/v1/images/` — the images you may see: those of the hosts you may use, and those
  that ran an evaluation you may read (staff: all). A digest is what an agent says, which the
  hub cannot check, so each user's agents keep their own record of an image: a digest seen
  through several users' hosts is listed once per registrant, and one digest in a URL reads your
  own record first, then an operator's, then the oldest;
- `GET /api/v1/images/<digest>/` — one image: tags, framework, labels, and every Python and
  Debian package with its version, and whether an operator's agent (staff) said so;
- `GET /api/v1/images/<digest>/diff/<other>/` — what differs from `digest` to `other`: the
  packages added, removed and changed (with both versions), and the OS and Python.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Case, Q, QuerySet, Value, When
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluations.models import Evaluation
from hub.models import ContainerImage, Host

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
    registered_by_operator = serializers.SerializerMethodField(
        help_text="whether an operator's agent (staff) said what the image holds; otherwise a "
        "user's agent did (the hub cannot check what a digest holds)"
    )

    class Meta:
        model = ContainerImage
        fields = [*ImageSerializer.Meta.fields, "labels", "environment", "registered_by_operator"]

    def get_registered_by_operator(self, image: ContainerImage) -> bool:
        return bool(image.registered_by and image.registered_by.is_staff)


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


def visible_images(user: AbstractBaseUser | AnonymousUser) -> QuerySet[ContainerImage]:
    """An image is read by whoever may use a host that registered it (`Host.usable_by`), and
    by whoever reads an evaluation that ran in it; staff read every image."""
    images = ContainerImage.objects.all()
    if user.is_authenticated and user.is_staff:  # type: ignore[union-attr]
        return images
    ran = Evaluation.objects.visible_to(user).filter(result__image__isnull=False)
    return images.filter(
        Q(hosts__in=Host.objects.usable_by(user)) | Q(pk__in=ran.values("result__image"))
    ).distinct()


def _visible(request: Request) -> QuerySet[ContainerImage]:
    return visible_images(request.user)


def _one(request: Request, digest: str) -> ContainerImage:
    """The record of `digest` the caller reads: their own, else an operator's, else the
    oldest they may see; 404 when they may see none."""
    user = request.user
    mine = Q(registered_by=user) if user.is_authenticated else Q(pk__in=[])
    found = (
        _visible(request)
        .filter(digest=digest)
        .annotate(
            rank=Case(
                When(mine, then=Value(0)),
                When(registered_by__is_staff=True, then=Value(1)),
                default=Value(2),
            )
        )
        .order_by("rank", "created_at", "pk")
        .first()
    )
    if found is None:
        raise Http404("no such image")
    return found


class ImageList(generics.ListAPIView[ContainerImage]):
    serializer_class = ImageSerializer

    @extend_schema(summary="List the predictor images you may see")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[ContainerImage]:
        return _visible(self.request).select_related("registered_by").order_by("-created_at", "pk")


class ImageDetail(APIView):
    @extend_schema(
        summary="Read one image's software environment", responses={200: ImageDetailSerializer}
    )
    def get(self, request: Request, digest: str) -> Response:
        return Response(ImageDetailSerializer(_one(request, digest)).data)


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
        return Response(image_diff(_one(request, digest), _one(request, other)))
