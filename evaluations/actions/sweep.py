"""The hub's sweep: every evaluation whose host or message was lost dispatched again, or
failed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from evaluations.actions.transitions import is_silent, locked, lose, record_status, silence_reason
from evaluations.models import Evaluation, StatusChange
from hub.models import Host
from predictors.protocol import DISPATCHED, FAILED, RUNNING


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
            evaluation = locked(pk, skip_locked=True)
            if evaluation is None:
                continue
            if evaluation.status == RUNNING and is_silent(evaluation, now):
                done = lose(evaluation, silence_reason(evaluation), now)
            elif evaluation.status == DISPATCHED and pk in fail:
                record_status(evaluation, FAILED, fail[pk])
                done = True
            elif evaluation.status == DISPATCHED and pk in why:
                done = lose(evaluation, why[pk], now)
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
