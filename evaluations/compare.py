"""Comparisons: two to eight evaluations side by side against a pinned baseline, written once
for the API (`GET /api/v1/compare/`) and the page (`/compare/`).

- **What differs**: the request, the processing parameters (the model manifests' `inputs` and
  `outputs` with each evaluation's overrides applied, as a flattened diff), and the stack
  (framework version, CPU, GPU, OS, Python, threads, container image, host). Only the
  differing rows unless all are asked for.
- **Accuracy**: top-1 and top-5 with their deltas to the baseline; per input, agreement of the
  top-1 class with the baseline's, the inputs on which any evaluation disagrees (with each
  one's top classes), and the divergence of the output distributions from the baseline's
  (Kullback–Leibler and Jensen–Shannon, in bits) and the largest absolute difference of a
  class's probability. The distributions are the stored top-k classes of each input; where
  top-k does not cover every class, the rest of the probability mass is spread evenly over the
  classes not stored (`distributions` says which: "exact" or "estimated from the top k").
- **Latency and throughput** per batch size: the median with its interval, p90, p99 and the
  mean (labelled), and against the baseline the ratio of the medians with its bootstrap
  interval, the Mann–Whitney U test and a verdict: faster, slower or no detectable
  difference (`predictors.statistics.difference`).
- **Per layer**, from the traces' per-layer aggregates: layers matched by name within one
  framework, across frameworks by op type and order (best effort; `layers.matched_by` says
  which); each layer's median time with its interval, the ratio of the medians to the
  baseline's and the verdict of the same test on the layer's spans; kernels per layer where the traces
  hold them, and the kernels added, removed, faster and slower across the whole trace.
- **Across systems**: when the evaluations ran one model, framework and dataset on different
  hosts, the latency per batch size normalised to the baseline's host.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ObjectDoesNotExist
from django.urls import reverse

from evaluations.models import Evaluation
from hub import storage
from hub.errors import Invalid, NotFound
from hub.models import Manifest
from predictors import manifests as spec
from predictors import statistics

MIN_EVALUATIONS = 2
MAX_EVALUATIONS = 8
# The inputs listed as disagreements, at most.
DISAGREEMENTS_SHOWN = 50
# The divergences are computed over at most this many inputs (the first ones of the split).
DIVERGENCE_INPUTS = 200_000
# Per layer, a comparison tests every matched layer: a coarser bootstrap (resamples, and the
# spans of a layer it draws from) keeps a page of a deep model quick.
LAYER_RESAMPLES = 400
LAYER_SAMPLES = 400


def parse_ids(raw: str | None) -> list[uuid.UUID]:
    """`a,b,c` → the evaluation ids, 2 to 8 of them, each once; Invalid naming `evaluations`."""
    parts = [part.strip() for part in str(raw or "").split(",") if part.strip()]
    if not MIN_EVALUATIONS <= len(parts) <= MAX_EVALUATIONS:
        raise Invalid(
            f"evaluations must list {MIN_EVALUATIONS} to {MAX_EVALUATIONS} evaluation ids "
            f"separated by commas; got {len(parts)}",
            path="evaluations",
        )
    ids: list[uuid.UUID] = []
    for part in parts:
        try:
            value = uuid.UUID(part)
        except ValueError:
            raise Invalid(
                f"evaluations: {part[:40]!r} is not an evaluation id", path="evaluations"
            ) from None
        if value in ids:
            raise Invalid(f"evaluations: {value} is listed twice", path="evaluations")
        ids.append(value)
    return ids


def load(
    user: AbstractBaseUser | AnonymousUser, ids: list[uuid.UUID], baseline: str | None = None
) -> list[Evaluation]:
    """The evaluations in the order given, the baseline first; NotFound naming an id the user
    may not read (as if it did not exist)."""
    found = {
        evaluation.pk: evaluation
        for evaluation in Evaluation.objects.visible_to(user)
        .filter(pk__in=ids)
        .select_related("result", "result__image", "host", "model", "dataset")
        .prefetch_related("result__batch_results__samples")
    }
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise NotFound(f"no evaluation {missing[0]} that you may read", path="evaluations")
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
    return {
        "baseline": str(evaluations[0].pk),
        # The baseline's task: what its two accuracy columns (top1, top5) hold.
        "task": evaluations[0].task,
        "evaluations": [_summary(evaluation) for evaluation in evaluations],
        "differs": differences(evaluations, show_all=show_all),
        "accuracy": accuracy(evaluations),
        "latency": latency(evaluations, noise),
        "layers": layers(evaluations, noise),
        "systems": systems(evaluations),
        "theoretical": theoretical(evaluations),
    }


def theoretical(evaluations: list[Evaluation]) -> dict[str, Any]:
    """Each evaluation's theoretical performance as its result counted it
    (`predictors.analysis.flops`): multiply-adds and parameters per input, the FLOP/s each batch size
    achieved and its share of the roofline's peak the run measured; whether the multiply-adds
    agree (the same model in two formats must count the same work)."""
    cells: list[dict[str, Any]] = []
    for evaluation in evaluations:
        result = getattr(evaluation, "result", None)
        details = result.details if result is not None and isinstance(result.details, dict) else {}
        counted = details.get("theoretical")
        if not isinstance(counted, dict):
            cells.append({"label": label(evaluation), "present": False})
            continue
        found = counted.get("roofline")
        roof: dict[str, Any] = found if isinstance(found, dict) else {}
        peak = roof.get("peak_gflops_per_s") if roof.get("measured") else None
        achieved = [a for a in counted.get("achieved") or [] if isinstance(a, dict)]
        cells.append(
            {
                "label": label(evaluation),
                "present": True,
                "counted": bool(counted.get("counted")),
                "reason": counted.get("reason"),
                "macs": counted.get("macs"),
                "params": counted.get("params"),
                "framework": counted.get("framework"),
                "peak_gflops_per_s": peak,
                # Which peak the roof is (`predictors.analysis.roofline.place`) and why.
                "peak_why": (roof.get("roof") or {}).get("why") if peak else None,
                "bandwidth_gb_per_s": roof.get("bandwidth_gb_per_s") if peak else None,
                "achieved": [
                    {
                        "batch_size": a.get("batch_size"),
                        "gflops_per_s": a.get("gflops_per_s"),
                        # The share the run stored (at most 1, the roof holding every point);
                        # a result from before it did, against its peak.
                        "of_peak": a.get("of_peak")
                        if isinstance(a.get("of_peak"), int | float)
                        else (
                            a["gflops_per_s"] / peak
                            if peak and isinstance(a.get("gflops_per_s"), int | float)
                            else None
                        ),
                        "note": a.get("note"),
                    }
                    for a in achieved
                ],
            }
        )
    counts = {cell["macs"] for cell in cells if cell.get("counted")}
    return {
        "cells": cells,
        "macs_agree": len(counts) <= 1 if counts else None,
    }


def label(evaluation: Evaluation) -> str:
    host = evaluation.host.name if evaluation.host else "?"
    overrides = " + " + ", ".join(_overrides(evaluation)) if evaluation.overrides else ""
    return f"{evaluation.model_name} · {evaluation.framework} · {host}{overrides}"


def _summary(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "id": str(evaluation.pk),
        "url": reverse("evaluation", kwargs={"pk": evaluation.pk}),
        "label": label(evaluation),
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


# -- What differs ----------------------------------------------------------------------------


def _overrides(evaluation: Evaluation) -> list[str]:
    return [line for line in evaluation.overrides.splitlines() if line]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        flat = {}
        for index, inner in enumerate(value):
            flat.update(_flatten(inner, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return {prefix: value}


def _processing(evaluation: Evaluation) -> dict[str, Any]:
    """The processing parameters the evaluation ran with: its model manifest's `inputs` and
    `outputs`, with its overrides applied."""
    manifest = (
        evaluation.model
        or Manifest.objects.filter(
            kind=Manifest.MODEL,
            name=evaluation.model_name,
            version=evaluation.model_version,
            framework=evaluation.framework,
        ).first()
    )
    if manifest is None:
        return {}
    content = manifest.content
    if evaluation.overrides:
        try:
            content = spec.apply_overrides(manifest.content, _overrides(evaluation)).data
        except spec.ManifestError:
            pass  # checked at launch; a manifest edited since is shown as it is
    return _flatten({key: content.get(key) for key in ("inputs", "outputs") if key in content})


def _stack(evaluation: Evaluation) -> dict[str, Any]:
    result = getattr(evaluation, "result", None)
    stack = result.stack if result is not None and isinstance(result.stack, dict) else {}

    def part(name: str) -> dict[str, Any]:
        value = stack.get(name)
        return value if isinstance(value, dict) else {}

    container = stack.get("container")
    image = container.get("image") if isinstance(container, dict) else container
    return {
        "framework version": evaluation.framework_version,
        "CPU": result.cpu_model if result else "",
        "GPU": result.gpu_model if result else "",
        "OS": part("os").get("platform"),
        "Python": part("python").get("version"),
        "NumPy": stack.get("numpy"),
        "threads": evaluation.threads,
        "container image": image,
        "image digest": container.get("digest") if isinstance(container, dict) else None,
        "host": evaluation.host.name if evaluation.host else None,
    }


def _image_packages(evaluations: list[Evaluation]) -> list[dict[str, Any]]:
    """The packages of the images the evaluations ran in ("python: numpy", "debian: libc6"),
    when they ran in different registered images; nothing otherwise."""
    images = [getattr(getattr(e, "result", None), "image", None) for e in evaluations]
    if not any(images) or len({image.pk if image else None for image in images}) < 2:
        return [{} for _ in evaluations]
    return [
        {
            f"{kind}: {name}": version
            for kind, key in (("python", "python_packages"), ("debian", "debian_packages"))
            for name, version in ((image.environment or {}).get(key) or {}).items()
        }
        if image is not None
        else {}
        for image in images
    ]


def _request(evaluation: Evaluation) -> dict[str, Any]:
    request = dict(evaluation.request) if isinstance(evaluation.request, dict) else {}
    request.setdefault("model_version", evaluation.model_version)
    request["overrides"] = _overrides(evaluation)
    return {key: request[key] for key in sorted(request)}


def differences(evaluations: list[Evaluation], *, show_all: bool = False) -> dict[str, Any]:
    sections = {
        "request": [_request(e) for e in evaluations],
        "processing": [_processing(e) for e in evaluations],
        "stack": [_stack(e) for e in evaluations],
        "image packages": _image_packages(evaluations),
    }
    rows: list[dict[str, Any]] = []
    for section, values in sections.items():
        keys: list[str] = []
        for flat in values:
            keys += [key for key in flat if key not in keys]
        for key in keys:
            cells = [flat.get(key) for flat in values]
            differs = any(_canonical(cell) != _canonical(cells[0]) for cell in cells[1:])
            # An image's thousands of packages: only those that differ, even when all are asked.
            if differs or (show_all and section != "image packages"):
                rows.append(
                    {
                        "section": section,
                        "key": key,
                        "values": cells,
                        "differs": differs,
                        "follows": _follows(evaluations, cells) if differs else None,
                    }
                )
    return {
        "rows": rows,
        "all": show_all,
        "differing": sum(1 for row in rows if row["differs"]),
    }


def _follows(evaluations: list[Evaluation], cells: list[Any]) -> str | None:
    """What a difference comes with: "framework" when evaluations of one framework agree on
    the value (it is the framework's, like the layout TensorFlow needs), else "host" likewise;
    None when neither explains it (an override, a seed). With every framework different this
    cannot tell the framework from the rest of the stack; the host is then the same or not."""
    values = [_canonical(cell) for cell in cells]
    for name, keys in (
        ("framework", [e.framework for e in evaluations]),
        ("host", [e.host_id for e in evaluations]),
    ):
        if len(set(keys)) > 1 and all(
            values[i] == values[j]
            for i in range(len(values))
            for j in range(i + 1, len(values))
            if keys[i] == keys[j]
        ):
            return name
    return None


def _canonical(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# -- Accuracy --------------------------------------------------------------------------------


def _predictions(evaluation: Evaluation) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(labels, classes [n, k], probabilities [n, k]) of the first DIVERGENCE_INPUTS inputs."""
    result = getattr(evaluation, "result", None)
    # A latency-only result predicted nothing to compare.
    if result is None or not result.predictions_path or result.top1 is None:
        return None
    try:
        with pq.ParquetFile(storage.resolve(result.predictions_path)) as parquet:
            table = parquet.read(columns=["label", "classes", "probabilities"])
    except (OSError, ValueError):
        return None
    table = table.slice(0, DIVERGENCE_INPUTS)
    labels = table.column("label").to_numpy()
    k = max(int(result.top_k), 1)

    def matrix(name: str, dtype: Any, fill: Any) -> np.ndarray:
        column = table.column(name).combine_chunks()
        lengths = np.diff(column.offsets.to_numpy())
        values = column.flatten().to_numpy(zero_copy_only=False).astype(dtype)
        if len(lengths) and (lengths == k).all():  # every row holds k: one reshape
            return values.reshape(len(lengths), k)
        out = np.full((len(lengths), k), fill, dtype=dtype)
        starts = column.offsets.to_numpy()[:-1] - column.offsets.to_numpy()[0]
        for index, (start, length) in enumerate(zip(starts, lengths, strict=True)):
            length = min(int(length), k)
            out[index, :length] = values[start : start + length]
        return out

    return labels, matrix("classes", np.int64, -1), matrix("probabilities", np.float64, 0.0)


def _class_count(evaluation: Evaluation) -> int | None:
    dataset = evaluation.dataset
    if dataset is None:
        return None
    labels = dataset.content.get("labels")
    return len(labels) if isinstance(labels, list) else None


def _stored(classes: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """[n, count] of the stored values at their classes, as they are (0 where none is stored):
    a multi-label classifier's own probabilities, a regression's values."""
    n, k = classes.shape
    stored = np.zeros((n, count), dtype=np.float64)
    valid = (classes >= 0) & (classes < count)
    rows = np.repeat(np.arange(n), k).reshape(n, k)
    stored[rows[valid], classes[valid]] = values[valid]
    return stored


def _dense(classes: np.ndarray, probabilities: np.ndarray, count: int) -> np.ndarray:
    """[n, count] distributions from top-k rows: the stored probabilities, and the rest of the
    mass spread evenly over the classes not stored."""
    n, k = classes.shape
    dense = np.zeros((n, count), dtype=np.float64)
    valid = (classes >= 0) & (classes < count)
    rows = np.repeat(np.arange(n), k).reshape(n, k)
    dense[rows[valid], classes[valid]] = probabilities[valid]
    stored = valid.sum(axis=1)
    rest = np.clip(1.0 - dense.sum(axis=1), 0.0, None)
    unseen = count - stored
    share = np.divide(rest, unseen, out=np.zeros(n), where=unseen > 0)
    dense += np.where(dense == 0, share[:, None], 0.0)
    dense /= dense.sum(axis=1, keepdims=True).clip(min=1e-12)
    return dense


def _divergences(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: KL(p‖q) and JS(p, q), in bits (q's zeros floored so that KL stays finite)."""
    eps = 1e-12
    p = np.clip(p, eps, None)
    q = np.clip(q, eps, None)
    kl = np.sum(p * np.log2(p / q), axis=1)
    m = (p + q) / 2
    js = 0.5 * np.sum(p * np.log2(p / m), axis=1) + 0.5 * np.sum(q * np.log2(q / m), axis=1)
    return np.maximum(kl, 0.0), np.clip(js, 0.0, 1.0)


def accuracy(evaluations: list[Evaluation]) -> dict[str, Any]:
    base = evaluations[0]
    base_result = getattr(base, "result", None)
    loaded = [_predictions(evaluation) for evaluation in evaluations]
    count = _class_count(base) or 0
    # A detector's rows are its detections (best first): the agreement is of the best ones.
    detector = base.dataset is not None and base.dataset.task == "object_detection"
    # Scores that are no distribution over the classes: a multi-label classifier's (each class
    # its own probability) and a regression's values (the agreement of a "best" value means
    # nothing there: only the values' differences are compared).
    task = base.dataset.task if base.dataset is not None else ""
    independent = task in ("multi_label_classification", "regression")
    # Tasks whose top-1 is the share of inputs whose best class is their label: an interval
    # of that share, and a per-input test of two models on the same inputs.
    shares = task in PROPORTION_TASKS
    top_ks = [int(e.result.top_k) for e in evaluations if hasattr(e, "result")]
    exact = bool(count) and bool(top_ks) and min(top_ks) >= count
    rows = []
    disagreeing: set[int] = set()
    for evaluation, predicted in zip(evaluations, loaded, strict=True):
        result = getattr(evaluation, "result", None)
        row: dict[str, Any] = {
            "evaluation": str(evaluation.pk),
            "top1": result.top1 if result else None,
            "top5": result.top5 if result else None,
            "count": result.count if result else None,
            "delta_top1": (result.top1 - base_result.top1)
            if result and base_result and result.top1 is not None and base_result.top1 is not None
            else None,
            "delta_top5": (result.top5 - base_result.top5)
            if result and base_result and result.top5 is not None and base_result.top5 is not None
            else None,
            "agreement": None,
            "disagreeing_inputs": None,
            "kl_mean": None,
            "kl_max": None,
            "js_mean": None,
            "js_max": None,
            "max_abs_difference": None,
            "top1_interval": statistics.proportion(round(result.top1 * result.count), result.count)
            if shares and result and result.top1 is not None and result.count
            else None,
            "paired": None,
        }
        base_predicted = loaded[0]
        if predicted is not None and base_predicted is not None:
            n = min(len(predicted[0]), len(base_predicted[0]))
            if n:
                top1 = predicted[1][:n, 0]
                base_top1 = base_predicted[1][:n, 0]
                differ = np.nonzero(top1 != base_top1)[0]
                disagreeing.update(int(i) for i in differ[: DISAGREEMENTS_SHOWN * 4])
                row["agreement"] = float(1.0 - len(differ) / n)
                row["disagreeing_inputs"] = int(len(differ))
                if shares and evaluation is not base:
                    row["paired"] = _paired(base_predicted, predicted, n)
                if detector:
                    # Scores of detections are no distribution over the classes.
                    rows.append(row)
                    continue
                width = count or int(max(predicted[1].max(), base_predicted[1].max()) + 1)
                if independent:
                    # Each value as stored: no distribution to fill in or normalise.
                    p = _stored(base_predicted[1][:n], base_predicted[2][:n], width)
                    q = _stored(predicted[1][:n], predicted[2][:n], width)
                    row["max_abs_difference"] = float(np.abs(p - q).max())
                    if task == "regression":
                        row["agreement"] = row["disagreeing_inputs"] = None
                    rows.append(row)
                    continue
                p = _dense(base_predicted[1][:n], base_predicted[2][:n], width)
                q = _dense(predicted[1][:n], predicted[2][:n], width)
                kl, js = _divergences(p, q)
                row.update(
                    kl_mean=float(kl.mean()),
                    kl_max=float(kl.max()),
                    js_mean=float(js.mean()),
                    js_max=float(js.max()),
                    max_abs_difference=float(np.abs(p - q).max()),
                )
        rows.append(row)
    return {
        "rows": rows,
        "interval": statistics.ACCURACY_INTERVAL,
        "test": statistics.ACCURACY_TEST,
        "distributions": "none: a detector's scores are no distribution over the classes; the "
        "agreement compares each image's best detection"
        if detector
        else "none: each class's probability is its own (multi-label); the agreement compares "
        "each input's most probable class"
        if task == "multi_label_classification"
        else "none: a regression's values are compared by their largest difference"
        if task == "regression"
        else "exact"
        if exact
        else f"estimated from the top {min(top_ks) if top_ks else '?'} classes of each input",
        "disagreements": _disagreements(evaluations, loaded, sorted(disagreeing)),
    }


PROPORTION_TASKS = ("image_classification", "sequence_labelling")
# The inputs listed as right in one evaluation and wrong in the other, at most.
PAIRED_SHOWN = 50


def _paired(base: Any, other: Any, n: int) -> dict[str, Any] | None:
    """The exact McNemar test of `other` against the baseline on their first `n` inputs (the
    best class against the label), with the inputs only one of them gets right."""
    labels = base[0][:n]
    if not np.array_equal(labels, other[0][:n]) or (labels < 0).any():
        return None
    base_right = base[1][:n, 0] == labels
    other_right = other[1][:n, 0] == labels
    paired = statistics.paired_accuracy(base_right, other_right)
    paired["only_baseline_inputs"] = np.flatnonzero(base_right & ~other_right)[
        :PAIRED_SHOWN
    ].tolist()
    paired["only_other_inputs"] = np.flatnonzero(other_right & ~base_right)[:PAIRED_SHOWN].tolist()
    return paired


def _disagreements(
    evaluations: list[Evaluation], loaded: list[Any], indices: list[int]
) -> list[dict[str, Any]]:
    labels = (
        evaluations[0].dataset.content.get("labels") if evaluations[0].dataset else None
    ) or []
    shown = []
    for index in indices[:DISAGREEMENTS_SHOWN]:
        entry: dict[str, Any] = {"index": index, "label": None, "label_name": None, "top": []}
        for predicted in loaded:
            if predicted is None or index >= len(predicted[0]):
                entry["top"].append(None)
                continue
            entry["label"] = int(predicted[0][index])
            entry["top"].append(
                [
                    {
                        "class": int(c),
                        "name": labels[c] if 0 <= c < len(labels) else str(c),
                        "probability": round(float(p), 5),
                    }
                    for c, p in zip(predicted[1][index][:3], predicted[2][index][:3], strict=True)
                    if c >= 0
                ]
            )
        if entry["label"] is not None and 0 <= entry["label"] < len(labels):
            entry["label_name"] = labels[entry["label"]]
        entry["input_url"] = reverse(
            "api-evaluation-input", kwargs={"pk": evaluations[0].pk, "index": index}
        )
        shown.append(entry)
    return shown


# -- Latency ---------------------------------------------------------------------------------


def _samples(row: Any) -> list[float] | None:
    try:
        return list(row.samples.samples_ms)
    except ObjectDoesNotExist:
        return None


def latency(evaluations: list[Evaluation], noise: float = statistics.NOISE) -> dict[str, Any]:
    """Per batch size, each evaluation's median with its interval (the statistics layer's
    summary of its row) and, after the baseline, the difference from it: the ratio of the
    medians with its bootstrap interval, the Mann–Whitney U test and the verdict
    (`predictors.statistics.difference`). A result stored without its samples gets the ratio
    of its medians and no verdict."""
    by_size: dict[int, list[Any]] = {}
    for position, evaluation in enumerate(evaluations):
        result = getattr(evaluation, "result", None)
        for row in result.batch_results.all() if result else []:
            by_size.setdefault(row.batch_size, [None] * len(evaluations))[position] = row
    sizes = []
    for size in sorted(by_size):
        cells: list[dict[str, Any] | None] = []
        base = by_size[size][0]
        base_samples = _samples(base) if base is not None else None
        for position, row in enumerate(by_size[size]):
            if row is None:
                cells.append(None)
                continue
            cell: dict[str, Any] = {
                **row.latency,
                "batches": row.count,
                "throughput_ips": row.throughput_ips,
                "ratio": None,
                "throughput_ratio": None,
                "difference": None,
                "verdict": None,
            }
            if position and base is not None and base.p50_ms > 0 and row.p50_ms > 0:
                cell["ratio"] = row.p50_ms / base.p50_ms
                cell["throughput_ratio"] = (
                    row.throughput_ips / base.throughput_ips if base.throughput_ips else None
                )
                samples = _samples(row)
                if base_samples and samples and len(base_samples) > 1 and len(samples) > 1:
                    difference = statistics.difference(base_samples, samples, noise=noise)
                    cell["difference"] = difference.to_dict()
                    cell["verdict"] = difference.words
                else:
                    cell["verdict"] = (
                        f"×{statistics.ratio(cell['ratio'])} of the medians; no verdict: "
                        "too few samples kept to test a difference"
                    )
            cells.append(cell)
        sizes.append({"batch_size": size, "cells": cells})
    return {
        "batch_sizes": sizes,
        "headline": "median latency per batch",
        "interval": statistics.MEDIAN_INTERVAL,
        "noise": noise,
        "test": f"{statistics.LATENCY_TEST} on the timed batches; {statistics.RATIO_INTERVAL}; "
        f"a difference is called only when the test rejects at {statistics.ALPHA:g} and the "
        f"whole interval lies beyond ±{noise:.0%} (run-to-run noise)",
    }


# -- Per layer -------------------------------------------------------------------------------


def _layer_rows(evaluation: Evaluation) -> list[Any]:
    from traces import aggregates as trace_aggregates
    from traces.models import Trace

    trace = Trace.objects.filter(trace_id=evaluation.trace_id).first()
    if trace is None:
        return []
    return list(trace_aggregates.aggregates(trace))


def _layer_samples(evaluation: Evaluation, size: int | None) -> dict[str, np.ndarray]:
    from traces import aggregates as trace_aggregates

    return trace_aggregates.layer_samples(evaluation.trace_id, "framework", size)


def _layer_batch_size(per_layer: list[list[Any]]) -> int | None:
    """The batch size the layers are compared at: the smallest that every evaluation with
    layers traced, else the baseline's smallest (None: its layer spans carry no batch size)."""
    sizes = [{r.batch_size for r in rows} for rows in per_layer if rows]
    shared = set.intersection(*sizes) if sizes else set()
    for candidates in (shared, sizes[0] if sizes else set()):
        known = sorted(size for size in candidates if size is not None)
        if known:
            return known[0]
    return None


def layers(evaluations: list[Evaluation], noise: float = statistics.NOISE) -> dict[str, Any]:
    """Layers matched across the evaluations at one batch size, with their time and ratio to
    the baseline, the kernels inside each, and which kernels differ."""
    every = [_layer_rows(evaluation) for evaluation in evaluations]
    per_layer = [[r for r in rows if r.level == "framework"] for rows in every]
    if not per_layer[0] or not any(per_layer[1:]):
        return {
            "matched_by": None,
            "batch_size": None,
            "rows": [],
            "kernels": [],
            "note": "no per-layer spans: launch at trace level framework or deeper",
        }
    # Statistics are never mixed across batch sizes: one batch size, the same for all.
    size = _layer_batch_size(per_layer)
    per_layer = [[r for r in rows if r.batch_size == size] for rows in per_layer]
    same_framework = len({e.framework for e in evaluations}) == 1
    samples = [_layer_samples(evaluation, size) for evaluation in evaluations]
    rows: list[dict[str, Any]] = []
    if same_framework:
        matched_by = "name"
        index = [{row.name: row for row in layer_rows} for layer_rows in per_layer]
        for row in sorted(
            per_layer[0], key=lambda r: (r.layer_index is None, r.layer_index, r.name)
        ):
            rows.append(
                _layer_row(
                    row.name, row.op_type, [found.get(row.name) for found in index], samples, noise
                )
            )
    else:
        matched_by = "op type and order"
        ordered = [
            sorted(layer_rows, key=lambda r: (r.layer_index is None, r.layer_index, r.name))
            for layer_rows in per_layer
        ]
        queues = [_by_op_type(layer_rows) for layer_rows in ordered]
        for row in ordered[0]:
            op = _op_key(row.op_type)
            cells = [row]
            for queue in queues[1:]:
                items = queue.get(op) or []
                cells.append(items.pop(0) if items else None)
            rows.append(_layer_row(row.name, row.op_type, cells, samples, noise))
    kernel_sets = [
        {
            r.name: r
            for r in rows_
            if r.level == "system_library" and r.op_type == "kernel" and r.batch_size == size
        }
        for rows_ in every
    ]
    return {
        "matched_by": matched_by,
        "batch_size": size,
        "rows": rows,
        "kernels": _kernel_diff(kernel_sets),
        "note": (
            "matched by name within one framework"
            if same_framework
            else "matched across frameworks by op type and order (best effort): layers of one "
            "op type pair up in the order they run"
        )
        + (f", at batch size {size}" if size is not None else ""),
    }


def _op_key(op_type: str | None) -> str:
    text = (op_type or "").lower()
    for plain in (
        "conv",
        "relu",
        "pool",
        "gemm",
        "linear",
        "matmul",
        "dense",
        "softmax",
        "norm",
        "add",
        "flatten",
        "dropout",
        "reshape",
    ):
        if plain in text:
            return {"linear": "gemm", "matmul": "gemm", "dense": "gemm", "reshape": "flatten"}.get(
                plain, plain
            )
    return text


def _by_op_type(rows: list[Any]) -> dict[str, list[Any]]:
    queues: dict[str, list[Any]] = {}
    for row in rows:
        queues.setdefault(_op_key(row.op_type), []).append(row)
    return queues


def _layer_row(
    name: str,
    op_type: str | None,
    cells: list[Any],
    samples: list[dict[str, np.ndarray]],
    noise: float,
) -> dict[str, Any]:
    """A matched layer: each evaluation's median time with its interval, and after the
    baseline the ratio of the medians and the verdict of the statistics layer on the layer's
    spans (`predictors.statistics.difference`)."""
    found = [
        samples[position].get(cell.name) if cell is not None else None
        for position, cell in enumerate(cells)
    ]
    medians: list[float | None] = []
    intervals: list[list[float] | None] = []
    for cell, durations in zip(cells, found, strict=True):
        if cell is None:
            medians.append(None)
            intervals.append(None)
            continue
        if durations is not None and len(durations):
            summary = statistics.latency(durations)
            medians.append(summary["p50_ms"])
            low, high = summary["p50_low_ms"], summary["p50_high_ms"]
            intervals.append([low, high] if low is not None and high is not None else None)
        else:
            medians.append(cell.p50_ns / 1e6)
            intervals.append(None)
    verdicts: list[str | None] = [None]
    for durations in found[1:]:
        base_durations = found[0]
        if (
            base_durations is None
            or durations is None
            or len(base_durations) < 2
            or len(durations) < 2
            or np.median(base_durations) <= 0
            or np.median(durations) <= 0
        ):
            verdicts.append(None)
            continue
        verdicts.append(
            statistics.difference(
                base_durations,
                durations,
                noise=noise,
                resamples=LAYER_RESAMPLES,
                most=LAYER_SAMPLES,
            ).verdict
        )
    base_median = medians[0]
    return {
        "name": name,
        "op_type": op_type,
        "names": [cell.name if cell is not None else None for cell in cells],
        "p50_ms": medians,
        "p50_interval_ms": intervals,
        "mean_ms": [cell.mean_ns / 1e6 if cell is not None else None for cell in cells],
        "count": [cell.count if cell is not None else None for cell in cells],
        "ratio": [
            median / base_median if median is not None and base_median else None
            for median in medians
        ],
        "verdict": verdicts,
        # The kernels run inside the layer: [count, total ns], or None (none traced).
        "kernels": [
            [cell.kernel_count, cell.kernel_total_ns]
            if cell is not None and cell.kernel_count is not None
            else None
            for cell in cells
        ],
    }


def _kernel_diff(kernel_sets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per evaluation after the baseline: the kernels added, removed, faster and slower (by
    their mean time, beyond 10 %)."""
    base = kernel_sets[0]
    diffs = []
    for kernels in kernel_sets[1:]:
        common = sorted(set(base) & set(kernels))
        faster = [n for n in common if kernels[n].mean_ns < 0.9 * base[n].mean_ns]
        slower = [n for n in common if kernels[n].mean_ns > 1.1 * base[n].mean_ns]
        diffs.append(
            {
                "added": sorted(set(kernels) - set(base))[:50],
                "removed": sorted(set(base) - set(kernels))[:50],
                "faster": faster[:50],
                "slower": slower[:50],
            }
        )
    return diffs


# -- Across systems --------------------------------------------------------------------------


def systems(evaluations: list[Evaluation]) -> dict[str, Any] | None:
    """Latency per batch size normalised to the baseline's host, when the evaluations ran one
    model, framework and dataset on two or more hosts."""
    keys = {(e.model_name, e.model_version, e.framework, e.dataset_name) for e in evaluations}
    hosts = {e.host_id for e in evaluations}
    if len(keys) != 1 or len(hosts) < 2:
        return None
    base = evaluations[0]
    base_rows = (
        {r.batch_size: r for r in base.result.batch_results.all()}
        if hasattr(base, "result")
        else {}
    )
    series = []
    for evaluation in evaluations:
        rows = (
            {r.batch_size: r for r in evaluation.result.batch_results.all()}
            if hasattr(evaluation, "result")
            else {}
        )
        points = [
            {
                "batch_size": size,
                "p50_ms": rows[size].p50_ms,
                "normalised": rows[size].p50_ms / base_rows[size].p50_ms,
            }
            for size in sorted(rows)
            if size in base_rows and base_rows[size].p50_ms > 0
        ]
        series.append(
            {
                "evaluation": str(evaluation.pk),
                "host": evaluation.host.name if evaluation.host else None,
                "hardware": (evaluation.result.gpu_model or evaluation.result.cpu_model)
                if hasattr(evaluation, "result")
                else "",
                "points": points,
            }
        )
    return {"reference": base.host.name if base.host else None, "series": series}


def ids_text(evaluations: Iterable[Evaluation]) -> str:
    return ",".join(str(evaluation.pk) for evaluation in evaluations)
