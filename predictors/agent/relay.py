"""The agent's end of a predictor container's socket (`predictors.agent.contained` is the
other): the job's folders on the agent's side (`RunFolders`), the relay that answers the
container's requests (`Relay`: it fetches only the files the job's manifests name, takes spans
only in the shape the loop writes them and no message over MAX_LINE bytes, and passes the
progress and cancels on), and the watch that stops a container past its time (`Deadline`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictors import manifests
from predictors.agent.images import first_line
from predictors.evaluation import EvaluationCancelled, EvaluationError
from predictors.protocol import Job, ResultUpload
from predictors.tracing import Span

__all__ = ["FILES_MOUNT", "SOCKET", "Deadline", "JobCalls", "Relay", "RunFolders", "reported"]

logger = logging.getLogger("mlmodelscope.containers")

# Where the container sees the job's files, and the socket's name in its run folder.
FILES_MOUNT = "/mlms/files"
SOCKET = "agent.sock"

# A container that runs custom code and says nothing for its call limit plus this long is
# stopped (the code holds the interpreter, so its own watchdog cannot run); one that has sent
# its outcome and is still running this long after is stopped too.
SILENCE_MARGIN_SECONDS = 15.0
OUTCOME_GRACE_SECONDS = 10.0
# The images' unprivileged user (docker/*/Dockerfile).
CONTAINER_UID = 10001
# How long a container may take to stop between two predictions after a cancel.
STOP_SECONDS = 30
# The longest line the agent reads from a container (a batch of spans).
MAX_LINE = 64 * 2**20


class RunFolders:
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


@dataclass(frozen=True)
class JobCalls:
    """What the relay passes a container's requests on to: the job's files (`fetch`, from the
    hub into the agent's cache), its progress, whether it was cancelled, and its spans (None:
    not traced)."""

    fetch: Callable[[str, str | None], Path]
    progress: Callable[[int, int], None]
    cancelled: Callable[[], bool]
    spans: Callable[[list[Span]], None] | None


class Relay(threading.Thread):
    """The agent's end of the container's socket: answers its requests. It fetches only the
    files the job's manifests name, and takes spans only in the shape the loop writes them."""

    def __init__(self, job: Job, calls: JobCalls, work: RunFolders) -> None:
        super().__init__(name=f"relay-{job.id[:8]}", daemon=True)
        self.job = job
        self.calls = calls
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
        # Where the evaluation sees the job's files: the container's mount, or the folder
        # itself for an evaluation in a process on this host (`predictors.agent.process`).
        self.files_root = FILES_MOUNT
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
                    answer = {"error": first_line(exc)}
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
        if self.calls.cancelled() and self.container is not None and not self.cancel_sent:
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
            path = Path(self.calls.fetch(url, sha256 if isinstance(sha256, str) else None))
            name = f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{path.name}"
            target = self.work.files / name
            if not target.exists():
                try:
                    os.link(path, target)
                except OSError:  # another file system, or no hard links: a copy
                    shutil.copyfile(path, target)
                    os.chmod(target, 0o644)
            return {"path": f"{self.files_root}/{name}"}
        if op == "progress":
            self.calls.progress(int(message["done"]), int(message["total"]))
            cancelled = self.calls.cancelled()
            if cancelled and not self.cancel_sent:
                self.cancel_sent = True
                self._stop_container()
            return {"cancelled": cancelled}
        if op == "spans":
            batch = [_span(entry) for entry in message.get("spans") or []]
            if self.calls.spans is not None:
                self.calls.spans(batch)
            return {}
        if op in ("result", "failed", "cancelled"):
            self.outcome = message
            return {}
        raise ValueError(f"unknown request {op!r}")


def reported(relay: Relay) -> ResultUpload | None:
    """What the evaluation said of its end over the socket: its result; EvaluationCancelled
    for a cancel, EvaluationError for a failure (the user's, or an unexpected one); None when
    it said nothing (it was stopped, or it died)."""
    said = relay.outcome
    if said is None:
        return None
    if said["op"] == "result":
        return ResultUpload.from_dict(said["upload"])
    if said["op"] == "cancelled":
        raise EvaluationCancelled()
    if said.get("user"):
        raise EvaluationError(str(said["message"]))
    raise EvaluationError(f"the evaluation hit an unexpected error: {said['message']}")


class Deadline(threading.Thread):
    """Stops a container that runs custom code and has been silent past its relay's limit,
    and one that has sent its outcome but does not exit."""

    def __init__(self, relay: Relay, container: Any) -> None:
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
