"""What the apps built on traces ask of them (the evaluations app: launches that join a caller's
trace, and the spans an evaluation's result reports)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Sum

from evaluations.models import Evaluation
from traces.models import SpanExport, Trace


def owned_by_another_user(trace_id: str, user: AbstractBaseUser) -> bool:
    """Whether another user's token wrote spans into trace `trace_id` (it has a `Trace` row of
    another owner)."""
    return Trace.objects.filter(trace_id=trace_id).exclude(owner_id=user.pk).exists()


def spans_stored(evaluation: Evaluation) -> int:
    """How many spans the hub stored for the evaluation's current attempt."""
    total = SpanExport.objects.filter(evaluation=evaluation, attempt=evaluation.attempts).aggregate(
        total=Sum("spans")
    )["total"]
    return int(total or 0)
