"""`/api/v1/groups/`: create groups, invite members, remove members or leave, choose whether a
group's hosts run your jobs; `/api/v1/invitations/`: the invitations waiting for your answer,
accepted or declined there; `/api/v1/manifests/<id>/shares/`: share a manifest with a group
(`hub.groups`).

A group one does not belong to answers 404, like an object one may not see; an invitee sees
only their invitation (the group's name and description, and who invited them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from hub import groups
from hub.api.errors import valid_body
from hub.api.fields import KnownFields
from hub.api.openapi import error_response
from hub.models import GroupInvitation, Manifest


class GroupSerializer(serializers.Serializer[Group]):
    """A group as the API shows its members (written by `group_body`)."""

    name = serializers.CharField()
    description = serializers.CharField()
    owner = serializers.CharField()
    members = serializers.ListField(child=serializers.CharField())
    invited = serializers.ListField(
        child=serializers.CharField(), help_text="users invited who have not answered yet"
    )
    trust_hosts = serializers.BooleanField(
        help_text="whether the hosts lent to the group run your jobs without your naming them "
        "(your choice; off until you turn it on)"
    )
    url = serializers.CharField()


class InvitationSerializer(serializers.Serializer[Any]):
    """An invitation to a group, as its invitee (and the group's members) see it."""

    group = serializers.CharField()
    description = serializers.CharField()
    username = serializers.CharField(help_text="who is invited")
    invited_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    url = serializers.CharField(help_text="the invitee's: DELETE declines it")
    accept = serializers.CharField(help_text="the invitee's: POST accepts it")


class MembershipSerializer(KnownFields):
    trust_hosts = serializers.BooleanField(
        help_text="run your jobs on the hosts lent to the group without naming them"
    )


GROUP = GroupSerializer


class GroupCreateSerializer(KnownFields):
    name = serializers.CharField(max_length=64, help_text=groups.NAME_RULE)
    description = serializers.CharField(
        max_length=groups.DESCRIPTION_MAX, required=False, allow_blank=True, default=""
    )


class MemberSerializer(KnownFields):
    username = serializers.CharField(max_length=150)


class ManifestShareSerializer(KnownFields):
    group = serializers.CharField(max_length=150, help_text="one of your groups")


def group_body(group: Group, viewer: Any) -> dict[str, Any]:
    """The group as member `viewer` sees it (with their own choice of trusting its hosts)."""
    profile = group.profile  # type: ignore[attr-defined]
    return {
        "name": group.name,
        "description": profile.description,
        "owner": profile.owner.get_username(),
        "members": sorted(group.user_set.values_list("username", flat=True)),  # type: ignore[attr-defined]
        "invited": groups.pending_invitees(group),
        "trust_hosts": groups.trusts_hosts(viewer, group),
        "url": f"/api/v1/groups/{group.name}/",
    }


def invitation_body(invitation: GroupInvitation) -> dict[str, Any]:
    group = invitation.group
    url = f"/api/v1/invitations/{group.name}/"
    return {
        "group": group.name,
        "description": group.profile.description,  # type: ignore[attr-defined]
        "username": invitation.invitee.get_username(),
        "invited_by": invitation.invited_by.get_username(),
        "created_at": invitation.created_at,
        "url": url,
        "accept": f"{url}accept/",
    }


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
        rows = [group_body(group, request.user) for group in page or []]
        return self.get_paginated_response(rows)

    def post(self, request: Request) -> Response:
        data = valid_body(GroupCreateSerializer, request)
        group = groups.create_group(
            request.user,  # type: ignore[arg-type]
            data["name"],
            data["description"],
        )
        return Response(group_body(group, request.user), status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(summary="Read a group you belong to", responses=GROUP),
    delete=extend_schema(summary="Delete a group you own", responses={204: None}),
)
class GroupDetail(generics.GenericAPIView[Group]):
    def get(self, request: Request, name: str) -> Response:
        group = groups.member_group(request.user, name, path="")
        return Response(group_body(group, request.user))

    def delete(self, request: Request, name: str) -> Response:
        groups.delete_group(
            request.user,  # type: ignore[arg-type]
            groups.member_group(request.user, name, path=""),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    get=extend_schema(summary="The invitations to a group you belong to that wait for an answer"),
    post=extend_schema(
        summary="Invite a user to a group you own (they become a member once they accept)",
        request=MemberSerializer,
        responses={
            201: InvitationSerializer,
            409: error_response(409, "The user is a member already."),
        },
    ),
)
class GroupInvitations(generics.ListAPIView[GroupInvitation]):
    serializer_class = InvitationSerializer  # the rows are written by `invitation_body`

    def get_queryset(self) -> QuerySet[GroupInvitation]:
        group = groups.member_group(self.request.user, self.kwargs["name"], path="")
        return group.invitations.select_related("group__profile", "invitee", "invited_by")  # type: ignore[attr-defined, no-any-return]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([invitation_body(each) for each in page or []])

    def post(self, request: Request, name: str) -> Response:
        group = groups.member_group(request.user, name, path="")
        data = valid_body(MemberSerializer, request)
        invitation = groups.invite(request.user, group, data["username"])  # type: ignore[arg-type]
        return Response(invitation_body(invitation), status=status.HTTP_201_CREATED)


@extend_schema(
    summary="Withdraw an invitation to a group you own that was not answered yet",
    responses={204: None},
)
class GroupInvitationDetail(generics.GenericAPIView[Group]):
    def delete(self, request: Request, name: str, username: str) -> Response:
        return _on_user(request, name, username, groups.withdraw_invitation)


@extend_schema_view(
    get=extend_schema(
        summary="Your membership of a group: whether its hosts run your jobs unasked",
        responses=MembershipSerializer,
    ),
    patch=extend_schema(
        summary="Choose whether the hosts lent to a group run your jobs without your naming them",
        request=MembershipSerializer,
        responses=MembershipSerializer,
    ),
)
class GroupMembership(generics.GenericAPIView[Group]):
    def get(self, request: Request, name: str) -> Response:
        group = groups.member_group(request.user, name, path="")
        return Response({"trust_hosts": groups.trusts_hosts(request.user, group)})

    def patch(self, request: Request, name: str) -> Response:
        group = groups.member_group(request.user, name, path="")
        data = valid_body(MembershipSerializer, request)
        groups.set_trust(request.user, group, data["trust_hosts"])  # type: ignore[arg-type]
        return Response({"trust_hosts": groups.trusts_hosts(request.user, group)})


@extend_schema(
    summary="Remove a member from a group you own, or leave a group",
    responses={204: None},
)
class GroupMember(generics.GenericAPIView[Group]):
    def delete(self, request: Request, name: str, username: str) -> Response:
        return _on_user(request, name, username, groups.remove_member)


def _on_user(
    request: Request, name: str, username: str, action: Callable[[Any, Group, str], Any]
) -> Response:
    """`action` (the caller, a group of theirs, a user's name) done: 204."""
    group = groups.member_group(request.user, name, path="")
    action(request.user, group, username)
    return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(summary="The invitations to groups that wait for your answer")
class InvitationList(generics.ListAPIView[GroupInvitation]):
    serializer_class = InvitationSerializer  # the rows are written by `invitation_body`

    def get_queryset(self) -> QuerySet[GroupInvitation]:
        return groups.invitations_of(self.request.user)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([invitation_body(each) for each in page or []])


@extend_schema_view(
    get=extend_schema(summary="Read an invitation of yours", responses=InvitationSerializer),
    delete=extend_schema(summary="Decline an invitation", responses={204: None}),
)
class InvitationDetail(generics.GenericAPIView[Group]):
    def get(self, request: Request, group: str) -> Response:
        return Response(invitation_body(groups.invitation_for(request.user, group)))

    def delete(self, request: Request, group: str) -> Response:
        groups.decline_invitation(groups.invitation_for(request.user, group))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(
    summary="Accept an invitation: you are a member of the group from now on",
    request=None,
    responses=GROUP,
)
class InvitationAccept(generics.GenericAPIView[Group]):
    def post(self, request: Request, group: str) -> Response:
        joined = groups.accept_invitation(groups.invitation_for(request.user, group))
        return Response(group_body(joined, request.user))


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
        data = valid_body(ManifestShareSerializer, request)
        groups.share_manifest(request.user, manifest, data["group"])  # type: ignore[arg-type]
        return Response(_shares(manifest, request))


@extend_schema(summary="Stop sharing a manifest with a group", responses={204: None})
class ManifestShare(generics.GenericAPIView[Manifest]):
    def delete(self, request: Request, pk: int, group: str) -> Response:
        manifest = _own_manifest(request, pk)
        groups.unshare_manifest(request.user, manifest, group)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
