"""The catalog (`/`): every model and dataset the user can see, searched and filtered."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Max, Min
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from evaluations import leaderboards
from frontend import display
from hub.api.manifests import filter_manifests
from hub.models import Host, Manifest
from predictors.manifests.versioning import version_key
from predictors.tasks import LOWER_IS_BETTER


@dataclass
class CatalogEntry:
    """One model or dataset name, with every version and framework the user can see."""

    kind: str
    name: str
    latest: Manifest
    versions: list[str] = field(default_factory=list)
    frameworks: list[str] = field(default_factory=list)
    private: bool = False
    # The best published top-1 and the lowest published p50 latency at batch size 1.
    best_top1: float | None = None
    best_p50_ms: float | None = None
    # Whether the dataset it was trained on is one the visitor can open here (a pretrained
    # model names data the hub does not hold: shown, not linked).
    training_dataset_shown: bool = False

    @property
    def training_dataset(self) -> str:
        return str((self.latest.content.get("attributes") or {}).get("training_dataset") or "")

    @property
    def untrained(self) -> bool:
        return (self.latest.content.get("attributes") or {}).get("trained") is False

    @property
    def task_label(self) -> str:
        return display.task_name(self.latest.task)

    @property
    def metric_name(self) -> str:
        """What `best_top1` is for the model's task (top-1, mAP, mIoU, MAE, …)."""
        return display.accuracy_headings(self.latest.task)[0]

    @property
    def framework_labels(self) -> list[tuple[str, str]]:
        return [(f, display.framework_name(f)) for f in self.frameworks]

    @property
    def url(self) -> str:
        view = "model" if self.kind == Manifest.MODEL else "dataset"
        return reverse(view, args=[self.name])


def entries(manifests: list[Manifest]) -> list[CatalogEntry]:
    groups: dict[tuple[str, str], list[Manifest]] = defaultdict(list)
    for manifest in manifests:
        groups[(manifest.kind, manifest.name)].append(manifest)
    entries = []
    for (kind, name), group in sorted(groups.items()):
        group.sort(key=lambda m: version_key(m.version), reverse=True)
        versions = sorted({m.version for m in group}, key=version_key, reverse=True)
        frameworks = sorted({m.framework for m in group if m.framework})
        entries.append(
            CatalogEntry(
                kind=kind,
                name=name,
                latest=group[0],
                versions=versions,
                frameworks=frameworks,
                private=any(m.visibility == Manifest.PRIVATE for m in group),
            )
        )
    return entries


def catalog(request: HttpRequest) -> HttpResponse:
    visible = Manifest.objects.visible_to(request.user)
    params = request.GET
    chosen = {
        key: params.get(key, "").strip() for key in ("search", "framework", "task", "dataset")
    }

    models = filter_manifests(
        visible.filter(kind=Manifest.MODEL),
        {k: chosen[k] for k in ("search", "framework", "task")},
    )
    if chosen["dataset"]:
        models = models.filter(content__attributes__training_dataset=chosen["dataset"])
    datasets = filter_manifests(
        visible.filter(kind=Manifest.DATASET), {k: chosen[k] for k in ("search", "task")}
    )
    if chosen["dataset"]:
        datasets = datasets.filter(name=chosen["dataset"])
    if chosen["framework"]:
        datasets = datasets.none()

    all_models = visible.filter(kind=Manifest.MODEL)
    frameworks = set(all_models.values_list("framework", flat=True))
    tasks = set(visible.values_list("task", flat=True)) - {""}
    trained_on = all_models.values_list("content__attributes__training_dataset", flat=True)
    dataset_names = {str(d) for d in trained_on if d} | set(
        visible.filter(kind=Manifest.DATASET).values_list("name", flat=True)
    )
    options = {
        "framework": [(f, display.framework_name(f)) for f in sorted(frameworks)],
        "task": [(t, display.task_name(t)) for t in sorted(tasks)],
        "dataset": [(d, d) for d in sorted(dataset_names)],
    }
    model_entries = entries(list(models))
    best = _best_published({entry.name: entry.latest.task for entry in model_entries})
    readable = set(visible.filter(kind=Manifest.DATASET).values_list("name", flat=True))
    for entry in model_entries:
        entry.best_top1, entry.best_p50_ms = best.get(entry.name, (None, None))
        entry.training_dataset_shown = entry.training_dataset in readable
    return render(
        request,
        "frontend/catalog.html",
        {
            "models": model_entries,
            "datasets": entries(list(datasets)),
            "chosen": chosen,
            "filtered": any(chosen.values()),
            "options": options,
            # The live hosts this visitor's jobs may run on (never another user's own).
            "live_hosts": Host.objects.live().usable_by(request.user).count(),
        },
    )


def _best_published(tasks: dict[str, str]) -> dict[str, tuple[float | None, float | None]]:
    """Per model name (`tasks`: each name's task, its latest version's), the best published
    result of that task's first metric and the lowest published p50 latency at batch size 1 (over
    every framework, dataset and host)."""
    rows = (
        leaderboards.published()
        .filter(model_name__in=list(tasks))
        .values("model_name", "task")
        .annotate(high=Max("result__top1"), low=Min("result__top1"), p50=Min("result__p50_ms_at_1"))
    )
    # The best is the lowest for a task whose headline metric is an error (regression).
    return {
        row["model_name"]: (row["low" if row["task"] in LOWER_IS_BETTER else "high"], row["p50"])
        for row in rows
        if row["task"] == tasks[row["model_name"]]
    }
