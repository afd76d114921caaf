"""What an agent registers for its host (`POST /api/v1/hosts/`): the frameworks it offers with
the devices each can use here, the host's hardware (its roofline measured once) and software,
and the predictor images it runs in or runs evaluations in."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictors.agent.containers import Runner
from predictors.analysis import roofline
from predictors.frameworks.predictor import PredictorError, predictor_class
from predictors.host import introspection
from predictors.manifests.versioning import is_valid_version
from predictors.protocol import CPU, GPU, local_device

__all__ = ["OWN_ENVIRONMENT", "AgentError", "host_registration"]

logger = logging.getLogger("mlmodelscope.agent")

# Where the predictor images keep their software environment (docker/predictor/Dockerfile).
OWN_ENVIRONMENT = Path("/etc/mlmodelscope/environment.json")


class AgentError(Exception):
    """The agent cannot start (no framework, the hub refused it, …)."""


def host_registration(
    name: str,
    wanted: Sequence[str],
    *,
    runner: Runner | None,
    concurrency: int,
    pool: bool,
    instance: str,
    group: str | None = None,
    queues: Sequence[str] | None = None,
) -> dict[str, Any]:
    """What the agent of host `name` registers: the frameworks of `wanted` it offers (those
    installed here, or with `runner` those of its predictor images), with their devices,
    hardware, software, and the queues and scope it asks for. AgentError when it offers none."""
    stack = introspection.stack(list(wanted))
    images = runner.images.scan() if runner is not None else []
    if runner is not None:
        # In containers, the frameworks are the images' (one version each, as labelled).
        stack["frameworks"] = {
            framework: next((i.framework_version for i in images if i.framework == framework), None)
            for framework in wanted
        }
    frameworks = []
    for framework, version in stack["frameworks"].items():
        if version is None:
            continue
        if not is_valid_version(version):
            logger.warning("%s %s is not a semantic version; not offered", framework, version)
            continue
        if runner is not None:  # a device per image: -cpu, and -gpu where GPUs are
            devices = [
                device
                for device in (CPU, GPU)
                if any(i.framework == framework and i.device == device for i in images)
                and (device == CPU or stack["gpus"])
            ]
            if not devices:
                continue  # a GPU image on a host without GPUs
        else:
            devices = _devices(framework, stack)
        frameworks.append({"name": framework, "version": version, "devices": devices})
    if not frameworks and runner is not None:
        raise AgentError(
            f"no predictor image of {', '.join(wanted)} is on this host: build them "
            "with `make images` (docker/build.py)"
        )
    if not frameworks:
        raise AgentError(f"none of the frameworks {', '.join(wanted)} is installed on this host")
    registration: dict[str, Any] = {
        "name": name,
        "frameworks": frameworks,
        "hardware": {key: stack[key] for key in ("architecture", "cpu", "memory_bytes", "gpus")}
        # The host's roofline, measured once (`predictors.analysis.roofline`): the CPU's (numpy's
        # BLAS, the processor's theoretical peak, a STREAM triad), and the first GPU's
        # where one is. Each evaluation measures its own framework's (its result's).
        | {
            "roofline": {
                device: roofline.measure(device)
                for device in [CPU] + ([local_device(GPU)] if stack["gpus"] else [])
            }
        },
        "software": {
            key: stack[key] for key in ("os", "python", "numpy", "frameworks", "container")
        }
        | {"agent": {"concurrency": concurrency}},
        "pool": pool,
        "instance": instance,
    }
    if runner is not None:
        registration["software"]["docker"] = {
            "limits": runner.limits.describe(),
            "custom_code": runner.custom_code,
            "images": [
                {key: value for key, value in image.registration().items() if key != "environment"}
                for image in images
            ],
        }
        registration["images"] = [image.registration() for image in images]
    elif (own := _own_image(stack, frameworks)) is not None:
        # An agent running inside a predictor image registers that image, so that the hub
        # keeps its packages and links the results to it.
        registration["images"] = [own]
    if group:
        registration["group"] = group
    if queues:
        registration["queues"] = list(queues)
    return registration


def _devices(framework: str, stack: dict[str, Any]) -> list[str]:
    devices = [CPU]
    if stack["gpus"]:
        try:
            predictor_class(framework).check_device(local_device(GPU))
        except PredictorError as exc:
            logger.info("%s cannot use the GPU here: %s", framework, exc)
        else:
            devices.append(GPU)
    return devices


def _own_image(stack: dict[str, Any], frameworks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The predictor image this agent runs in, as a --docker agent registers its images, when
    it runs in one whose digest was given (MLMS_CONTAINER_DIGEST) and that holds its
    environment; else None."""
    container = stack.get("container") or {}
    tag, digest = container.get("image"), container.get("digest")
    if not tag or not digest or len(frameworks) != 1:
        return None
    try:
        environment = json.loads(OWN_ENVIRONMENT.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("the image's environment (%s) cannot be read: %s", OWN_ENVIRONMENT, exc)
        return None
    (framework,) = frameworks
    return {
        "digest": digest,
        "tags": [tag],
        "framework": framework["name"],
        "framework_version": framework["version"],
        "device": GPU if str(tag).endswith("-gpu") else CPU,
        "labels": {},
        "environment": environment if isinstance(environment, dict) else {},
    }
