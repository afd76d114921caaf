"""`/api/v1/groups/`: create groups, add and remove members; `/api/v1/manifests/<id>/shares/`:
share a manifest with a group (`hub.groups`).

A group one does not belong to answers 404, like an object one may not see.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from hub import groups
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.models import Manifest


class GroupSerializer(serializers.Serializer[Group]):
    """A group as the API shows it (written by `group_body`)."""

    name = serializers.CharField()
    description = serializers.CharField()
    owner = serializers.CharField()
    members = serializers.ListField(child=serializers.CharField())
    url = serializers.CharField()


GROUP = GroupSerializer


class GroupCreateSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=64, help_text=groups.NAME_RULE)
    description = serializers.CharField(
        max_length=groups.DESCRIPTION_MAX, required=False, allow_blank=True, default=""
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class MemberSerializer(serializers.Serializer[dict[str, Any]]):
    username = serializers.CharField(max_length=150)


class ManifestShareSerializer(serializers.Serializer[dict[str, Any]]):
    group = serializers.CharField(max_length=150, help_text="one of your groups")


def group_body(group: Group) -> dict[str, Any]:
    profile = group.profile  # type: ignore[attr-defined]
    return {
        "name": group.name,
        "description": profile.description,
        "owner": profile.owner.get_username(),
        "members": sorted(group.user_set.values_list("username", flat=True)),  # type: ignore[attr-defined]
        "url": f"/api/v1/groups/{group.name}/",
    }


def _valid(serializer_class: Any, request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ApiError([{"path": "", "message": "the body must be a JSON object"}])
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@extend_schema_view(
    get=extend_schema(summary="List the groups you belong to (staff: every group)"),
    post=extend_schema(
        summary="Create a group; you are its owner and first member",
        request=GroupCreateSerializer,
        responses={201: GROUP, 409: error_response(409, "A group of that name exists.")},
    ),
)
class GroupList(generics.ListAPIView[Group]):
    serializer_class = GroupSerializer  # the rows are written by `group_body`

    def get_queryset(self) -> QuerySet[Group]:
        return groups.groups_of(self.request.user).prefetch_related("user_set")

    @extend_schema(responses=GROUP)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([group_body(group) for group in page or []])

    def post(self, request: Request) -> Response:
        data = _valid(GroupCreateSerializer, request)
        group = groups.create_group(
            request.user,  # type: ignore[arg-type]
            data["name"],
            data["description"],
        )
        return Response(group_body(group), status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(summary="Read a group you belong to", responses=GROUP),
    delete=extend_schema(summary="Delete a group you own", responses={204: None}),
)
class GroupDetail(generics.GenericAPIView[Group]):
    def get(self, request: Request, name: str) -> Response:
        return Response(group_body(groups.member_group(request.user, name, path="")))

    def delete(self, request: Request, name: str) -> Response:
        groups.delete_group(
            request.user,  # type: ignore[arg-type]
            groups.member_group(request.user, name, path=""),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(
    summary="Add a member to a group you own",
    request=MemberSerializer,
    responses={200: GROUP},
)
class GroupMembers(generics.GenericAPIView[Group]):
    def post(self, request: Request, name: str) -> Response:
        group = groups.member_group(request.user, name, path="")
        data = _valid(MemberSerializer, request)
        groups.add_member(request.user, group, data["username"])  # type: ignore[arg-type]
        return Response(group_body(group))


@extend_schema(
    summary="Remove a member from a group you own, or leave a group",
    responses={204: None},
)
class GroupMember(generics.GenericAPIView[Group]):
    def delete(self, request: Request, name: str, username: str) -> Response:
        group = groups.member_group(request.user, name, path="")
        groups.remove_member(request.user, group, username)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


SHARES = inline_serializer(
    "Shares", {"groups": serializers.ListField(child=serializers.CharField())}
)


def _own_manifest(request: Request, pk: int) -> Manifest:
    return get_object_or_404(Manifest.objects.visible_to(request.user), pk=pk)


def _shares(manifest: Manifest, request: Request) -> dict[str, Any]:
    mine = set(groups.groups_of(request.user).values_list("pk", flat=True))
    return {
        "groups": sorted(manifest.shared_groups.filter(pk__in=mine).values_list("name", flat=True))
    }


@extend_schema_view(
    get=extend_schema(summary="The groups (of yours) a manifest is shared with", responses=SHARES),
    post=extend_schema(
        summary="Share a manifest you own with one of your groups",
        request=ManifestShareSerializer,
        responses=SHARES,
    ),
)
class ManifestShares(generics.GenericAPIView[Manifest]):
    def get(self, request: Request, pk: int) -> Response:
        return Response(_shares(_own_manifest(request, pk), request))

    def post(self, request: Request, pk: int) -> Response:
        manifest = _own_manifest(request, pk)
        data = _valid(ManifestShareSerializer, request)
        groups.share_manifest(request.user, manifest, data["group"])  # type: ignore[arg-type]
        return Response(_shares(manifest, request))


@extend_schema(summary="Stop sharing a manifest with a group", responses={204: None})
class ManifestShare(generics.GenericAPIView[Manifest]):
    def delete(self, request: Request, pk: int, group: str) -> Response:
        manifest = _own_manifest(request, pk)
        groups.unshare_manifest(request.user, manifest, group)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
