"""Where an evaluation runs: the queue, for a request the solver (`hub.solver`) has solved.

The solver offers only hosts that may run the job (`hub.trust`: the launcher's own, the
operators' shared pool, the hosts of the groups whose hosts the launcher trusts or the host the
launch names; and only where the host's owner may read the model and dataset) and that meet
every constraint. Placement only picks the queue. A request that names a `host` goes to that
host's own queue `<scope>.host.<name>`. Otherwise `hosts: one` prefers the launcher's own hosts,
then the shared pool, then their trusted groups' hosts, and within that scope goes to the
capability queue `<scope>.<framework>.<cpu|gpu>` so
that Celery balances the job among equal hosts, provided every live host consuming that queue
can run it; otherwise (a framework version or hardware constraint that only some of them meet)
it is pinned to the eligible host with the fewest active jobs, on that host's own queue.
`hosts: all` pins one evaluation to each eligible host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q

from evaluations.models import Evaluation
from hub import solver
from hub.models import Host, Manifest
from hub.solver import Unsatisfiable
from predictors.protocol import (
    DISPATCHED,
    POOL_SCOPE,
    RUNNING,
    USER_SCOPE,
    capability_queue,
    host_queue,
    scope_owner,
)

__all__ = ["Placement", "Unsatisfiable", "can_run", "eligible_hosts", "place", "replace"]


@dataclass(frozen=True)
class Placement:
    manifest: Manifest
    queue: str
    # Set when the job is pinned to one host's own queue.
    host: Host | None


def place(solution: solver.Solution, request: Mapping[str, Any], user_id: int) -> list[Placement]:
    """Where to run a new, solved evaluation request: one placement, or one per host for
    `hosts: all`."""
    if request["hosts"] == "all":
        placements: dict[int, Placement] = {}
        for match in solution.matches:  # highest model version first
            if match.host.pk not in placements:
                queue = host_queue(match.host.scope, match.host.name)
                placements[match.host.pk] = Placement(match.manifest, queue, match.host)
        return sorted(placements.values(), key=lambda p: p.host.name if p.host else "")
    manifest = solution.manifest
    return [_choose(manifest, solution.hosts_for(manifest), request, user_id)]


def replace(evaluation: Evaluation) -> Placement:
    """Where to dispatch an evaluation again (its host was lost): the same manifest, on a live
    host that can run it; for `hosts: all`, on the same host only."""
    if evaluation.model is None:
        raise Unsatisfiable("model", f"the manifest of {evaluation.model_name} was deleted")
    if evaluation.dataset is None:
        raise Unsatisfiable("dataset", f"the manifest of {evaluation.dataset_name} was deleted")
    eligible = eligible_hosts(evaluation)
    if evaluation.request["hosts"] == "all":
        pinned = evaluation.target_host
        if pinned is None or all(h.pk != pinned.pk for h in eligible):
            if pinned is None:
                raise Unsatisfiable("hosts", "its host was removed")
            why = "may no longer run it" if pinned.is_live else "is no longer live"
            raise Unsatisfiable("hosts", f"host {pinned.name} {why}")
        return Placement(evaluation.model, host_queue(pinned.scope, pinned.name), pinned)
    return _choose(evaluation.model, eligible, evaluation.request, evaluation.user_id)


def eligible_hosts(evaluation: Evaluation, among: list[Host] | None = None) -> list[Host]:
    """The live hosts (of `among`, if given) that may run `evaluation` (`hub.trust`) and meet
    its whole request, with its own model and dataset manifests."""
    if evaluation.model is None or evaluation.dataset is None:
        return []
    try:
        solution = solver.solve(
            evaluation.user,
            _constraints(evaluation.request),
            hosts=among,
            manifests=[evaluation.model],
            dataset=evaluation.dataset,
        )
    except Unsatisfiable:
        return []
    return solution.hosts_for(evaluation.model)


def can_run(evaluation: Evaluation, host: Host) -> bool:
    """Whether `host` (live or not) may run `evaluation` and meets its request: a claim's
    check, repeated at each report of the claimant."""
    return bool(eligible_hosts(evaluation, among=[host]))


def _constraints(request: Mapping[str, Any]) -> solver.Request:
    """An evaluation's constraints, but its dataset (chosen at launch)."""
    return dataclasses.replace(solver.Request.of_launch(request), dataset="")


def _choose(
    manifest: Manifest, eligible: list[Host], request: Mapping[str, Any], user_id: int
) -> Placement:
    if not eligible:
        raise Unsatisfiable("hosts", "no live host can run it")
    wanted = request.get("host") or ""
    if wanted:
        chosen = next((host for host in eligible if host.name == wanted), None)
        if chosen is None:
            able = ", ".join(sorted(host.name for host in eligible))
            raise Unsatisfiable(
                "host",
                f"host {wanted} cannot run it: it is not live, not one you may use, or does "
                f"not meet the request (hosts that can: {able})",
            )
        return Placement(manifest, host_queue(chosen.scope, chosen.name), chosen)
    by_scope: dict[str, list[Host]] = {}
    for host in eligible:
        by_scope.setdefault(host.scope, []).append(host)
    scopes = sorted(by_scope, key=lambda scope: (_scope_rank(scope, user_id), scope))
    live = list(Host.objects.live())
    for scope in scopes:
        queue = capability_queue(scope, manifest.framework, request["device"])
        eligible_ids = {host.pk for host in by_scope[scope]}
        consumers = [host for host in live if queue in (host.queues or [])]
        if consumers and all(host.pk in eligible_ids for host in consumers):
            return Placement(manifest, queue, None)
    # Some consumer of each shared queue could not run it: pin it to the least busy eligible
    # host of the preferred scope.
    preferred = by_scope[scopes[0]]
    active = Q(evaluations__status__in=(DISPATCHED, RUNNING))
    load = {
        host.pk: host.active
        for host in Host.objects.filter(pk__in=[h.pk for h in preferred]).annotate(
            active=Count("evaluations", filter=active)
        )
    }
    host = min(preferred, key=lambda h: (load.get(h.pk, 0), h.name))
    return Placement(manifest, host_queue(host.scope, host.name), host)


def _scope_rank(scope: str, user_id: int) -> int:
    """The launcher's own hosts first, then the shared pool, then the hosts of the groups whose
    hosts they trust (a group's host is never preferred to the pool)."""
    kind, owner = scope_owner(scope)
    if kind == USER_SCOPE and owner == user_id:
        return 0
    return 1 if kind == POOL_SCOPE else 2
