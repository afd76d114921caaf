"""Where the loop writes its spans as it goes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from predictors.tracing import Span


class SpanSink(Protocol):
    """Where the loop writes its spans as it goes: at the end of each batch size, and once more
    at the end (the predictor's layers, the counter samples). A span's parent is written before
    it, in the same call or an earlier one."""

    def write(self, spans: Sequence[Span]) -> None: ...


class SpanList:
    """A sink that keeps every span (`Evaluation.spans`): for local runs and the CLI."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def write(self, spans: Sequence[Span]) -> None:
        self.spans.extend(spans)
