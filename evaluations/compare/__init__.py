"""Comparisons: two to eight evaluations side by side against a pinned baseline, written once
for the API (`GET /api/v1/compare/`) and the page (`/compare/`).

- **What differs** (`differences`): the request, the processing parameters (the model manifests'
  `inputs` and `outputs` with each evaluation's overrides applied, as a flattened diff), and the
  stack (framework version, CPU, GPU, OS, Python, threads, container image, host). Only the
  differing rows unless all are asked for.
- **Accuracy** (`accuracy`): top-1 and top-5 with their deltas to the baseline; per input, agreement
  of the top-1 class with the baseline's, the inputs on which any evaluation disagrees (with each
  one's top classes), and the divergence of the output distributions from the baseline's
  (Kullback–Leibler and Jensen–Shannon, in bits) and the largest absolute difference of a class's
  probability. The distributions are the stored top-k classes of each input; where top-k does not
  cover every class, the rest of the probability mass is spread evenly over the classes not stored
  (`distributions` says which: "exact" or "estimated from the top k").
- **Latency and throughput** (`latency`) per batch size: the median with its interval, p90, p99 and
  the mean (labelled), and against the baseline the ratio of the medians with its bootstrap
  interval, the Mann–Whitney U test and a verdict: faster, slower or no detectable difference
  (`predictors.statistics.difference`).
- **Per layer** (`layers`), from the traces' per-layer aggregates: layers matched by name within one
  framework, across frameworks by op type and order (best effort; `layers.matched_by` says which);
  each layer's median time with its interval, the ratio of the medians to the baseline's and the
  verdict of the same test on the layer's spans; kernels per layer where the traces hold them, and
  the kernels added, removed, faster and slower across the whole trace.
- **Across systems** (`latency`): when the evaluations ran one model, framework and dataset on
  different hosts, the latency per batch size normalised to the baseline's host.

The diff of traces (`diff`, `GET /api/v1/compare/traces/`, `/compare/traces/`) compares two
sides of up to 32 runs in all, item by item at every level of their traces, one value per run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.urls import reverse

from evaluations.compare import accuracy, differences, latency, layers
from evaluations.models import Evaluation
from hub.errors import Invalid, NotFound
from predictors import statistics

MIN_EVALUATIONS = 2
MAX_EVALUATIONS = 8


def parse_ids(raw: str | None) -> list[uuid.UUID]:
    """`a,b,c` → the evaluation ids, 2 to 8 of them, each once; Invalid naming `evaluations`."""
    return parse_id_list(raw, "evaluations", MIN_EVALUATIONS, MAX_EVALUATIONS)


def parse_id_list(raw: str | None, path: str, least: int, most: int) -> list[uuid.UUID]:
    """`a,b,c` (query parameter `path`) → the evaluation ids, `least` to `most` of them, each
    once; Invalid naming `path`."""
    parts = [part.strip() for part in str(raw or "").split(",") if part.strip()]
    if not least <= len(parts) <= most:
        raise Invalid(
            f"{path} must list {least} to {most} evaluation ids separated by commas; "
            f"got {len(parts)}",
            path=path,
        )
    ids: list[uuid.UUID] = []
    for part in parts:
        try:
            value = uuid.UUID(part)
        except ValueError:
            raise Invalid(f"{path}: {part[:40]!r} is not an evaluation id", path=path) from None
        if value in ids:
            raise Invalid(f"{path}: {value} is listed twice", path=path)
        ids.append(value)
    return ids


def load(
    user: AbstractBaseUser | AnonymousUser,
    ids: list[uuid.UUID],
    baseline: str | None = None,
    *,
    path: str = "evaluations",
    details: bool = True,
) -> list[Evaluation]:
    """The evaluations in the order given, the baseline first; NotFound naming `path` and an
    id the user may not read (as if it did not exist). `details`: with their results' batch
    rows and samples (what a side-by-side comparison reads; a diff of traces reads none)."""
    queryset = Evaluation.objects.visible_to(user).filter(pk__in=ids)
    if details:
        queryset = queryset.select_related(
            "result", "result__image", "host", "model", "dataset"
        ).prefetch_related("result__batch_results__samples")
    else:
        queryset = queryset.select_related("result", "host")
    found = {evaluation.pk: evaluation for evaluation in queryset}
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise NotFound(f"no evaluation {missing[0]} that you may read", path=path)
    ordered = [found[pk] for pk in ids]
    if baseline:
        try:
            chosen = uuid.UUID(str(baseline))
        except ValueError:
            raise Invalid(
                f"baseline {baseline[:40]!r} is not an evaluation id", path="baseline"
            ) from None
        if chosen not in found:
            raise Invalid("baseline must be one of the evaluations compared", path="baseline")
        ordered.sort(key=lambda evaluation: evaluation.pk != chosen)
    return ordered


def parse_noise(raw: str | None) -> float:
    """`?noise=` (per cent, 0 to 50; "2" or "2%") → the share below which a difference of the
    medians is reported as noise; the statistics layer's default when absent."""
    if raw is None:
        return statistics.NOISE
    text = str(raw).strip().removesuffix("%").strip()
    try:
        value = float(text)
    except ValueError:
        raise Invalid(
            f"noise must be a percentage from 0 to 50; got {raw[:40]!r}", path="noise"
        ) from None
    if not 0 <= value <= 50:
        raise Invalid(f"noise must be a percentage from 0 to 50; got {raw[:40]!r}", path="noise")
    return value / 100


def compare(
    evaluations: list[Evaluation], *, show_all: bool = False, noise: float = statistics.NOISE
) -> dict[str, Any]:
    """The comparison of `evaluations` (the first is the baseline); differences of the medians
    smaller than `noise` (a share) are reported as noise."""
    differences.name_apart(evaluations)
    return {
        "baseline": str(evaluations[0].pk),
        # The baseline's task: what its two accuracy columns (top1, top5) hold.
        "task": evaluations[0].task,
        "evaluations": [summary(evaluation) for evaluation in evaluations],
        "differs": differences.compare(evaluations, show_all=show_all),
        "accuracy": accuracy.compare(evaluations),
        "latency": latency.compare(evaluations, noise),
        "layers": layers.compare(evaluations, noise),
        "systems": latency.systems(evaluations),
        "theoretical": latency.theoretical(evaluations),
    }


def summary(evaluation: Evaluation) -> dict[str, Any]:
    """What a comparison shows of an evaluation: its id, page, label and what it ran."""
    return {
        "id": str(evaluation.pk),
        "url": reverse("evaluation", kwargs={"pk": evaluation.pk}),
        "label": differences.label(evaluation),
        "model": evaluation.model_name,
        "model_version": evaluation.model_version,
        "untrained": evaluation.untrained,
        "framework": evaluation.framework,
        "framework_version": evaluation.framework_version,
        "dataset": evaluation.dataset_name,
        "split": evaluation.split,
        "host": evaluation.host.name if evaluation.host else None,
        "status": evaluation.status,
        "has_result": hasattr(evaluation, "result"),
    }


def ids_text(evaluations: Iterable[Evaluation]) -> str:
    return ",".join(str(evaluation.pk) for evaluation in evaluations)
