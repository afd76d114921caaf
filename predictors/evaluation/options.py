"""What to run: the evaluation loop's options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from predictors.evaluation.errors import EvaluationError
from predictors.frameworks.predictor import (
    DEVICES,
)
from predictors.protocol import (
    JOB_DEFAULTS,
    LOADGEN_MODES,
    SCENARIOS,
    TRACE_LEVELS,
    JobOptions,
    cold_start_problem,
    scenario_problem,
    target_ci_problem,
)

_DEFAULT = JOB_DEFAULTS

# ONNX Runtime's graph optimization levels (`--graph-optimization`); None leaves its default.
GRAPH_OPTIMIZATIONS = ("none", "basic", "extended", "all")


@dataclass(frozen=True)
class EvaluationOptions:
    """What to run. `threads` None leaves each framework's default thread pools."""

    # Every option of the same name as a job option (`predictors.protocol.JobOptions`) takes
    # its one default from there (`JOB_DEFAULTS`).
    batch_sizes: tuple[int, ...] = _DEFAULT["batch_sizes"]
    split: str = _DEFAULT["split"]
    limit: int | None = _DEFAULT["limit"]
    device: str = "cpu"
    warmup: int = _DEFAULT["warmup"]
    repeat: int = _DEFAULT["repeat"]
    threads: int | None = _DEFAULT["threads"]
    seed: int = _DEFAULT["seed"]
    trace_level: str = _DEFAULT["trace_level"]
    stage_bytes: int = 256 * 1024 * 1024
    graph_optimization: str | None = None
    # Time the first predictions, with no warm-up (warmup must be 0); the report says so.
    cold_start: bool = _DEFAULT["cold_start"]
    # Manifest parameters to override, PATH=VALUE, applied to the model manifest in order
    # before it runs (`mlms evaluate --set`, a hub launch's `overrides`).
    overrides: tuple[str, ...] = _DEFAULT["overrides"]
    # Run a trained model whose labels are not the dataset's (`predictors.manifests.labels`); the
    # result's notes show the mismatch.
    allow_label_mismatch: bool = _DEFAULT["allow_label_mismatch"]
    # Time the model without scoring it (`predictors.evaluation.latency`): no labels are read.
    latency_only: bool = _DEFAULT["latency_only"]
    # Run the manifest's custom processing code (`predictors.processing.custom_code`): set only inside a
    # predictor container whose agent opts in; elsewhere a manifest with code is refused.
    custom_code: bool = False
    # The longest one call of custom code may take (seconds), where a watchdog enforces it.
    custom_code_seconds: float = 60.0
    # An MLPerf LoadGen scenario run after the fixed batches (`predictors.evaluation.loadgen`;
    # the job options of the same names in `predictors.protocol.JobOptions`).
    scenario: str = _DEFAULT["scenario"]
    target_qps: float | None = _DEFAULT["target_qps"]
    latency_bound_ms: float | None = _DEFAULT["latency_bound_ms"]
    min_duration_ms: int = _DEFAULT["min_duration_ms"]
    min_query_count: int = _DEFAULT["min_query_count"]
    samples_per_query: int | None = _DEFAULT["samples_per_query"]
    loadgen_mode: str = _DEFAULT["loadgen_mode"]
    find_peak_qps: bool = _DEFAULT["find_peak_qps"]
    # Past the repeat passes, time each batch size until the median's 95 % interval is within
    # ± this share of it, or until `target_ci_seconds` (`predictors.evaluation.fixed_batches`).
    target_ci: float | None = _DEFAULT["target_ci"]
    target_ci_seconds: float = _DEFAULT["target_ci_seconds"]

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
        if self.scenario not in SCENARIOS:
            raise EvaluationError(
                f"scenario must be one of {', '.join(SCENARIOS)}; got {self.scenario!r}"
            )
        if self.loadgen_mode not in LOADGEN_MODES:
            raise EvaluationError(
                f"loadgen_mode must be one of {', '.join(LOADGEN_MODES)}; got {self.loadgen_mode!r}"
            )
        positive("min_duration_ms", self.min_duration_ms, 1)
        positive("min_query_count", self.min_query_count, 1)
        if self.samples_per_query is not None:
            positive("samples_per_query", self.samples_per_query, 1)
        for name in ("target_qps", "latency_bound_ms"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise EvaluationError(f"{name} must be a number > 0; got {value!r}")
        problem = scenario_problem(self) or target_ci_problem(self)
        if problem:
            raise EvaluationError(f"{problem[0]} {problem[1]}")
        if isinstance(self.target_ci_seconds, bool) or not (
            isinstance(self.target_ci_seconds, int | float) and self.target_ci_seconds > 0
        ):
            raise EvaluationError(
                f"target_ci_seconds must be a number > 0; got {self.target_ci_seconds!r}"
            )
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise EvaluationError(f"device must be cpu, cuda or cuda:N; got {self.device!r}")
