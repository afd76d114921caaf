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

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import Case, Count, F, QuerySet, When
from django.urls import reverse

from evaluations.models import Evaluation
from hub.errors import Invalid, NotFound
from predictors.predictor import FRAMEWORKS
from predictors.protocol import DEVICES

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
# `top1_points` percentage points and their p50 latencies at batch size 1 by at most
# `latency_ratio` of the smaller one.
TOLERANCE = {"top1_points": 0.5, "latency_ratio": 0.10}
TOLERANCE_TEXT = (
    f"top-1 within {TOLERANCE['top1_points']} points and p50 latency at batch size 1 within "
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
ORDERINGS: tuple[str, ...] = tuple(f"{sign}{name}" for name in COLUMNS for sign in ("", "-"))
DEFAULT_ORDERING = "-top1"

# The filters: query parameter → (lookup, allowed values or () for any text).
FILTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "framework": ("framework", tuple(FRAMEWORKS)),
    "device": ("device", DEVICES),
    "hardware": ("hardware", ()),
    "model": ("model_name", ()),
}

# The fields that make two runs the same configuration.
_CONFIGURATION = (
    "result__content_hash",
    "framework",
    "framework_version",
    "dataset_version",
    "split",
    "device",
    "result__cpu_model",
    "result__gpu_model",
    "threads",
    "seed",
    "overrides",
)


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
    """The evaluations a leaderboard may show: published, succeeded, with a result, of a public
    model and dataset (the same rule as for an anonymous reader)."""
    return Evaluation.objects.visible_to(AnonymousUser()).filter(
        status=Evaluation.SUCCEEDED, result__isnull=False
    )


def boards() -> list[Board]:
    """Every board: a task and dataset with at least one published result."""
    counts = (
        published()
        .values("task", "dataset_name")
        .annotate(entries=Count("id"))
        .order_by("task", "dataset_name")
    )
    return [Board(row["task"], row["dataset_name"], row["entries"]) for row in counts]


# A task's and a dataset's name, as manifests spell them.
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def board_entries(
    task: str, dataset: str, params: Mapping[str, Any] | None = None
) -> QuerySet[Evaluation]:
    """The rows of one board, filtered and sorted by `params` (`FILTERS`, `ordering`); a bad
    value is refused naming the parameter; a task or dataset that no manifest could name is
    NotFound."""
    for kind, name in (("task", task), ("dataset", dataset)):
        if not _NAME.fullmatch(name):
            raise NotFound(f"no leaderboard for {kind} {name[:64]!r}", path=kind)
    params = params or {}
    queryset = with_hardware(published().filter(task=task, dataset_name=dataset))
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
    ordering = str(params.get("ordering") or DEFAULT_ORDERING)
    if ordering not in ORDERINGS:
        raise Invalid(f"ordering must be one of {', '.join(ORDERINGS)}", path="ordering")
    key = F(COLUMNS[ordering.lstrip("-")])
    key_order = key.desc(nulls_last=True) if ordering.startswith("-") else key.asc(nulls_last=True)
    # Ties: the faster at batch size 1 first, then the newer.
    return queryset.select_related("result", "host").order_by(
        key_order, F("result__p50_ms_at_1").asc(nulls_last=True), "-finished_at", "id"
    )


def with_hardware(queryset: QuerySet[Evaluation]) -> QuerySet[Evaluation]:
    """`hardware`: the GPU's name for a GPU run, the CPU's for a CPU run."""
    return queryset.annotate(
        hardware=Case(
            When(device="gpu", then=F("result__gpu_model")),
            default=F("result__cpu_model"),
        )
    )


def hardware_choices(task: str, dataset: str) -> list[str]:
    """The hardware names a board holds, to filter by."""
    values = (
        with_hardware(published().filter(task=task, dataset_name=dataset))
        .values_list("hardware", flat=True)
        .distinct()
    )
    return sorted({value for value in values if value})


def rows(evaluations: Iterable[Evaluation]) -> list[dict[str, Any]]:
    """The board rows of `evaluations` (from `board_entries`), each with how many published runs
    of its configuration agree with it."""
    items = list(evaluations)
    agreeing = _agreeing_runs(items)
    return [_row(item, agreeing.get(item.pk, 1)) for item in items]


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
        "top5": result.top5 if result.top_k >= 5 else None,
        "p50_ms": result.p50_ms_at_1,
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


def _agreeing_runs(items: list[Evaluation]) -> dict[Any, int]:
    """For each of `items`, the published runs of its configuration (itself included) that agree
    with it within TOLERANCE."""
    if not items:
        return {}
    hashes = {item.result.content_hash for item in items}
    runs: dict[tuple[Any, ...], list[tuple[float, float | None]]] = defaultdict(list)
    for values in (
        published()
        .filter(result__content_hash__in=hashes)
        .values_list(*_CONFIGURATION, "result__top1", "result__p50_ms_at_1")
    ):
        runs[tuple(values[:-2])].append((values[-2], values[-1]))
    counts = {}
    for item in items:
        key = tuple(_configuration_value(item, name) for name in _CONFIGURATION)
        mine = (item.result.top1, item.result.p50_ms_at_1)
        counts[item.pk] = max(1, sum(1 for other in runs.get(key, []) if _agree(mine, other)))
    return counts


def _configuration_value(item: Evaluation, name: str) -> Any:
    target: Any = item
    for part in name.split("__"):
        target = getattr(target, part)
    return target


def _agree(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    if abs(a[0] - b[0]) * 100 > TOLERANCE["top1_points"] + 1e-9:
        return False
    if a[1] is None or b[1] is None:
        return a[1] is None and b[1] is None
    low, high = sorted((a[1], b[1]))
    return high - low <= TOLERANCE["latency_ratio"] * low + 1e-12


def pareto_front(points: Iterable[tuple[Any, float, float]]) -> list[Any]:
    """The keys of the points (key, latency, accuracy) that no other point beats on both: none is
    as fast and more accurate, or faster and as accurate. Sorted by latency."""
    front: list[Any] = []
    best = float("-inf")
    for key, _latency, accuracy in sorted(points, key=lambda p: (p[1], -p[2])):
        if accuracy > best:
            front.append(key)
            best = accuracy
    return front
