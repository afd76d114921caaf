"""Model outputs: the top-k classes of each row, and the class labels of an output."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from predictors.processing.labels import labels_from_text
from predictors.processing.parameters import ProcessingError


def postprocess(
    outputs: np.ndarray,
    *,
    output_type: Literal["logits", "probabilities"],
    top_k: int,
    labels: Sequence[str],
) -> list[list[tuple[int, str, float]]]:
    """The top-k (class index, label, probability) of each row, most probable first.

    `outputs` is (N, classes), or (N, …) flattened per row. Logits go through a numerically
    stable softmax (in float64); probabilities are used as they are. Ties go to the lower class
    index, and a `top_k` above the number of classes returns every class.
    """
    if output_type not in ("logits", "probabilities"):
        raise ProcessingError(
            f"output type must be logits or probabilities; got {output_type!r}",
            parameter="type",
        )
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ProcessingError(f"top_k must be an integer >= 1; got {top_k!r}", parameter="top_k")
    values = np.asarray(outputs, dtype=np.float64)
    if values.ndim < 2:
        raise ProcessingError(
            f"model outputs must have a batch axis first, (N, classes); got shape {values.shape}"
        )
    values = values.reshape(values.shape[0], -1)
    classes = values.shape[1]
    if len(labels) != classes:
        raise ProcessingError(
            f"the model gives {classes} classes but there are {len(labels)} labels",
            parameter="labels",
        )
    if np.isnan(values).any():
        raise ProcessingError("the model outputs contain NaN")
    if output_type == "logits":
        shifted = values - values.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        probabilities = exp / exp.sum(axis=1, keepdims=True)
    else:
        probabilities = values
    k = min(top_k, classes)
    # A stable sort of the negated probabilities keeps equal ones in class-index order.
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(probabilities, order, axis=1)
    return [
        [(int(i), labels[int(i)], float(p)) for i, p in zip(row_order, row_top, strict=True)]
        for row_order, row_top in zip(order, top, strict=True)
    ]


def load_labels(output_parameters: Mapping[str, Any], fetch: Callable[[str], Path]) -> list[str]:
    """The class labels of an output: the inline `labels` list, or `labels_path` fetched.

    `fetch` turns a URL into a local file (e.g. `DataManager.fetch`). A labels file holds one
    label per line (UTF-8); trailing empty lines are ignored.
    """
    inline = output_parameters.get("labels")
    path = output_parameters.get("labels_path")
    if (inline is None) == (path is None):
        raise ProcessingError(
            "an output needs exactly one of 'labels' (a list) and 'labels_path'",
            parameter="labels",
        )
    if inline is not None:
        if not isinstance(inline, list) or not all(isinstance(x, str) for x in inline):
            raise ProcessingError("'labels' must be a list of strings", parameter="labels")
        return list(inline)
    if not isinstance(path, str):
        raise ProcessingError("'labels_path' must be a URL", parameter="labels_path")
    return labels_from_text(fetch(path).read_text(encoding="utf-8"))
