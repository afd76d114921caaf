"""Evaluations in predictor containers: what `mlms agent --docker` adds (Docker SDK for Python).

The agent runs each evaluation in the image that the model manifest's `container` field names
for this host's architecture and the job's device (`container.amd64.cpu`). The container:

- has no network at all (`network_mode: none`) and holds no token: it talks only to the agent,
  over a Unix socket in a private folder the agent mounts (`predictors.agent.contained` says how).
  The agent fetches only the files the job's manifests name, from the hub into its cache, and
  hard-links each into a folder of the job's own that the container sees read-only (nothing
  else of the cache); it sends the container's progress and spans on to the hub, taking spans
  only in the shape the loop writes them and no message over MAX_LINE bytes;
- runs as the image's unprivileged user (the agent's own user when the agent is not root), on
  a read-only root file system (a private /tmp), with every capability dropped, no new
  privileges, a process limit, the GPUs for a gpu job (the NVIDIA container toolkit), and the
  CPU and memory limits of the request (`container_cpus`, `container_memory_mb`) capped by the
  host's settings (`--cpus`, `--memory`); the result records the limits the engine applied;
- is labelled with the evaluation and the agent, and removed when the job ends (an agent that
  starts removes what an earlier run of it left);
- runs the model manifest's custom processing code only when the agent opts in
  (`--allow-custom-code`; `predictors.processing.custom_code`), with each call's time limit
  (`--custom-code-seconds`) and a memory limit even where the host sets none
  (CUSTOM_CODE_MEMORY); an agent that has not opted in refuses such a job, saying why.

What can go wrong, and what the evaluation says:

- the image is not on the host: failed, naming the image and the command that builds it;
- the container used more memory than its limit (killed by the kernel): failed, "out of
  memory (limit …)";
- the container was killed otherwise mid-run (`docker kill`), or the daemon lost it (a
  restart): reported as lost, and the hub dispatches the evaluation again, as it does for a
  lost agent;
- a failure inside: its message (and for an unexpected error, its traceback).

The images themselves are `predictors.agent.images`; the agent's end of the container's
socket is `predictors.agent.relay`.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictors import manifests
from predictors.agent.images import Images, build_hint, first_line, image_for
from predictors.agent.relay import (
    FILES_MOUNT,
    SILENCE_MARGIN_SECONDS,
    Deadline,
    JobCalls,
    Relay,
    RunFolders,
    reported,
)
from predictors.evaluation import EvaluationCancelled, EvaluationError
from predictors.processing.custom_code import DEFAULT_CALL_SECONDS, RUNS_WHERE, code_in
from predictors.protocol import GPU, Job, ResultUpload
from predictors.tracing import Span

__all__ = [
    "ContainerLost",
    "Limits",
    "Runner",
    "parse_memory",
]

logger = logging.getLogger("mlmodelscope.containers")

AGENT_LABEL = "org.mlmodelscope.agent"
EVALUATION_LABEL = "org.mlmodelscope.evaluation"
RUN_MOUNT = "/mlms/run"

# How the agent tells a container to run the manifest's custom code (`--allow-custom-code`).
CUSTOM_CODE_ENV = "MLMS_CUSTOM_CODE"
CUSTOM_CODE_SECONDS_ENV = "MLMS_CUSTOM_CODE_SECONDS"
# The memory of a container that runs custom code when neither the host nor the request
# limits it: custom code never runs without a memory limit.
CUSTOM_CODE_MEMORY = 4 * 2**30
# Processes (and threads) a container may start.
PIDS_LIMIT = 4096


class ContainerLost(Exception):
    """The container was killed mid-run by something other than its memory limit: the hub
    should dispatch the evaluation again."""


_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_memory(text: str) -> int:
    """Bytes of a size such as `512m`, `4g`, `4GiB` or `1073741824`; ValueError naming it."""
    value = text.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = value, ""
    if value and value[-1] in _UNITS:
        number, unit = value[:-1], value[-1]
    try:
        amount = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 512m, 4g)") from None
    if not math.isfinite(amount) or amount > 2**60:
        raise ValueError(f"{text!r} is not a size (e.g. 512m, 4g)")
    size = int(amount * _UNITS[unit])
    if size < 6 * 2**20:
        raise ValueError(f"{text!r} is less than Docker's minimum of 6 MiB")
    return size


def show_bytes(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


@dataclass(frozen=True)
class Limits:
    """A container's limits: CPUs (fractions allowed) and memory in bytes (None: no limit)."""

    cpus: float | None = None
    memory: int | None = None

    def describe(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "memory_bytes": self.memory}


class Runner:
    """Runs one job's evaluation in a container and relays what it says (see the module
    docstring). `agent` is the host's name; `label` names this agent in its containers' labels
    (the hub's URL and the host's name, by default the name), so that an agent removes only
    what an earlier run of itself left."""

    def __init__(
        self,
        client: Any,
        agent: str,
        cache_dir: Path,
        *,
        limits: Limits | None = None,
        architecture: str = "amd64",
        label: str | None = None,
        custom_code: bool = False,
        custom_code_seconds: float = DEFAULT_CALL_SECONDS,
    ) -> None:
        self.client = client
        # Whether this host runs manifests' custom processing code (`--allow-custom-code`).
        self.custom_code = custom_code
        self.custom_code_seconds = custom_code_seconds
        self.agent = agent
        self.label = label or agent
        self.cache_dir = cache_dir.resolve()
        self.limits = limits or Limits()
        self.architecture = architecture
        self.images = Images(client)

    def limits_for(self, job: Job) -> Limits:
        """The job's container limits: the request's (`container_cpus`, `container_memory_mb`),
        each capped by the host's own (`--cpus`, `--memory`), else the host's."""
        asked = job.limits or {}
        cpus, memory_mb = asked.get("cpus"), asked.get("memory_mb")
        memory = int(memory_mb) * 2**20 if memory_mb is not None else None
        return Limits(
            cpus=min(x for x in (cpus, self.limits.cpus) if x is not None)
            if cpus is not None or self.limits.cpus is not None
            else None,
            memory=min(x for x in (memory, self.limits.memory) if x is not None)
            if memory is not None or self.limits.memory is not None
            else None,
        )

    def remove_leftovers(self) -> None:
        """Remove the containers an earlier run of this agent left (it stopped mid-job)."""
        try:
            leftovers = self.client.containers.list(
                all=True, filters={"label": f"{AGENT_LABEL}={self.label}"}
            )
            for container in leftovers:
                logger.warning("removing container %s left by an earlier run", container.short_id)
                container.remove(force=True)
        except Exception as exc:  # a container that went away meanwhile: not worth stopping for
            logger.warning("could not remove the containers an earlier run left: %s", exc)

    def run(
        self,
        job: Job,
        fetch: Callable[[str, str | None], Path],
        progress: Callable[[int, int], None],
        cancelled: Callable[[], bool],
        spans: Callable[[list[Span]], None] | None,
    ) -> ResultUpload:
        """Run `job` in its image; its result, with the image recorded in its stack. Raises
        EvaluationCancelled, EvaluationError (failed, for the user), ContainerLost."""
        reference = image_for(job.model.source, self.architecture, job.device)
        image = self.images.find(reference)
        if image is None:
            raise EvaluationError(
                f"the image {reference} (the manifest's container for {self.architecture}/"
                f"{job.device}) is not on host {self.agent}: {build_hint(reference)}"
            )
        limits = self.limits_for(job)
        code = _code_fields(job)
        environment = {"MLMS_CONTAINER_IMAGE": reference, "HOME": "/tmp"}  # noqa: S108
        if code:
            if not self.custom_code:
                raise EvaluationError(
                    f"{job.model.name} {job.model.version} has custom {' and '.join(code)} "
                    f"code, and host {self.agent} does not run custom code (its agent was "
                    f"started without --allow-custom-code): {RUNS_WHERE}"
                )
            environment[CUSTOM_CODE_ENV] = "1"
            environment[CUSTOM_CODE_SECONDS_ENV] = f"{self.custom_code_seconds:g}"
            if limits.memory is None:
                limits = Limits(cpus=limits.cpus, memory=CUSTOM_CODE_MEMORY)
        work = RunFolders(self.cache_dir, job)
        container = None
        relay: Relay | None = None
        try:
            relay = Relay(job, JobCalls(fetch, progress, cancelled, spans), work)
            relay.start()
            container = self.client.containers.create(
                image.id,
                ["python", "-m", "predictors.agent.contained", RUN_MOUNT],
                entrypoint=[],
                user=work.user,
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": "rw,nosuid,nodev,size=1g"},  # noqa: S108 - the container's own
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=PIDS_LIMIT,
                mem_limit=limits.memory,
                memswap_limit=limits.memory,  # no swap beyond the limit
                nano_cpus=int(limits.cpus * 1e9) if limits.cpus else None,
                device_requests=_gpus() if job.device == GPU else None,
                volumes={
                    str(work.files): {"bind": FILES_MOUNT, "mode": "ro"},
                    # Read-only: connecting to the socket needs no write access to its folder.
                    str(work.socket): {"bind": RUN_MOUNT, "mode": "ro"},
                },
                environment=environment,
                labels={AGENT_LABEL: self.label, EVALUATION_LABEL: job.id},
                name=f"mlms-{job.id[:8]}-{job.attempt}-{os.urandom(3).hex()}",
            )
            relay.container = container
            if code:
                relay.silence_limit = self.custom_code_seconds + SILENCE_MARGIN_SECONDS
            try:
                container.start()
                deadline = Deadline(relay, container)
                deadline.start()
                try:
                    status = container.wait()
                finally:
                    deadline.finished.set()
                container.reload()
            except Exception as exc:  # the daemon went away or restarted mid-run
                raise ContainerLost(
                    f"the Docker daemon lost its container ({reference}) mid-run: {first_line(exc)}"
                ) from None
            return self._outcome(job, relay, container, image, reference, status)
        finally:
            if relay is not None:
                relay.stop()
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception as exc:
                    logger.warning("could not remove container %s: %s", container.short_id, exc)
            work.remove()

    def _outcome(
        self,
        job: Job,
        relay: Relay,
        container: Any,
        image: Any,
        reference: str,
        status: dict[str, Any],
    ) -> ResultUpload:
        code = int(status.get("StatusCode", -1))
        state = container.attrs.get("State", {})
        # The limits as the engine applied them, not as asked.
        config = container.attrs.get("HostConfig", {})
        applied = Limits(
            cpus=config["NanoCpus"] / 1e9 if config.get("NanoCpus") else None,
            memory=int(config["Memory"]) if config.get("Memory") else None,
        )
        upload = reported(relay)
        if upload is not None:
            upload.stack["container"] = {
                "image": reference,
                "digest": image.id,
                "id": container.id,
                "limits": applied.describe(),
            }
            return upload
        if relay.timed_out:
            raise EvaluationError(relay.timed_out)
        if state.get("OOMKilled"):
            limit = show_bytes(applied.memory) if applied.memory else "the host's memory"
            raise EvaluationError(
                f"out of memory (limit {limit}): the container running {reference} was killed "
                "by the kernel; ask for more (`container_memory_mb`) or run it on a host with a "
                "higher limit (`mlms agent --docker --memory …`)"
            )
        if relay.cancel_sent:
            raise EvaluationCancelled()
        if relay.refused:
            raise EvaluationError(f"the container running {reference} {relay.refused}")
        logs = container.logs(tail=20).decode(errors="replace").strip()
        if code in (137, 143) or code < 0:
            raise ContainerLost(
                f"its container ({reference}) was killed mid-run (exit status {code}, not by its "
                "memory limit)"
            )
        last = logs.splitlines()[-5:] if logs else []
        raise EvaluationError(
            f"the container running {reference} exited with status {code} before it reported "
            "a result" + (": " + " | ".join(last) if last else "")
        )


def _code_fields(job: Job) -> list[str]:
    """The fields of the job's model manifest that hold custom code."""
    try:
        data = manifests.load(job.model.source, kind="model").data
    except manifests.ManifestError:
        return []  # the container reports the manifest's own error
    return code_in(data)


def _gpus() -> list[Any]:
    """Every GPU, for a gpu job (the NVIDIA container toolkit hands them to the container)."""
    types: Any = importlib.import_module("docker.types")
    return [types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
