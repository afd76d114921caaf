"""A model fed several inputs from one batch: the predictor of a model whose text input feeds
features of the text besides its ids (`predictors.processing.text.TextFeeds`), or that reads
several of the dataset's columns (`predictors.processing.columns.ColumnsPreprocessor`).

The loop drives every model through `predict(batch)`, one array batch axis first; such a
model's batch holds its inputs packed side by side ((N, 1 + F, L) for a text's, (N, B) bytes
for columns'). `SeveralFeeds` wraps the
framework's predictor: `predict` takes the batch apart into the model's inputs, each of its
own element type (a copy of the rows, inside the timed call: microseconds next to the model's
own work, and what a framework does anyway with an input that is not contiguous), and runs
them by name (`Predictor.predict_feeds`); every other call goes to the framework's predictor
as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from predictors.frameworks.layer_outputs import MAX_CAPTURE_BYTES, LayerOutput
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    StateReset,
)
from predictors.manifests import Manifest
from predictors.manifests.graph_check import Signature
from predictors.tasks import scored_output_name
from predictors.tracing import Layer


class Packed(Protocol):
    """What packs a model's inputs into one batch: their names (the first, the name the loop
    feeds the packed batch by), whether a batch is packed, and how to take it apart."""

    @property
    def names(self) -> list[str]: ...

    def is_packed(self, batch: Any) -> bool: ...

    def unpack(self, batch: np.ndarray) -> dict[str, np.ndarray]: ...


class SeveralFeeds(Predictor):
    """`inner`, fed `feeds` from each packed batch (see the module docstring)."""

    def __init__(self, inner: Predictor, feeds: Packed) -> None:
        self.inner, self.feeds = inner, feeds
        self._output = ""

    @classmethod
    def check_device(cls, device: str) -> None:  # pragma: no cover - asked of the inner class
        raise NotImplementedError

    @classmethod
    def software(cls) -> dict[str, Any]:  # pragma: no cover - asked of the inner class
        raise NotImplementedError

    def load(self, manifest: Manifest, options: PredictorOptions) -> None:
        self.inner.load(manifest, options)
        self._output = scored_output_name(manifest.data)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        return self.inner.predict_feeds(self.feeds.unpack(batch), self._output)

    def run(self, feeds: dict[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        """`feeds` by name, the packed batch under the text input's name taken apart."""
        first = self.feeds.names[0]
        packed = feeds.get(first)
        if packed is not None and self.feeds.is_packed(packed):
            feeds = {name: value for name, value in feeds.items() if name != first}
            feeds.update(self.feeds.unpack(packed))
        return self.inner.run(feeds, names)

    def layer_outputs(
        self, batch: np.ndarray, *, max_bytes: int = MAX_CAPTURE_BYTES
    ) -> list[LayerOutput]:
        raise PredictorError(
            f"layer outputs are captured for models of one input; this one takes "
            f"{', '.join(self.feeds.names)} from each row"
        )

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        # The graph's inputs are checked one by one against the manifest at upload (ranks,
        # element types, the length of fixed rows): the packed batch is the loop's own.
        return None

    def signature(self) -> Signature | None:
        return self.inner.signature()

    def inference_context(self) -> AbstractContextManager[object]:
        return self.inner.inference_context()

    def synchronize(self) -> None:
        self.inner.synchronize()

    def start_tracing(self) -> None:
        self.inner.start_tracing()

    def stop_tracing(self) -> None:
        self.inner.stop_tracing()

    def take_layers(self) -> list[list[Layer]] | None:
        return self.inner.take_layers()

    def layers_as_they_come(self) -> bool:
        return self.inner.layers_as_they_come()

    def trace_summary(self) -> dict[str, Any] | None:
        return self.inner.trace_summary()

    def state_reset(self) -> StateReset | None:
        return self.inner.state_reset()

    def settings(self) -> dict[str, Any]:
        return self.inner.settings()

    def close(self) -> None:
        self.inner.close()
