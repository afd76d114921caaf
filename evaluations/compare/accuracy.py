"""Accuracy compared: top-1 and top-5 with their deltas to the baseline, per input the
agreement of the best class, the inputs on which any evaluation disagrees, the divergence of
the output distributions from the baseline's, and the paired test of two classifiers."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.urls import reverse

from evaluations import outputs
from evaluations.models import Evaluation
from predictors import statistics
from predictors.tasks import input_columns

# The inputs listed as disagreements, at most.
DISAGREEMENTS_SHOWN = 50
# The divergences are computed over at most this many inputs (the first ones of the split).
DIVERGENCE_INPUTS = 200_000


Predicted = tuple[np.ndarray, np.ndarray, np.ndarray, list[str] | None]


def _predictions(evaluation: Evaluation, task: str) -> Predicted | None:
    """(labels, classes [n, k], probabilities [n, k], a text recognizer's decoded texts or
    None) of the first DIVERGENCE_INPUTS inputs."""
    result = getattr(evaluation, "result", None)
    # A latency-only result predicted nothing to compare.
    if result is None or not result.predictions_path or result.top1 is None:
        return None
    try:
        # The first inputs alone, read a row group at a time (never the whole file).
        table = outputs.head(
            result.predictions_path,
            ["label", "classes", "probabilities", "text"],
            DIVERGENCE_INPUTS,
        )
    except (OSError, ValueError):
        return None
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

    texts = table.column("text").to_pylist() if "text" in table.column_names else None
    return (
        labels,
        matrix("classes", np.int64, -1),
        # A text recognizer's: NaN where a line has no confidence (a text decoded from
        # emitted token ids); any other's, 0 where a row holds fewer than k (its classes there
        # are -1, not read).
        matrix("probabilities", np.float64, np.nan if task == "text_recognition" else 0.0),
        texts,
    )


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


def compare(evaluations: list[Evaluation]) -> dict[str, Any]:
    """Each evaluation's accuracy against the baseline's (the first)."""
    base = evaluations[0]
    base_result = getattr(base, "result", None)
    task = base.dataset.task if base.dataset is not None else ""
    loaded = [_predictions(evaluation, task) for evaluation in evaluations]
    count = _class_count(base) or 0
    # A detector's rows are its detections (best first): the agreement is of the best ones.
    detector = base.dataset is not None and base.dataset.task == "object_detection"
    # Scores that are no distribution over the classes: a multi-label classifier's (each class
    # its own probability) and a regression's values (the agreement of a "best" value means
    # nothing there: only the values' differences are compared); a text recognizer's one
    # confidence per line (its lines are compared by their decoded texts, where every
    # evaluation's predictions file holds them).
    texts_compared = task == "text_recognition" and all(
        predicted is not None and predicted[3] is not None
        for predicted in loaded
        if predicted is not None
    )
    # An embedding's prediction is its nearest other input's identity, scored by their
    # similarity: no distribution either; the agreement compares those identities.
    independent = task in (
        "multi_label_classification",
        "regression",
        "text_recognition",
        "feature_extraction",
    )
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
                texts, base_texts = predicted[3], base_predicted[3]
                if texts_compared and texts is not None and base_texts is not None:
                    # A text recognizer's prediction is its line's decoded text, compared as
                    # its error rates read it (outer whitespace stripped, runs of spaces one).
                    differ = np.array(
                        [i for i in range(n) if _words(texts[i]) != _words(base_texts[i])],
                        dtype=np.int64,
                    )
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
                    largest = float(np.abs(p - q).max())
                    # None where either side has no confidences (emitted token ids).
                    row["max_abs_difference"] = None if np.isnan(largest) else largest
                    if task == "regression" or (task == "text_recognition" and not texts_compared):
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
        # What the agreement compares, input by input.
        "agreement": "lines whose decoded text equals the baseline's (outer whitespace "
        "stripped, runs of spaces one, as the error rates read them)"
        if texts_compared
        else "images whose best detection's class equals the baseline's"
        if detector
        else "inputs whose top-1 class equals the baseline's",
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
        else "none: a text recognizer's lines are compared by their decoded texts (the "
        "agreement), their confidences by their largest difference (none where a model "
        "emits token ids, which carry no confidence)"
        if texts_compared
        else "none: a text recognizer's confidences (one per line) are compared by their "
        "largest difference (its predictions files hold no decoded texts to compare)"
        if task == "text_recognition"
        else "none: each input's prediction is its most similar other input's identity; the "
        "agreement compares those identities, the similarities by their largest difference"
        if task == "feature_extraction"
        else "exact"
        if exact
        else f"estimated from the top {min(top_ks) if top_ks else '?'} classes of each input",
        "disagreements": _disagreements(evaluations, loaded, sorted(disagreeing), texts_compared),
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


def _probability(value: Any) -> float | None:
    """A stored probability to 5 decimals; None where none is stored (NaN)."""
    number = float(value)
    return None if np.isnan(number) else round(number, 5)


def _words(text: str) -> str:
    return " ".join(text.split())


def _disagreements(
    evaluations: list[Evaluation], loaded: list[Any], indices: list[int], texts: bool
) -> list[dict[str, Any]]:
    """The inputs at `indices`, each with every evaluation's top three classes (`texts`: a
    text recognizer's decoded text and its confidence)."""
    dataset = evaluations[0].dataset.content if evaluations[0].dataset else {}
    labels = dataset.get("labels") or []
    # Images are shown; other inputs (text, tensors, raw files, another column) are linked.
    model = evaluations[0].model
    named = input_columns(model.content) if model is not None else None
    image = str(dataset.get("encoding") or "").lower() in ("png", "jpeg", "jpg") and (
        not named or named[0] in ("image", "audio", "input")
    )
    shown = []
    for index in indices[:DISAGREEMENTS_SHOWN]:
        entry: dict[str, Any] = {"index": index, "label": None, "label_name": None, "top": []}
        for predicted in loaded:
            if predicted is None or index >= len(predicted[0]):
                entry["top"].append(None)
                continue
            entry["label"] = int(predicted[0][index])
            if texts:  # a text recognizer's line: its text and its confidence
                entry["top"].append(
                    [
                        {
                            "class": 0,
                            "name": predicted[3][index],
                            "probability": _probability(predicted[2][index][0]),
                        }
                    ]
                )
                continue
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
        entry["input_is_image"] = image
        shown.append(entry)
    return shown
