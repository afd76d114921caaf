"""Where an evaluation runs: the hub's solver, plus the hardware constraints, plus a queue.

`hub.solver.solve` matches the model, framework and device constraints against live hosts.
This module adds the hardware constraints of an evaluation request, checked against what each
agent registered as its host's `hardware` (the shape `predictors.introspection.stack` reads):

- `arch`: the host's `architecture` (amd64, arm64, …);
- `gpu_model`: a case-insensitive substring of a GPU's `name` (device gpu only);
- `min_memory_gb`: the memory of the device the job runs on: one GPU's `memory_bytes` for
  device gpu, the host's `memory_bytes` for device cpu.

The solver offers only hosts the launcher trusts (their own, their groups', the operators'
shared pool; `Host.objects.trusted_by`). Then placement picks the queue. A request that names a
`host` goes to that host's own queue `<scope>.host.<name>`. Otherwise `hosts: one` prefers the
launcher's own hosts, then their groups', then the shared pool, and within that scope goes to
the capability queue `<scope>.<framework>.<cpu|cuda>` so that Celery balances the job among
equal hosts, provided every live host consuming that queue can run it; otherwise (a framework
version or hardware constraint that only some of them meet) it is pinned to the eligible host
with the fewest active jobs, on that host's own queue. `hosts: all` pins one evaluation to each
eligible host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q

from evaluations.models import Evaluation
from hub import solver
from hub.models import Host, Manifest
from hub.solver import Unsatisfiable
from predictors.hub_client import capability_queue, host_queue
from predictors.versioning import satisfies, version_key

__all__ = ["Placement", "Unsatisfiable", "eligible_hosts", "find_dataset", "place", "replace"]

_GIB = 2**30


@dataclass(frozen=True)
class Placement:
    manifest: Manifest
    queue: str
    # Set when the job is pinned to one host's own queue.
    host: Host | None


def place(user: AbstractBaseUser | AnonymousUser, request: Mapping[str, Any]) -> list[Placement]:
    """Where to run a new evaluation request: one placement, or one per host for `hosts: all`.

    Raises Unsatisfiable naming the first constraint nothing satisfies.
    """
    matches = _hardware_filter(solver.solve(user, solver_request(request)), request)
    if request["hosts"] == "all":
        placements: dict[int, Placement] = {}
        for match in matches:  # highest model version first
            if match.host.pk not in placements:
                queue = host_queue(match.host.scope, match.host.name)
                placements[match.host.pk] = Placement(match.manifest, queue, match.host)
        return sorted(placements.values(), key=lambda p: p.host.name if p.host else "")
    manifest = matches[0].manifest
    eligible = [m.host for m in matches if m.manifest.pk == manifest.pk]
    return [_choose(manifest, eligible, request, user.pk)]


def replace(evaluation: Evaluation) -> Placement:
    """Where to dispatch an evaluation again (its host was lost): the same manifest, on a live
    host that can run it; for `hosts: all`, on the same host only."""
    if evaluation.model is None:
        raise Unsatisfiable("model", f"the manifest of {evaluation.model_name} was deleted")
    eligible = eligible_hosts(evaluation)
    if evaluation.request["hosts"] == "all":
        pinned = evaluation.target_host
        if pinned is None or all(h.pk != pinned.pk for h in eligible):
            name = pinned.name if pinned is not None else "its host"
            raise Unsatisfiable("hosts", f"host {name} is no longer live")
        return Placement(evaluation.model, host_queue(pinned.scope, pinned.name), pinned)
    return _choose(evaluation.model, eligible, evaluation.request, evaluation.user_id)


def eligible_hosts(evaluation: Evaluation) -> list[Host]:
    """The live hosts that can run `evaluation` (its own manifest, its whole request)."""
    try:
        matches = solver.solve(evaluation.user, solver_request(evaluation.request))
        matches = _hardware_filter(matches, evaluation.request)
    except Unsatisfiable:
        return []
    hosts: dict[int, Host] = {}
    for match in matches:
        if match.manifest.pk == evaluation.model_id:
            hosts.setdefault(match.host.pk, match.host)
    return list(hosts.values())


def find_dataset(user: AbstractBaseUser | AnonymousUser, name: str, version_range: str) -> Manifest:
    """The highest visible version of dataset `name` in `version_range`."""
    candidates = list(Manifest.objects.visible_to(user).filter(kind=Manifest.DATASET, name=name))
    if not candidates:
        raise Unsatisfiable("dataset", f"no dataset named '{name}'")
    matching = [m for m in candidates if satisfies(m.version, version_range)]
    if not matching:
        versions = ", ".join(sorted(m.version for m in candidates))
        raise Unsatisfiable(
            "dataset_version",
            f"no version of dataset {name} satisfies '{version_range}' (available: {versions})",
        )
    return max(matching, key=lambda m: version_key(m.version))


def solver_request(request: Mapping[str, Any]) -> solver.Request:
    return solver.Request(
        model=request["model"],
        version=request["model_version"],
        framework=request["framework"],
        framework_version=request["framework_version"],
        device=request["device"],
    )


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
    active = Q(evaluations__status__in=("dispatched", "running"))
    load = {
        host.pk: host.active
        for host in Host.objects.filter(pk__in=[h.pk for h in preferred]).annotate(
            active=Count("evaluations", filter=active)
        )
    }
    host = min(preferred, key=lambda h: (load.get(h.pk, 0), h.name))
    return Placement(manifest, host_queue(host.scope, host.name), host)


def _scope_rank(scope: str, user_id: int) -> int:
    """The launcher's own hosts first, then their groups', then the shared pool."""
    if scope == f"user-{user_id}":
        return 0
    return 1 if scope.startswith("group-") else 2


def _gpus(host: Host) -> list[dict[str, Any]]:
    gpus = (host.hardware or {}).get("gpus") or []
    return [gpu for gpu in gpus if isinstance(gpu, dict)]


def _memory_bytes(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _gpu_memory(host: Host, gpu_model: str) -> float:
    """The memory of the host's largest GPU (of model `gpu_model`, if given), in bytes."""
    return max(
        (
            _memory_bytes(gpu.get("memory_bytes"))
            for gpu in _gpus(host)
            if not gpu_model or gpu_model.lower() in str(gpu.get("name", "")).lower()
        ),
        default=0.0,
    )


def _hardware_filter(matches: list[solver.Match], request: Mapping[str, Any]) -> list[solver.Match]:
    """The matches whose host meets the hardware constraints; Unsatisfiable naming the first
    constraint (arch, gpu_model, min_memory_gb) that leaves none."""

    def keep(path: str, fits: Any, describe: Any) -> None:
        nonlocal matches
        hosts = {m.host.pk: m.host for m in matches}
        kept = [m for m in matches if fits(m.host)]
        if not kept:
            seen = "; ".join(f"{h.name}: {describe(h)}" for h in hosts.values())
            raise Unsatisfiable(path, f"no live host satisfies {path} {request[path]!r} ({seen})")
        matches = kept

    arch = request.get("arch") or ""
    gpu_model = request.get("gpu_model") or ""
    min_memory_gb = request.get("min_memory_gb")
    if arch:
        keep(
            "arch",
            lambda h: (h.hardware or {}).get("architecture") == arch,
            lambda h: (h.hardware or {}).get("architecture") or "architecture unknown",
        )
    if gpu_model:
        keep(
            "gpu_model",
            lambda h: any(gpu_model.lower() in str(g.get("name", "")).lower() for g in _gpus(h)),
            lambda h: ", ".join(str(g.get("name")) for g in _gpus(h)) or "no GPU",
        )
    if min_memory_gb is not None:
        if request["device"] == "gpu":
            keep(
                "min_memory_gb",
                lambda h: _gpu_memory(h, gpu_model) >= min_memory_gb * _GIB,
                lambda h: f"GPU memory {_gpu_memory(h, gpu_model) / _GIB:.1f} GB",
            )
        else:
            keep(
                "min_memory_gb",
                lambda h: (
                    _memory_bytes((h.hardware or {}).get("memory_bytes")) >= min_memory_gb * _GIB
                ),
                lambda h: (
                    f"memory {_memory_bytes((h.hardware or {}).get('memory_bytes')) / _GIB:.1f} GB"
                ),
            )
    return matches
