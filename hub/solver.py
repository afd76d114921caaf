"""The constraint solver: which manifests can run on which live hosts.

A request names a model (and optionally a version range, a framework, a framework version
range and a device). The answer is every (manifest, host) pair that satisfies all of them, the
highest model version first. When nothing does, `Unsatisfiable` names the first constraint that
emptied the candidates, in the order a user would relax them: `model`, `version`, `framework`,
`hosts` (no live host at all), `framework` (no live host runs it), `framework_version`,
`framework_range` (the manifest's own framework range) and `device`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from hub.models import Host, Manifest
from predictors.versioning import InvalidRange, satisfies, validate_range, version_key

DEVICES = ("cpu", "gpu")


class Unsatisfiable(Exception):
    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


class InvalidConstraint(Unsatisfiable):
    """A constraint that is malformed rather than unmet."""


@dataclass(frozen=True)
class Request:
    model: str
    version: str = ""
    framework: str = ""
    framework_version: str = ""
    device: str = ""


@dataclass(frozen=True)
class Match:
    manifest: Manifest
    host: Host
    framework_version: str
    device: str


def _check(request: Request) -> None:
    if not request.model:
        raise InvalidConstraint("model", "'model' is required")
    for field in ("version", "framework_version"):
        value = getattr(request, field)
        if value:
            try:
                validate_range(value)
            except InvalidRange as error:
                raise InvalidConstraint(field, str(error)) from None
    if request.device and request.device not in DEVICES:
        raise InvalidConstraint("device", f"'{request.device}' is not one of {', '.join(DEVICES)}")


def _names(values: Any) -> str:
    return ", ".join(sorted(set(values))) or "none"


def candidate_manifests(user: AbstractBaseUser | AnonymousUser, request: Request) -> list[Manifest]:
    """The visible model manifests that satisfy the model-side constraints."""
    _check(request)
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


def _host_offers(host: Host, framework: str) -> list[dict[str, Any]]:
    return [
        entry
        for entry in host.frameworks
        if isinstance(entry, dict) and entry.get("name") == framework
    ]


def solve(user: AbstractBaseUser | AnonymousUser, request: Request) -> list[Match]:
    manifests = candidate_manifests(user, request)
    hosts = list(Host.objects.live().trusted_by(user))
    if not hosts:
        if Host.objects.live().exists():
            raise Unsatisfiable(
                "hosts",
                "no live host that you may use is registered: jobs run only on your own hosts, "
                "your groups' hosts and the operators' shared pool (start an agent of your own "
                "with `mlms agent`)",
            )
        raise Unsatisfiable(
            "hosts", "no live host is registered (start an agent with `mlms agent`)"
        )
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
