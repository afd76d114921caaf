"""Regression: the scenario of `regression` models, whose output is values (one per label:
the target's names) compared with the dataset's targets.

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans).
The model's one scored output, of type `values`, is (N,) or (N, k) for the k labels; the
dataset's `target` column holds a number per row, or a list of k numbers (`DatasetReader`,
target `values`).

Metrics by scikit-learn (`regression_metrics`): `mae` (mean absolute error), `rmse` (root mean
squared error), `r2` (the coefficient of determination; None for fewer than two inputs, where
it is not defined), averaged uniformly over the k values, `max_error` (the largest absolute
error of any value), and each value's own (`per_value`). `top1` is the MAE and `top5` the RMSE (the result's two accuracy columns,
labelled by task where they are shown): for regression, lower is better.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from predictors.evaluation.base import FirstPass
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import FixedBatches


def regression_metrics(
    predicted: np.ndarray, truth: np.ndarray, labels: list[str]
) -> dict[str, Any]:
    """The metrics of the module docstring, of predicted and true values (N, k)."""
    from sklearn import metrics

    if predicted.shape != truth.shape:
        raise EvaluationError(
            f"the model gives {predicted.shape[1]} values per input for {truth.shape[1]} "
            "labels (the dataset's targets)"
        )
    if not np.all(np.isfinite(predicted)):
        bad = int(np.flatnonzero(~np.isfinite(predicted).all(axis=1))[0])
        raise EvaluationError(f"the model's output for input {bad} is not finite (NaN or inf)")
    enough = len(truth) >= 2
    per_value = {
        label: {
            "mae": float(metrics.mean_absolute_error(truth[:, i], predicted[:, i])),
            "rmse": float(metrics.root_mean_squared_error(truth[:, i], predicted[:, i])),
            "r2": float(metrics.r2_score(truth[:, i], predicted[:, i])) if enough else None,
            "max_error": float(metrics.max_error(truth[:, i], predicted[:, i])),
        }
        for i, label in enumerate(labels)
    }
    mae = float(metrics.mean_absolute_error(truth, predicted))
    rmse = float(metrics.root_mean_squared_error(truth, predicted))
    return {
        "top1": mae,
        "top5": rmse,
        "count": int(len(truth)),
        "mae": mae,
        "rmse": rmse,
        "r2": float(metrics.r2_score(truth, predicted)) if enough else None,
        "max_error": float(np.abs(predicted - truth).max()),
        "per_value": per_value,
        "target_mean": float(truth.mean()),
        "target_std": float(truth.std()),
        "library": "scikit-learn",
    }


@register("regression", tasks=("regression",))
class Regression(FixedBatches):
    """The regression scenario; see the module docstring."""

    def configure(self) -> None:
        self.read_type = "probabilities"  # predictions rank nothing: every value, in order

    def read(self, outputs: Any) -> np.ndarray:
        values = np.asarray(outputs, np.float64)
        return values.reshape(len(values), -1)

    def postprocess_batch(self, outputs: np.ndarray) -> list[list[tuple[int, str, float]]]:
        """Each input's values, one per label, in order."""
        if outputs.shape[1] != len(self.labels):
            raise EvaluationError(
                f"{self.model.name} gives {outputs.shape[1]} values per input for "
                f"{len(self.labels)} labels"
            )
        return [
            [(index, self.labels[index], float(value)) for index, value in enumerate(row)]
            for row in outputs
        ]

    def score(self) -> tuple[dict[str, Any], int]:
        predicted = np.concatenate(self.collected_outputs)
        truth = np.concatenate(self.collected_labels)
        if self.first is None:
            # A target is no class: the per-input label is -1; the values are the predictions.
            self.first = FirstPass.unlabelled(predicted, self.collected_predictions)
        return regression_metrics(predicted, truth, self.labels), len(truth)
