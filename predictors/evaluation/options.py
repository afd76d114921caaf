"""What to run: the evaluation loop's options, every job option and what the host decides."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from predictors.evaluation.errors import EvaluationError
from predictors.frameworks.predictor import DEVICES
from predictors.protocol import TRACE_LEVELS, JobOptions, ProtocolError, cold_start_problem

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
        def positive(name: str, value: Any, minimum: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise EvaluationError(f"{name} must be an integer >= {minimum}; got {value!r}")

        for spec in fields(JobOptions):  # a list option may be given as a list
            if isinstance(getattr(self, spec.name), list):
                object.__setattr__(self, spec.name, tuple(getattr(self, spec.name)))
        if not self.batch_sizes:
            raise EvaluationError("batch_sizes must name at least one batch size")
        for size in self.batch_sizes:
            positive("a batch size", size, 1)
        if len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise EvaluationError(f"batch_sizes repeats a batch size: {list(self.batch_sizes)}")
        if self.limit is not None:
            positive("limit", self.limit, 1)
        positive("warmup", self.warmup, 0)
        positive("repeat", self.repeat, 1)
        if self.threads is not None:
            positive("threads", self.threads, 1)
        positive("seed", self.seed, 0)
        positive("stage_bytes", self.stage_bytes, 1)
        if cold_start_problem(self):
            raise EvaluationError(f"a cold start runs no warm-up; got warmup {self.warmup}")
        if self.trace_level not in TRACE_LEVELS:
            raise EvaluationError(
                f"trace level must be one of {', '.join(TRACE_LEVELS)}; got {self.trace_level!r}"
            )
        if self.graph_optimization not in (None, *GRAPH_OPTIMIZATIONS):
            raise EvaluationError(
                f"graph optimization must be one of {', '.join(GRAPH_OPTIMIZATIONS)}; "
                f"got {self.graph_optimization!r}"
            )
        for name in ("target_qps", "latency_bound_ms"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise EvaluationError(f"{name} must be a number > 0; got {value!r}")
        seconds = self.target_ci_seconds
        if isinstance(seconds, bool) or not (isinstance(seconds, int | float) and seconds > 0):
            raise EvaluationError(f"target_ci_seconds must be a number > 0; got {seconds!r}")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise EvaluationError(f"device must be cpu, cuda or cuda:N; got {self.device!r}")
        # The job options' own checks (bounds, choices, the options that fit together).
        try:
            super().__post_init__()
        except ProtocolError as error:
            raise EvaluationError(f"{error.path} {error.message}") from None
