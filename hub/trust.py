"""Who runs whose jobs: the one rule that placement, claims, file downloads and span exports
all enforce.

A host may run a job when both hold:

1. **The launcher trusts the host** (`trusts`): it is in the operators' shared pool, or it is
   the launcher's own, or it is lent to a group the launcher belongs to by a member of that
   group, and the launcher either chose to trust that group's hosts (`GroupTrust`, off by
   default) or named the host in the launch. Membership is only ever by consent (an invitation
   the invitee accepted, `hub.groups`), so nobody can make their host trusted by someone else.
2. **The host's owner may read every object the job uses** (`reads`): its model and dataset
   manifests, and through them their files. The pool is the operators', who run every user's
   jobs; any other host's owner must be able to see the manifests themself (public, their own,
   or shared with a group they belong to), so a private model never reaches another user's
   machine because a group lends it.

For an evaluation, the two are asked together by `evaluations.models.Evaluation.why_not_on`.
Placement offers a job only hosts for which both hold (`hub.solver`); a claim is refused unless
they hold (`evaluations.actions.claim_evaluation`), and while the job runs they are checked again
at each report of its agent, so that access withdrawn mid-job (a member leaves, a trust is turned
off, a manifest is unshared) takes the job off the host; an agent token fetches a job's files and
writes its spans only while its host holds a live claim on the job.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from hub.models import Host, Manifest


def trusts(user: AbstractBaseUser | AnonymousUser, host: Host, *, named: str = "") -> bool:
    """Whether `user`'s jobs may run on `host`; `named` is the host a launch named, if any."""
    hosts = Host.objects.usable_by(user) if named == host.name else Host.objects.trusted_by(user)
    return hosts.filter(pk=host.pk).exists()


def reads(host: Host, manifests: Iterable[Manifest]) -> bool:
    """Whether the owner of `host` may read every one of `manifests` (the pool's owners, the
    operators, run every user's jobs)."""
    if host.pool:
        return True
    ids = {manifest.pk for manifest in manifests}
    visible = (
        Manifest.objects.visible_to(host.owner).filter(pk__in=ids).values_list("pk", flat=True)
    )
    return set(visible) == ids


def readers(hosts: Iterable[Host], manifests: Iterable[Manifest]) -> set[int]:
    """The ids of those of `hosts` whose owner may read every one of `manifests` (`reads`, for
    many hosts at once: one query per distinct owner)."""
    wanted = list(manifests)
    by_owner: dict[int, bool] = {}
    able = set()
    for host in hosts:
        if host.pool:
            able.add(host.pk)
            continue
        if host.owner_id not in by_owner:
            by_owner[host.owner_id] = reads(host, wanted)
        if by_owner[host.owner_id]:
            able.add(host.pk)
    return able
