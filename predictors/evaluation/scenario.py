"""How an evaluation drives the model: a scenario.

A scenario runs one batch size's share of an evaluation: it reads and preprocesses the inputs,
calls the predictor, times what it measures, writes its spans to the sink, and answers that
batch size's summary (latency, throughput, accuracy). `FixedBatches` is today's only scenario:
the fixed-batch closed loop (`predictors.evaluation.fixed_batches`). A LoadGen scenario
(SingleStream, MultiStream, Server, Offline) implements the same interface, so that `evaluate`
chooses one by the job's options and everything around it (fetching, loading, tracing hooks,
summaries, the result) stays as it is.
"""

from __future__ import annotations

from typing import Any, Protocol

from predictors.data import DatasetReader

__all__ = ["Scenario"]


class Scenario(Protocol):
    """One way to drive the model (see the module docstring)."""

    def run(self, reader: DatasetReader, preprocessor: Any) -> dict[str, Any]:
        """Run one batch size (`reader.batch_size`) and answer its summary."""
        ...

    def flush(self) -> None:
        """Write the spans recorded so far to the sink."""
        ...
