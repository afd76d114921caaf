"""What to run: the evaluation loop's options, every job option and what the host decides."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from predictors.evaluation.errors import EvaluationError
from predictors.frameworks.predictor import DEVICES
from predictors.protocol import JobOptions, ProtocolError

# ONNX Runtime's graph optimization levels (`--graph-optimization`); None leaves its default.
GRAPH_OPTIMIZATIONS = ("none", "basic", "extended", "all")


@dataclass(frozen=True)
class EvaluationOptions(JobOptions):
    """What to run: every job option (`predictors.protocol.JobOptions`: its field, default
    and check, once), and what only the host decides. `threads` None leaves each framework's
    default thread pools."""

    device: str = "cpu"
    stage_bytes: int = 256 * 1024 * 1024
    graph_optimization: str | None = None
    # Run the manifest's custom processing code (`predictors.processing.custom_code`): set only
    # inside a predictor container whose agent opts in; elsewhere a manifest with code is
    # refused.
    custom_code: bool = False
    # The longest one call of custom code may take (seconds), where a watchdog enforces it.
    custom_code_seconds: float = 60.0

    @classmethod
    def from_job(cls, options: JobOptions, *, device: str, **host: Any) -> EvaluationOptions:
        """The loop's options for a hub job: every job option, by name, and what the host
        decides (`custom_code`, `custom_code_seconds`)."""
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in options.to_dict().items()
        }
        return cls(device=device, **values, **host)

    def __post_init__(self) -> None:
        for spec in fields(JobOptions):  # a list option may be given as a list
            if isinstance(getattr(self, spec.name), list):
                object.__setattr__(self, spec.name, tuple(getattr(self, spec.name)))
        # The job options' own checks (bounds, choices, the options that fit together), once.
        try:
            super().__post_init__()
        except ProtocolError as error:
            raise EvaluationError(f"{error.path} {error.message}") from None
        # What only the host decides.
        if isinstance(self.stage_bytes, bool) or not (
            isinstance(self.stage_bytes, int) and self.stage_bytes >= 1
        ):
            raise EvaluationError(f"stage_bytes must be an integer >= 1; got {self.stage_bytes!r}")
        if self.graph_optimization not in (None, *GRAPH_OPTIMIZATIONS):
            raise EvaluationError(
                f"graph optimization must be one of {', '.join(GRAPH_OPTIMIZATIONS)}; "
                f"got {self.graph_optimization!r}"
            )
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise EvaluationError(f"device must be cpu, cuda or cuda:N; got {self.device!r}")
