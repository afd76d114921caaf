"""Every status change of an evaluation (`record_status`), and what the other actions share:
its row locked, a new dispatch sent after commit, and a job whose host lost it dispatched
again, left to wait for a host, or failed."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluations import events, outputs, placement, tasks
from evaluations.error_codes import EvaluationErrorCode
from evaluations.models import Evaluation, StatusChange
from hub import solver
from hub.errors import NotFound
from hub.models import Host
from predictors.protocol import CANCELLED, DISPATCHED, FAILED, FINISHED, QUEUED, RUNNING, SUCCEEDED
from traces import finishing

logger = logging.getLogger(__name__)

_ALLOWED = {
    QUEUED: {DISPATCHED, FAILED, CANCELLED},
    DISPATCHED: {DISPATCHED, RUNNING, FAILED, CANCELLED},
    # running → running: a new claim took over from a claimant that went silent.
    RUNNING: {DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED},
}


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
    if status in FINISHED:
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
    if status in FINISHED:
        # The pages of predictions staged before a result: assembled, or no longer wanted.
        evaluation_id = evaluation.pk
        transaction.on_commit(lambda: outputs.remove_pages(evaluation_id), robust=True)
    if status in FINISHED and evaluation.trace_id:
        # Its trace compacted and aggregated now, not on the first visit.
        trace_id = evaluation.trace_id
        transaction.on_commit(lambda: finishing.schedule(trace_id), robust=True)
    return change


def locked(evaluation_id: Any, *, skip_locked: bool = False) -> Evaluation | None:
    """The evaluation, its row locked until the transaction ends; None when there is none (or,
    with `skip_locked`, when another transaction holds it)."""
    rows = Evaluation.objects.select_for_update(
        skip_locked=skip_locked, of=("self",)
    ).select_related("host", "target_host", "model", "user")
    return rows.filter(pk=evaluation_id).first()


def get_locked(evaluation_id: Any) -> Evaluation:
    """The evaluation, its row locked; NotFound when there is none."""
    evaluation = locked(evaluation_id)
    if evaluation is None:
        raise NotFound(f"no evaluation {evaluation_id}", code=EvaluationErrorCode.NOT_FOUND)
    return evaluation


def dispatch_evaluation(evaluation: Evaluation, where: placement.Placement, why: str) -> None:
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
            evaluation = locked(evaluation_id)
            if evaluation and evaluation.status == DISPATCHED and evaluation.dispatches == dispatch:
                _note_waiting(
                    evaluation,
                    f"the hub could not reach its Celery broker ({exc})",
                    f"the broker (CELERY_BROKER_URL), sent again every "
                    f"{settings.EVALUATION_SEND_SECONDS} s",
                )


def is_silent(evaluation: Evaluation, now: datetime) -> bool:
    """Whether the (running) evaluation's claimant has not reported for HOST_LIVE_SECONDS."""
    cutoff = now - timedelta(seconds=settings.HOST_LIVE_SECONDS)
    return evaluation.last_report_at is None or evaluation.last_report_at < cutoff


def silence_reason(evaluation: Evaluation) -> str:
    """Why a silent claimant went silent, as its history says it."""
    host = evaluation.host
    if host is None:
        return "its host was removed"
    if not host.is_live:
        return f"host {host.name} stopped heartbeating"
    return f"the agent on host {host.name} stopped reporting on it (was it restarted?)"


def lose(evaluation: Evaluation, why: str, now: datetime | None = None) -> bool:
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
            dispatch_evaluation(
                evaluation, again, f"{why}; no live host can run it now ({unmet.message})"
            )
            _note_waiting(evaluation, "", _A_HOST)
            return True
        elif waited < settings.EVALUATION_WAIT_SECONDS:
            why = f"{why}; no live host can run it now ({unmet.message})"
            return _note_waiting(evaluation, why, _A_HOST)
        record_status(evaluation, FAILED, f"{why}, and no other host can run it: {unmet.message}")
        return True
    dispatch_evaluation(evaluation, where, why)
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
