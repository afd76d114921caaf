"""Public leaderboards: one board per task and dataset, built from published evaluations only.

What reaches a board is what anyone may read: `Evaluation.objects.visible_to(AnonymousUser())`,
which holds only published evaluations whose model and dataset are public. A row is one
succeeded evaluation: model and version, framework and version, hardware, accuracy, latency at
batch size 1, the best throughput and its batch size, and what reproduces it (the model's
content hash, the stack, seed, threads and overrides). Written once for the API
(`GET /api/v1/leaderboards/…`, JSON and CSV) and the pages (`/leaderboards/`).

Runs of the same configuration (the same model content, framework version, dataset version and
split, device, CPU and GPU, threads, seed and overrides) that agree within `TOLERANCE` are
counted on each row: a number several people measured alike is one to trust.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from django.db.models import Case, Count, F, QuerySet, When
from django.urls import reverse

from evaluations.models import Evaluation, Result
from hub.errors import Invalid, NotFound
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.protocol import DEVICES, GPU
from predictors.tasks import LOWER_IS_BETTER

__all__ = [
    "COLUMNS",
    "FILTERS",
    "TOLERANCE",
    "Board",
    "board_entries",
    "boards",
    "pareto_front",
    "rows",
]

# Two runs of one configuration agree when their top-1 accuracies differ by at most
# `top1_points` percentage points (a regression's errors: by at most `error_ratio` of the
# smaller one) and their p50 latencies at batch size 1 by at most `latency_ratio` of the
# smaller one.
TOLERANCE = {"top1_points": 0.5, "error_ratio": 0.005, "latency_ratio": 0.10}
TOLERANCE_TEXT = (
    f"top-1 within {TOLERANCE['top1_points']} points (a regression's error within "
    f"{TOLERANCE['error_ratio']:.1%}) and p50 latency at batch size 1 within "
    f"{TOLERANCE['latency_ratio']:.0%}"
)

# The sortable columns: query value → the ORM field it sorts by.
COLUMNS: dict[str, str] = {
    "top1": "result__top1",
    "top5": "result__top5",
    "model": "model_name",
    "framework": "framework",
    "date": "finished_at",
    "hardware": "hardware",
    "p50_ms": "result__p50_ms_at_1",
    "p99_ms": "result__p99_ms_at_1",
    "throughput": "result__best_throughput_ips",
}
# The columns every row has a value of.
_ALWAYS_SET = {"top1", "model", "framework"}  # top5 is null for five classes or fewer
ORDERINGS: tuple[str, ...] = tuple(f"{sign}{name}" for name in COLUMNS for sign in ("", "-"))
DEFAULT_ORDERING = "-top1"


def default_ordering(task: str) -> str:
    """A board's order when none is asked: the best first (the lowest error, for a task whose
    headline metric is one)."""
    return "top1" if task in LOWER_IS_BETTER else DEFAULT_ORDERING


# The filters: query parameter → (lookup, allowed values or () for any text).
FILTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "framework": ("framework", tuple(FRAMEWORKS)),
    "device": ("device", DEVICES),
    "hardware": ("hardware", ()),
    "model": ("model_name", ()),
}


@dataclass(frozen=True)
class Board:
    task: str
    dataset: str
    entries: int

    @property
    def title(self) -> str:
        return f"{self.dataset} · {self.task.replace('_', ' ')}"

    def url(self) -> str:
        return reverse("leaderboard", kwargs={"task": self.task, "dataset": self.dataset})

    def api_url(self) -> str:
        return reverse("api-leaderboard", kwargs={"task": self.task, "dataset": self.dataset})


def published() -> QuerySet[Evaluation]:
    """The evaluations a leaderboard may show: published and succeeded (so with a result), of
    a public model and dataset (the same rule as for an anonymous reader)."""
    return Evaluation.objects.visible_to(AnonymousUser()).filter(status=Evaluation.SUCCEEDED)


def scored() -> QuerySet[Evaluation]:
    """The published evaluations the boards rank: those with an accuracy (not latency-only)."""
    return published().filter(top1__isnull=False)


def boards() -> list[Board]:
    """Every board: a task and dataset with at least one published scored result."""
    counts = (
        scored()
        .values("task", "dataset_name")
        .annotate(entries=Count("*"))  # COUNT(*): an index-only scan
        .order_by("task", "dataset_name")
    )
    return [Board(row["task"], row["dataset_name"], row["entries"]) for row in counts]


# A task's and a dataset's name, as manifests spell them.
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def board_entries(task: str, dataset: str, params: Mapping[str, Any] | None = None) -> Counted:
    """The rows of one board, filtered and sorted by `params` (`FILTERS`, `ordering`); a bad
    value is refused naming the parameter; a task or dataset that no manifest could name is
    NotFound."""
    for kind, name in (("task", task), ("dataset", dataset)):
        if not _NAME.fullmatch(name):
            raise NotFound(f"no leaderboard for {kind} {name[:64]!r}", path=kind)
    params = params or {}
    queryset = scored().filter(task=task, dataset_name=dataset)
    if params.get("hardware") is not None:
        queryset = with_hardware(queryset)
    for name, (lookup, choices) in FILTERS.items():
        raw = params.get(name)
        if raw is None:
            continue
        value = str(raw)
        if not value.strip():
            raise Invalid(f"{name} is empty: leave it out to match any {name}", path=name)
        if choices and value not in choices:
            raise Invalid(f"{name} must be one of {', '.join(choices)}", path=name)
        queryset = queryset.filter(**{lookup: value})
    # Left out, the board's own order; given, one of ORDERINGS (an empty value is refused, as
    # the filters' are, and as the schema's enum says).
    given = params.get("ordering")
    ordering = default_ordering(task) if given is None else str(given)
    if ordering not in ORDERINGS:
        raise Invalid(f"ordering must be one of {', '.join(ORDERINGS)}", path="ordering")
    name = ordering.lstrip("-")
    key = F(COLUMNS[name])
    # Rows without the value last; on a column that always has one, the plain order, which an
    # index walks (PostgreSQL does not infer that NULLS LAST is moot on a NOT NULL column).
    if name in _ALWAYS_SET:
        key_order = key.desc() if ordering.startswith("-") else key.asc()
    else:
        key_order = (
            key.desc(nulls_last=True) if ordering.startswith("-") else key.asc(nulls_last=True)
        )
    # Ties: the faster at batch size 1 first (an index on the key and an incremental sort
    # answer a page without sorting the board).
    counted = queryset.order_by()
    rows = (
        with_hardware(queryset)
        .filter(result__top1__gte=0)  # an inner join: every published result has one
        .select_related("result", "host")
        .defer("request", "result__details")
        .order_by(key_order, F("result__p50_ms_at_1").asc(nulls_last=True), "id")
    )
    return Counted(rows, counted)


def with_hardware(queryset: QuerySet[Evaluation]) -> QuerySet[Evaluation]:
    """`hardware`: the GPU's name for a GPU run, the CPU's for a CPU run."""
    return queryset.annotate(
        hardware=Case(
            When(device=GPU, then=F("result__gpu_model")),
            default=F("result__cpu_model"),
        )
    )


def hardware_choices(task: str, dataset: str) -> list[str]:
    """The hardware names a board holds, to filter by (kept a minute: a filter's list of
    choices may lag behind the board by that much)."""
    key = "leaderboards.hardware." + hashlib.sha256(f"{task}/{dataset}".encode()).hexdigest()
    cached = cache.get(key)
    if cached is None:
        values = (
            with_hardware(scored().filter(task=task, dataset_name=dataset))
            .order_by()
            .values_list("hardware", flat=True)
            .distinct()
        )
        cached = sorted({value for value in values if value})
        cache.set(key, cached, 60)
    return list(cached)


def rows(evaluations: Iterable[Evaluation]) -> list[dict[str, Any]]:
    """The board rows of `evaluations` (from `board_entries`), each with how many published runs
    of its configuration agree with it."""
    return [_row(item, item.result.agreeing_runs) for item in evaluations]


def _row(item: Evaluation, agreeing: int) -> dict[str, Any]:
    result = item.result
    stack = result.stack if isinstance(result.stack, dict) else {}
    system = stack.get("os") if isinstance(stack.get("os"), dict) else {}
    python = stack.get("python") if isinstance(stack.get("python"), dict) else {}
    return {
        "evaluation": str(item.pk),
        "url": reverse("evaluation", kwargs={"pk": item.pk}),
        "model": item.model_name,
        "model_version": item.model_version,
        "untrained": item.untrained,
        "framework": item.framework,
        "framework_version": item.framework_version,
        "device": item.device,
        "hardware": getattr(item, "hardware", "") or "",
        "cpu_model": result.cpu_model,
        "gpu_model": result.gpu_model,
        "host": item.host.name if item.host is not None else "",
        "dataset_version": item.dataset_version,
        "split": item.split,
        "count": result.count,
        "top1": result.top1,
        "top5": result.top5,
        "p50_ms": result.p50_ms_at_1,
        "p50_low_ms": result.p50_low_ms_at_1,
        "p50_high_ms": result.p50_high_ms_at_1,
        "p99_ms": result.p99_ms_at_1,
        "throughput": result.best_throughput_ips,
        "throughput_batch_size": result.best_batch_size,
        "date": item.finished_at.isoformat() if item.finished_at else None,
        # What reproduces it.
        "content_hash": result.content_hash,
        "os": str((system or {}).get("platform") or ""),
        "python": str((python or {}).get("version") or ""),
        "threads": item.threads,
        "seed": item.seed,
        "overrides": [line for line in item.overrides.splitlines() if line],
        "trace_level": item.trace_level,
        "agreeing_runs": agreeing,
    }


def configuration_of(evaluation: Evaluation, result: Any) -> str:
    """The configuration an evaluation ran, as a hash: runs of one configuration should agree."""
    values = {
        "content_hash": result.content_hash,
        "framework": evaluation.framework,
        "framework_version": evaluation.framework_version,
        "dataset": [evaluation.dataset_name, evaluation.dataset_version, evaluation.split],
        "device": evaluation.device,
        "cpu": result.cpu_model,
        "gpu": result.gpu_model,
        "threads": evaluation.threads,
        "seed": evaluation.seed,
        "overrides": evaluation.overrides,
    }
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def recount(configuration: str) -> None:
    """Set `agreeing_runs` of every result of `configuration`: the published runs of it that
    agree with each (itself included) within TOLERANCE. Called when one is published or
    unpublished, so that reading a board computes nothing."""
    if not configuration:
        return
    rows = list(
        Result.objects.filter(configuration=configuration).values_list(
            "pk", "top1", "p50_ms_at_1", "evaluation__published", "evaluation__task"
        )
    )
    # Latency-only runs (no top-1) agree on their latency alone.
    shown = [
        (pk, np.nan if top1 is None else top1, p50)
        for pk, top1, p50, is_published, _task in rows
        if is_published
    ]
    counts = {row[0]: 1 for row in rows}
    # One configuration is one model: one task.
    errors = bool(rows) and rows[0][4] in LOWER_IS_BETTER
    if shown:
        top1 = np.array([row[1] for row in shown])
        p50 = np.array([np.nan if row[2] is None else row[2] for row in shown])
        for first in range(0, len(shown), 1024):
            a_top1 = top1[first : first + 1024, None]
            a_p50 = p50[first : first + 1024, None]
            if errors:
                smaller = np.fmin(a_top1, top1[None, :])
                close = np.abs(a_top1 - top1[None, :]) <= TOLERANCE["error_ratio"] * smaller + 1e-12
            else:
                close = np.abs(a_top1 - top1[None, :]) * 100 <= TOLERANCE["top1_points"] + 1e-9
            close |= np.isnan(a_top1) & np.isnan(top1[None, :])
            low = np.fmin(a_p50, p50[None, :])
            high = np.fmax(a_p50, p50[None, :])
            both_missing = np.isnan(a_p50) & np.isnan(p50[None, :])
            near = both_missing | (high - low <= TOLERANCE["latency_ratio"] * low + 1e-12)
            agreeing = (close & near).sum(axis=1)
            for offset, count in enumerate(agreeing):
                counts[shown[first + offset][0]] = max(1, int(count))
    changed = [Result(pk=pk, agreeing_runs=count) for pk, count in counts.items()]
    Result.objects.bulk_update(changed, ["agreeing_runs"], batch_size=1000)


def pareto_front(
    points: Iterable[tuple[Any, float, float]], *, lower_is_better: bool = False
) -> list[Any]:
    """The keys of the points (key, latency, accuracy) that no other point beats on both: none is
    as fast and more accurate, or faster and as accurate. Sorted by latency. With
    `lower_is_better` the third value is an error (a regression's MAE): the lower the better."""
    if lower_is_better:
        points = [(key, latency, -error) for key, latency, error in points]
    front: list[Any] = []
    best = float("-inf")
    for key, _latency, accuracy in sorted(points, key=lambda p: (p[1], -p[2])):
        if accuracy > best:
            front.append(key)
            best = accuracy
    return front


class Counted:
    """A board's rows for a paginator: sliced from `rows`, counted on `counted` (the same
    filters without the join that sorting needs, which an index alone answers)."""

    def __init__(self, rows: QuerySet[Evaluation], counted: QuerySet[Evaluation]):
        self.rows = rows
        self.counted = counted
        self.ordered = True

    def count(self) -> int:
        return self.counted.count()

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, item: Any) -> Any:
        return self.rows[item]

    def iterator(self, chunk_size: int = 500) -> Any:
        return self.rows.iterator(chunk_size=chunk_size)
