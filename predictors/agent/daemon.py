"""The agent daemon: runs a hub's evaluations on this host (`mlms agent`, see
`predictors.agent.main` for its command line). The agent:

1. reads the host's hardware and software stack (`predictors.host.introspection`) and the
   installed frameworks, with the devices each can use here (`predictors.agent.registration`);
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
its start and every minute (see `predictors.tracing.delivery`). The result says how many
spans were sent and how many the hub took (`details.spans`); `predictors.agent.results` builds
the reports. The final report (result, failure or
cancellation) is retried for `REPORT_RETRY_SECONDS` while the hub does not answer, so a hub
restart during a job loses neither its spans nor its result.

Without `--docker`, evaluations run in the agent's own process, except a job whose settings
this process can no longer take (TensorFlow's thread pools, sized once per process, and a job
asking for other `threads`): it runs in a fresh process of its own (`predictors.agent.process`).

With `--docker`, each evaluation runs in the predictor image its model manifest names for the
host's architecture and the job's device (`predictors.agent.containers`): the agent offers the
frameworks of the images it has (not those installed beside it), registers each image with its
software environment, and records the image and its digest in the result's stack. `--cpus` and
`--memory` limit each container. A Docker daemon that does not answer stops the agent at start.
`--allow-custom-code` runs model manifests' custom preprocess/postprocess code in those
containers (`predictors.processing.custom_code`); the host registers it, and the hub sends
such jobs only to hosts that do; without it the agent refuses them.

The agent talks to the hub only over HTTP and the broker; it never imports Django.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictors import manifests
from predictors.agent.containers import ContainerLost, Runner
from predictors.agent.hub_client import HubClient, HubError, HubUnreachable, retries_within
from predictors.agent.process import ProcessRunner, fresh_process_reason
from predictors.agent.registration import AgentError, host_registration
from predictors.agent.results import (
    PAGE_BYTES,
    SPAN_RETRY_SECONDS,
    Reporter,
    close_trace,
    open_trace,
    paged,
    result_upload,
    with_spans,
)
from predictors.broker import prepare_exchanges
from predictors.data import DataManager, default_cache_dir
from predictors.evaluation import (
    USER_ERRORS,
    Evaluation,
    EvaluationCancelled,
    EvaluationOptions,
    evaluate,
)
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.protocol import (
    CANCELLED,
    FAILED,
    LOST,
    NOT_OURS,
    TASK_NAME,
    Job,
    ProtocolError,
    ResultUpload,
    local_device,
)
from predictors.tracing import Tracer
from predictors.tracing.delivery import drain

__all__ = ["Agent", "Timings", "broker_answers"]

logger = logging.getLogger("mlmodelscope.agent")

# How long the agent keeps sending a job's final report while the hub does not answer (a
# restart, an outage), before it gives up.
REPORT_RETRY_SECONDS = 300.0
# How often the agent sends the spool's exports again.
SPOOL_SECONDS = 60.0


@dataclass(frozen=True)
class Timings:
    """How often the agent sends its heartbeats and a job's progress (the hub's config)."""

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
        page_bytes: int = PAGE_BYTES,
    ) -> None:
        self.client = client
        # A result's predictions larger than this go in pages before it (`paged`).
        self.page_bytes = page_bytes
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
        """What the agent registers (`host_registration`), read and measured once."""
        if self._registration is None:
            self._registration = host_registration(
                self.name,
                self.wanted,
                runner=self.runner,
                concurrency=self.concurrency,
                pool=self.pool,
                instance=self.instance,
                group=self.group,
                queues=self.requested_queues,
            )
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
        # Pages well under the hub's limit on one body, whatever the agent was told.
        limit = config.get("result_max_bytes")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self.page_bytes = min(self.page_bytes, max(limit // 2, 1024))

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
        reporter = Reporter(self.client, evaluation_id, claim, self.timings.report_seconds)
        reporter.start()
        outcome: tuple[str, str] | None = None
        upload: ResultUpload | None = None
        spans: dict[str, Any] | None = None
        tracer = self._open_trace(job)
        try:
            try:
                upload = self._evaluate(job, reporter, tracer)
                if tracer is not None:
                    opened = tracer
                    tracer = None
                    spans = close_trace(job, opened)
            except EvaluationCancelled:
                outcome = (CANCELLED, "")
            except ContainerLost as exc:
                outcome = (LOST, str(exc))
            except USER_ERRORS as exc:
                outcome = (FAILED, " ".join(str(exc).split()))
            except Exception as exc:
                logger.exception("evaluation %s failed unexpectedly", evaluation_id)
                outcome = (
                    FAILED,
                    f"the agent hit an unexpected error: {type(exc).__name__}: {exc}",
                )
            finally:
                if tracer is not None:
                    # A failed or cancelled run: what it measured is delivered all the same.
                    close_trace(job, tracer)
        except BaseException:
            reporter.stop()
            raise
        # The reporter goes on until the outcome is posted: a large result takes a while to
        # send and to store, and a job that said nothing meanwhile would be taken for lost.
        try:
            reporter.report_now()  # where the job ended, before its outcome
            if reporter.lost:
                logger.warning("evaluation %s is no longer ours; dropped", evaluation_id)
                return "lost"
            return self._post_outcome(job, outcome, upload, spans)
        finally:
            reporter.stop(last_report=False)

    def _post_outcome(
        self,
        job: Job,
        outcome: tuple[str, str] | None,
        upload: ResultUpload | None,
        spans: dict[str, Any] | None,
    ) -> str:
        evaluation_id, claim = job.id, job.claim
        retries = retries_within(REPORT_RETRY_SECONDS)
        try:
            if outcome is not None:
                self.client.report_status(evaluation_id, claim, *outcome, retries=retries)
                logger.info("evaluation %s %s %s", evaluation_id, *outcome)
                return outcome[0]
            assert upload is not None
            if spans is not None:
                upload = with_spans(upload, spans)
            upload, pages = paged(upload, self.page_bytes)
            try:
                for page in pages:
                    self.client.post_predictions_page(
                        evaluation_id, claim, page.to_dict(), retries=retries
                    )
                if pages:
                    logger.info("evaluation %s: predictions posted in %d pages", job.id, len(pages))
                self.client.post_result(evaluation_id, claim, upload.to_dict(), retries=retries)
            except HubError as exc:
                if exc.code in NOT_OURS or exc.status in (408, 429) or not 400 <= exc.status < 500:
                    raise  # not ours, or for a while only: not a refusal of the result
                # The hub refused the result (too large, malformed): the job failed, saying
                # why, rather than stay running until it is taken for a lost host.
                reason = f"the hub refused the result: {exc}"
                self.client.report_status(evaluation_id, claim, FAILED, reason, retries=retries)
                logger.error("evaluation %s failed: %s", evaluation_id, reason)
                return FAILED
        except (HubError, HubUnreachable) as exc:
            logger.error("could not report evaluation %s: %s", evaluation_id, exc)
            return "unreported"
        logger.info("evaluation %s succeeded", evaluation_id)
        return "succeeded"

    def _open_trace(self, job: Job) -> Tracer | None:
        """The job's tracer (`open_trace`), exporting as this host, spooling in its spool."""
        return open_trace(job, self.client, self.name, self.spool_dir)

    def _export_trace(self, job: Job, evaluation: Evaluation) -> dict[str, Any] | None:
        """Send a finished evaluation's spans (as `open_trace`, then `close_trace`)."""
        if not evaluation.spans:
            return None
        tracer = self._open_trace(job)
        if tracer is None:
            return None
        tracer.write(evaluation.spans)
        return close_trace(job, tracer)

    def _evaluate(self, job: Job, reporter: Reporter, tracer: Tracer | None) -> ResultUpload:
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
        why = fresh_process_reason(job)
        if why is not None:
            logger.info("evaluation %s runs in a fresh process: %s", job.id, why)
            return ProcessRunner(self.cache_dir or default_cache_dir()).run(
                job,
                data.fetch,
                reporter.progress,
                reporter.cancelled.is_set,
                tracer.write if tracer is not None else None,
                why=why,
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
