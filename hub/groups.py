"""Groups: people who share manifests, evaluations and hosts.

A group has an owner (who created it) and members (the owner among them). Members see the
group, its members, and what is shared with it; only the owner (or staff) adds and removes
members or deletes the group; a member may leave. A manifest's owner shares it with a group
they belong to; what a group may see is then what its members see
(`Manifest.objects.visible_to`). Sharing an evaluation is `evaluations.actions.share_evaluation`:
it lives with the evaluations, which the hub does not import.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from hub.error_codes import HubErrorCode
from hub.errors import Conflict, Forbidden, Invalid, NotFound
from hub.models import GroupProfile, Manifest

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAME_RULE = "1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
DESCRIPTION_MAX = 500


def groups_of(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Group]:
    """The groups `user` belongs to (staff: every group with a profile)."""
    groups = Group.objects.filter(profile__isnull=False).select_related("profile__owner")
    if not user.is_authenticated:
        return groups.none()
    if user.is_staff:  # type: ignore[union-attr]
        return groups.order_by("name")
    return groups.filter(user=user).order_by("name")


def member_group(
    user: AbstractBaseUser | AnonymousUser, name: str, *, path: str = "group"
) -> Group:
    """The group called `name` that `user` belongs to (staff: any group), else NotFound (a
    group one does not belong to is as good as absent)."""
    group = groups_of(user).filter(name=str(name)[:150]).first()
    if group is None:
        raise NotFound(f"no group '{str(name)[:64]}' that you belong to", path=path)
    return group


def create_group(owner: AbstractBaseUser, name: str, description: str = "") -> Group:
    name = str(name)
    if not NAME.fullmatch(name):
        raise Invalid(f"name must be {NAME_RULE}, not {name[:64]!r}", path="name")
    if len(description) > DESCRIPTION_MAX:
        raise Invalid(
            f"description is longer than {DESCRIPTION_MAX} characters", path="description"
        )
    try:
        with transaction.atomic():
            group = Group.objects.create(name=name)
            GroupProfile.objects.create(group=group, owner=owner, description=description)
            group.user_set.add(owner)  # type: ignore[attr-defined]
    except IntegrityError:
        raise Conflict(
            f"a group named '{name}' exists: choose another name",
            path="name",
            code=HubErrorCode.NAME_TAKEN,
        ) from None
    return group


def _check_owner(user: AbstractBaseUser, group: Group, what: str) -> None:
    if group.profile.owner_id != user.pk and not user.is_staff:  # type: ignore[attr-defined]
        raise Forbidden(f"only the group's owner can {what}", code=HubErrorCode.NOT_GROUP_OWNER)


def add_member(user: AbstractBaseUser, group: Group, username: str) -> AbstractBaseUser:
    _check_owner(user, group, "add members")
    User = get_user_model()
    member = User.objects.filter(username=str(username)[:150]).first()
    if member is None or not member.is_active:
        raise Invalid(f"no user '{str(username)[:64]}'", path="username")
    group.user_set.add(member)  # type: ignore[attr-defined]
    return member


def remove_member(user: AbstractBaseUser, group: Group, username: str) -> None:
    """The owner removes a member; a member removes themself (leaves)."""
    if username != user.get_username():
        _check_owner(user, group, "remove other members")
    member = group.user_set.filter(username=username).first()  # type: ignore[attr-defined]
    if member is None:
        raise NotFound(f"'{username[:64]}' is not a member of '{group.name}'", path="username")
    if member.pk == group.profile.owner_id:  # type: ignore[attr-defined]
        raise Invalid(
            "the group's owner cannot leave it: delete the group instead", path="username"
        )
    group.user_set.remove(member)  # type: ignore[attr-defined]


def delete_group(user: AbstractBaseUser, group: Group) -> None:
    _check_owner(user, group, "delete it")
    group.delete()


def share_manifest(user: AbstractBaseUser, manifest: Manifest, group_name: str) -> Group:
    """Share `manifest` (the user's own) with one of the user's groups."""
    if manifest.owner_id != user.pk and not user.is_staff:
        raise Forbidden("only the manifest's owner can share it", code=HubErrorCode.NOT_OWNER)
    group = member_group(user, group_name)
    manifest.shared_groups.add(group)
    return group


def unshare_manifest(user: AbstractBaseUser, manifest: Manifest, group_name: str) -> None:
    if manifest.owner_id != user.pk and not user.is_staff:
        raise Forbidden("only the manifest's owner can unshare it", code=HubErrorCode.NOT_OWNER)
    group = manifest.shared_groups.filter(name=str(group_name)[:150]).first()
    if group is None:
        raise NotFound(f"{manifest} is not shared with '{str(group_name)[:64]}'", path="group")
    manifest.shared_groups.remove(group)


def visible_to_group(manifest: Manifest | None, group: Group) -> bool:
    """Whether every member of `group` may read `manifest` because it is public or shared with
    the group (not merely because one member owns it)."""
    if manifest is None:
        return False
    return (
        manifest.visibility == Manifest.PUBLIC
        or manifest.shared_groups.filter(pk=group.pk).exists()
    )
