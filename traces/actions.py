"""What the apps built on traces ask of them (the evaluations app: launches that join a caller's
trace, the spans an evaluation's result reports, and the per-layer figures a comparison
reads)."""

from __future__ import annotations

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Sum

from evaluations.models import Evaluation
from traces import aggregates
from traces.models import SpanAggregate, SpanExport, Trace


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


def span_aggregates(trace_id: str) -> list[SpanAggregate]:
    """The aggregates of trace `trace_id` per level, name, op type and batch size
    (`traces.aggregates`); none when the trace has no spans."""
    trace = Trace.objects.filter(trace_id=trace_id).first()
    if trace is None:
        return []
    return aggregates.aggregates(trace)


def layer_durations(trace_id: str, batch_size: int | None) -> dict[str, np.ndarray]:
    """{layer name: its spans' durations in ns, in the order they ran} of trace `trace_id` at
    `batch_size`: what a comparison tests a layer's difference on."""
    return aggregates.layer_samples(trace_id, "framework", batch_size)
