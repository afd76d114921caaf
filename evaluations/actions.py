"""State changes of evaluations. The API views, the agent-facing API and the hub's sweep all call
these; nothing else writes an evaluation's status.

Every transition goes through `record_status`, which stores a StatusChange and sends the
WebSocket event on commit. Lifecycle:

    queued → dispatched → running → succeeded | failed | cancelled
                 ▲           │
                 └───────────┘  the host was lost: dispatched again (a new attempt)

A running evaluation is *lost* when its agent stops reporting on it (the agent reports at least
every few seconds while it works) for HOST_LIVE_SECONDS; `requeue_lost` dispatches it again,
or fails it after EVALUATION_MAX_ATTEMPTS attempts, or when no live host can run it any more.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from evaluations import events, leaderboards, outputs, placement, tasks
from evaluations.error_codes import EvaluationErrorCode
from evaluations.models import BatchResult, Evaluation, LatencySamples, Result, StatusChange
from hub import actions as hub_actions
from hub import solver
from hub.errors import Conflict, Forbidden, Invalid, NotFound
from hub.models import ApiToken, Host, Manifest
from predictors import manifests as spec
from predictors import statistics
from predictors.manifests.labels import REFUSAL_HINT as LABEL_HINT
from predictors.manifests.labels import is_untrained
from predictors.manifests.labels import mismatch as label_mismatch
from predictors.protocol import (
    BOTH_METRICS,
    ResultUpload,
    loadgen_problem,
    metric_names,
    metric_problem,
    scored_output_name,
    unsupported,
)
from traces import finishing
from traces.actions import owned_by_another_user
from traces.traceparent import TraceParent

logger = logging.getLogger(__name__)

QUEUED = Evaluation.QUEUED
DISPATCHED = Evaluation.DISPATCHED
RUNNING = Evaluation.RUNNING
SUCCEEDED = Evaluation.SUCCEEDED
FAILED = Evaluation.FAILED
CANCELLED = Evaluation.CANCELLED

_ALLOWED = {
    QUEUED: {DISPATCHED, FAILED, CANCELLED},
    DISPATCHED: {DISPATCHED, RUNNING, FAILED, CANCELLED},
    # running → running: a new claim took over from a claimant that went silent.
    RUNNING: {DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED},
}


# -- transitions -----------------------------------------------------------------------------


def record_status(
    evaluation: Evaluation, status: str, reason: str, *, host: Host | None = None
) -> StatusChange:
    """Move a (locked) evaluation to `status`, store the change and send its event on commit."""
    if status not in _ALLOWED.get(evaluation.status, set()):
        raise ValueError(f"an evaluation cannot go from {evaluation.status} to {status}")
    now = timezone.now()
    evaluation.status = status
    if status == RUNNING and evaluation.started_at is None:
        evaluation.started_at = now
    if status in Evaluation.FINISHED:
        evaluation.finished_at = now
    evaluation.save()
    change = StatusChange.objects.create(
        evaluation=evaluation,
        status=status,
        reason=reason,
        attempt=evaluation.attempts,
        host=host,
    )
    events.status_changed(evaluation, change)
    if status in Evaluation.FINISHED and evaluation.trace_id:
        # Its trace compacted and aggregated now, not on the first visit.
        trace_id = evaluation.trace_id
        transaction.on_commit(lambda: finishing.schedule(trace_id), robust=True)
    return change


def _locked(evaluation_id: Any, *, skip_locked: bool = False) -> Evaluation | None:
    rows = Evaluation.objects.select_for_update(
        skip_locked=skip_locked, of=("self",)
    ).select_related("host", "target_host", "model", "user")
    return rows.filter(pk=evaluation_id).first()


def _get_locked(evaluation_id: Any) -> Evaluation:
    evaluation = _locked(evaluation_id)
    if evaluation is None:
        raise NotFound(f"no evaluation {evaluation_id}", code=EvaluationErrorCode.NOT_FOUND)
    return evaluation


# -- launch ----------------------------------------------------------------------------------


def launch_evaluation(
    user: AbstractBaseUser, request: Mapping[str, Any], *, trace_parent: TraceParent | None = None
) -> list[Evaluation]:
    """Create and dispatch the evaluations of a validated request (one, or one per host).

    With `trace_parent` (the caller's W3C `traceparent`) every evaluation launched gets the
    caller's trace id as its `trace_id`, and its root span will be the child of the caller's
    span (the agent learns the span id from the job).

    NotFound when the model or dataset does not exist for the user; Invalid naming the
    constraint when no live host can run it. The request is solved once (`hub.solver.solve`);
    placement only picks the queue.
    """
    try:
        solution = solver.solve(user, solver.Request.of_launch(request))
    except solver.Unsatisfiable as unmet:
        not_found = unmet.path in ("model", "dataset") and not isinstance(
            unmet, solver.InvalidConstraint
        )
        # The solver's `version` is the request's `model_version`.
        path = "model_version" if unmet.path == "version" else unmet.path
        kind = NotFound if not_found else Invalid
        raise kind(unmet.message, path=path, code=EvaluationErrorCode.UNSATISFIABLE) from None
    dataset = solution.dataset
    assert dataset is not None
    placements = placement.place(solution, request, user.pk)
    contents = _apply_overrides(
        request.get("overrides") or [], {where.manifest for where in placements}
    )
    timing = bool(request.get("latency_only"))
    _check_supported(contents, timing)
    _check_scenario(contents, request, timing)
    if not request.get("allow_label_mismatch") and not timing:
        _check_labels(contents, dataset)

    group = uuid.uuid4()
    launched = []
    traced: dict[str, Any] = {}
    if trace_parent is not None:
        _check_trace_parent(user, trace_parent)
        traced["trace_id"] = trace_parent.trace_id
        traced["trace_parent_span_id"] = trace_parent.span_id
    with transaction.atomic():
        for where in placements:
            evaluation = Evaluation.objects.create(
                user=user,
                model=where.manifest,
                dataset=dataset,
                model_name=where.manifest.name,
                model_version=where.manifest.version,
                framework=where.manifest.framework,
                dataset_name=dataset.name,
                dataset_version=dataset.version,
                split=request["split"],
                device=request["device"],
                task=where.manifest.task,
                untrained=is_untrained(where.manifest.content or {}),
                trace_level=request["trace_level"],
                threads=request.get("threads"),
                seed=request["seed"],
                overrides="\n".join(request.get("overrides") or []),
                request=dict(request),
                group=group,
                **traced,
            )
            change = StatusChange.objects.create(
                evaluation=evaluation, status=QUEUED, reason=f"launched by {user.get_username()}"
            )
            events.status_changed(evaluation, change)
            _dispatch(evaluation, where, "")
            launched.append(evaluation)
    return launched


def _apply_overrides(
    overrides: list[str], manifests: set[Manifest]
) -> list[tuple[Manifest, dict[str, Any]]]:
    """Each manifest the launch runs with its content as it will run: the overrides applied
    (as `mlms evaluate --set` does locally), each result valid, else Invalid naming
    `overrides` and the manifest's field."""
    contents = []
    for manifest in sorted(manifests, key=lambda m: m.pk):
        content = manifest.content or {}
        if overrides:
            try:
                content = spec.apply_overrides(content, overrides).data
            except spec.ManifestError as error:
                raise Invalid(
                    [
                        {
                            "path": "overrides",
                            "message": f"on {manifest.name} {manifest.version} "
                            f"({manifest.framework}): {e['path'] or '<root>'}: {e['message']}",
                        }
                        for e in error.errors
                    ],
                    code=EvaluationErrorCode.INVALID_OVERRIDE,
                ) from None
        contents.append((manifest, content))
    return contents


def _check_supported(contents: list[tuple[Manifest, dict[str, Any]]], latency_only: bool) -> None:
    """A model the evaluation loop cannot run as its manifest says (another task, several
    inputs or outputs; for `latency_only`, what that mode cannot feed) is refused at launch,
    rather than dispatched to fail: Invalid naming `model`."""
    for _manifest, content in contents:
        problem = unsupported(content, latency_only=latency_only)
        if problem:
            raise Invalid(problem, path="model", code=EvaluationErrorCode.UNSUPPORTED)


def _check_scenario(
    contents: list[tuple[Manifest, dict[str, Any]]],
    request: Mapping[str, Any],
    latency_only: bool,
) -> None:
    """A LoadGen scenario the model cannot be driven in (`predictors.protocol.loadgen_problem`)
    is refused at launch: Invalid naming `scenario` (or `loadgen_mode`)."""
    scenario = request.get("scenario") or "fixed"
    mode = request.get("loadgen_mode") or "performance"
    for _manifest, content in contents:
        problem = loadgen_problem(content, scenario, mode, latency_only)
        if problem:
            path = "loadgen_mode" if problem.startswith("loadgen_mode") else "scenario"
            raise Invalid(problem, path=path, code=EvaluationErrorCode.UNSUPPORTED)


def _check_labels(contents: list[tuple[Manifest, dict[str, Any]]], dataset: Manifest) -> None:
    """A trained model whose labels are not the dataset's would score unrelated class
    indices: Invalid naming both label sets (`predictors.manifests.labels`), unless the request allows
    it. Labels the hub cannot read here (an https:// file) are left to the agent's check."""
    dataset_labels = hub_actions.stored_labels(dataset.content or {})
    if dataset_labels is None:
        return
    for manifest, content in contents:
        if is_untrained(content):
            continue
        # The scored output's labels (a detector's classes output).
        scored = scored_output_name(content) if content.get("outputs") else None
        output = next(
            (
                o
                for o in content.get("outputs") or []
                if isinstance(o, dict) and o.get("name") == scored
            ),
            {},
        )
        model_labels = hub_actions.stored_labels(output.get("parameters") or {})
        if model_labels is None:
            continue
        problem = label_mismatch(
            f"{manifest.name} {manifest.version}",
            model_labels,
            f"{dataset.name} {dataset.version}",
            dataset_labels,
        )
        if problem:
            raise Invalid(
                f"{problem}. {LABEL_HINT}", path="dataset", code=EvaluationErrorCode.LABEL_MISMATCH
            )


def _check_trace_parent(user: AbstractBaseUser, parent: TraceParent) -> None:
    """Joining a trace that another user's evaluation or spans use would let this user write
    into it and read it through their own evaluation: 400 naming `traceparent`."""
    others = Evaluation.objects.filter(trace_id=parent.trace_id).exclude(user_id=user.pk)
    if others.exists() or owned_by_another_user(parent.trace_id, user):
        raise Invalid(
            "this trace id belongs to another user's trace",
            path="traceparent",
            code=EvaluationErrorCode.TRACE_TAKEN,
        )


def _dispatch(evaluation: Evaluation, where: placement.Placement, why: str) -> None:
    """Send the evaluation to its queue after commit, as a new dispatch."""
    evaluation.dispatches += 1
    evaluation.dispatched_at = timezone.now()
    evaluation.sent_at = None
    evaluation.queue = where.queue
    evaluation.target_host = where.host
    evaluation.host = None
    evaluation.claim = ""
    evaluation.framework_version = ""
    evaluation.progress_done = evaluation.progress_total = 0
    if where.host is not None:
        reason = f"sent to host {where.host.name} (queue {where.queue})"
    else:
        reason = f"sent to queue {where.queue}, shared by the hosts that can run it"
    record_status(evaluation, DISPATCHED, f"{why}; {reason}" if why else reason)
    pk, dispatch, queue = str(evaluation.pk), evaluation.dispatches, where.queue
    transaction.on_commit(lambda: _send(pk, dispatch, queue))


def _send(evaluation_id: str, dispatch: int, queue: str) -> None:
    """Send dispatch `dispatch` and mark it sent. A hub that stops before it marks the dispatch
    sent leaves it in the outbox (`sent_at` null), which the sweep sends again."""
    try:
        tasks.send_evaluation(evaluation_id, dispatch, queue)
        Evaluation.objects.filter(pk=evaluation_id, dispatches=dispatch).update(
            sent_at=timezone.now()
        )
    except Exception as exc:
        # The dispatch stays in the outbox (unsent): the sweep sends it again every
        # EVALUATION_SEND_SECONDS, and fails it after EVALUATION_WAIT_SECONDS.
        logger.exception("could not send evaluation %s to queue %s", evaluation_id, queue)
        with transaction.atomic():
            evaluation = _locked(evaluation_id)
            if evaluation and evaluation.status == DISPATCHED and evaluation.dispatches == dispatch:
                _note_waiting(
                    evaluation,
                    f"the hub could not reach its Celery broker ({exc})",
                    f"the broker (CELERY_BROKER_URL), sent again every "
                    f"{settings.EVALUATION_SEND_SECONDS} s",
                )


# -- the agent's side ------------------------------------------------------------------------


def claim_evaluation(evaluation_id: Any, host: Host, dispatch: int) -> Evaluation:
    """Give the evaluation to `host`, whose agent received dispatch number `dispatch`.

    The first claim wins. A later one (a message the broker delivered twice, or a dispatch that
    has been superseded) is refused with 409 while the evaluation's claimant keeps reporting;
    a claimant that went silent loses the job to the new claim.
    """
    hub_actions.record_heartbeat(host)  # claiming shows that the host is alive
    with transaction.atomic():
        evaluation = _get_locked(evaluation_id)
        if evaluation.why_not_on(host):
            # Before anything else, and changing nothing: a host that may not run the job
            # (`hub.trust`) learns nothing of the evaluation, and cannot move it elsewhere either.
            raise Forbidden(
                f"host {host.name} may not run evaluation {evaluation.pk}: its launcher runs "
                "jobs only on their own hosts, the operators' shared pool and the hosts of "
                "groups whose hosts they trust or that they name, and only on hosts whose owner "
                "may read the model and dataset",
                code=EvaluationErrorCode.HOST_NOT_TRUSTED,
            )
        refusal = _claim_refusal(evaluation, host, dispatch)
        if refusal is None:
            # Taking over from a claimant that went silent says so.
            lost = f"{_silence_reason(evaluation)}; " if evaluation.status == RUNNING else ""
            evaluation.attempts += 1
            evaluation.claim = uuid.uuid4().hex
            evaluation.host = host
            evaluation.framework_version = _framework_version(host, evaluation.framework)
            evaluation.progress_done = evaluation.progress_total = 0
            evaluation.last_report_at = timezone.now()
            reason = f"{lost}claimed by host {host.name} (attempt {evaluation.attempts})"
            record_status(evaluation, RUNNING, reason, host=host)
    if refusal is not None:
        raise Conflict(refusal, code=EvaluationErrorCode.CLAIM_TAKEN)
    return evaluation


def _claim_refusal(evaluation: Evaluation, host: Host, dispatch: int) -> str | None:
    """Why `host` may not claim the (locked) evaluation, or None. May dispatch it elsewhere."""
    if evaluation.is_finished:
        return f"evaluation {evaluation.pk} is {evaluation.status} already"
    if dispatch != evaluation.dispatches:
        return (
            f"this message is dispatch {dispatch} of evaluation {evaluation.pk}, which has "
            f"been dispatched again since (dispatch {evaluation.dispatches})"
        )
    if evaluation.target_host_id is not None and evaluation.target_host_id != host.pk:
        name = evaluation.target_host.name if evaluation.target_host else "another host"
        return f"evaluation {evaluation.pk} is dispatched to {name}"
    if evaluation.status == RUNNING:
        if not _is_silent(evaluation, timezone.now()):
            who = evaluation.host.name if evaluation.host else "another host"
            return f"evaluation {evaluation.pk} is running on {who} (attempt {evaluation.attempts})"
        if evaluation.cancel_requested or evaluation.attempts >= settings.EVALUATION_MAX_ATTEMPTS:
            _lose(evaluation, _silence_reason(evaluation))
            return f"evaluation {evaluation.pk} is {evaluation.status}"
    if evaluation.model_id is None or evaluation.dataset_id is None:
        kind = "model" if evaluation.model_id is None else "dataset"
        record_status(evaluation, FAILED, f"its {kind} manifest was deleted before it ran")
        return f"evaluation {evaluation.pk} is failed"
    if not placement.can_run(evaluation, host):
        # A consumer of a shared queue that cannot run this request: pin it to one that can.
        _lose(evaluation, f"host {host.name} cannot run it")
        return f"host {host.name} cannot run evaluation {evaluation.pk}; it was sent elsewhere"
    return None


def _framework_version(host: Host, framework: str) -> str:
    for entry in host.frameworks or []:
        if isinstance(entry, dict) and entry.get("name") == framework:
            return str(entry.get("version", ""))
    return ""


def _check_claim(evaluation: Evaluation, token: ApiToken, claim: str) -> None:
    """403 unless a host of `token` holds the evaluation, or held an attempt of it (a token
    that never did learns nothing of it, not even its status); 409 unless `claim` is current."""
    holder = evaluation.host
    if holder is None or holder.token_id != token.pk:
        held = StatusChange.objects.filter(
            evaluation=evaluation, status=RUNNING, host__token=token
        ).exists()
        if not held:
            raise Forbidden(
                "No host of this agent token holds a claim on this evaluation.",
                code=EvaluationErrorCode.HOST_NOT_YOURS,
            )
    if evaluation.status != RUNNING or evaluation.claim != claim:
        state = evaluation.status
        if state == RUNNING:
            state = f"running on {evaluation.host.name if evaluation.host else 'another host'}"
        raise Conflict(
            f"evaluation {evaluation.pk} is no longer yours ({state}); stop working on it",
            code=EvaluationErrorCode.CLAIM_SUPERSEDED,
        )


def record_progress(
    evaluation_id: Any, token: ApiToken, claim: str, done: int, total: int
) -> Evaluation:
    """Record the claimant's progress (predictions done of total); it doubles as its report
    that it is still working on the job."""
    _check_still_allowed(evaluation_id, token, claim)
    with transaction.atomic():
        evaluation = _get_locked(evaluation_id)
        _check_claim(evaluation, token, claim)
        changed = (evaluation.progress_done, evaluation.progress_total) != (done, total)
        evaluation.progress_done, evaluation.progress_total = done, total
        evaluation.last_report_at = timezone.now()
        evaluation.save(
            update_fields=["progress_done", "progress_total", "last_report_at", "updated_at"]
        )
        if changed:
            events.progressed(evaluation)
    return evaluation


def _check_still_allowed(evaluation_id: Any, token: ApiToken, claim: str) -> None:
    """Before a report of the claimant (progress, result, status) is taken: when its host may no
    longer run the job (`hub.trust`: access withdrawn while it ran), the job is taken back and
    dispatched again, and once that has committed the agent is told to stop (409). Reports of
    anyone but the current claimant are left to `_check_claim`."""
    withdrawn = None
    with transaction.atomic():
        evaluation = _get_locked(evaluation_id)
        host = evaluation.host
        if evaluation.status == RUNNING and evaluation.claim == claim and host is not None:
            if host.token_id == token.pk:
                withdrawn = evaluation.why_not_on(host)
                if withdrawn:
                    _lose(evaluation, withdrawn)
    if withdrawn:
        raise Conflict(
            f"evaluation {evaluation.pk} is no longer yours ({withdrawn}); stop working on it",
            code=EvaluationErrorCode.CLAIM_SUPERSEDED,
        )


def record_result(evaluation_id: Any, token: ApiToken, claim: str, upload: ResultUpload) -> Result:
    """Store the claimant's result and finish the evaluation as succeeded. Posting the same
    result again (a retry) answers the stored one."""
    _check_still_allowed(evaluation_id, token, claim)
    with transaction.atomic():
        evaluation = _get_locked(evaluation_id)
        if evaluation.status == SUCCEEDED and evaluation.claim == claim:
            return evaluation.result
        _check_claim(evaluation, token, claim)
        _check_accuracy(evaluation, upload.accuracy)
        batch_sizes = {str(size) for size in evaluation.request["batch_sizes"]}
        if set(upload.latency) != batch_sizes:
            raise Invalid(
                f"has batch sizes {sorted(upload.latency)}, the request asked for "
                f"{sorted(batch_sizes)}",
                path="latency",
                code=EvaluationErrorCode.RESULT_MISMATCH,
            )
        # The per-input outputs go to the artifact store, and are removed again if the result
        # is not stored after all.
        predictions_path = outputs.write(evaluation.pk, upload.predictions)
        try:
            result = _store_result(evaluation, upload, predictions_path)
            evaluation.progress_done = evaluation.progress_total
            reason = _accuracy_words(result, evaluation.task)
            if evaluation.cancel_requested:
                # The cancel raced the end of the run and lost: say so rather than drop it.
                reason += "; a cancel was requested, but the run finished before the agent saw it"
            record_status(evaluation, SUCCEEDED, reason, host=evaluation.host)
        except BaseException:
            outputs.remove(evaluation.pk)
            raise
    return result


def _check_accuracy(evaluation: Evaluation, accuracy: dict[str, Any]) -> None:
    """A result's accuracy must be what its request and task can give: none for a latency-only
    evaluation, a top-1 for any other, each in its task's range (`metric_problem`); Invalid
    naming the field."""
    timing = bool(evaluation.request.get("latency_only"))
    if timing and (accuracy.get("top1") is not None or accuracy.get("top5") is not None):
        raise Invalid(
            "must be null: the evaluation is latency-only (nothing is scored)",
            path="accuracy.top1",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    if not timing and accuracy.get("top1") is None:
        raise Invalid(
            "is required: the evaluation is scored (only a latency-only one has no accuracy)",
            path="accuracy.top1",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    if not timing and evaluation.task in BOTH_METRICS and accuracy.get("top5") is None:
        first, second = metric_names(evaluation.task)
        raise Invalid(
            f"is required: a {evaluation.task} result gives its {second} beside its {first}",
            path="accuracy.top5",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    for name in ("top1", "top5"):
        problem = metric_problem(evaluation.task, name, accuracy.get(name))
        if problem:
            raise Invalid(
                problem, path=f"accuracy.{name}", code=EvaluationErrorCode.RESULT_MISMATCH
            )


def _accuracy_words(result: Result, task: str) -> str:
    """The result's accuracy in a sentence, by its evaluation's task (its last status
    reason)."""
    details = result.details if isinstance(result.details, dict) else {}
    if result.top1 is None:
        at_1 = f", p50 {result.p50_ms_at_1:.3f} ms at batch size 1" if result.p50_ms_at_1 else ""
        return f"latency only (not scored): {result.count} inputs timed{at_1}"
    if task == "object_detection":
        return (
            f"mAP {result.top1:.4f} (COCO, IoU .50:.95), {result.top5:.4f} at IoU .50 on "
            f"{result.count} images"
        )
    if task == "semantic_segmentation":
        return f"mIoU {result.top1:.4f}, pixel accuracy {result.top5:.2%} on {result.count} images"
    if task == "multi_label_classification":
        return f"mAP {result.top1:.4f}, F1 {result.top5:.4f} (micro) on {result.count} inputs"
    if task == "regression":
        return f"MAE {result.top1:.4g}, RMSE {result.top5:.4g} on {result.count} inputs"
    if task == "sequence_labelling":
        words = f"accuracy {result.top1:.2%}"
        reset = details.get("accuracy_state_reset")
        if isinstance(reset, dict) and isinstance(reset.get("top1"), int | float):
            words += f" with the state carried, {reset['top1']:.2%} with it reset at every call"
        return f"{words} on {result.count} inputs"
    top5 = f", top-5 {result.top5:.2%}" if result.top5 is not None else ""
    return f"top-1 {result.top1:.2%}{top5} on {result.count} inputs"


def _latency_fields(entry: dict[str, Any]) -> dict[str, Any]:
    """A batch size's latency columns: computed here by the statistics layer from the samples
    when the agent sent them (the figures it sent beside them are not trusted), else as sent
    (an agent that keeps no samples: no interval)."""
    samples = entry.get("samples_ms")
    if samples is not None:
        entry = statistics.latency(np.asarray(samples, dtype=np.float64) * 1e6)
    names = BatchResult.LATENCY_FIELDS + BatchResult.INTERVAL_FIELDS
    return {name: entry.get(name) for name in names} | {"count": entry["count"]}


def _store_result(evaluation: Evaluation, upload: ResultUpload, predictions_path: str) -> Result:
    """The Result and its rows, one per batch size."""
    accuracy = upload.accuracy
    given = upload.stack.get("cpu")
    cpu: dict[str, Any] = given if isinstance(given, dict) else {}
    gpus = [g for g in upload.stack.get("gpus") or [] if isinstance(g, dict)]
    # The image it ran in, when its host registered an image of that digest (an agent names
    # only images it registered; anything else is kept in the stack as said, unlinked).
    container = upload.stack.get("container")
    digest = container.get("digest") if isinstance(container, dict) else None
    image = None
    if isinstance(digest, str) and evaluation.host is not None:
        image = evaluation.host.images.filter(digest=digest).first()
    result = Result.objects.create(
        evaluation=evaluation,
        top1=accuracy["top1"],
        top5=accuracy["top5"],
        count=accuracy["count"],
        predictions_path=predictions_path,
        top_k=int(upload.predictions.get("top_k") or 1),
        content_hash=upload.content_hash,
        cpu_model=str(cpu.get("model") or "")[:256],
        gpu_model=str(gpus[0].get("name") or "")[:256] if gpus else "",
        stack=upload.stack,
        details=upload.details,
        host=evaluation.host,
        image=image,
    )
    rows = BatchResult.objects.bulk_create(
        BatchResult(
            result=result,
            evaluation=evaluation,
            batch_size=int(size),
            throughput_ips=upload.throughput[size],
            **_latency_fields(entry),
        )
        for size, entry in upload.latency.items()
    )
    LatencySamples.objects.bulk_create(
        LatencySamples(
            batch_result=row, samples_ms=upload.latency[str(row.batch_size)]["samples_ms"]
        )
        for row in rows
        if upload.latency[str(row.batch_size)].get("samples_ms") is not None
    )
    result.summarize(rows)
    result.configuration = leaderboards.configuration_of(evaluation, result)
    evaluation.top1, evaluation.top5 = result.top1, result.top5
    result.save(
        update_fields=[
            "p50_ms_at_1",
            "p50_low_ms_at_1",
            "p50_high_ms_at_1",
            "p99_ms_at_1",
            "best_throughput_ips",
            "best_batch_size",
            "configuration",
        ]
    )
    return result


def report_status(
    evaluation_id: Any, token: ApiToken, claim: str, status: str, reason: str
) -> Evaluation:
    """The claimant finishes the evaluation as failed (saying why) or cancelled, or gives it
    back as `lost` (saying why), to be dispatched again like the job of a lost agent."""
    _check_still_allowed(evaluation_id, token, claim)
    with transaction.atomic():
        evaluation = _get_locked(evaluation_id)
        _check_claim(evaluation, token, claim)
        host = evaluation.host
        name = host.name if host else "its host"
        if status == "lost":
            _lose(evaluation, f"host {name} lost it: {reason}")
            return evaluation
        if status == FAILED:
            reason = f"failed on host {name}: {reason}"
        else:
            done = f"{evaluation.progress_done} of {evaluation.progress_total} predictions"
            reason = f"cancelled; host {name} stopped it after {done}" + (
                f" ({reason})" if reason else ""
            )
        record_status(evaluation, status, reason, host=host)
    return evaluation


def on_agent_restarted(sender: Any, *, host: Host, **_: Any) -> None:
    """`hub.signals.agent_restarted`: the host's agent started afresh, so the jobs its previous
    process held are lost; each is dispatched again now (as `requeue_lost` would once their
    silence had lasted HOST_LIVE_SECONDS)."""
    for pk in Evaluation.objects.filter(status=RUNNING, host=host).values_list("pk", flat=True):
        with transaction.atomic():
            evaluation = _locked(pk)
            if evaluation and evaluation.status == RUNNING and evaluation.host_id == host.pk:
                _lose(evaluation, f"the agent of host {host.name} was restarted during the job")


# -- the user's side -------------------------------------------------------------------------


def cancel_evaluation(evaluation_id: Any, user: AbstractBaseUser) -> Evaluation:
    """Cancel at once when no agent holds it yet; otherwise ask the agent, which stops at its
    next progress report and reports `cancelled`."""
    with transaction.atomic():
        evaluation = _get_locked(evaluation_id)
        if evaluation.is_finished:
            raise Conflict(
                f"evaluation {evaluation.pk} is {evaluation.status} already",
                code=EvaluationErrorCode.FINISHED,
            )
        if evaluation.status in (QUEUED, DISPATCHED):
            record_status(
                evaluation, CANCELLED, f"cancelled by {user.get_username()} before it started"
            )
        elif not evaluation.cancel_requested:
            evaluation.cancel_requested = True
            evaluation.save(update_fields=["cancel_requested", "updated_at"])
            events.cancel_requested(evaluation)
    return evaluation


# -- the sweep -------------------------------------------------------------------------------


def requeue_lost(now: datetime | None = None) -> list[Evaluation]:
    """Dispatch again (or fail) every evaluation whose host or message was lost:

    - running, and its agent has not reported for HOST_LIVE_SECONDS: dispatched again, until
      EVALUATION_MAX_ATTEMPTS attempts have been lost; cancelled if a cancel was pending;
    - dispatched to a host that stopped heartbeating, or to a queue that no live host
      consumes any more, for HOST_LIVE_SECONDS: sent to another host that can run it, or
      failed saying why none can;
    - dispatched but never sent (the hub stopped between its commit and the broker's answer)
      for EVALUATION_SEND_SECONDS: sent again;
    - dispatched and sent, but not claimed for EVALUATION_DISPATCH_SECONDS although a live host
      that consumes its queue has been idle (no job) for HOST_LIVE_SECONDS: its message was
      lost in the broker; sent again.

    Every re-send is a new dispatch, so an old message that turns up later is refused when it
    is claimed: at most one claim wins. The hub runs the sweep every EVALUATION_SWEEP_SECONDS
    (evaluations.sweeper). Returns the evaluations it changed.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.HOST_LIVE_SECONDS)
    silent = Evaluation.objects.filter(status=RUNNING).filter(
        Q(last_report_at__isnull=True) | Q(last_report_at__lt=cutoff)
    )
    live = list(Host.objects.live())
    live_queues = {queue for host in live for queue in (host.queues or [])}
    waiting = Evaluation.objects.filter(status=DISPATCHED).select_related("target_host")
    why: dict[Any, str] = {}
    fail: dict[Any, str] = {}
    idle: list[Host] | None = None  # read only when a sent dispatch has waited long
    for evaluation in waiting:
        since = evaluation.dispatched_at or evaluation.updated_at
        age = (now - since).total_seconds()
        if evaluation.updated_at < cutoff and evaluation.target_host is not None:
            if not evaluation.target_host.is_live:
                why[evaluation.pk] = (
                    f"host {evaluation.target_host.name} stopped heartbeating before the job "
                    "started"
                )
                continue
        elif evaluation.updated_at < cutoff and evaluation.queue not in live_queues:
            why[evaluation.pk] = (
                f"no live host consumes queue {evaluation.queue} any more before the job started"
            )
            continue
        if evaluation.sent_at is None and age >= settings.EVALUATION_WAIT_SECONDS:
            fail[evaluation.pk] = (
                f"the broker did not take dispatch {evaluation.dispatches} within "
                f"{settings.EVALUATION_WAIT_SECONDS} s; check that the broker "
                "(CELERY_BROKER_URL) is up, then launch the evaluation again"
            )
        elif evaluation.sent_at is None and age >= settings.EVALUATION_SEND_SECONDS:
            why[evaluation.pk] = (
                f"the hub had not sent dispatch {evaluation.dispatches} to the broker after "
                f"{age:.0f} s (was the hub restarted, or the broker down?)"
            )
        elif evaluation.sent_at is not None and age >= settings.EVALUATION_DISPATCH_SECONDS:
            if idle is None:
                idle = _idle_hosts(live, cutoff)
            waiting_on = [h.name for h in idle if evaluation.queue in (h.queues or [])]
            if waiting_on:
                why[evaluation.pk] = (
                    f"not claimed {age:.0f} s after dispatch {evaluation.dispatches} although "
                    f"host {waiting_on[0]}, which consumes queue {evaluation.queue}, was idle: "
                    "the broker lost its message"
                )
    changed = []
    for pk in [*silent.values_list("pk", flat=True), *why, *fail]:
        with transaction.atomic():
            evaluation = _locked(pk, skip_locked=True)
            if evaluation is None:
                continue
            if evaluation.status == RUNNING and _is_silent(evaluation, now):
                done = _lose(evaluation, _silence_reason(evaluation), now)
            elif evaluation.status == DISPATCHED and pk in fail:
                record_status(evaluation, FAILED, fail[pk])
                done = True
            elif evaluation.status == DISPATCHED and pk in why:
                done = _lose(evaluation, why[pk], now)
            else:
                continue
            if done:
                changed.append(evaluation)
    return changed


def _idle_hosts(live: list[Host], cutoff: datetime) -> list[Host]:
    """The live hosts that run no job and have claimed or finished none since `cutoff`."""
    busy = set(
        Evaluation.objects.filter(status=RUNNING, host__isnull=False).values_list(
            "host_id", flat=True
        )
    )
    recent = set(
        StatusChange.objects.filter(at__gte=cutoff, host__isnull=False).values_list(
            "host_id", flat=True
        )
    )
    return [host for host in live if host.pk not in busy and host.pk not in recent]


def _is_silent(evaluation: Evaluation, now: datetime) -> bool:
    cutoff = now - timedelta(seconds=settings.HOST_LIVE_SECONDS)
    return evaluation.last_report_at is None or evaluation.last_report_at < cutoff


def _silence_reason(evaluation: Evaluation) -> str:
    host = evaluation.host
    if host is None:
        return "its host was removed"
    if not host.is_live:
        return f"host {host.name} stopped heartbeating"
    return f"the agent on host {host.name} stopped reporting on it (was it restarted?)"


def _lose(evaluation: Evaluation, why: str, now: datetime | None = None) -> bool:
    """The (locked) evaluation's host cannot run it: cancel, dispatch again, or fail it; or,
    when no live host can run it now, let it wait in its queue for one to come back (agents
    restarting, a broker outage) for EVALUATION_WAIT_SECONDS after its dispatch. Whether it
    changed."""
    if evaluation.status == RUNNING and evaluation.cancel_requested:
        record_status(evaluation, CANCELLED, f"cancelled; {why} before it stopped")
        return True
    attempts = evaluation.attempts
    if evaluation.status == RUNNING and attempts >= settings.EVALUATION_MAX_ATTEMPTS:
        record_status(evaluation, FAILED, f"{why}; gave up after {attempts} attempts on lost hosts")
        return True
    try:
        where = placement.replace(evaluation)
    except solver.Unsatisfiable as unmet:
        now = now or timezone.now()
        since = evaluation.dispatched_at or evaluation.created_at
        waited = (now - since).total_seconds()
        if evaluation.model is None or not evaluation.queue:
            pass  # nothing to wait for
        elif evaluation.status == RUNNING:
            # Back to its queue, where a host that returns will find it.
            again = placement.Placement(evaluation.model, evaluation.queue, evaluation.target_host)
            _dispatch(evaluation, again, f"{why}; no live host can run it now ({unmet.message})")
            _note_waiting(evaluation, "", _A_HOST)
            return True
        elif waited < settings.EVALUATION_WAIT_SECONDS:
            why = f"{why}; no live host can run it now ({unmet.message})"
            return _note_waiting(evaluation, why, _A_HOST)
        record_status(evaluation, FAILED, f"{why}, and no other host can run it: {unmet.message}")
        return True
    _dispatch(evaluation, where, why)
    return True


_WAITS = "it waits"
_A_HOST = "a host that can run it"


def _note_waiting(evaluation: Evaluation, why: str, what: str) -> bool:
    """Say once in the (locked, dispatched) evaluation's history why it waits, for `what` and
    how long (appended to the last entry when `why` is empty); whether it said so now."""
    last = evaluation.history.order_by("-at", "-id").first()
    if last is not None and _WAITS in last.reason:
        return False
    wait = f"{_WAITS} up to {settings.EVALUATION_WAIT_SECONDS} s after its dispatch for {what}"
    if not why and last is not None:
        last.reason = f"{last.reason}; {wait}"
        last.save(update_fields=["reason"])
        return True
    record_status(evaluation, DISPATCHED, f"{why}; {wait}")
    return True
