"""Latency only: a model timed without scoring it (`latency_only`).

For models whose outputs have no labels (embeddings, features: outputs of type `tensor`),
models of a task the loop does not score, and any dataset whose inputs fit the model, labelled
or not. The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions,
spans); no labels are read (`DatasetReader`, target `none`) and the result's accuracy is None.

Every output is computed in each timed call: ONNX Runtime is asked for all of the model's
outputs by name (it would otherwise compute only what one output needs); TorchScript and
TensorFlow modules compute all of theirs anyway. The first output is kept, flattened per input,
where it holds at most `KEPT_VALUES` values per input, so that two frameworks' outputs can
still be compared input by input (`summaries.compare`); a larger one (a segmentation map) is
not kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from predictors.evaluation.base import FirstPass, Setup, Staged, Windowed
from predictors.evaluation.scenario import LATENCY_ONLY, register
from predictors.evaluation.scenarios.fixed_batches import FixedBatches
from predictors.processing import ProcessingError
from predictors.tasks import data_input_name

# The most values per input of the first output kept for comparisons.
KEPT_VALUES = 4096


@register(LATENCY_ONLY)
class LatencyOnly(FixedBatches):
    """The latency-only scenario; see the module docstring."""

    # The first output's shape and the batch's inputs, where its first axis is not them.
    _misaligned: tuple[tuple[int, ...], int] | None = None

    @classmethod
    def target(cls, setup: Setup) -> str:
        return "none"

    def output_type(self) -> str:
        return "tensor"

    def notes(self) -> list[str]:
        notes = [
            "latency only: the model was timed, not scored (no labels read, no accuracy); "
            "its every output was computed in each call"
        ]
        if self._misaligned is not None:
            shape, rows = self._misaligned
            notes.append(
                f"the output {self.kept_name!r} is {shape} for a batch of {rows} inputs: its "
                "first axis is not the batch, so its values were not kept for comparison "
                "(counts are of inputs)"
            )
        return notes

    def configure(self) -> None:
        outputs = [entry["name"] for entry in self.model.data["outputs"]]
        self.kept_name = outputs[0]
        if self.model.framework == "onnxruntime" and len(outputs) > 1:
            fed = data_input_name(self.model.data)
            run = self.predictor.run

            def every_output(batch: np.ndarray) -> Any:
                return run({fed: batch}, outputs)[0]

            self.call = every_output

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        for batch, labels, outputs in zip(stage.batches, stage.labels, stage_outputs, strict=True):
            rows = len(batch)  # the inputs of the call, whatever the output's first axis holds
            values = np.asarray(outputs)
            if isinstance(labels, Windowed):  # clips cut into windows: a row per window
                rows = len(labels)
                try:
                    values = self.setup.preprocessor.windowing.combined(values, labels.counts)
                except (ProcessingError, ValueError):
                    values = np.zeros(0)  # not a row per window: counted, not kept
            self._counted += rows
            if values.ndim == 0 or values.shape[0] != rows:
                if self._misaligned is None:
                    self._misaligned = (tuple(values.shape), rows)
                continue
            values = values.reshape(rows, -1)
            if values.shape[1] <= KEPT_VALUES:
                self.collected_outputs.append(values.astype(np.float32, copy=False))

    def start_collecting(self) -> None:
        super().start_collecting()
        self._counted = 0
        self._misaligned = None

    def score(self) -> tuple[dict[str, Any] | None, int]:  # type: ignore[override]
        if self.first is None:
            kept = sum(len(values) for values in self.collected_outputs) == self._counted
            outputs = (
                np.concatenate(self.collected_outputs)
                if kept and self.collected_outputs
                else np.zeros((self._counted, 0), np.float32)
            )
            self.first = FirstPass.unlabelled(outputs, [[] for _ in range(self._counted)])
        return None, self._counted
