"""One evaluation in a fresh Python process on the agent's own host, without a container.

An agent without `--docker` runs its jobs in its own process. Some settings of a framework can
be made once per process only: TensorFlow sizes its thread pools when it first runs something,
so a second TensorFlow job that asks for other `threads` could not get them there. Such a job
runs in a fresh process instead (`fresh_process_reason` says when, and why), which speaks the
same protocol as a predictor container over a Unix socket (`predictors.agent.contained`, with
`predictors.agent.relay` on the agent's side): the agent fetches the files, passes the
progress, cancels and spans on, and posts the result.

The process is no sandbox: it runs as the agent does, with the agent's environment, and never
runs a manifest's custom code (which runs only in containers).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from predictors import manifests
from predictors.agent.containers import CUSTOM_CODE_ENV
from predictors.agent.relay import Deadline, JobCalls, Relay, RunFolders, reported
from predictors.evaluation import EvaluationCancelled, EvaluationError
from predictors.protocol import Job, ResultUpload
from predictors.tracing import Span

__all__ = ["ProcessRunner", "fresh_process_reason"]

logger = logging.getLogger("mlmodelscope.agent")


def fresh_process_reason(job: Job) -> str | None:
    """Why `job` cannot run in this process and needs a fresh one, or None when it can: a
    TensorFlow job whose `threads` differ from the thread pools TensorFlow has already made
    here (they are sized once per process)."""
    threads = job.options.threads
    if threads is None:
        return None
    try:
        framework = manifests.load(job.model.source, kind="model").framework
    except manifests.ManifestError:
        return None  # the evaluation reports the manifest's own error
    if framework != "tensorflow":
        return None
    try:
        from predictors.frameworks.tensorflow import thread_pools_problem
    except ImportError:
        return None  # not installed here: the evaluation says so
    return thread_pools_problem(threads)


class _Child:
    """The process, as the relay and the deadline stop a container: `kill`, `stop`."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def kill(self) -> None:
        self.process.kill()

    def stop(self, timeout: float = 5) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()


class ProcessRunner:
    """Runs one job in a fresh process of this Python (see the module docstring)."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir.resolve()

    def run(
        self,
        job: Job,
        fetch: Callable[[str, str | None], Path],
        progress: Callable[[int, int], None],
        cancelled: Callable[[], bool],
        spans: Callable[[list[Span]], None] | None,
        *,
        why: str = "",
    ) -> ResultUpload:
        """Run `job` in a fresh process; its result, with the process recorded in its stack
        (`process`: its id and `why` it was fresh). Raises EvaluationCancelled and
        EvaluationError."""
        work = RunFolders(self.cache_dir, job)
        relay: Relay | None = None
        child: _Child | None = None
        environment = {key: value for key, value in os.environ.items() if key != CUSTOM_CODE_ENV}
        try:
            relay = Relay(job, JobCalls(fetch, progress, cancelled, spans), work)
            relay.files_root = str(work.files)
            relay.start()
            process = subprocess.Popen(  # noqa: S603 - this interpreter, this package's module
                [sys.executable, "-m", "predictors.agent.contained", str(work.socket)],
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            child = _Child(process)
            relay.container = child
            deadline = Deadline(relay, child)
            deadline.start()
            try:
                _, errors = process.communicate()
            finally:
                deadline.finished.set()
            return _outcome(relay, process.returncode, errors, process.pid, why)
        finally:
            if child is not None and child.process.poll() is None:
                child.kill()
            if relay is not None:
                relay.stop()
            work.remove()


def _outcome(relay: Relay, code: int, errors: bytes, pid: int, why: str) -> ResultUpload:
    upload = reported(relay)
    if upload is not None:
        upload.stack["process"] = {"pid": pid, "fresh": why}
        return upload
    if relay.cancel_sent:
        raise EvaluationCancelled()
    if relay.refused:
        raise EvaluationError(f"the evaluation's process {relay.refused}")
    last = errors.decode(errors="replace").strip().splitlines()[-5:]
    raise EvaluationError(
        f"the evaluation's process exited with status {code} before it reported a result"
        + (": " + " | ".join(last) if last else "")
    )
