"""The constraint solver: which manifests can run on which live hosts. Every constraint of a
launch is solved here, once.

A `Request` names a model (and optionally a version range, a framework, a framework version
range, a device), the hardware it needs (`arch`, `gpu_model`, `min_memory_gb`), a host by name,
and a dataset (name, version range, split). `solve` answers every (manifest, host) pair that
meets all of them, the highest model version first, with the dataset chosen. When nothing does,
`Unsatisfiable` names the first constraint that emptied the candidates, in the order a user
would relax them: `model`, `version`, `framework`, `dataset`, `dataset_version`, `split`,
`hosts` (no live host at all), `framework` (no live host runs it), `framework_version`,
`framework_range` (the manifest's own framework range), `device`, `arch`, `gpu_model`,
`min_memory_gb`, `container` (a host whose agent runs jobs in containers, `--docker`, runs a
manifest only when it has the image the manifest's `container` field names for the host's
architecture and the device; a request with container limits runs only on such hosts:
`container_limits`), `custom_code` (a manifest with custom processing code runs only on hosts
whose agent opts in, `--docker --allow-custom-code`), `host`.

The hardware constraints are checked against what each agent registered as its host's
`hardware` (the shape `predictors.host.introspection.stack` reads): `arch` the host's
`architecture`; `gpu_model` a case-insensitive substring of a GPU's `name` (device gpu only);
`min_memory_gb` the memory of the device the job runs on (one GPU's for gpu, the host's for
cpu).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from hub import trust
from hub.models import Host, Manifest
from predictors.manifests.versioning import InvalidRange, satisfies, validate_range, version_key
from predictors.processing.custom_code import code_in
from predictors.protocol import DEVICES, GPU

__all__ = ["DEVICES", "InvalidConstraint", "Match", "Request", "Solution", "Unsatisfiable", "solve"]

_GIB = 2**30


class Unsatisfiable(Exception):
    """No manifest and live host meet the request: `path` names the constraint left unmet.
    (The caller says what that means: 404 for resolve; for a launch, 404 when the model or
    dataset does not exist and 400 otherwise.)"""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


class InvalidConstraint(Unsatisfiable):
    """A constraint that is malformed rather than unmet."""


@dataclass(frozen=True)
class Request:
    """Every constraint of a launch (or of `GET /api/v1/resolve/`)."""

    model: str
    version: str = ""
    framework: str = ""
    framework_version: str = ""
    device: str = ""
    arch: str = ""
    gpu_model: str = ""
    min_memory_gb: float | None = None
    host: str = ""
    # Limits for the evaluation's container (container_cpus, container_memory_mb): only hosts
    # whose agent runs jobs in containers can apply them.
    in_container: bool = False
    # The dataset, when the request runs one (a launch; resolve may leave it out).
    dataset: str = ""
    dataset_version: str = "*"
    split: str = ""
    # Timed without scoring: the dataset's task need not be the model's (its labels are not
    # read), only its inputs fit the model.
    latency_only: bool = False

    @classmethod
    def of_launch(cls, request: Mapping[str, Any]) -> Request:
        """The constraints of a validated launch request (`POST /api/v1/evaluations/`)."""
        names = {spec.name for spec in fields(cls)}
        values = {name: request[name] for name in names if name in request}
        values["version"] = request.get("model_version", "")
        values["in_container"] = any(
            request.get(name) is not None for name in ("container_cpus", "container_memory_mb")
        )
        return cls(**values)


@dataclass(frozen=True)
class Match:
    manifest: Manifest
    host: Host
    framework_version: str
    device: str


@dataclass(frozen=True)
class Solution:
    """What `solve` answers: the matches (highest model version first) and the dataset."""

    matches: list[Match]
    dataset: Manifest | None

    @property
    def manifest(self) -> Manifest:
        """The manifest a launch runs: the highest version that some host can run."""
        return self.matches[0].manifest

    def hosts_for(self, manifest: Manifest) -> list[Host]:
        hosts: dict[int, Host] = {}
        for match in self.matches:
            if match.manifest.pk == manifest.pk:
                hosts.setdefault(match.host.pk, match.host)
        return list(hosts.values())


def solve(
    user: AbstractBaseUser | AnonymousUser,
    request: Request,
    *,
    hosts: Iterable[Host] | None = None,
    manifests: Iterable[Manifest] | None = None,
    dataset: Manifest | None = None,
) -> Solution:
    """Every (manifest, host) pair that meets `request`, among the live hosts `user` trusts
    (or among `hosts`, for a claim's check of one host), and among the visible manifests (or
    `manifests` and `dataset`, for an evaluation whose manifests are chosen already). A host runs
    a manifest only where its owner may read it and the dataset (`hub.trust`)."""
    _check(request)
    candidates = _candidate_manifests(user, request, manifests)
    if dataset is None and request.dataset:
        dataset = _dataset(user, request, candidates[0])
    offered = _trusted_hosts(user, request.host, among=hosts)
    matches = _software(request, candidates, offered)
    matches = _readable(matches, dataset, request.host)
    matches = _hardware(request, matches)
    matches = _containers(request, matches)
    if request.host:
        named = [m for m in matches if m.host.name == request.host]
        if not named:
            able = ", ".join(sorted({m.host.name for m in matches}))
            raise Unsatisfiable(
                "host",
                f"host {request.host} cannot run it: it is not live, not one you may use, or "
                f"does not meet the request (hosts that can: {able})",
            )
        matches = named
    return Solution(_custom_code(matches), dataset)


def _check(request: Request) -> None:
    if not request.model:
        raise InvalidConstraint("model", "'model' is required")
    for name in ("version", "framework_version", "dataset_version"):
        value = getattr(request, name)
        if value:
            try:
                validate_range(value)
            except InvalidRange as error:
                raise InvalidConstraint(name, str(error)) from None
    if request.device and request.device not in DEVICES:
        raise InvalidConstraint("device", f"'{request.device}' is not one of {', '.join(DEVICES)}")
    if request.gpu_model and request.device != GPU:
        raise InvalidConstraint("gpu_model", "needs device gpu")
    if request.min_memory_gb is not None and request.min_memory_gb < 0:
        raise InvalidConstraint("min_memory_gb", "must be 0 or more")


def _names(values: Any) -> str:
    return ", ".join(sorted(set(values))) or "none"


def _candidate_manifests(
    user: AbstractBaseUser | AnonymousUser,
    request: Request,
    given: Iterable[Manifest] | None,
) -> list[Manifest]:
    """The visible model manifests that satisfy the model-side constraints."""
    if given is not None:
        manifests = list(given)
    else:
        manifests = list(
            Manifest.objects.visible_to(user).filter(kind=Manifest.MODEL, name=request.model)
        )
    if not manifests:
        raise Unsatisfiable("model", f"no model named '{request.model}'")
    if request.version:
        matching = [m for m in manifests if satisfies(m.version, request.version)]
        if not matching:
            raise Unsatisfiable(
                "version",
                f"no version of {request.model} satisfies '{request.version}' "
                f"(available: {_names(m.version for m in manifests)})",
            )
        manifests = matching
    if request.framework:
        matching = [m for m in manifests if m.framework == request.framework]
        if not matching:
            raise Unsatisfiable(
                "framework",
                f"{request.model} has no manifest for framework '{request.framework}' "
                f"(available: {_names(m.framework for m in manifests)})",
            )
        manifests = matching
    return sorted(manifests, key=lambda m: version_key(m.version), reverse=True)


def _dataset(user: AbstractBaseUser | AnonymousUser, request: Request, model: Manifest) -> Manifest:
    """The highest visible version of the request's dataset in its range, for the model's task,
    with the request's split."""
    name = request.dataset
    candidates = list(Manifest.objects.visible_to(user).filter(kind=Manifest.DATASET, name=name))
    if not candidates:
        raise Unsatisfiable("dataset", f"no dataset named '{name}'")
    matching = [m for m in candidates if satisfies(m.version, request.dataset_version or "*")]
    if not matching:
        raise Unsatisfiable(
            "dataset_version",
            f"no version of dataset {name} satisfies '{request.dataset_version}' "
            f"(available: {_names(m.version for m in candidates)})",
        )
    dataset = max(matching, key=lambda m: version_key(m.version))
    if dataset.task != model.task and not request.latency_only:
        raise InvalidConstraint(
            "dataset",
            f"dataset {dataset.name} is for {dataset.task}, but model {model.name} does "
            f"{model.task} (time it on the dataset's inputs with latency_only)",
        )
    splits = (dataset.content or {}).get("splits") or {}
    if request.split and request.split not in splits:
        raise InvalidConstraint(
            "split",
            f"dataset {dataset.name} {dataset.version} has no split '{request.split}' (it has "
            f"{', '.join(splits) or 'none'})",
        )
    return dataset


def _trusted_hosts(
    user: AbstractBaseUser | AnonymousUser, named: str, among: Iterable[Host] | None
) -> list[Host]:
    """The live hosts (or those of `among`, live or not: a claim's check) that `user` trusts
    (`hub.trust`), with the host the request names where `user` may use it (a host lent to one
    of their groups runs their jobs unasked only when they trust the group's hosts)."""
    trusted = Host.objects.trusted_by(user)
    if named:
        trusted = trusted | Host.objects.usable_by(user).filter(name=named)
    if among is not None:
        given = list(among)
        ids = set(trusted.filter(pk__in=[host.pk for host in given]).values_list("pk", flat=True))
        return [host for host in given if host.pk in ids]
    hosts = list(trusted.live().distinct())
    if hosts:
        return hosts
    if Host.objects.live().exists():
        raise Unsatisfiable(
            "hosts",
            "no live host that you may use is registered: jobs run only on your own hosts, "
            "the operators' shared pool, and the hosts of the groups whose hosts you trust or "
            "that you name (start an agent of your own with `mlms agent`)",
        )
    raise Unsatisfiable("hosts", "no live host is registered (start an agent with `mlms agent`)")


def _readable(matches: list[Match], dataset: Manifest | None, named: str) -> list[Match]:
    """The matches whose host's owner may read the manifest and the dataset (`hub.trust`);
    Unsatisfiable naming the hosts left out when none is left (`hosts`), or when they leave
    out the host the request names (`host`)."""
    kept: list[Match] = []
    able: dict[int, set[int]] = {}
    for match in matches:
        pk = match.manifest.pk
        if pk not in able:
            hosts = [m.host for m in matches if m.manifest.pk == pk]
            able[pk] = trust.readers(hosts, [match.manifest, *([dataset] if dataset else [])])
        if match.host.pk in able[pk]:
            kept.append(match)
    if named and any(m.host.name == named for m in matches):
        if not any(m.host.name == named for m in kept):
            raise Unsatisfiable(
                "host",
                f"host {named} cannot run it: its owner may not read its model or dataset "
                "(share the manifests with the host's group, or name another host)",
            )
    if kept or not matches:
        return kept
    raise Unsatisfiable(
        "hosts",
        "the hosts that could run it belong to users who may not read its model or dataset ("
        + ", ".join(sorted({m.host.name for m in matches}))
        + "): share the manifests with their group, or run it on your own hosts or the pool",
    )


def _host_offers(host: Host, framework: str) -> list[dict[str, Any]]:
    return [
        entry
        for entry in host.frameworks
        if isinstance(entry, dict) and entry.get("name") == framework
    ]


def _software(request: Request, manifests: list[Manifest], hosts: list[Host]) -> list[Match]:
    """The (manifest, host, device) triples whose host runs the manifest's framework, in a
    version both the request and the manifest accept, on the requested device."""
    if not hosts:
        raise Unsatisfiable("hosts", "no live host can run it")
    frameworks = {m.framework for m in manifests}
    offering = [(h, e) for h in hosts for fw in frameworks for e in _host_offers(h, fw)]
    if not offering:
        raise Unsatisfiable("framework", f"no live host runs {_names(frameworks)}")
    if request.framework_version:
        offering = [
            (h, e)
            for h, e in offering
            if satisfies(str(e.get("version", "")), request.framework_version)
        ]
        if not offering:
            raise Unsatisfiable(
                "framework_version",
                f"no live host runs {_names(frameworks)} satisfying '{request.framework_version}'",
            )
    matches: list[Match] = []
    unmet_range: list[str] = []
    unmet_device = False
    for manifest in manifests:
        for host, entry in offering:
            if entry.get("name") != manifest.framework:
                continue
            version = str(entry.get("version", ""))
            if manifest.framework_range and not satisfies(version, manifest.framework_range):
                unmet_range.append(
                    f"{manifest.name} {manifest.version} needs {manifest.framework} "
                    f"{manifest.framework_range} (host {host.name} has {version})"
                )
                continue
            devices = [d for d in entry.get("devices", ["cpu"]) if d in DEVICES]
            if request.device and request.device not in devices:
                unmet_device = True
                continue
            for device in [request.device] if request.device else devices:
                matches.append(Match(manifest, host, version, device))
    if not matches:
        if unmet_device and request.device:
            raise Unsatisfiable(
                "device", f"no live host runs {_names(frameworks)} on {request.device}"
            )
        # The manifests' own framework ranges, not the request's framework_version, ruled out
        # every host.
        raise Unsatisfiable(
            "framework_range",
            "no live host has a framework version the manifest requires: "
            + "; ".join(sorted(set(unmet_range))),
        )
    return matches


def _gpus(host: Host) -> list[dict[str, Any]]:
    gpus = (host.hardware or {}).get("gpus") or []
    return [gpu for gpu in gpus if isinstance(gpu, dict)]


def _bytes(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _gpu_memory(host: Host, gpu_model: str) -> float:
    """The memory of the host's largest GPU (of model `gpu_model`, if given), in bytes."""
    return max(
        (
            _bytes(gpu.get("memory_bytes"))
            for gpu in _gpus(host)
            if not gpu_model or gpu_model.lower() in str(gpu.get("name", "")).lower()
        ),
        default=0.0,
    )


def manifest_image(manifest: Manifest, host: Host, device: str) -> str | None:
    """The image `manifest` names for the host's architecture and `device` (its `container`
    field), or None."""
    containers = (manifest.content or {}).get("container")
    architecture = (host.hardware or {}).get("architecture")
    by_device = containers.get(architecture) if isinstance(containers, dict) else None
    image = by_device.get(device) if isinstance(by_device, dict) else None
    return image if isinstance(image, str) else None


def _host_images(host: Host) -> set[str] | None:
    """The image tags of a host whose agent runs jobs in containers (--docker), or None for
    a host that runs them in its own process."""
    docker = (host.software or {}).get("docker")
    if not isinstance(docker, dict):
        return None
    return {
        str(tag)
        for image in docker.get("images") or []
        if isinstance(image, dict)
        for tag in image.get("tags") or []
    }


def _containers(request: Request, matches: list[Match]) -> list[Match]:
    """The matches a host can run: one in containers only where it has the image that the
    manifest names for its architecture and the device; Unsatisfiable (`container`) naming
    the images missing when none is left. A request with container limits runs only in
    containers (Unsatisfiable `container_limits` when no host runs jobs in them)."""
    if request.in_container:
        contained = [m for m in matches if _host_images(m.host) is not None]
        if not contained:
            raise Unsatisfiable(
                "container_limits",
                "container_cpus and container_memory_mb limit the evaluation's container, and "
                "no live host that can run it runs jobs in containers (`mlms agent --docker`): "
                + ", ".join(sorted({m.host.name for m in matches})),
            )
        matches = contained
    kept, missing = [], []
    for match in matches:
        tags = _host_images(match.host)
        if tags is None:
            kept.append(match)
            continue
        image = manifest_image(match.manifest, match.host, match.device)
        if image is not None and image in tags:
            kept.append(match)
        else:
            wanted = image or (
                f"no image for {(match.host.hardware or {}).get('architecture')}/{match.device}"
            )
            missing.append(f"{match.host.name} lacks {wanted}")
    if not kept:
        raise Unsatisfiable(
            "container",
            "no live host has the container image the manifest names ("
            + "; ".join(sorted(set(missing)))
            + "); build it there with `make images` (docker/build.py) and restart its agent",
        )
    return kept


def _runs_custom_code(host: Host) -> bool:
    """Whether the host's agent runs manifests' custom code (`--docker --allow-custom-code`)."""
    docker = (host.software or {}).get("docker")
    return isinstance(docker, dict) and docker.get("custom_code") is True


def _custom_code(matches: list[Match]) -> list[Match]:
    """A manifest with custom processing code runs only on hosts that opt in; Unsatisfiable
    (`custom_code`) naming the hosts that could run it otherwise when none does."""
    kept = [
        match
        for match in matches
        if not code_in(match.manifest.content or {}) or _runs_custom_code(match.host)
    ]
    if kept or not matches:
        return kept
    manifest = matches[0].manifest
    fields = " and ".join(code_in(manifest.content or {}))
    raise Unsatisfiable(
        "custom_code",
        f"{manifest.name} {manifest.version} has custom {fields} code, which runs only inside a "
        "predictor container on a host whose agent opts in (`mlms agent --docker "
        "--allow-custom-code`); none of the live hosts that could run it does: "
        + ", ".join(sorted({m.host.name for m in matches})),
    )


def _hardware(request: Request, matches: list[Match]) -> list[Match]:
    """The matches whose host meets the hardware constraints; Unsatisfiable naming the first
    constraint (arch, gpu_model, min_memory_gb) that leaves none."""

    def keep(
        path: str, value: Any, fits: Callable[[Match], bool], describe: Callable[[Match], str]
    ) -> None:
        nonlocal matches
        kept = [m for m in matches if fits(m)]
        if not kept:
            seen = "; ".join(sorted({f"{m.host.name}: {describe(m)}" for m in matches}))
            raise Unsatisfiable(path, f"no live host satisfies {path} {value!r} ({seen})")
        matches = kept

    if request.arch:
        keep(
            "arch",
            request.arch,
            lambda m: (m.host.hardware or {}).get("architecture") == request.arch,
            lambda m: (m.host.hardware or {}).get("architecture") or "architecture unknown",
        )
    if request.gpu_model:
        wanted = request.gpu_model.lower()
        keep(
            "gpu_model",
            request.gpu_model,
            lambda m: any(wanted in str(g.get("name", "")).lower() for g in _gpus(m.host)),
            lambda m: ", ".join(str(g.get("name")) for g in _gpus(m.host)) or "no GPU",
        )
    if request.min_memory_gb is not None:
        needed = request.min_memory_gb * _GIB

        def memory(match: Match) -> float:
            if match.device == GPU:
                return _gpu_memory(match.host, request.gpu_model)
            return _bytes((match.host.hardware or {}).get("memory_bytes"))

        keep(
            "min_memory_gb",
            request.min_memory_gb,
            lambda m: memory(m) >= needed,
            lambda m: f"{'GPU memory' if m.device == GPU else 'memory'} {memory(m) / _GIB:.1f} GB",
        )
    return matches
