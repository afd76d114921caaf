"""The predictor images on this host, through the Docker SDK for Python: the client
(`docker_client`), the images with the `org.mlmodelscope.framework` label that `make images`
sets (`Images.scan`, each with its software environment, read once per image from the file the
build wrote, for the agent to register with the hub), and the image a model manifest names for
this host (`image_for`)."""

from __future__ import annotations

import importlib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from predictors import manifests
from predictors.evaluation import EvaluationError
from predictors.frameworks.predictor import first_line

__all__ = [
    "DockerUnavailable",
    "Image",
    "Images",
    "build_hint",
    "docker_client",
    "first_line",
    "image_for",
]

logger = logging.getLogger("mlmodelscope.containers")

FRAMEWORK_LABEL = "org.mlmodelscope.framework"
ENVIRONMENT_LABEL = "org.mlmodelscope.environment"


class DockerUnavailable(Exception):
    """The Docker daemon cannot be reached (or the SDK is missing)."""


def docker_client() -> Any:
    """A Docker SDK client that answered a ping; DockerUnavailable saying why otherwise."""
    try:
        # By name: the repository's docker/ folder (the images) is no package of ours.
        docker: Any = importlib.import_module("docker")
    except ImportError:  # pragma: no cover - a dependency of the package
        raise DockerUnavailable("the Docker SDK for Python (docker) is not installed") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        raise DockerUnavailable(
            f"the Docker daemon at {where} does not answer ({first_line(exc)}); start it "
            "(`dockerd &` as root, or `systemctl start docker`), or run the agent without "
            "--docker"
        ) from None
    return client


@dataclass
class Image:
    """A predictor image on this host."""

    id: str  # sha256:… of the image's configuration: it names every layer
    tags: list[str]
    framework: str
    framework_version: str
    device: str
    labels: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    def registration(self) -> dict[str, Any]:
        return {
            "digest": self.id,
            "tags": self.tags,
            "framework": self.framework,
            "framework_version": self.framework_version,
            "device": self.device,
            "labels": self.labels,
            "environment": self.environment,
        }


class Images:
    """The predictor images on this host (see the module docstring)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._environments: dict[str, dict[str, Any]] = {}

    def scan(self) -> list[Image]:
        found = []
        for image in self.client.images.list(filters={"label": FRAMEWORK_LABEL}):
            labels = dict(image.labels or {})
            if not image.tags:
                continue  # an old build whose tag moved on
            found.append(
                Image(
                    id=image.id,
                    tags=sorted(image.tags),
                    framework=labels.get(FRAMEWORK_LABEL, ""),
                    framework_version=labels.get(f"{FRAMEWORK_LABEL}.version", ""),
                    device=labels.get("org.mlmodelscope.device", "cpu"),
                    labels=labels,
                    environment=self.environment(image.id, labels),
                )
            )
        return sorted(found, key=lambda image: image.tags[0])

    def environment(self, image_id: str, labels: dict[str, str]) -> dict[str, Any]:
        """The image's software environment, read once from the file its build wrote."""
        if image_id in self._environments:
            return self._environments[image_id]
        path = labels.get(ENVIRONMENT_LABEL)
        environment: dict[str, Any] = {}
        if path:
            try:
                output = self.client.containers.run(
                    image_id,
                    ["cat", path],
                    entrypoint=[],
                    network_mode="none",
                    remove=True,
                    stdout=True,
                    stderr=False,
                )
                environment = json.loads(output)
            except Exception as exc:
                logger.warning("cannot read %s in image %s: %s", path, image_id[:19], exc)
        self._environments[image_id] = environment
        return environment

    def find(self, reference: str) -> Any | None:
        """The local image named `reference`, or None."""
        errors: Any = importlib.import_module("docker.errors")
        try:
            return self.client.images.get(reference)
        except errors.ImageNotFound:
            return None


def image_for(model_source: str, architecture: str, device: str) -> str:
    """The image the model manifest names for this architecture and device; EvaluationError
    saying what is missing."""
    model = manifests.load(model_source, kind="model")
    containers = model.data.get("container") or {}
    by_device = containers.get(architecture) if isinstance(containers, dict) else None
    image = by_device.get(device) if isinstance(by_device, dict) else None
    if not isinstance(image, str) or not image:
        raise EvaluationError(
            f"the manifest {model.name} {model.version} names no container image for "
            f"{architecture}/{device} (its `container.{architecture}.{device}` field)"
        )
    return image


def build_hint(image: str) -> str:
    """How to build an image of ours: `make images IMAGES=<framework>`."""
    repository, _, tag = image.partition(":")
    owner, _, name = repository.rpartition("/")
    if owner == "mlmodelscope" and name:
        gpu = " GPU=1" if tag.endswith("-gpu") else ""
        return f"build it with `make images IMAGES={name}{gpu}` (docker/build.py)"
    return "build or load it on this host (`docker load`)"
