"""The job option `capture_inputs`: every layer's output of a few chosen inputs, captured after
the timed batches, on the model as the job loaded it (its framework, device, threads and
processing parameters), and kept with the result for the first divergence
(`predictors.analysis.divergence`).

The inputs are read from the split by index and preprocessed as the timed batches were; the
predictor runs them once through a copy of the model that records each layer's output
(`Predictor.layer_outputs`). The capture is bounded (`MAX_CAPTURE_BYTES`): a larger one is
refused naming its size, before anything is sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from predictors.data.readers import rows_at
from predictors.evaluation.base import Setup
from predictors.evaluation.errors import EvaluationError
from predictors.frameworks.layer_outputs import MAX_CAPTURE_BYTES
from predictors.frameworks.predictor import Predictor, PredictorError
from predictors.tasks import input_columns

if TYPE_CHECKING:
    from predictors.analysis.divergence import Capture

__all__ = ["capture_layers", "capture_problem"]


def capture_problem(model: dict[str, Any], preprocessor: Any) -> str | None:
    """Why the layer outputs of this model cannot be captured; None where they can (one input
    fed from the dataset, preprocessed a batch at a time)."""
    inputs = model.get("inputs") or []
    if len(inputs) != 1:
        names = ", ".join(str(entry.get("name")) for entry in inputs if isinstance(entry, dict))
        return (
            "capture_inputs: the layer outputs are captured for models with one input; "
            f"{model.get('name')} has {len(inputs)} ({names})"
        )
    if hasattr(preprocessor, "stream"):
        return "capture_inputs: a model fed streams of chunks has no one input to capture"
    return None


def capture_layers(setup: Setup, predictor: Predictor) -> Capture | None:
    """The layer outputs of the job's `capture_inputs` (None where it names none)."""
    indices = list(setup.options.capture_inputs)
    if not indices:
        return None
    from predictors.analysis.divergence import Capture

    try:
        named = input_columns(setup.model.data)
        values = rows_at(setup.split_file, indices, named[0] if named else None)
    except IndexError as error:
        raise EvaluationError(f"capture_inputs: {error}") from None
    batch = np.ascontiguousarray(setup.preprocessor.batch(values))
    try:
        layers = predictor.layer_outputs(batch, max_bytes=MAX_CAPTURE_BYTES)
    except PredictorError as error:
        raise EvaluationError(f"capture_inputs: {error}") from None
    return Capture(framework=setup.model.framework, input=batch, layers=layers, indices=indices)
