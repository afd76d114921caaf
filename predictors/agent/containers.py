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

`Images.scan` reads the images this host has (those with the `org.mlmodelscope.framework`
label that `make images` sets), with each image's software environment (read once per image
from the file the build wrote), for the agent to register with the hub.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import math
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from predictors import manifests
from predictors.evaluation import EvaluationCancelled, EvaluationError
from predictors.processing.custom_code import DEFAULT_CALL_SECONDS, RUNS_WHERE, fields_with_code
from predictors.protocol import GPU, Job, ResultUpload
from predictors.tracing import Span

__all__ = [
    "ContainerLost",
    "DockerUnavailable",
    "Images",
    "Limits",
    "Runner",
    "docker_client",
    "parse_memory",
]

logger = logging.getLogger("mlmodelscope.containers")

FRAMEWORK_LABEL = "org.mlmodelscope.framework"
ENVIRONMENT_LABEL = "org.mlmodelscope.environment"
AGENT_LABEL = "org.mlmodelscope.agent"
EVALUATION_LABEL = "org.mlmodelscope.evaluation"
FILES_MOUNT = "/mlms/files"
RUN_MOUNT = "/mlms/run"
SOCKET = "agent.sock"
# How the agent tells a container to run the manifest's custom code (`--allow-custom-code`).
CUSTOM_CODE_ENV = "MLMS_CUSTOM_CODE"
CUSTOM_CODE_SECONDS_ENV = "MLMS_CUSTOM_CODE_SECONDS"
# A container that runs custom code and says nothing for its call limit plus this long is
# stopped (the code holds the interpreter, so its own watchdog cannot run); one that has sent
# its outcome and is still running this long after is stopped too.
SILENCE_MARGIN_SECONDS = 15.0
OUTCOME_GRACE_SECONDS = 10.0
# The memory of a container that runs custom code when neither the host nor the request
# limits it: custom code never runs without a memory limit.
CUSTOM_CODE_MEMORY = 4 * 2**30
# The images' unprivileged user (docker/*/Dockerfile).
CONTAINER_UID = 10001
# How long a container may take to stop between two predictions after a cancel.
STOP_SECONDS = 30
# Processes (and threads) a container may start.
PIDS_LIMIT = 4096


class DockerUnavailable(Exception):
    """The Docker daemon cannot be reached (or the SDK is missing)."""


class ContainerLost(Exception):
    """The container was killed mid-run by something other than its memory limit: the hub
    should dispatch the evaluation again."""


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
            f"the Docker daemon at {where} does not answer ({_first_line(exc)}); start it "
            "(`dockerd &` as root, or `systemctl start docker`), or run the agent without "
            "--docker"
        ) from None
    return client


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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
    from predictors import manifests

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
        work = _RunFolders(self.cache_dir, job)
        container = None
        relay: _Relay | None = None
        try:
            relay = _Relay(self, job, fetch, progress, cancelled, spans, work)
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
                deadline = _Deadline(relay, container)
                deadline.start()
                try:
                    status = container.wait()
                finally:
                    deadline.finished.set()
                container.reload()
            except Exception as exc:  # the daemon went away or restarted mid-run
                raise ContainerLost(
                    f"the Docker daemon lost its container ({reference}) mid-run: "
                    f"{_first_line(exc)}"
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
        relay: _Relay,
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
        said = relay.outcome
        if said is not None and said["op"] == "result":
            upload = ResultUpload.from_dict(said["upload"])
            upload.stack["container"] = {
                "image": reference,
                "digest": image.id,
                "id": container.id,
                "limits": applied.describe(),
            }
            return upload
        if said is not None and said["op"] == "cancelled":
            raise EvaluationCancelled()
        if said is not None and said["op"] == "failed":
            if said.get("user"):
                raise EvaluationError(str(said["message"]))
            raise EvaluationError(f"the evaluation hit an unexpected error: {said['message']}")
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
    return fields_with_code(data)


def _gpus() -> list[Any]:
    """Every GPU, for a gpu job (the NVIDIA container toolkit hands them to the container)."""
    types: Any = importlib.import_module("docker.types")
    return [types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


class _RunFolders:
    """A job's folders on the agent's side: `files` (under the cache, so that the job's files
    are hard links, not copies), which the container sees read-only at FILES_MOUNT and which
    holds only the files of the job's manifests; and `socket`, a short private path for the
    Unix socket (at RUN_MOUNT), reachable only by the agent and the container's user."""

    def __init__(self, cache_dir: Path, job: Job) -> None:
        runs = cache_dir / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        os.chmod(runs, 0o700)
        self.files = Path(tempfile.mkdtemp(dir=runs, prefix=f"{job.id[:8]}-"))
        os.chmod(self.files, 0o755)  # noqa: S103 - the container's user reads the job's files
        self.socket = Path(tempfile.mkdtemp(prefix="mlms-"))  # 0700
        if os.geteuid() == 0:
            os.chown(self.socket, CONTAINER_UID, CONTAINER_UID)
            self.user: str | None = None  # the image's own unprivileged user
        else:
            self.user = f"{os.getuid()}:{os.getgid()}"  # the agent's user owns the folder

    def remove(self) -> None:
        shutil.rmtree(self.files, ignore_errors=True)
        shutil.rmtree(self.socket, ignore_errors=True)


# The longest line the agent reads from a container (a batch of spans).
MAX_LINE = 64 * 2**20


class _Relay(threading.Thread):
    """The agent's end of the container's socket: answers its requests. It fetches only the
    files the job's manifests name, and takes spans only in the shape the loop writes them."""

    def __init__(
        self,
        runner: Runner,
        job: Job,
        fetch: Callable[[str, str | None], Path],
        progress: Callable[[int, int], None],
        cancelled: Callable[[], bool],
        spans: Callable[[list[Span]], None] | None,
        work: _RunFolders,
    ) -> None:
        super().__init__(name=f"relay-{job.id[:8]}", daemon=True)
        self.runner = runner
        self.job = job
        self.fetch = fetch
        self.progress = progress
        self.cancelled = cancelled
        self.spans = spans
        self.work = work
        self.allowed = _job_files(job)
        self.outcome: dict[str, Any] | None = None
        # When the container last said something, and how long it may be silent (None: no
        # limit; set for custom code). `timed_out` says why it was stopped for its silence.
        self.last_seen = time.monotonic()
        self.silence_limit: float | None = None
        self.timed_out = ""
        self.cancel_sent = False
        # Why the agent stopped listening to the container (it broke the protocol), if it did.
        self.refused = ""
        self.container: Any = None
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = work.socket / SOCKET
        self._server.bind(str(path))
        os.chmod(path, 0o777)  # noqa: S103 - in a folder only the container's user reaches
        self._server.listen(1)
        self._server.settimeout(0.5)
        self._stopping = threading.Event()
        self._stopper: threading.Timer | None = None

    def stop(self) -> None:
        self._stopping.set()
        if self._stopper is not None:
            self._stopper.cancel()
        self.join(timeout=5)
        self._server.close()

    def run(self) -> None:
        connection = None
        while not self._stopping.is_set():
            try:
                connection, _ = self._server.accept()
                break
            except TimeoutError:
                self._watch_cancel()
        if connection is None:
            return
        with connection, connection.makefile("r", encoding="utf-8") as reader:
            while True:
                line = reader.readline(MAX_LINE)
                self.last_seen = time.monotonic()
                if not line:
                    return
                if not line.endswith("\n"):
                    self._refuse(f"sent a message longer than {MAX_LINE} bytes")
                    return
                try:
                    answer = self.answer(json.loads(line))
                except Exception as exc:  # a request the agent cannot answer: say why
                    logger.warning("evaluation %s: %s", self.job.id, exc)
                    answer = {"error": _first_line(exc)}
                connection.sendall((json.dumps(answer) + "\n").encode())

    def _refuse(self, why: str) -> None:
        logger.warning("evaluation %s: the container %s; stopping it", self.job.id, why)
        self.refused = why
        if self.container is not None:
            try:
                self.container.kill()
            except Exception as exc:
                logger.warning("could not kill container: %s", exc)

    def _watch_cancel(self) -> None:
        """A cancel before the container connected (or while it hangs): stop it."""
        if self.cancelled() and self.container is not None and not self.cancel_sent:
            self.cancel_sent = True
            self._stop_container()

    def _stop_container(self) -> None:
        """After a cancel the container stops between two predictions; one that has not
        within STOP_SECONDS gets SIGTERM, then SIGKILL 5 s later."""

        def stop() -> None:
            try:
                self.container.stop(timeout=5)
            except Exception as exc:
                logger.warning("could not stop container: %s", exc)

        self._stopper = threading.Timer(STOP_SECONDS, stop)
        self._stopper.daemon = True
        self._stopper.start()

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        if op == "job":
            return self.job.to_dict()
        if op == "fetch":
            url = str(message.get("url"))
            sha256 = message.get("sha256")
            if url not in self.allowed:
                raise EvaluationError(f"{url} is not a file of this job's manifests")
            path = Path(self.fetch(url, sha256 if isinstance(sha256, str) else None))
            name = f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{path.name}"
            target = self.work.files / name
            if not target.exists():
                try:
                    os.link(path, target)
                except OSError:  # another file system, or no hard links: a copy
                    shutil.copyfile(path, target)
                    os.chmod(target, 0o644)
            return {"path": f"{FILES_MOUNT}/{name}"}
        if op == "progress":
            self.progress(int(message["done"]), int(message["total"]))
            cancelled = self.cancelled()
            if cancelled and not self.cancel_sent:
                self.cancel_sent = True
                self._stop_container()
            return {"cancelled": cancelled}
        if op == "spans":
            batch = [_span(entry) for entry in message.get("spans") or []]
            if self.spans is not None:
                self.spans(batch)
            return {}
        if op in ("result", "failed", "cancelled"):
            self.outcome = message
            return {}
        raise ValueError(f"unknown request {op!r}")


class _Deadline(threading.Thread):
    """Stops a container that runs custom code and has been silent past its relay's limit,
    and one that has sent its outcome but does not exit."""

    def __init__(self, relay: _Relay, container: Any) -> None:
        super().__init__(name=f"deadline-{relay.job.id[:8]}", daemon=True)
        self.relay = relay
        self.container = container
        self.finished = threading.Event()

    def run(self) -> None:
        outcome_at: float | None = None
        while not self.finished.wait(1.0):
            now = time.monotonic()
            relay = self.relay
            if relay.outcome is not None:
                outcome_at = outcome_at or now
                if now - outcome_at > OUTCOME_GRACE_SECONDS:
                    self._kill("sent its outcome but did not exit")
                    return
                continue
            limit = relay.silence_limit
            if limit is not None and now - relay.last_seen > limit:
                relay.timed_out = (
                    f"custom code ran for more than {limit - SILENCE_MARGIN_SECONDS:g} s in one "
                    f"call without letting the run report (nothing heard for {limit:g} s), and "
                    "its container was stopped; make it faster, or run it on a host that allows "
                    "longer calls (`mlms agent --custom-code-seconds`)"
                )
                self._kill("was silent past its limit")
                return

    def _kill(self, why: str) -> None:
        logger.warning("evaluation %s: the container %s; stopping it", self.relay.job.id, why)
        try:
            self.container.kill()
        except Exception as exc:  # it exited meanwhile
            logger.warning("could not kill container: %s", exc)


def _job_files(job: Job) -> set[str]:
    """The file URLs the job's model (its overrides applied) and dataset manifests name."""
    from predictors import manifests

    model = manifests.load(job.model.source, kind="model").data
    if job.options.overrides:
        model = manifests.apply_overrides(model, list(job.options.overrides)).data
    dataset = manifests.load(job.dataset.source, kind="dataset").data
    return manifests.file_urls(model, "model") | manifests.file_urls(dataset, "dataset")


def _span(entry: Any) -> Span:
    """A span as the container sent it, in the shape the loop writes (ValueError otherwise)."""
    if not isinstance(entry, dict):
        raise ValueError("a span must be an object")
    name, attributes = entry.get("name"), entry.get("attributes", {})
    numbers = [entry.get(key, 0) for key in ("start_ns", "end_ns", "span_id", "parent_id")]
    if not isinstance(name, str) or not isinstance(attributes, dict):
        raise ValueError("a span needs a name and attributes as an object")
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
        raise ValueError("a span's times and ids must be integers")
    start, end, span_id, parent = numbers
    return Span(name, start, end, attributes, span_id, parent)
