"""The agent's side: a host claims a dispatched job, and the claimant reports its progress,
its failure or cancel, or gives the job back; an agent that restarted loses the jobs its
previous process held. Every report of the claimant is checked against its claim."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluations import events, placement
from evaluations.actions.transitions import (
    get_locked,
    is_silent,
    locked,
    lose,
    record_status,
    silence_reason,
)
from evaluations.error_codes import EvaluationErrorCode
from evaluations.models import Evaluation, StatusChange
from hub import actions as hub_actions
from hub.errors import Conflict, Forbidden
from hub.models import ApiToken, Host
from predictors.protocol import FAILED, LOST, RUNNING


def claim_evaluation(evaluation_id: Any, host: Host, dispatch: int) -> Evaluation:
    """Give the evaluation to `host`, whose agent received dispatch number `dispatch`.

    The first claim wins. A later one (a message the broker delivered twice, or a dispatch that
    has been superseded) is refused with 409 while the evaluation's claimant keeps reporting;
    a claimant that went silent loses the job to the new claim.
    """
    hub_actions.record_heartbeat(host)  # claiming shows that the host is alive
    with transaction.atomic():
        evaluation = get_locked(evaluation_id)
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
            lost = f"{silence_reason(evaluation)}; " if evaluation.status == RUNNING else ""
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
        if not is_silent(evaluation, timezone.now()):
            who = evaluation.host.name if evaluation.host else "another host"
            return f"evaluation {evaluation.pk} is running on {who} (attempt {evaluation.attempts})"
        if evaluation.cancel_requested or evaluation.attempts >= settings.EVALUATION_MAX_ATTEMPTS:
            lose(evaluation, silence_reason(evaluation))
            return f"evaluation {evaluation.pk} is {evaluation.status}"
    if evaluation.model_id is None or evaluation.dataset_id is None:
        kind = "model" if evaluation.model_id is None else "dataset"
        record_status(evaluation, FAILED, f"its {kind} manifest was deleted before it ran")
        return f"evaluation {evaluation.pk} is failed"
    if not placement.can_run(evaluation, host):
        # A consumer of a shared queue that cannot run this request: pin it to one that can.
        lose(evaluation, f"host {host.name} cannot run it")
        return f"host {host.name} cannot run evaluation {evaluation.pk}; it was sent elsewhere"
    return None


def _framework_version(host: Host, framework: str) -> str:
    for entry in host.frameworks or []:
        if isinstance(entry, dict) and entry.get("name") == framework:
            return str(entry.get("version", ""))
    return ""


def check_claim(evaluation: Evaluation, token: ApiToken, claim: str) -> None:
    """403 unless a host of `token` holds the evaluation, or held an attempt of it (a token
    that never did learns nothing of it, not even its status); 409 unless `claim` is current."""
    check_claim_holder(evaluation, token)
    if evaluation.status != RUNNING or evaluation.claim != claim:
        state = evaluation.status
        if state == RUNNING:
            state = f"running on {evaluation.host.name if evaluation.host else 'another host'}"
        raise _superseded(evaluation, state)


def check_claim_holder(evaluation: Evaluation, token: ApiToken) -> None:
    """403 unless a host of `token` holds the evaluation, or held an attempt of it."""
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


def record_progress(
    evaluation_id: Any, token: ApiToken, claim: str, done: int, total: int
) -> Evaluation:
    """Record the claimant's progress (predictions done of total); it doubles as its report
    that it is still working on the job."""
    with _claimed(evaluation_id, token, claim) as evaluation:
        changed = (evaluation.progress_done, evaluation.progress_total) != (done, total)
        evaluation.progress_done, evaluation.progress_total = done, total
        evaluation.last_report_at = timezone.now()
        evaluation.save(
            update_fields=["progress_done", "progress_total", "last_report_at", "updated_at"]
        )
        if changed:
            events.progressed(evaluation)
    return evaluation


def check_still_allowed(evaluation_id: Any, token: ApiToken, claim: str) -> None:
    """Before a report of the claimant (progress, result, status) is taken: when its host may no
    longer run the job (`hub.trust`: access withdrawn while it ran), the job is taken back and
    dispatched again, and once that has committed the agent is told to stop (409). Reports of
    anyone but the current claimant are left to `check_claim`."""
    withdrawn = None
    with transaction.atomic():
        evaluation = get_locked(evaluation_id)
        host = evaluation.host
        if evaluation.status == RUNNING and evaluation.claim == claim and host is not None:
            if host.token_id == token.pk:
                withdrawn = evaluation.why_not_on(host)
                if withdrawn:
                    lose(evaluation, withdrawn)
    if withdrawn:
        raise _superseded(evaluation, withdrawn)


def _superseded(evaluation: Evaluation, why: str) -> Conflict:
    """409 to a claimant whose claim is no longer current: it stops working on the job."""
    return Conflict(
        f"evaluation {evaluation.pk} is no longer yours ({why}); stop working on it",
        code=EvaluationErrorCode.CLAIM_SUPERSEDED,
    )


@contextmanager
def _claimed(evaluation_id: Any, token: ApiToken, claim: str) -> Iterator[Evaluation]:
    """The evaluation, its row locked until the block ends, for a report of its current
    claimant (`check_still_allowed`, then `check_claim`: 403 or 409 otherwise)."""
    check_still_allowed(evaluation_id, token, claim)
    with transaction.atomic():
        evaluation = get_locked(evaluation_id)
        check_claim(evaluation, token, claim)
        yield evaluation


def report_status(
    evaluation_id: Any, token: ApiToken, claim: str, status: str, reason: str
) -> Evaluation:
    """The claimant finishes the evaluation as failed (saying why) or cancelled, or gives it
    back as `lost` (saying why), to be dispatched again like the job of a lost agent."""
    with _claimed(evaluation_id, token, claim) as evaluation:
        host = evaluation.host
        name = host.name if host else "its host"
        if status == LOST:
            lose(evaluation, f"host {name} lost it: {reason}")
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
            evaluation = locked(pk)
            if evaluation and evaluation.status == RUNNING and evaluation.host_id == host.pk:
                lose(evaluation, f"the agent of host {host.name} was restarted during the job")
