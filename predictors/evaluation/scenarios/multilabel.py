"""Multi-label classification: the scenario of `multi_label_classification` models, whose
inputs each belong to any number of classes (none, one or several).

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans).
The model's one scored output gives a score per class and input: `logits`, each read through
its own sigmoid (not a softmax: the classes do not compete), or `probabilities`, each class's
own. The dataset's `label` column holds each input's classes as a list of class indices,
read as (N, classes) 0/1 rows (`DatasetReader`, target `classes`).

Metrics by scikit-learn (`multilabel_metrics`): `map`, the mean over the classes that occur in
the split of each class's average precision (`average_precision_score`, the area under its
precision-recall curve: no threshold); `map_micro`, over every (input, class) pair at once;
and, with a class predicted where its probability reaches the output's `threshold` (default
0.5): micro F1, macro F1 (over the classes that occur in the split or the predictions),
micro precision and recall, `exact_match` (the share of inputs whose
predicted set is exactly their set: `accuracy_score`) and `hamming_loss`. `top1` is `map` and
`top5` is the micro F1 (the result's two accuracy columns, labelled by task where they are
shown).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from predictors.evaluation.base import FirstPass
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import FixedBatches

DEFAULT_THRESHOLD = 0.5


def sigmoid_probabilities(scores: np.ndarray, output_type: str) -> np.ndarray:
    """Each class's probability, (N, classes): logits through a sigmoid, probabilities kept."""
    values = np.asarray(scores, np.float64).reshape(len(scores), -1)
    if output_type == "logits":
        # exp of a non-positive number only: no overflow either way.
        positive = np.exp(-np.abs(values))
        values = np.where(values >= 0, 1.0 / (1.0 + positive), positive / (1.0 + positive))
    return values


def multilabel_metrics(
    probabilities: np.ndarray, truth: np.ndarray, labels: list[str], threshold: float
) -> dict[str, Any]:
    """The metrics of the module docstring, of probabilities (N, classes) and 0/1 truth."""
    from sklearn import metrics

    if not np.all(np.isfinite(probabilities)):
        bad = int(np.flatnonzero(~np.isfinite(probabilities).all(axis=1))[0])
        raise EvaluationError(f"the model's output for input {bad} is not finite (NaN or inf)")
    if probabilities.shape != truth.shape:
        raise EvaluationError(
            f"the model gives {probabilities.shape[1]} scores per input for {truth.shape[1]} labels"
        )
    if probabilities.min() < 0 or probabilities.max() > 1:
        raise EvaluationError(
            "the model's probabilities are not between 0 and 1: declare the output as logits "
            "if it gives scores before a sigmoid"
        )
    predicted = (probabilities >= threshold).astype(np.uint8)
    present = truth.sum(axis=0) > 0
    per_class: dict[str, float | None] = {}
    for index, label in enumerate(labels):
        per_class[label] = (
            float(metrics.average_precision_score(truth[:, index], probabilities[:, index]))
            if present[index]
            else None  # no input of the class: its precision-recall curve is not defined
        )
    scored = [value for value in per_class.values() if value is not None]
    mean_ap = float(np.mean(scored)) if scored else 0.0
    micro_ap = (
        float(metrics.average_precision_score(truth, probabilities, average="micro"))
        if truth.any()
        else 0.0
    )
    f1_micro = float(metrics.f1_score(truth, predicted, average="micro", zero_division=0))
    # Macro F1 over the classes that occur in the split or in the predictions: a class absent
    # from both has no F1 to average (and would count as 0).
    occurring = np.flatnonzero(present | (predicted.sum(axis=0) > 0))
    f1_macro = (
        float(
            metrics.f1_score(truth, predicted, average="macro", labels=occurring, zero_division=0)
        )
        if occurring.size
        else None
    )
    return {
        "top1": mean_ap,
        "top5": f1_micro,
        "count": int(truth.shape[0]),
        "map": mean_ap,
        "map_micro": micro_ap,
        "f1_micro": f1_micro,
        "f1_macro": f1_macro,
        "precision_micro": float(
            metrics.precision_score(truth, predicted, average="micro", zero_division=0)
        ),
        "recall_micro": float(
            metrics.recall_score(truth, predicted, average="micro", zero_division=0)
        ),
        "exact_match": float(metrics.accuracy_score(truth, predicted)),
        "hamming_loss": float(metrics.hamming_loss(truth, predicted)),
        "threshold": threshold,
        "classes_scored": len(scored),
        "average_precision": per_class,
        "labels_per_input": float(truth.sum(axis=1).mean()),
        "library": "scikit-learn",
    }


@register("multilabel", tasks=("multi_label_classification",))
class MultiLabel(FixedBatches):
    """The multi-label scenario; see the module docstring."""

    def configure(self) -> None:
        self.threshold = float(self.spec.output_parameters.get("threshold", DEFAULT_THRESHOLD))
        self.read_type = "probabilities"

    def read(self, outputs: Any) -> np.ndarray:
        return sigmoid_probabilities(np.asarray(outputs), self.spec.output_type)

    def score(self) -> tuple[dict[str, Any], int]:
        outputs = np.concatenate(self.collected_outputs).astype(np.float64, copy=False)
        truth = np.concatenate(self.collected_labels)
        if self.first is None:
            # An input's classes are a set: the per-input label is not one class (-1).
            self.first = FirstPass.unlabelled(outputs, self.collected_predictions)
        return multilabel_metrics(outputs, truth, self.labels, self.threshold), len(truth)
