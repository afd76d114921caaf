"""Groups: people who share manifests, evaluations and hosts.

A group has an owner (who created it) and members (the owner among them). Nobody joins a group
without saying yes: the owner *invites* a user (`invite`), and the invitee accepts (then they are
a member) or declines (`accept_invitation`, `decline_invitation`); the owner may withdraw an
invitation. A member may always leave; the owner removes members or deletes the group. Members,
and only members, see the group, its owner, its members and pending invitations, and what is
shared with it; an invitee sees the group's name and description and who invited them.

Each member decides whether the hosts lent to the group run their jobs unasked (`set_trust`,
off by default; `hub.trust`): without it a group's host runs their job only when they name it.

A manifest's owner shares it with a group they belong to; what a group may see is then what
its members see (`Manifest.objects.visible_to`). Sharing an evaluation is
`evaluations.actions.share_evaluation`: it lives with the evaluations, which the hub does not
import. Whoever loses access (a member who leaves or is removed) is told through
`hub.signals.access_withdrawn`, so that their open WebSockets check again.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from hub import signals
from hub.error_codes import HubErrorCode
from hub.errors import Conflict, Forbidden, Invalid, NotFound
from hub.models import GroupInvitation, GroupProfile, GroupTrust, Manifest

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


def is_member(user: AbstractBaseUser | AnonymousUser, group: Group) -> bool:
    """Whether `user` belongs to `group` (an accepted membership; staff are not members by
    being staff)."""
    return bool(user.is_authenticated) and group.user_set.filter(pk=user.pk).exists()  # type: ignore[attr-defined]


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


def invite(user: AbstractBaseUser, group: Group, username: str) -> GroupInvitation:
    """The owner invites `username` to the group: an invitation, which makes them a member only
    once they accept it. Inviting someone invited already answers their invitation."""
    _check_owner(user, group, "invite members")
    User = get_user_model()
    invitee = User.objects.filter(username=str(username)[:150]).first()
    if invitee is None or not invitee.is_active:
        raise Invalid(f"no user '{str(username)[:64]}'", path="username")
    if is_member(invitee, group):
        raise Conflict(
            f"'{invitee.get_username()}' is a member of '{group.name}' already",
            path="username",
            code=HubErrorCode.ALREADY_MEMBER,
        )
    invitation, _ = GroupInvitation.objects.get_or_create(
        group=group, invitee=invitee, defaults={"invited_by": user}
    )
    return invitation


def invitations_of(user: AbstractBaseUser | AnonymousUser) -> QuerySet[GroupInvitation]:
    """The invitations waiting for `user`'s answer, newest first."""
    if not user.is_authenticated:
        return GroupInvitation.objects.none()
    return GroupInvitation.objects.filter(invitee=user).select_related(
        "group__profile", "invited_by"
    )


def invitation_for(user: AbstractBaseUser | AnonymousUser, group_name: str) -> GroupInvitation:
    """`user`'s invitation to the group called `group_name`, else NotFound."""
    invitation = invitations_of(user).filter(group__name=str(group_name)[:150]).first()
    if invitation is None:
        raise NotFound(f"no invitation to a group '{str(group_name)[:64]}' for you", path="group")
    return invitation


def accept_invitation(invitation: GroupInvitation) -> Group:
    """The invitee says yes: they are a member from now on (trusting none of its hosts yet)."""
    with transaction.atomic():
        group = invitation.group
        group.user_set.add(invitation.invitee)  # type: ignore[attr-defined]
        invitation.delete()
    return group


def decline_invitation(invitation: GroupInvitation) -> None:
    """The invitee says no: the invitation is gone, and nothing of theirs changed."""
    invitation.delete()


def withdraw_invitation(user: AbstractBaseUser, group: Group, username: str) -> None:
    """The owner takes back an invitation not answered yet."""
    _check_owner(user, group, "withdraw invitations")
    deleted, _ = GroupInvitation.objects.filter(
        group=group, invitee__username=str(username)[:150]
    ).delete()
    if not deleted:
        raise NotFound(
            f"'{str(username)[:64]}' has no invitation to '{group.name}'", path="username"
        )


def pending_invitees(group: Group) -> list[str]:
    """The usernames invited to `group` who have not answered (for its members' eyes)."""
    return sorted(group.invitations.values_list("invitee__username", flat=True))  # type: ignore[attr-defined]


def remove_member(user: AbstractBaseUser, group: Group, username: str) -> None:
    """The owner removes a member; a member removes themself (leaves). They stop trusting its
    hosts, and their open WebSockets check their access again."""
    if username != user.get_username():
        _check_owner(user, group, "remove other members")
    member = group.user_set.filter(username=username).first()  # type: ignore[attr-defined]
    if member is None:
        raise NotFound(f"'{username[:64]}' is not a member of '{group.name}'", path="username")
    if member.pk == group.profile.owner_id:  # type: ignore[attr-defined]
        raise Invalid(
            "the group's owner cannot leave it: delete the group instead", path="username"
        )
    with transaction.atomic():
        group.user_set.remove(member)  # type: ignore[attr-defined]
        GroupTrust.objects.filter(group=group, user=member).delete()
        signals.access_withdrawn.send(sender=Group, users=[member.pk])


def delete_group(user: AbstractBaseUser, group: Group) -> None:
    _check_owner(user, group, "delete it")
    with transaction.atomic():
        members = list(group.user_set.values_list("pk", flat=True))  # type: ignore[attr-defined]
        group.delete()
        signals.access_withdrawn.send(sender=Group, users=members)


def trusts_hosts(user: AbstractBaseUser | AnonymousUser, group: Group) -> bool:
    """Whether `user` runs their jobs on the group's hosts unasked (`hub.trust`)."""
    return (
        bool(user.is_authenticated) and GroupTrust.objects.filter(group=group, user=user).exists()
    )  # type: ignore[misc]


def set_trust(user: AbstractBaseUser, group: Group, trusted: bool) -> None:
    """A member chooses whether the hosts lent to `group` run their jobs unasked."""
    if not is_member(user, group):
        raise Forbidden(
            f"only members of '{group.name}' choose whether its hosts run their jobs",
            code=HubErrorCode.NOT_A_MEMBER,
        )
    if trusted:
        GroupTrust.objects.get_or_create(group=group, user=user)
    else:
        GroupTrust.objects.filter(group=group, user=user).delete()


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
