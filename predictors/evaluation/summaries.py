"""Summaries of an evaluation: accuracy and other metrics of the outputs, and the result's notes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.frameworks.predictor import (
    Predictor,
)
from predictors.manifests import Manifest
from predictors.processing.labels import is_untrained
from predictors.processing.labels import mismatch as label_mismatch
from predictors.protocol import at_least
from predictors.tracing.counters import CounterSampler


def probabilities(scores: np.ndarray, output_type: str) -> np.ndarray:
    """The probability of every class, (N, classes), from a batch of the scored output."""
    scores = scores.reshape(scores.shape[0], -1).astype(np.float64)
    if output_type in ("binary_probability", "binary_logit"):
        if scores.shape[1] != 1:
            raise EvaluationError(
                f"a {output_type} output gives one number per input; this one gives "
                f"{scores.shape[1]}"
            )
        positive = scores[:, 0]
        if output_type == "binary_logit":
            positive = 1.0 / (1.0 + np.exp(-positive))
        return np.stack([1.0 - positive, positive], axis=1)
    if output_type == "logits":
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    return scores


def top_accuracy(outputs: np.ndarray, labels: np.ndarray) -> dict[str, float | int | None]:
    """Top-1 and top-5 accuracy; top-5 is None for five classes or fewer, where every label is
    among the five best and the number would say nothing."""
    k = min(5, outputs.shape[1])
    # A stable sort of the negated outputs breaks ties towards the lower class index, as
    # `postprocess` does; softmax keeps the order, so logits rank like probabilities.
    top = np.argsort(-outputs, axis=1, kind="stable")[:, :k]
    hits = top == labels[:, None]
    return {
        "top1": float(hits[:, 0].mean()),
        "top5": float(hits.any(axis=1).mean()) if outputs.shape[1] > 5 else None,
        "count": int(labels.size),
    }


def sequence_metrics(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """Per-input metrics of a sequence labelling or a binary classifier (`probabilities`:
    (N, classes), rows sum to 1; `labels`: (N,) class indices), computed by scikit-learn: accuracy, precision, recall and
    F1 (of the second class when there are two, the positive one; macro-averaged over the
    classes otherwise), and ROC AUC (one-vs-rest, macro, over the classes present; None when
    a class is missing from the labels, where it is not defined). `top1` is the accuracy and
    `top5` the share of labels among the five most probable classes (as for classification:
    None for five classes or fewer)."""
    from sklearn import metrics

    classes = probabilities.shape[1]
    if not np.all(np.isfinite(probabilities)):
        bad = int(np.flatnonzero(~np.isfinite(probabilities).all(axis=1))[0])
        raise EvaluationError(f"the model's output for input {bad} is not finite (NaN or inf)")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise EvaluationError(
            f"the dataset has label {int(labels.max())}, but the model's output reads "
            f"{classes} classes"
        )
    predicted = np.argmax(probabilities, axis=1)
    binary = classes == 2
    average = "binary" if binary else "macro"
    every = list(range(classes))
    precision, recall, f1, _ = metrics.precision_recall_fscore_support(
        labels,
        predicted,
        average=average,
        labels=None if binary else every,
        pos_label=1,
        zero_division=0,
    )
    present = np.unique(labels)
    roc_auc: float | None = None
    if len(present) == classes and classes >= 2:
        try:
            roc_auc = float(
                metrics.roc_auc_score(labels, probabilities[:, 1])
                if binary
                else metrics.roc_auc_score(labels, probabilities, multi_class="ovr", labels=every)
            )
        except ValueError:  # scores that are no probabilities (rows not summing to 1)
            roc_auc = None
    return {
        **top_accuracy(probabilities, labels),
        "accuracy": float(metrics.accuracy_score(labels, predicted)),
        "precision": float(precision),
        "recall": float(recall),
        "f1": float(f1),
        "roc_auc": roc_auc,
        "average": average,
    }


def label_notes(
    model: Manifest,
    dataset: Manifest,
    labels: list[str],
    dataset_labels: list[str] | None,
    classes: int,
) -> list[str]:
    notes = []
    if is_untrained(model.data):
        notes.append(
            f"{model.name} is not trained (attributes.trained: false): its accuracy is "
            "meaningless; use it for latency and throughput"
        )
    if dataset_labels is not None:
        problem = label_mismatch(
            f"{model.name} {model.version}",
            labels,
            f"{dataset.name} {dataset.version}",
            dataset_labels,
        )
        if problem:
            notes.append(f"labels differ: {problem}")
    if classes != len(labels):
        notes.append(f"the model gives {classes} outputs per input for {len(labels)} labels")
    return notes


def trace_notes(
    options: EvaluationOptions, predictor_type: type[Predictor], sampler: CounterSampler | None
) -> list[str]:
    """What the requested trace level could not record here, in words."""
    level = options.trace_level
    notes: list[str] = []
    finest = predictor_type.finest_trace_level
    framework = predictor_type.framework
    if at_least(level, "ml_library") and not at_least(finest, level):
        notes.append(
            f"trace level {level}: the {framework} predictor traces down to {finest}; "
            "finer steps inside its calls are not recorded"
        )
    if at_least(level, "system_library") and options.device == "cpu":
        notes.append(
            f"trace level {level} on the CPU: there are no CUDA runtime calls or GPU kernels "
            "to record"
        )
    if sampler is not None:
        notes.extend(sampler.notes)
    return notes


def shown(value: Any) -> str:
    """A manifest value as the manifest would show it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
