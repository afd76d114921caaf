"""Who may write spans into a trace, and who may read it.

A trace id that belongs to an evaluation is written by the evaluation's user (token scope
`write` or `evaluate`) or by an agent token whose host holds the live claim on that evaluation
(it is running there, the export carries that claim, `X-MLMS-Claim`, and the host may still run
the job, `hub.trust`, as checked at most a second ago); a trace id of no
evaluation belongs to the user whose token first wrote into it. Reads follow the evaluation's
visibility, or the owner (and staff) for a free-standing trace.

An agent's export is refused (Conflict) once the hub has given the job to another attempt or the job
has ended, and an agent token without the claim writes nothing (Forbidden): an evaluation's spans are
those of the attempt that produced its result. Only the claimant's exports count as the
attempt's stored spans (`Target.attempt`; the user's own spans join the trace, counted for no
attempt), so the spans stored for a result never exceed those its agent sent.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import F

from evaluations.models import Evaluation
from hub.errors import Conflict, Forbidden
from hub.models import ApiToken
from hub.statements import statement
from traces.error_codes import TraceErrorCode
from traces.models import Trace
from traces.store import TRACE_ID

RUNNING = Evaluation.RUNNING

# The token scopes of a user who writes spans, and of anyone who may.
USER_SCOPES = frozenset({"write", "evaluate"})
WRITE_SCOPES = USER_SCOPES | {"agent"}


@dataclass
class Target:
    """A trace an export may write into: its id, the evaluation its spans count for (if any),
    and its row (None while it has none)."""

    trace_id: str
    evaluation: Evaluation | None
    trace: Trace | None
    # The evaluation's attempt the spans count for: its current one when its claimant sent them
    # under its claim; 0 (none) for anyone else's.
    attempt: int = 0


def _evaluation_of(trace_id: str, trace: Trace | None) -> Evaluation | None:
    if trace is not None and trace.evaluation_id is not None:
        return trace.evaluation
    return Evaluation.objects.select_related("host").filter(trace_id=trace_id).first()


# What authorizing an export and counting its spans read of a trace's row and of an evaluation
# (and its host's token, `host_token_id`): only these fields (any other is read from the database
# when asked for). Each query is built once per process and number of trace ids
# (`hub.statements`): building it took several times as long as the database took to answer.
_TRACE_FIELDS = ("trace_id", "owner_id", "evaluation_id")
_EVALUATION_FIELDS = ("id", "user", "status", "attempts", "claim", "trace_id")


def _placeholders(count: int) -> list[str]:
    return [f"{index:032x}" for index in range(count)]  # distinct: `__in` drops repeats


@functools.lru_cache(maxsize=32)
def _traces_statement(count: int) -> str:
    ids = _placeholders(count)
    return statement(Trace.objects.filter(trace_id__in=ids).only(*_TRACE_FIELDS).order_by(), ids)


@functools.lru_cache(maxsize=32)
def _evaluations_statement(count: int) -> str:
    ids = _placeholders(count)
    queryset = (
        Evaluation.objects.filter(trace_id__in=ids)
        .annotate(host_token_id=F("host__token_id"))
        .only(*_EVALUATION_FIELDS)
    )
    return statement(queryset, ids)


def _traces(trace_ids: list[str]) -> dict[str, Trace]:
    """The `Trace` rows of these trace ids."""
    rows = Trace.objects.raw(_traces_statement(len(trace_ids)), trace_ids)
    return {trace.trace_id: trace for trace in rows}


def _evaluations(trace_ids: list[str]) -> list[Evaluation]:
    """The evaluations of these trace ids (newest first, as the model orders them), each with
    its host's token id as `host_token_id` (None without a host)."""
    return list(Evaluation.objects.raw(_evaluations_statement(len(trace_ids)), trace_ids))


def authorize_write(token: ApiToken, trace_ids: Iterable[str], *, claim: str = "") -> list[Target]:
    """The traces `token` may write into, or Forbidden naming the first it may not.

    With `claim` (an agent's `X-MLMS-Claim`), an evaluation's trace takes the spans only for the
    running evaluation that claim currently holds, and they count for its attempt:
    Conflict when the job has ended or the hub has given it to another attempt since.
    An agent token without a claim writes only where its user could (scope `write` or
    `evaluate`, the evaluation's own user).

    Two queries however many traces the export holds: their `Trace` rows, and the evaluations
    of their trace ids (with their hosts)."""
    scopes = set(token.scopes)
    ids = sorted(trace_ids)
    if not ids:  # an export of no spans (`IN ()` is no SQL)
        return []
    traces = _traces(ids)
    sharing: dict[str, list[Evaluation]] = {}
    for each in _evaluations(ids):
        sharing.setdefault(each.trace_id, []).append(each)
    targets = []
    for trace_id in ids:
        trace = traces.get(trace_id)
        shared = sharing.get(trace_id, [])
        evaluation = _evaluation_among(trace, shared)
        if evaluation is not None:
            # Evaluations launched with one `traceparent` share its trace id (`hosts: all`
            # launches several): the token may write when it may write into any of them, and
            # the spans are counted for the one its claim holds, else the first of them.
            candidates = [evaluation, *shared]
            by_agent = [e for e in candidates if _agent_of(token, scopes, e)]
            if claim and by_agent:
                current = [e for e in by_agent if e.status == RUNNING and e.claim == claim]
                if not current:
                    raise Conflict(
                        f"Claim {claim} is no longer current for the evaluation of trace "
                        f"{trace_id}: the job ended, or the hub gave it to another attempt, "
                        "whose spans replace these.",
                        code=TraceErrorCode.CLAIM_NOT_CURRENT,
                    )
                refusal = _host_refusal(current[0], claim)
                if refusal:
                    raise Conflict(
                        f"Claim {claim} is no longer current for the evaluation of trace "
                        f"{trace_id}: {refusal}.",
                        code=TraceErrorCode.CLAIM_NOT_CURRENT,
                    )
                targets.append(Target(trace_id, current[0], trace, current[0].attempts))
                continue
            owned = [e for e in candidates if _owner_of(token, scopes, e)]
            allowed = bool(owned)
            if owned:
                evaluation = owned[0]
        elif trace is not None:
            allowed = bool(scopes & USER_SCOPES) and trace.owner_id == token.user_id
        else:
            allowed = bool(scopes & USER_SCOPES)
        if not allowed:
            raise Forbidden(
                f"This token may not write spans into trace {trace_id}.",
                code=TraceErrorCode.NOT_WRITABLE,
            )
        targets.append(Target(trace_id, evaluation, trace))
    return targets


def _evaluation_among(trace: Trace | None, shared: list[Evaluation]) -> Evaluation | None:
    """`_evaluation_of`, from the evaluations of the trace id read already (newest first)."""
    if trace is not None and trace.evaluation_id is not None:
        found = [e for e in shared if e.pk == trace.evaluation_id]
        if found:
            return found[0]
        # The trace's evaluation has another trace id (rare): one more query.
        return (
            Evaluation.objects.annotate(host_token_id=F("host__token_id"))
            .only(*_EVALUATION_FIELDS)
            .filter(pk=trace.evaluation_id)
            .first()
        )
    return shared[0] if shared else None


# The claimant's host may still run the job (`hub.trust`), as its last check found, per
# (evaluation, claim): {key: (answer, until)}. Checked again once an answer is older than
# HOST_CHECK_SECONDS, so access withdrawn while the job runs stops its spans within that time
# (the agent's next report takes the job back, `evaluations.actions`); an export costs the
# check's queries at most once in that time, not once per export.
HOST_CHECK_SECONDS = 1.0
_host_checks: dict[tuple[str, str], tuple[str | None, float]] = {}


def _host_refusal(evaluation: Evaluation, claim: str) -> str | None:
    """Why the host that holds `claim` on the evaluation may no longer run it, or None."""
    now = time.monotonic()
    key = (str(evaluation.pk), claim)
    known = _host_checks.get(key)
    if known is not None and known[1] > now:
        return known[0]
    if len(_host_checks) > 4096:
        for stale in [k for k, (_answer, until) in _host_checks.items() if until <= now]:
            del _host_checks[stale]
    full = Evaluation.objects.select_related("user", "host", "model", "dataset").get(
        pk=evaluation.pk
    )
    refusal = full.why_not_on(full.host) if full.host is not None else "it has no host"
    _host_checks[key] = (refusal, now + HOST_CHECK_SECONDS)
    return refusal


def _owner_of(token: ApiToken, scopes: set[str], evaluation: Evaluation) -> bool:
    """Whether `token` writes as the evaluation's user."""
    return bool(scopes & USER_SCOPES) and evaluation.user_id == token.user_id


def _agent_of(token: ApiToken, scopes: set[str], evaluation: Evaluation) -> bool:
    """Whether `token` is the agent token of the host that claimed the evaluation last (whether
    its claim is still live is the claim's to say)."""
    return "agent" in scopes and getattr(evaluation, "host_token_id", None) == token.pk


def readable_trace(
    user: AbstractBaseUser | AnonymousUser, trace_id: str
) -> tuple[Trace | None, Evaluation | None] | None:
    """(the Trace row if any, its evaluation if any) when `user` may read the trace; else None."""
    if not TRACE_ID.match(trace_id):
        return None
    trace = Trace.objects.filter(trace_id=trace_id).first()
    evaluation = _evaluation_of(trace_id, trace)
    if evaluation is not None:
        # An anonymous caller reads the trace of a published evaluation only.
        if not Evaluation.objects.visible_to(user).filter(pk=evaluation.pk).exists():
            return None
        return trace, evaluation
    if trace is None or not user.is_authenticated:
        return None
    if trace.owner_id != user.pk and not user.is_staff:  # type: ignore[union-attr]
        return None
    return trace, None
