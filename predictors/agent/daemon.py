"""The agent: the daemon that runs a hub's evaluations on this host.

    mlms agent --hub URL [--token T | --token-file F] [--name NAME] [--frameworks F,...]
               [--queues Q,...] [--pool | --group G] [--concurrency 1] [--broker URL]
               [--cache DIR] [--docker [--cpus N] [--memory SIZE]
                                        [--allow-custom-code [--custom-code-seconds S]]]

(also `python -m predictors.agent.daemon@@ …`; the token may come from $MLMS_AGENT_TOKEN, and must hold
the `agent` scope). The agent:

1. reads the host's hardware and software stack (`predictors.host.introspection`) and the installed
   frameworks, with the devices each can use here;
2. registers the host with the hub (`POST /api/v1/hosts/`), waiting for the hub to come up.
   The host runs its owner's jobs only, or its group's with `--group`, or every user's with
   `--pool` (the operators' shared pool: staff tokens only). The registration carries this
   process's `instance`: a hub that sees a new one dispatches the jobs the previous process held
   (it crashed, or was killed) again at once;
3. asks the hub for the broker, the queues and its timings (`GET /api/v1/agent/config/`): the
   broker credentials reach only the jobs of the host's scope (with Redis); `--broker` or
   $CELERY_BROKER_URL replace the broker's address;
4. sends the host's heartbeats from a thread;
5. consumes the queues the hub named: `<scope>.host.<name>` (jobs for this host only) and one
   per capability (`<scope>.onnxruntime.cpu`, …; `--queues` chooses among the capabilities),
   with a Celery worker of its own: thread pool, `--concurrency` jobs at once (1 by default, so
   that one job's timings are not disturbed by another's), late acknowledgement and a prefetch
   of one message.

A job (the task `mlmodelscope.evaluate` with [evaluation id, dispatch number]) is claimed over
HTTP first: the hub answers with the manifests and options, or refuses a message that another
agent claimed already. The evaluation runs in `predictors.evaluation` with the model and
dataset files fetched from the hub (`DataManager`, `/api/v1/artifacts/`). A reporter thread
sends the progress every few seconds, which also tells the hub the job is alive, and learns from
the answer when the user cancelled: the evaluation then stops between two predictions and the
agent reports `cancelled`. A failure is reported with its message; success with the result.
Before it posts a result, the agent exports the evaluation's spans to the hub's OTLP receiver
under the job's `trace_id` (and the caller's `parent_span_id`, if any), each export sent once
under the job's claim and retried while the hub does not answer, for `SPAN_RETRY_SECONDS`; what
is still undelivered then waits in the spool (`<cache>/spool`), which the agent sends again at
its start and every minute (see `predictors.agent.span_delivery`). The result says how many spans were
sent and how many the hub took (`details.spans`). The final report (result, failure or
cancellation) is retried for `REPORT_RETRY_SECONDS` while the hub does not answer, so a hub
restart during a job loses neither its spans nor its result.

With `--docker`, each evaluation runs in the predictor image its model manifest names for the
host's architecture and the job's device (`predictors.agent.containers`): the agent offers the
frameworks of the images it has (not those installed beside it), registers each image with its
software environment, and records the image and its digest in the result's stack. `--cpus` and
`--memory` limit each container. A Docker daemon that does not answer stops the agent at start.
`--allow-custom-code` runs model manifests' custom preprocess/postprocess code in those
containers (`predictors.processing.custom_code`); the host registers it, and the hub sends such jobs only to
hosts that do; without it the agent refuses them.

The agent talks to the hub only over HTTP and the broker; it never imports Django.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictors import manifests
from predictors.agent.containers import (
    ContainerLost,
    DockerUnavailable,
    Limits,
    Runner,
    docker_client,
    parse_memory,
)
from predictors.agent.hub_client import HubClient, HubError, HubUnreachable
from predictors.agent.span_delivery import drain
from predictors.analysis import roofline
from predictors.broker import prepare_exchanges
from predictors.data import DataManager, default_cache_dir
from predictors.evaluation import (
    USER_ERRORS,
    Evaluation,
    EvaluationCancelled,
    EvaluationOptions,
    evaluate,
)
from predictors.frameworks.predictor import FRAMEWORKS, PredictorError, predictor_class
from predictors.host import introspection
from predictors.manifests.versioning import is_valid_version
from predictors.processing.custom_code import DEFAULT_CALL_SECONDS
from predictors.protocol import (
    CPU,
    GPU,
    NOT_OURS,
    TASK_NAME,
    Attr,
    Job,
    ProtocolError,
    ResultUpload,
    local_device,
)
from predictors.tracing import Tracer

__all__ = ["Agent", "main"]

logger = logging.getLogger("mlmodelscope.agent")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# How long the agent keeps sending a job's spans, and its final report, while the hub does not
# answer (a restart, an outage), before it gives up (spans then wait in the spool).
SPAN_RETRY_SECONDS = 300.0
REPORT_RETRY_SECONDS = 300.0
# How often the agent sends the spool's exports again.
SPOOL_SECONDS = 60.0


@dataclass(frozen=True)
class Timings:
    heartbeat_seconds: float = 10.0
    report_seconds: float = 2.0


class Agent:
    """One host's agent: registration, heartbeats, and the jobs (see the module docstring)."""

    def __init__(
        self,
        client: HubClient,
        name: str,
        *,
        frameworks: Sequence[str] = FRAMEWORKS,
        queues: Sequence[str] | None = None,
        cache_dir: Path | None = None,
        concurrency: int = 1,
        pool: bool = False,
        group: str | None = None,
        runner: Runner | None = None,
    ) -> None:
        self.client = client
        # Evaluations in containers (`--docker`), or in this process (None).
        self.runner = runner
        self.name = name
        self.wanted = list(frameworks)
        self.requested_queues = list(queues) if queues else None
        self.cache_dir = cache_dir
        self.spool_dir = (cache_dir or default_cache_dir()) / "spool"
        self.concurrency = concurrency
        self.pool = pool
        self.group = group
        self.host_id: int | None = None
        # This process's id, registered with the host: the hub takes a registration from
        # another instance to mean that the one before it ended, and dispatches the jobs it
        # held again at once.
        self.instance = secrets.token_hex(16)
        # The queues the hub named for the host when it registered.
        self.hub_queues: list[str] = []
        self.timings = Timings()
        self.stopping = threading.Event()
        self._registration: dict[str, Any] | None = None
        # False while the broker does not answer: the agent then sends no heartbeats, so that
        # the hub offers its host no work (see `watch_broker`).
        self.broker_ok = threading.Event()
        self.broker_ok.set()
        self.active_jobs = 0
        self._jobs_lock = threading.Lock()

    # -- the host --------------------------------------------------------------------------------

    def registration(self) -> dict[str, Any]:
        """What the agent registers: frameworks with their devices, hardware, software, queues."""
        if self._registration is not None:
            return self._registration
        stack = introspection.stack(self.wanted)
        images = self.runner.images.scan() if self.runner is not None else []
        if self.runner is not None:
            # In containers, the frameworks are the images' (one version each, as labelled).
            stack["frameworks"] = {
                name: next((i.framework_version for i in images if i.framework == name), None)
                for name in self.wanted
            }
        frameworks = []
        for name, version in stack["frameworks"].items():
            if version is None:
                continue
            if not is_valid_version(version):
                logger.warning("%s %s is not a semantic version; not offered", name, version)
                continue
            if self.runner is not None:  # a device per image: -cpu, and -gpu where GPUs are
                devices = [
                    device
                    for device in (CPU, GPU)
                    if any(i.framework == name and i.device == device for i in images)
                    and (device == CPU or stack["gpus"])
                ]
                if not devices:
                    continue  # a GPU image on a host without GPUs
            else:
                devices = _devices(name, stack)
            frameworks.append({"name": name, "version": version, "devices": devices})
        if not frameworks and self.runner is not None:
            raise AgentError(
                f"no predictor image of {', '.join(self.wanted)} is on this host: build them "
                "with `make images` (docker/build.py)"
            )
        if not frameworks:
            raise AgentError(
                f"none of the frameworks {', '.join(self.wanted)} is installed on this host"
            )
        self._registration = {
            "name": self.name,
            "frameworks": frameworks,
            "devices": ["cpu"] + [f"gpu:{gpu['index']}" for gpu in stack["gpus"]],
            "hardware": {key: stack[key] for key in ("architecture", "cpu", "memory_bytes", "gpus")}
            # The host's roofline, measured once (`predictors.analysis.roofline`): the CPU's (numpy's
            # BLAS, the processor's theoretical peak, a STREAM triad), and the first GPU's
            # where one is. Each evaluation measures its own framework's (its result's).
            | {
                "roofline": {
                    device: roofline.measure(device)
                    for device in ["cpu"] + (["cuda"] if stack["gpus"] else [])
                }
            },
            "software": {
                key: stack[key] for key in ("os", "python", "numpy", "frameworks", "container")
            }
            | {"agent": {"concurrency": self.concurrency}},
            "pool": self.pool,
            "instance": self.instance,
        }
        if self.runner is not None:
            self._registration["software"]["docker"] = {
                "limits": self.runner.limits.describe(),
                "custom_code": self.runner.custom_code,
                "images": [
                    {
                        key: value
                        for key, value in image.registration().items()
                        if key != "environment"
                    }
                    for image in images
                ],
            }
            self._registration["images"] = [image.registration() for image in images]
        elif (own := _own_image(stack, frameworks)) is not None:
            # An agent running inside a predictor image registers that image, so that the hub
            # keeps its packages and links the results to it.
            self._registration["images"] = [own]
        if self.group:
            self._registration["group"] = self.group
        if self.requested_queues:
            self._registration["queues"] = list(self.requested_queues)
        return self._registration

    def register(self, wait_seconds: float = 60) -> int:
        """Register the host, retrying while the hub does not answer; the host's id."""
        payload = self.registration()
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                host = self.client.register_host(payload)
                break
            except HubUnreachable as exc:
                if time.monotonic() > deadline:
                    raise AgentError(str(exc)) from None
                logger.info("waiting for the hub at %s", self.client.url)
                self.stopping.wait(1)
        self.host_id = int(host["id"])
        self.hub_queues = [str(queue) for queue in host.get("queues") or []]
        logger.info(
            "registered host %s (id %s, scope %s): %s; queues %s",
            self.name,
            self.host_id,
            host.get("scope"),
            ", ".join(
                f"{f['name']} {f['version']} {'/'.join(f['devices'])}"
                for f in payload["frameworks"]
            ),
            ", ".join(self.hub_queues),
        )
        return self.host_id

    @property
    def queues(self) -> list[str]:
        """The queues the hub named for this host (after `register`)."""
        return list(self.hub_queues)

    def configure(self, config: dict[str, Any]) -> None:
        self.timings = Timings(
            heartbeat_seconds=float(config.get("heartbeat_seconds", 10)),
            report_seconds=float(config.get("report_seconds", 2)),
        )

    def heartbeat_forever(self) -> None:
        while not self.stopping.wait(self.timings.heartbeat_seconds):
            if not self.broker_ok.is_set():
                continue  # deaf to the broker: not offered work
            try:
                assert self.host_id is not None
                self.client.heartbeat(self.host_id)
            except HubError as exc:
                if exc.status == 404:  # the host was removed: register it again
                    logger.warning("the hub forgot host %s; registering it again", self.name)
                    try:
                        self.register(wait_seconds=0)
                    except (AgentError, HubError) as again:
                        logger.warning("registration refused: %s", again)
                else:
                    logger.warning("heartbeat refused: %s", exc)
            except HubUnreachable as exc:
                logger.warning("heartbeat lost: %s", exc)

    def start_heartbeat(self) -> threading.Thread:
        thread = threading.Thread(target=self.heartbeat_forever, name="heartbeat", daemon=True)
        thread.start()
        return thread

    def drain_spool_forever(self) -> None:
        """Send the spool's exports again: all at once now (a previous run left them), then
        every `SPOOL_SECONDS` those that their job gave up on."""
        older_than = 0.0
        while True:
            try:
                drain(self.spool_dir, self.client.url, self.client.token, older_than=older_than)
            except OSError as exc:
                logger.warning("cannot read the span spool %s: %s", self.spool_dir, exc)
            older_than = SPAN_RETRY_SECONDS
            if self.stopping.wait(SPOOL_SECONDS):
                return

    def start_spool(self) -> threading.Thread:
        thread = threading.Thread(target=self.drain_spool_forever, name="spool", daemon=True)
        thread.start()
        return thread

    # -- a job -----------------------------------------------------------------------------------

    def run_job(self, evaluation_id: str, dispatch: int) -> str:
        """Claim and run one evaluation; what became of it (for the log and the tests)."""
        with self._jobs_lock:
            self.active_jobs += 1
        try:
            return self._run_job(evaluation_id, dispatch)
        finally:
            with self._jobs_lock:
                self.active_jobs -= 1

    def _run_job(self, evaluation_id: str, dispatch: int) -> str:
        assert self.host_id is not None
        try:
            answer = self.client.claim(evaluation_id, self.host_id, dispatch)
        except HubError as exc:
            if exc.code in NOT_OURS:
                logger.info("evaluation %s not claimed: %s", evaluation_id, exc)
                return "not claimed"
            raise
        try:
            job = Job.from_dict(answer)
        except ProtocolError as exc:
            # A job this agent cannot read (an unknown trace level, a missing field): refuse it
            # saying which field, rather than run something other than what was asked.
            reason = f"the agent refused the job: {exc}"
            logger.error("evaluation %s: %s", evaluation_id, reason)
            given = answer.get("claim")
            claim = given if isinstance(given, str) else ""
            try:
                self.client.report_status(evaluation_id, claim, "failed", reason)
            except (HubError, HubUnreachable) as report_error:
                logger.error("could not report evaluation %s: %s", evaluation_id, report_error)
            return "refused"
        claim = job.claim
        logger.info("evaluation %s claimed (attempt %s)", evaluation_id, job.attempt)
        reporter = _Reporter(self.client, evaluation_id, claim, self.timings.report_seconds)
        reporter.start()
        outcome: tuple[str, str] | None = None
        upload: ResultUpload | None = None
        spans: dict[str, Any] | None = None
        tracer = self._open_trace(job)
        try:
            upload = self._evaluate(job, reporter, tracer)
            if tracer is not None:
                opened = tracer
                tracer = None
                spans = self._close_trace(job, opened)
        except EvaluationCancelled:
            outcome = ("cancelled", "")
        except ContainerLost as exc:
            outcome = ("lost", str(exc))
        except USER_ERRORS as exc:
            outcome = ("failed", " ".join(str(exc).split()))
        except Exception as exc:
            logger.exception("evaluation %s failed unexpectedly", evaluation_id)
            outcome = ("failed", f"the agent hit an unexpected error: {type(exc).__name__}: {exc}")
        finally:
            reporter.stop()
            if tracer is not None:
                # A failed or cancelled run: what it measured is delivered all the same.
                self._close_trace(job, tracer)
        if reporter.lost:
            logger.warning("evaluation %s is no longer ours; dropped", evaluation_id)
            return "lost"
        retries = _report_retries(REPORT_RETRY_SECONDS)
        try:
            if outcome is not None:
                self.client.report_status(evaluation_id, claim, *outcome, retries=retries)
                logger.info("evaluation %s %s %s", evaluation_id, *outcome)
                return outcome[0]
            assert upload is not None
            if spans is not None:
                upload.details["spans"] = spans
                if spans.get("note"):
                    upload.details["trace_export"] = spans["note"]
            self.client.post_result(evaluation_id, claim, upload.to_dict(), retries=retries)
        except (HubError, HubUnreachable) as exc:
            logger.error("could not report evaluation %s: %s", evaluation_id, exc)
            return "unreported"
        logger.info("evaluation %s succeeded", evaluation_id)
        return "succeeded"

    def _open_trace(self, job: Job) -> Tracer | None:
        """A tracer that exports the job's spans as the loop writes them (OTLP/HTTP, batched)
        under the job's `trace_id` and claim, its root span the child of the job's
        `parent_span_id` when the launch carried a `traceparent`; None when the job is not
        traced (or the tracer cannot start: the evaluation runs all the same)."""
        if not job.trace_id or job.options.trace_level == "none":
            return None
        try:
            tracer = Tracer(
                hub=self.client.url,
                token=self.client.token,
                service="mlms-agent",
                claim=job.claim or None,
                spool=self.spool_dir,
                retry_seconds=SPAN_RETRY_SECONDS,
            )
            tracer.start(
                attributes={
                    Attr.EVALUATION: job.id,
                    Attr.ATTEMPT: job.attempt,
                    Attr.HOST: self.name,
                    "model": job.model.name,
                    "framework": job.model.framework,
                    "dataset": job.dataset.name,
                },
                trace_id=job.trace_id,
                parent_span_id=job.parent_span_id or None,
            )
        except Exception:
            logger.exception("evaluation %s: the trace could not be opened", job.id)
            return None
        return tracer

    def _close_trace(self, job: Job, tracer: Tracer) -> dict[str, Any] | None:
        """End the job's trace and wait until the hub has taken its spans, or refused them, or
        `SPAN_RETRY_SECONDS` of its silence have passed. What became of them (`sent`,
        `stored`, `refused`, `spooled`, `retries`, and a `note` when not all were stored), for
        the result's details; a failure never fails the evaluation."""
        counts: dict[str, Any] = {}
        refusals: list[str] = []
        try:
            try:
                tracer.finish()
                tracer.flush()  # blocks while the delivery retries
            finally:
                tracer.shutdown()
                assert tracer.delivery is not None
                counts = dict(tracer.delivery.counts.as_dict())
                refusals = list(tracer.delivery.refusals)
        except Exception as exc:
            note = f"spans not exported: {type(exc).__name__}: {exc}"
        else:
            if counts["stored"] == counts["sent"]:
                return counts
            parts = []
            if counts["refused"]:
                parts.append(f"{counts['refused']} refused ({refusals[0]})")
            if counts["spooled"]:
                parts.append(
                    f"{counts['spooled']} not delivered within {SPAN_RETRY_SECONDS:g} s, "
                    "kept in the agent's spool to be sent again"
                )
            lost = counts["sent"] - counts["stored"] - counts["refused"] - counts["spooled"]
            if lost > 0:
                parts.append(f"{lost} not delivered")
            note = f"{counts['stored']} of {counts['sent']} spans stored: " + "; ".join(parts)
        logger.warning("evaluation %s: %s", job.id, note)
        return counts | {"note": note}

    def _export_trace(self, job: Job, evaluation: Evaluation) -> dict[str, Any] | None:
        """Send a finished evaluation's spans (as `_open_trace`, then `_close_trace`)."""
        if not evaluation.spans:
            return None
        tracer = self._open_trace(job)
        if tracer is None:
            return None
        tracer.write(evaluation.spans)
        return self._close_trace(job, tracer)

    def _evaluate(self, job: Job, reporter: _Reporter, tracer: Tracer | None) -> ResultUpload:
        # A hub restart while the job fetches its files is waited out, as for its reports.
        data = DataManager(
            self.cache_dir,
            hub_url=self.client.url,
            token=self.client.token,
            retry_seconds=REPORT_RETRY_SECONDS,
        )
        if self.runner is not None:
            return self.runner.run(
                job,
                data.fetch,
                reporter.progress,
                reporter.cancelled.is_set,
                tracer.write if tracer is not None else None,
            )
        model = manifests.load(job.model.source, kind="model")
        dataset = manifests.load(job.dataset.source, kind="dataset")
        evaluation = evaluate(
            model,
            dataset,
            EvaluationOptions.from_job(job.options, device=local_device(job.device)),
            data.fetch,
            progress=reporter.progress,
            cancelled=reporter.cancelled.is_set,
            sink=tracer,  # exported as the loop goes, not kept
        )
        return result_upload(job, evaluation)

    # -- the broker ------------------------------------------------------------------------------

    def watch_broker(
        self, broker_url: str, transport_options: dict[str, Any], restart: Any
    ) -> threading.Thread:
        """Probe the broker every heartbeat period from a thread of its own.

        A Celery worker whose broker connection broke during a task may never consume again
        (its ack fails, and it stays deaf while the agent heartbeats). So while the broker does
        not answer, the agent stops heartbeating, and the hub stops offering the host work and
        dispatches its waiting jobs elsewhere; once the broker answers again, the agent waits
        for its running jobs (which report over HTTP) and calls `restart`, which starts the
        agent afresh with a new worker.
        """

        def watch() -> None:
            lost_since: float | None = None
            while not self.stopping.wait(self.timings.heartbeat_seconds):
                ok = broker_answers(broker_url, transport_options)
                if not ok and lost_since is None:
                    lost_since = time.monotonic()
                    self.broker_ok.clear()
                    logger.warning("the broker does not answer; heartbeats stop until it does")
                elif ok and lost_since is not None:
                    logger.warning(
                        "the broker answers again after %.0f s; restarting the worker once the "
                        "running jobs end",
                        time.monotonic() - lost_since,
                    )
                    while self.active_jobs and not self.stopping.wait(0.5):
                        pass
                    restart()
                    return

        thread = threading.Thread(target=watch, name="broker-watch", daemon=True)
        thread.start()
        return thread

    # -- the worker ------------------------------------------------------------------------------

    def celery_app(self, broker_url: str, transport_options: dict[str, Any]) -> Any:
        """A Celery app that consumes this agent's queues and runs jobs with `run_job`."""
        from celery import Celery

        # No fix-ups: Celery's Django fix-up would import Django when DJANGO_SETTINGS_MODULE
        # happens to be set in the environment.
        app = Celery("mlmodelscope-agent", broker=broker_url, fixups=[], set_as_current=False)
        app.conf.update(
            broker_transport_options=transport_options,
            broker_connection_retry_on_startup=True,
            task_acks_late=True,
            task_reject_on_worker_lost=True,
            worker_prefetch_multiplier=1,
            task_serializer="json",
            accept_content=["json"],
            task_ignore_result=True,
            worker_enable_remote_control=False,
            worker_send_task_events=False,
            worker_hijack_root_logger=False,
        )
        agent = self

        @app.task(name=TASK_NAME, bind=True, max_retries=60)  # type: ignore[untyped-decorator]
        def run_evaluation(task: Any, evaluation_id: str, dispatch: int) -> str:
            try:
                return agent.run_job(evaluation_id, dispatch)
            except HubUnreachable as exc:  # the hub is down: try the claim again later
                raise task.retry(exc=exc, countdown=5) from None

        return app

    def work(self, broker_url: str, transport_options: dict[str, Any]) -> None:
        """Consume the queues until the worker is stopped (SIGTERM, Ctrl-C)."""
        app = self.celery_app(broker_url, transport_options)
        prepare_exchanges(broker_url, transport_options, self.queues)
        worker = app.Worker(
            pool="threads",
            concurrency=self.concurrency,
            queues=self.queues,
            hostname=f"{self.name}@mlmodelscope",
            without_gossip=True,
            without_mingle=True,
            without_heartbeat=True,
            loglevel="INFO",
        )
        try:
            worker.start()
        finally:
            self.stopping.set()


def _report_retries(seconds: float) -> int:
    """How many retries of `HubClient.request` (0.5 s, 1 s, 2 s, … then every 15 s) span
    about `seconds`."""
    retries, waited = 0, 0.0
    while waited < seconds:
        waited += min(0.5 * 2**retries, 15.0)
        retries += 1
    return retries


# Where the predictor images keep their software environment (docker/predictor/Dockerfile).
OWN_ENVIRONMENT = Path("/etc/mlmodelscope/environment.json")


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
        "device": "gpu" if str(tag).endswith("-gpu") else "cpu",
        "labels": {},
        "environment": environment if isinstance(environment, dict) else {},
    }


class AgentError(Exception):
    """The agent cannot start (no framework, the hub refused it, …)."""


class _Reporter(threading.Thread):
    """Sends a job's progress every `interval` seconds, from when it is claimed until it ends.

    The evaluation loop calls `progress` and `cancelled.is_set`, which only read and write
    attributes, so that reporting costs the timed loop nothing.
    """

    def __init__(self, client: HubClient, evaluation_id: str, claim: str, interval: float):
        super().__init__(name=f"report-{evaluation_id[:8]}", daemon=True)
        self.client = client
        self.evaluation_id = evaluation_id
        self.claim = claim
        self.interval = interval
        self.done = 0
        self.total = 0
        self.cancelled = threading.Event()
        self.lost = False
        self._finished = threading.Event()

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def run(self) -> None:
        while True:
            self.report()
            if self._finished.wait(self.interval):
                return

    def report(self) -> None:
        try:
            if self.client.report_progress(self.evaluation_id, self.claim, self.done, self.total):
                self.cancelled.set()
        except HubError as exc:
            if exc.code in NOT_OURS:
                self.lost = True
                self.cancelled.set()
            else:
                logger.warning("progress of %s refused: %s", self.evaluation_id, exc)
        except HubUnreachable as exc:
            logger.warning("progress of %s not sent: %s", self.evaluation_id, exc)

    def stop(self) -> None:
        """Stop reporting, after a last report of where the job ended."""
        self._finished.set()
        self.join()
        if not self.lost:
            self.report()


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


def result_upload(job: Job, evaluation: Evaluation) -> ResultUpload:
    """What the agent posts to `POST /api/v1/evaluations/<id>/result/` for a finished
    evaluation."""
    report = evaluation.result
    per_batch_size = {str(entry["batch_size"]): entry for entry in report["batch_sizes"]}
    top_k = max(max((len(row) for row in evaluation.predictions), default=1), 1)
    return ResultUpload(
        # A latency-only run scored nothing: its accuracy is null, its count the inputs timed.
        accuracy=report["accuracy"]
        or {"top1": None, "top5": None, "count": report["dataset"]["count"]},
        latency={size: dict(entry["latency"]) for size, entry in per_batch_size.items()},
        throughput={size: entry["throughput_ips"] for size, entry in per_batch_size.items()},
        predictions={
            "top_k": top_k,
            "labels": [int(label) for label in evaluation.labels],
            "classes": [[c for c, _, _ in row] for row in evaluation.predictions],
            "probabilities": [[round(p, 5) for _, _, p in row] for row in evaluation.predictions],
            # A detector's boxes, one per class above ([x, y, w, h] in the image's pixels).
            **(
                {
                    "boxes": [
                        [[round(float(v), 2) for v in row[:4]] for row in found]
                        for found in evaluation.detections
                    ]
                }
                if evaluation.detections is not None
                else {}
            ),
        },
        content_hash=report["model"]["content_hash"],
        stack=introspection.stack([report["framework"]["name"]]),
        # The samples travel once, in `latency`, where the hub summarises them itself.
        details=report
        | {
            "batch_sizes": [
                entry | {"latency": _without_samples(entry["latency"])}
                for entry in report["batch_sizes"]
            ],
            "trace_level_requested": job.options.trace_level,
        },
    )


def _without_samples(latency: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in latency.items() if key != "samples_ms"}


# -- command line ------------------------------------------------------------------------------


def broker_answers(broker_url: str, transport_options: dict[str, Any]) -> bool:
    """Whether the broker accepts a connection and answers (a ping, with Redis) within a few
    seconds. The filesystem broker always answers."""
    if broker_url.startswith("filesystem"):
        return True
    from kombu import Connection

    try:
        with Connection(
            broker_url, transport_options=transport_options, connect_timeout=3
        ) as connection:
            connection.ensure_connection(max_retries=1, timeout=3)
            client = getattr(connection.default_channel, "client", None)
            if client is not None and hasattr(client, "ping"):
                client.ping()
        return True
    except Exception:
        return False


def _restart(argv: Sequence[str]) -> None:
    """Start the agent afresh in this process (same arguments, a new worker)."""
    logging.shutdown()
    os.execv(sys.executable, [sys.executable, "-m", "predictors.agent.daemon", *argv])  # noqa: S606


def _default_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:128].lstrip("._-")
    return name or "agent"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlms agent", description="Run a hub's evaluations on this host."
    )
    parser.add_argument(
        "--hub", required=True, metavar="URL", help="the hub, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--token", metavar="T", help="an agent token (default: $MLMS_AGENT_TOKEN)")
    parser.add_argument(
        "--token-file", type=Path, metavar="PATH", help="read the token from a file"
    )
    parser.add_argument(
        "--name", default=_default_name(), help="the host's name at the hub (default: host name)"
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        metavar="F[,F...]",
        help="frameworks to offer, if installed (default: all)",
    )
    parser.add_argument(
        "--queues",
        metavar="C[,C...]",
        help="the capabilities to serve (e.g. onnxruntime.cpu), instead of every framework "
        "and device found; the host's own queue is always consumed",
    )
    placement = parser.add_mutually_exclusive_group()
    placement.add_argument(
        "--pool",
        action="store_true",
        help="put the host in the operators' shared pool, running every user's jobs "
        "(the token's user must be staff)",
    )
    placement.add_argument(
        "--group",
        metavar="NAME",
        help="lend the host to a group you belong to, running the jobs of its members who "
        "trust the group's hosts or name this one",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="jobs at once (default: 1)"
    )
    parser.add_argument(
        "--broker",
        metavar="URL",
        help="the Celery broker (default: $CELERY_BROKER_URL, else what the hub says)",
    )
    parser.add_argument("--cache", type=Path, metavar="DIR", help="the download cache folder")
    parser.add_argument(
        "--docker",
        action="store_true",
        help="run each evaluation in the predictor image its manifest names (Docker); the "
        "host offers the frameworks of the images it has",
    )
    parser.add_argument(
        "--cpus",
        type=float,
        metavar="N",
        help="with --docker: CPUs each container may use (fractions allowed; default: all)",
    )
    parser.add_argument(
        "--memory",
        metavar="SIZE",
        help="with --docker: memory each container may use, e.g. 4g (default: no limit)",
    )
    parser.add_argument(
        "--allow-custom-code",
        action="store_true",
        help="with --docker: run the custom preprocess/postprocess code of model manifests, "
        "inside their containers (no network, read-only files, memory and time limits); "
        "without it this host refuses such jobs",
    )
    parser.add_argument(
        "--custom-code-seconds",
        type=float,
        metavar="S",
        help="with --allow-custom-code: the longest one call of custom code may take "
        f"(default: {DEFAULT_CALL_SECONDS:g})",
    )
    parser.add_argument(
        "--wait", type=float, default=60, metavar="S", help="seconds to wait for the hub (60)"
    )
    return parser


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    if args.token_file:
        return str(args.token_file.read_text(encoding="utf-8").strip())
    token = os.environ.get("MLMS_AGENT_TOKEN", "").strip()
    if not token:
        raise AgentError("no token: pass --token or --token-file, or set MLMS_AGENT_TOKEN")
    return token


def _broker(given: str | None, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The broker URL and transport options: the hub's, or `given` with the options that keep
    to the host's scope (its key prefix; the filesystem folders belong to the hub's URL only).
    A Redis `given` without credentials of its own gets the hub's, those of the host scope's
    broker user: it names another address of the same broker."""
    from urllib.parse import urlsplit, urlunsplit

    options = dict(config.get("broker_transport_options") or {})
    hubs = str(config["broker_url"])
    if not given or given == hubs:
        return hubs, options
    scoped = {key: options[key] for key in ("global_keyprefix",) if key in options}
    ours, theirs = urlsplit(given), urlsplit(hubs)
    redis = ("redis", "rediss")
    if ours.scheme in redis and theirs.scheme in redis and "@" not in ours.netloc:
        if "@" in theirs.netloc:
            credentials = theirs.netloc.rsplit("@", 1)[0]
            given = urlunsplit(ours._replace(netloc=f"{credentials}@{ours.netloc}"))
    return given, scoped


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not _NAME.match(args.name):
        print(
            f"mlms agent: error: --name {args.name!r} may only use A-Z a-z 0-9 . _ -",
            file=sys.stderr,
        )
        return 2
    if args.concurrency < 1:
        print("mlms agent: error: --concurrency must be at least 1", file=sys.stderr)
        return 2
    if not args.docker and (args.cpus is not None or args.memory is not None):
        flag = "--cpus" if args.cpus is not None else "--memory"
        print(f"mlms agent: error: {flag} limits containers: it needs --docker", file=sys.stderr)
        return 2
    if args.allow_custom_code and not args.docker:
        print(
            "mlms agent: error: --allow-custom-code: custom code runs only inside predictor "
            "containers; it needs --docker",
            file=sys.stderr,
        )
        return 2
    if args.custom_code_seconds is not None and not args.allow_custom_code:
        print(
            "mlms agent: error: --custom-code-seconds limits custom code: it needs "
            "--allow-custom-code",
            file=sys.stderr,
        )
        return 2
    if args.custom_code_seconds is not None and not 0 < args.custom_code_seconds <= 86400:
        print(
            "mlms agent: error: --custom-code-seconds must be more than 0 and at most 86400; "
            f"got {args.custom_code_seconds:g}",
            file=sys.stderr,
        )
        return 2
    if args.cpus is not None and not 0 < args.cpus <= (os.cpu_count() or 1):
        print(
            f"mlms agent: error: --cpus must be more than 0 and at most this host's "
            f"{os.cpu_count()} CPUs; got {args.cpus:g}",
            file=sys.stderr,
        )
        return 2
    try:
        memory = parse_memory(args.memory) if args.memory is not None else None
    except ValueError as exc:
        print(f"mlms agent: error: --memory {exc}", file=sys.stderr)
        return 2
    try:
        digest = introspection.container_digest()
    except ValueError as exc:
        print(f"mlms agent: error: {exc}", file=sys.stderr)
        return 2
    image = os.environ.get("MLMS_CONTAINER_IMAGE")
    if image and digest is None and not args.docker:
        logger.warning(
            "running in the image %s without its digest: results will name the image, not its "
            "digest; start the container with -e %s=$(docker image inspect --format "
            "'{{.Id}}' %s)",
            image,
            introspection.DIGEST_VARIABLE,
            image,
        )
    runner = None
    if args.docker:
        try:
            runner = Runner(
                docker_client(),
                args.name,
                args.cache or default_cache_dir(),
                limits=Limits(cpus=args.cpus, memory=memory),
                architecture=introspection.architecture(),
                label=f"{args.hub.rstrip('/')}/{args.name}",
                custom_code=args.allow_custom_code,
                custom_code_seconds=args.custom_code_seconds or DEFAULT_CALL_SECONDS,
            )
        except DockerUnavailable as exc:
            print(f"mlms agent: error: --docker: {exc}", file=sys.stderr)
            return 1
    try:
        client = HubClient(args.hub, _token(args))
        agent = Agent(
            client,
            args.name,
            frameworks=[f.strip() for f in args.frameworks.split(",") if f.strip()],
            queues=[q.strip() for q in args.queues.split(",") if q.strip()]
            if args.queues
            else None,
            cache_dir=args.cache,
            concurrency=args.concurrency,
            pool=args.pool,
            group=args.group,
            runner=runner,
        )
        agent.register(wait_seconds=args.wait)
        assert agent.host_id is not None
        config = client.agent_config(agent.host_id)
        agent.configure(config)
        broker, options = _broker(args.broker or os.environ.get("CELERY_BROKER_URL"), config)
    except (AgentError, HubError, HubUnreachable, OSError) as exc:
        print(f"mlms agent: error: {exc}", file=sys.stderr)
        return 1
    if runner is not None:  # the name is this user's at the hub: its leftovers are ours
        runner.remove_leftovers()
    agent.start_heartbeat()
    agent.start_spool()
    arguments = list(sys.argv[1:] if argv is None else argv)
    agent.watch_broker(broker, options, lambda: _restart(arguments))
    agent.work(broker, options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
