"""The evaluation history: filters and orderings over evaluations and their results, written
once for the API (`GET /api/v1/evaluations/`), its schema and the CLI (`mlms evaluations`).

A filter's value is checked (a choice, an integer, a date, a UUID) and a bad one is refused
naming the parameter (`Invalid`). The latency and throughput orderings sort by a result's row
at one batch size, so they need the `batch_size` filter, which says which.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from django.db.models import F, QuerySet
from django.utils import timezone

from evaluations.models import Evaluation
from hub.errors import Invalid
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.protocol import DEVICES, LATENCY_KEYS, LATENCY_WORDS, STATUSES, TRACE_LEVELS

__all__ = ["FILTERS", "ORDERINGS", "Filter", "apply"]


@dataclass(frozen=True)
class Filter:
    """A query parameter of the history: `lookup` on Evaluation, checked as `kind` (text,
    choice, integer, date, uuid)."""

    name: str
    lookup: str
    description: str
    kind: str = "text"
    choices: tuple[str, ...] = ()


FILTERS: tuple[Filter, ...] = (
    Filter("model", "model_name", "model name"),
    Filter("version", "model_version", "model version (exact)"),
    Filter("framework", "framework", "framework", "choice", tuple(FRAMEWORKS)),
    Filter("framework_version", "framework_version", "the framework version it ran with"),
    Filter("dataset", "dataset_name", "dataset name"),
    Filter("dataset_version", "dataset_version", "dataset version (exact)"),
    Filter("split", "split", "dataset split"),
    Filter("host", "host__name", "the host it ran (or runs) on"),
    Filter("device", "device", "cpu or gpu", "choice", DEVICES),
    Filter("status", "status", "its status", "choice", STATUSES),
    Filter("trace_level", "trace_level", "the trace level it ran at", "choice", TRACE_LEVELS),
    Filter(
        "batch_size",
        "batch_results__batch_size",
        "has a result at this batch size (and the batch size the latency orderings sort by)",
        "integer",
    ),
    Filter("cpu_model", "result__cpu_model__icontains", "a substring of the CPU's name"),
    Filter("gpu_model", "result__gpu_model__icontains", "a substring of the GPU's name"),
    Filter("content_hash", "result__content_hash", "the content hash of the model that ran"),
    Filter(
        "override",
        "overrides__contains",
        "an override it ran with, PATH=VALUE or a part of one (color_mode=BGR)",
    ),
    Filter("user", "user__username", "user name (staff see every user's evaluations)"),
    Filter(
        "published",
        "published",
        "true: only published evaluations; false: only unpublished ones",
        "choice",
        ("true", "false"),
    ),
    Filter("task", "task", "the model's task"),
    Filter(
        "untrained",
        "untrained",
        "true: only of models marked not trained; false: only of the others",
        "choice",
        ("true", "false"),
    ),
    Filter("group", "group", "the evaluations one request launched", "uuid"),
    Filter(
        "created_after",
        "created_at__gte",
        "launched at or after this date or time (ISO 8601; a date is its midnight, UTC)",
        "date",
    ),
    Filter(
        "created_before",
        "created_at__lt",
        "launched before this date or time (ISO 8601; a date is its midnight, UTC)",
        "date",
    ),
)

# The metrics of a result's row at one batch size: its latency statistics, the percentiles
# first (the std is no sort key), and its throughput.
_ROW_METRICS = (
    *sorted((key for key in LATENCY_KEYS if key != "std_ms"), key=lambda key: key[0] != "p"),
    "throughput_ips",
)
# Copied onto the evaluation (indexed), so that sorting by them walks an index.
_RESULT_METRICS = {"top1": "top1", "top5": "top5"}
_FIELDS = {"created_at": "created_at", "finished_at": "finished_at"}
ORDERINGS: tuple[str, ...] = tuple(
    f"{sign}{name}" for name in (*_FIELDS, *_RESULT_METRICS, *_ROW_METRICS) for sign in ("", "-")
)


# What each ordering sorts by, in words (the history page's choices).
_WORDS = {
    "created_at": "launched",
    "finished_at": "finished",
    "top1": "first metric (top-1, mAP, CER …)",
    "top5": "second metric",
    **LATENCY_WORDS,
    "throughput_ips": "throughput",
}


def ordering_label(ordering: str) -> str:
    """An ordering in words: "median latency (p50), highest first"."""
    name = ordering.lstrip("-")
    words = _WORDS.get(name, name)
    if name in _FIELDS:
        return f"{words}, {'newest' if ordering.startswith('-') else 'oldest'} first"
    return f"{words}, {'highest' if ordering.startswith('-') else 'lowest'} first"


def sorts_rows(ordering: str) -> bool:
    """Whether an ordering sorts by the rows of one batch size (it needs `batch_size`)."""
    return ordering.lstrip("-") in _ROW_METRICS


def apply(queryset: QuerySet[Evaluation], params: Mapping[str, Any]) -> QuerySet[Evaluation]:
    """`queryset` filtered and ordered by the history's query parameters in `params`."""
    for spec in FILTERS:
        raw = params.get(spec.name)
        if raw is None:
            continue
        if not str(raw).strip():
            raise Invalid(
                f"{spec.name} is empty: leave it out to match any {spec.name}", path=spec.name
            )
        value = _value(spec, str(raw))
        if spec.name in ("published", "untrained"):
            value = value == "true"
        queryset = queryset.filter(**{spec.lookup: value})
    # With `batch_size`, the filter joins one row per evaluation (a result has one row per
    # batch size), so nothing is listed twice; the row orderings sort by that same join.
    ordering = params.get("ordering")
    if ordering is not None:
        queryset = _ordered(queryset, str(ordering), params.get("batch_size"))
    return queryset


def _value(spec: Filter, raw: str) -> Any:
    if spec.kind == "choice" and raw not in spec.choices:
        raise Invalid(f"{spec.name} must be one of {', '.join(spec.choices)}", path=spec.name)
    if spec.kind == "integer":
        if not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
            raise Invalid(
                f"{spec.name} must be a positive integer, not {raw[:40]!r}", path=spec.name
            )
        return int(raw)
    if spec.kind == "uuid":
        try:
            return uuid.UUID(raw)
        except ValueError:
            raise Invalid(f"{spec.name} must be a UUID, not {raw[:40]!r}", path=spec.name) from None
    if spec.kind == "date":
        return _moment(spec.name, raw)
    return raw


def _moment(name: str, raw: str) -> datetime:
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        try:
            moment = datetime.combine(date.fromisoformat(raw), time())
        except ValueError:
            raise Invalid(
                f"{name} must be an ISO 8601 date or time (2026-11-24 or 2026-11-24T10:00Z), "
                f"not {raw[:40]!r}",
                path=name,
            ) from None
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    return moment


def _ordered(
    queryset: QuerySet[Evaluation], ordering: str, batch_size: Any
) -> QuerySet[Evaluation]:
    if ordering not in ORDERINGS:
        raise Invalid(f"ordering must be one of {', '.join(ORDERINGS)}", path="ordering")
    name = ordering.lstrip("-")
    descending = ordering.startswith("-")
    if name in _FIELDS:
        key = F(_FIELDS[name])
    elif name in _RESULT_METRICS:
        key = F(_RESULT_METRICS[name])
    else:
        if not batch_size:
            raise Invalid(
                f"ordering by {name} sorts by the rows of one batch size: add batch_size",
                path="ordering",
            )
        key = F(f"batch_results__{name}")
    # Evaluations without the metric (no result yet) come last either way.
    return queryset.order_by(
        key.desc(nulls_last=True) if descending else key.asc(nulls_last=True), "-created_at", "id"
    )
