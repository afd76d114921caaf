"""The contract between the hub and its agents, written once: importable without Django.

Both sides read every shared name from here:

- the Celery task the hub sends and agents run (`TASK_NAME`), and the queue names
  (`host_queue`, `capability_queue`, `queue_scope`);
- an evaluation's statuses (`STATUSES`, `FINISHED`);
- the trace levels, in order, with what each adds (`TRACE_LEVELS`, `TRACE_LEVEL_MEANINGS`,
  `SPAN_LEVELS`, `KERNEL_LEVELS`, `at_least`);
- the span attribute keys (`Attr`);
- one device vocabulary: `cpu` and `gpu` between hub and agent (`DEVICES`); a predictor's own
  device string (`cpu`, `cuda`, `cuda:N`) is read with `device_kind` and made with
  `local_device`;
- the typed objects that cross the wire: `Job` (the claim's answer, with `JobOptions`) and
  `ResultUpload` (an agent's result), each with `to_dict` and a strict `from_dict` that raises
  `ProtocolError` naming the field at fault.

`JobOptions` is the one place a job option is written: the hub's launch request takes its
fields (with the bounds and help given here), the claim carries them, and the agent passes them
to the evaluation loop by name. Each option has one default, here (`JOB_DEFAULTS`), that every
entry point takes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any

__all__ = [
    "CPU",
    "DEVICES",
    "FINISHED",
    "GPU",
    "JOB_DEFAULTS",
    "KERNEL_LEVELS",
    "SPAN_LEVELS",
    "STATUSES",
    "TASK_NAME",
    "TRACE_LEVELS",
    "TRACE_LEVEL_MEANINGS",
    "NOT_OURS",
    "Attr",
    "Code",
    "Job",
    "JobOptions",
    "ManifestRef",
    "ProtocolError",
    "ResultUpload",
    "at_least",
    "capability",
    "capability_queue",
    "device_kind",
    "host_queue",
    "local_device",
    "queue_scope",
]


class ProtocolError(ValueError):
    """A message that breaks the contract: `path` names the field at fault."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


# -- refusals ----------------------------------------------------------------------------------


class Code:
    """The codes of the hub's refusals that an agent acts on (an error body's `code`)."""

    HOST_NOT_TRUSTED = "host_not_trusted"  # the launcher does not run jobs on this host
    HOST_NOT_YOURS = "host_not_yours"  # the host is registered with another agent token
    CLAIM_TAKEN = "claim_taken"  # another claim holds the job, or it finished, or moved
    CLAIM_SUPERSEDED = "claim_superseded"  # a report under a claim that is no longer current
    NOT_FOUND = "not_found"  # the evaluation does not exist (deleted)


# The refusals that mean the job is not, or no longer, this agent's: it drops the message.
NOT_OURS = frozenset(
    {
        Code.HOST_NOT_TRUSTED,
        Code.HOST_NOT_YOURS,
        Code.CLAIM_TAKEN,
        Code.CLAIM_SUPERSEDED,
        Code.NOT_FOUND,
    }
)


# -- the task and its queues --------------------------------------------------------------------

# The Celery task the hub sends (by name) and agents run: args [evaluation id, dispatch number].
TASK_NAME = "mlmodelscope.evaluate"

# -- devices ------------------------------------------------------------------------------------

CPU = "cpu"
GPU = "gpu"
DEVICES = (CPU, GPU)


def device_kind(device: str) -> str:
    """The hub's name (`cpu`, `gpu`) of a predictor's device (`cpu`, `cuda`, `cuda:N`)."""
    if device == CPU:
        return CPU
    if device == "cuda" or device.startswith("cuda:") or device == GPU:
        return GPU
    raise ProtocolError("device", f"must be cpu, gpu, cuda or cuda:N; got {device!r}")


def local_device(kind: str) -> str:
    """The predictor's device string for the hub's device kind."""
    if kind not in DEVICES:
        raise ProtocolError("device", f"must be one of {', '.join(DEVICES)}; got {kind!r}")
    return "cuda" if kind == GPU else CPU


def capability(framework: str, device: str) -> str:
    """What an agent offers, as the hub registers it: `onnxruntime.cpu`, `pytorch.gpu`."""
    return f"{framework}.{device_kind(device)}"


def host_queue(scope: str, host: str) -> str:
    """The queue only the agent of `host` consumes. `scope` is the host's: `pool` (the
    operators' shared pool), `group-<id>` or `user-<id>`."""
    return f"{scope}.host.{host}"


def capability_queue(scope: str, framework: str, device: str) -> str:
    """The queue every agent of `scope` that runs `framework` on `device` consumes
    (`pool.onnxruntime.cpu`, `user-7.pytorch.gpu`), so that Celery balances jobs among equal
    hosts that the same users trust. An agent never consumes another scope's queues."""
    return f"{scope}.{capability(framework, device)}"


def queue_scope(queue: str) -> str:
    """The scope a queue named by `host_queue` or `capability_queue` belongs to."""
    return queue.split(".", 1)[0]


# -- statuses -----------------------------------------------------------------------------------

QUEUED = "queued"
DISPATCHED = "dispatched"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STATUSES = (QUEUED, DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
FINISHED = (SUCCEEDED, FAILED, CANCELLED)

# -- trace levels -------------------------------------------------------------------------------

# Each level records what the ones before it do, and adds its own.
TRACE_LEVEL_MEANINGS: dict[str, str] = {
    "none": "no spans: the fastest run",
    "application": "pipeline stages: read, decode, preprocess, predict, postprocess",
    "model": "+ one span per batch inference",
    "framework": "+ one span per layer",
    "ml_library": "+ framework ops and kernels",
    "system_library": "+ CUDA runtime calls, GPU kernels, copies",
    "hardware": "+ GPU and CPU counters",
    "full": "everything",
}
TRACE_LEVELS = tuple(TRACE_LEVEL_MEANINGS)
# The levels a span can have (`Attr.LEVEL`), outermost first: a timeline track each.
SPAN_LEVELS = TRACE_LEVELS[1:-1]
# The levels whose spans are kernels and ops rather than layers.
KERNEL_LEVELS = ("ml_library", "system_library", "hardware")


def at_least(level: str, threshold: str) -> bool:
    """Whether trace level `level` records what level `threshold` records."""
    return TRACE_LEVELS.index(level) >= TRACE_LEVELS.index(threshold)


class Attr:
    """Span attribute keys."""

    LEVEL = "mlms.level"  # the trace level that records the span
    CLOCK = "mlms.clock"  # what its times were read from
    OP_TYPE = "mlms.op_type"
    LAYER_INDEX = "mlms.layer_index"
    LAYER_NAME = "mlms.layer_name"
    OUTPUT_SHAPE = "mlms.output_shape"
    INPUT_SHAPES = "mlms.input_shapes"
    DEVICE = "mlms.device"
    PROVIDER = "mlms.provider"
    PREDICTORS = "mlms.predictors"
    EVALUATION = "mlms.evaluation"
    ATTEMPT = "mlms.attempt"
    HOST = "mlms.host"
    CALL = "mlms.call"
    MODULE = "mlms.module"
    THREADS = "mlms.threads"
    MERGED = "mlms.merged"
    SHAPES = "mlms.shapes"
    CORRELATION_ID = "mlms.correlation_id"
    STREAM = "mlms.stream"
    LAUNCH = "mlms.launch"
    GRID = "mlms.grid"
    BLOCK = "mlms.block"
    SHARED_MEMORY = "mlms.shared_memory"
    REGISTERS_PER_THREAD = "mlms.registers_per_thread"
    ACHIEVED_OCCUPANCY_PCT = "mlms.achieved_occupancy_pct"
    BYTES = "mlms.bytes"
    BANDWIDTH_GBPS = "mlms.bandwidth_gbps"
    PARAMETER_BYTES = "mlms.parameter_bytes"
    OUTPUT_BYTES = "mlms.output_bytes"
    ACTIVATION_BYTES = "mlms.activation_bytes"
    MAIN_THREAD_WAIT_US = "mlms.main_thread_wait_us"
    MAIN_THREAD_RUN_US = "mlms.main_thread_run_us"
    # The batch size a span was measured at: on stage, batch, layer and kernel spans (the
    # evaluation loop's own attribute, without the `mlms.` prefix).
    BATCH_SIZE = "batch_size"
    # A hardware counter sample: a span of level `hardware` and op type `counter` whose numeric
    # attributes `mlms.counter.<name>` (the name ends in its unit: `gpu.power_w`) are the values
    # read at its start.
    COUNTER_PREFIX = "mlms.counter."


COUNTER_OP_TYPE = "counter"
COUNTER_LEVEL = "hardware"

# -- the job ------------------------------------------------------------------------------------


def _option(default: Any, help: str, **bounds: Any) -> Any:
    """A job option's default, with what the hub's launch request checks of it: `minimum`,
    `maximum`, `choices`, `nullable`, `pattern`; for lists `item` (int or str), `min_items`,
    `max_items`, `item_max_length`."""
    return field(default=default, metadata={"help": help, **bounds})


MAX_BATCH_SIZE = 65536
# How an evaluation drives the model: the fixed batches alone, or after them an MLPerf LoadGen
# scenario (`predictors.evaluation.loadgen`).
SCENARIOS = ("fixed", "single_stream", "multi_stream", "server", "offline")
DEFAULT_MIN_DURATION_MS = 1000
DEFAULT_MIN_QUERY_COUNT = 100
LOADGEN_MODES = ("performance", "accuracy")


def scenario_problem(options: Any) -> tuple[str, str] | None:
    """(option, why) where the LoadGen options do not fit the scenario (each LoadGen option
    applies to some scenarios only: one given elsewhere would do nothing); None where they
    fit. Shared by the hub's launch check, the CLI and the loop's options."""
    scenario = options.scenario
    given = {
        name
        for name in ("target_qps", "latency_bound_ms", "samples_per_query")
        if getattr(options, name) is not None
    }
    if options.find_peak_qps:
        given.add("find_peak_qps")
    # LoadGen's run length: given when other than its default.
    if options.min_duration_ms != DEFAULT_MIN_DURATION_MS:
        given.add("min_duration_ms")
    if options.min_query_count != DEFAULT_MIN_QUERY_COUNT:
        given.add("min_query_count")
    if options.loadgen_mode != "performance":
        given.add("loadgen_mode")
    if scenario == "fixed":
        if given:
            name = sorted(given)[0]
            return name, "applies to a LoadGen scenario; scenario is fixed (set scenario)"
        return None
    applies = {
        "single_stream": {"loadgen_mode"},
        "multi_stream": {"samples_per_query", "loadgen_mode"},
        "server": {"target_qps", "latency_bound_ms", "find_peak_qps", "loadgen_mode"},
        "offline": {"target_qps", "loadgen_mode"},
    }[scenario] | {"min_duration_ms", "min_query_count"}
    for name in sorted(given - applies):
        return name, f"does not apply to scenario {scenario}"
    if scenario == "server" and options.loadgen_mode == "performance":
        if options.latency_bound_ms is None:
            return "latency_bound_ms", "scenario server needs the latency bound its p99 keeps"
        if options.target_qps is None and not options.find_peak_qps:
            return "target_qps", "scenario server needs a target QPS (or find_peak_qps)"
    if options.find_peak_qps and options.loadgen_mode != "performance":
        return "find_peak_qps", "searches in performance mode only"
    return None


# With `target_ci`: the longest a batch size is timed for it, by default (seconds).
DEFAULT_TARGET_CI_SECONDS = 60.0


def target_ci_problem(options: Any) -> tuple[str, str] | None:
    """(option, why) where `target_ci` is not a share strictly between 0 and 1, or where
    `target_ci_seconds` is given (other than its default) without it; None where they fit.
    Shared by the hub's launch check, the CLI and the loop's options."""
    target = options.target_ci
    if target is not None:
        if isinstance(target, bool) or not isinstance(target, int | float):
            return "target_ci", f"must be a number; got {target!r}"
        if not (math.isfinite(target) and 0 < target < 1):
            return (
                "target_ci",
                f"must be a share more than 0 and less than 1 (0.02 is ±2 %); got {target}",
            )
    elif options.target_ci_seconds != DEFAULT_TARGET_CI_SECONDS:
        return "target_ci_seconds", "applies with target_ci only (set target_ci)"
    return None


def cold_start_problem(options: Any) -> tuple[str, str] | None:
    """("warmup", why) where a cold start is asked with a warm-up: a cold start times the first
    predictions. A request that leaves warmup out gets `default_warmup(cold_start)`."""
    if options.cold_start and options.warmup:
        return (
            "warmup",
            f"a cold start runs no warm-up; leave warmup out or set it to 0; got {options.warmup}",
        )
    return None


def parse_share(text: str) -> float:
    """A share as a person writes it: `2%`, `2 %` or `0.02` (all 0.02). ValueError saying what
    to write otherwise; the range is `target_ci_problem`'s to check."""
    written = text.strip()
    percent = written.endswith("%")
    number = written[:-1].strip() if percent else written
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a share: write e.g. 2% or 0.02") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a share: write e.g. 2% or 0.02")
    return value / 100 if percent else value


# The longest reason a status report may give (a failure's message, with custom code's
# traceback); `fit_reason` cuts a longer one in the middle.
MAX_REASON = 4000


def fit_reason(reason: str) -> str:
    """`reason`, cut in the middle to MAX_REASON characters when longer: its first lines say
    what failed, its last ones where."""
    if len(reason) <= MAX_REASON:
        return reason
    marker = "\n[… cut …]\n"
    keep = (MAX_REASON - len(marker)) // 2
    return reason[:keep] + marker + reason[-keep:]


@dataclass(frozen=True)
class JobOptions:
    """How the agent runs the evaluation loop. The hub's launch request takes these fields
    (each with its bounds below); the agent passes them to the loop by name."""

    split: str = _option(
        "validation", "the dataset split to evaluate", pattern=r"^[A-Za-z0-9._-]{1,64}$"
    )
    # At most what the hub's progress columns count (PostgreSQL integer: 2^31 - 1).
    limit: int | None = _option(
        None, "evaluate the first N inputs", minimum=1, maximum=2**31 - 1, nullable=True
    )
    batch_sizes: tuple[int, ...] = _option(
        (1,), "batch sizes to time, in order", minimum=1, maximum=MAX_BATCH_SIZE, max_items=16
    )
    # Two: TorchScript profiles its first run and compiles an optimized graph on the second.
    warmup: int = _option(
        2,
        "untimed predictions before timing (0 with cold_start, which times the first ones)",
        minimum=0,
        maximum=10000,
    )
    repeat: int = _option(1, "passes over the inputs, pooled", minimum=1, maximum=10000)
    seed: int = _option(0, "the seed of every random generator", minimum=0, maximum=2**32 - 1)
    threads: int | None = _option(
        None,
        "threads of each framework pool (default: the framework's)",
        minimum=1,
        maximum=1024,
        nullable=True,
    )
    cold_start: bool = _option(False, "time the first predictions: no warm-up")
    overrides: tuple[str, ...] = _option(
        (),
        "manifest parameters to override, PATH=VALUE, applied in order (as `mlms evaluate "
        "--set`), e.g. inputs.0.parameters.color_mode=BGR",
        item="str",
        min_items=0,
        max_items=8,
        item_max_length=120,
    )
    trace_level: str = _option("model", "what to trace", choices=TRACE_LEVELS)
    allow_label_mismatch: bool = _option(
        False,
        "run a trained model although its labels are not the dataset's (refused otherwise, "
        "naming both label sets); the result shows the mismatch",
    )
    latency_only: bool = _option(
        False,
        "time the model without scoring it: no labels are read and no accuracy is reported "
        "(for models whose outputs have no labels, such as embeddings, tasks the loop does not "
        "score, and datasets of any task); the result is kept off the accuracy leaderboards",
    )
    # MLPerf LoadGen (`predictors.evaluation.loadgen`): after the fixed batches, LoadGen drives
    # the loaded model in a scenario, and its summary and log are kept with the result.
    scenario: str = _option(
        "fixed",
        "how the model is driven after the fixed batches: fixed (the fixed batches alone) or "
        "an MLPerf LoadGen scenario (single_stream, multi_stream, server, offline)",
        choices=SCENARIOS,
    )
    target_qps: float | None = _option(
        None,
        "LoadGen: queries per second to send (server: required; offline: the expected rate)",
        number="float",
        minimum=0.01,
        maximum=1_000_000,
        nullable=True,
    )
    latency_bound_ms: float | None = _option(
        None,
        "LoadGen server: the latency its 99th percentile must stay under (required)",
        number="float",
        minimum=0.01,
        maximum=3_600_000,
        nullable=True,
    )
    min_duration_ms: int = _option(
        DEFAULT_MIN_DURATION_MS, "LoadGen: the shortest run, in ms", minimum=100, maximum=3_600_000
    )
    min_query_count: int = _option(
        DEFAULT_MIN_QUERY_COUNT,
        "LoadGen: the fewest queries a run sends",
        minimum=1,
        maximum=10_000_000,
    )
    samples_per_query: int | None = _option(
        None,
        "LoadGen multi_stream: the samples of each query (default 8)",
        minimum=1,
        maximum=MAX_BATCH_SIZE,
        nullable=True,
    )
    loadgen_mode: str = _option(
        "performance",
        "LoadGen: performance (time the queries) or accuracy (every sample once, scored)",
        choices=LOADGEN_MODES,
    )
    find_peak_qps: bool = _option(
        False,
        "LoadGen server: search for the highest target QPS LoadGen judges VALID (its p99 "
        "under latency_bound_ms); the result keeps every run and reports the one at the peak",
    )
    # Timing until the answer is known (`predictors.evaluation.target_ci`): past `repeat`
    # passes, a batch size is timed until the median's 95 % interval is within the share asked
    # (`predictors.statistics.median_interval_width`), or until `target_ci_seconds`.
    target_ci: float | None = _option(
        None,
        "time each batch size until the median's 95 % interval is within ± this share of the "
        "median (0.02: ±2 %), or until target_ci_seconds; null: the repeat passes only",
        number="float",
        nullable=True,
    )
    target_ci_seconds: float = _option(
        DEFAULT_TARGET_CI_SECONDS,
        "with target_ci: the longest a batch size is timed for it, in seconds, counted from the "
        "batch size's first read (its repeat passes always run)",
        number="float",
        minimum=0.1,
        maximum=3600,
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            _check_option(spec, getattr(self, spec.name))
        problem = scenario_problem(self) or target_ci_problem(self) or cold_start_problem(self)
        if problem:
            raise ProtocolError(*problem)

    def to_dict(self) -> dict[str, Any]:
        return {key: list(v) if isinstance(v, tuple) else v for key, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any, path: str = "options") -> JobOptions:
        data = _mapping(data, path)
        known = {spec.name for spec in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ProtocolError(f"{path}.{unknown[0]}", "unknown job option")
        values: dict[str, Any] = {
            key: tuple(v) if isinstance(v, list) else v for key, v in data.items()
        }
        try:
            return cls(**values)
        except ProtocolError as error:
            raise ProtocolError(f"{path}.{error.path}", error.message) from None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(spec.name for spec in fields(cls))


# The one default of every job option, by name: every entry point (the launch request and
# form, Reproduce, `mlms evaluate` here and with --hub, `mlms study`, reference results) and
# the loop's own options read it here.
JOB_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {spec.name: spec.default for spec in fields(JobOptions)}
)


def default_warmup(cold_start: bool) -> int:
    """The warm-up of a request that leaves it out: none for a cold start, else the job's
    default."""
    return 0 if cold_start else JOB_DEFAULTS["warmup"]


def _check_option(spec: Any, value: Any) -> None:
    meta = spec.metadata
    name = spec.name
    if value is None:
        if not meta.get("nullable"):
            raise ProtocolError(name, "must not be null")
        return
    default = spec.default
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ProtocolError(name, f"must be true or false; got {value!r}")
        return
    if isinstance(default, tuple):
        if not isinstance(value, tuple) or len(value) < meta.get("min_items", 1):
            raise ProtocolError(name, "must be a non-empty list")
        if len(value) > meta.get("max_items", len(value)):
            raise ProtocolError(name, f"must hold at most {meta['max_items']} items")
        if len(set(value)) != len(value):
            raise ProtocolError(name, f"names a value twice: {list(value)}")
        for item in value:
            if meta.get("item") == "str":
                _check_assignment(name, item, meta)
            else:
                _check_number(name, item, meta)
        return
    if isinstance(default, str) or "choices" in meta:
        if not isinstance(value, str):
            raise ProtocolError(name, f"must be a string; got {value!r}")
        if "choices" in meta and value not in meta["choices"]:
            raise ProtocolError(name, f"must be one of {', '.join(meta['choices'])}; got {value!r}")
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            raise ProtocolError(name, f"must match {meta['pattern']}; got {value!r}")
        return
    _check_number(name, value, meta)


def _check_assignment(name: str, value: Any, meta: Mapping[str, Any]) -> None:
    """A PATH=VALUE item."""
    if not isinstance(value, str) or "=" not in value or not value.partition("=")[0].strip():
        raise ProtocolError(name, f"each item is PATH=VALUE; got {value!r}")
    if len(value) > meta.get("item_max_length", len(value)):
        raise ProtocolError(name, f"an item is at most {meta['item_max_length']} characters")


def _check_number(name: str, value: Any, meta: Mapping[str, Any]) -> None:
    if meta.get("number") == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(name, f"must be a number; got {value!r}")
        if not math.isfinite(value):
            raise ProtocolError(name, f"must be a finite number; got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(name, f"must be an integer; got {value!r}")
    if "minimum" in meta and value < meta["minimum"]:
        raise ProtocolError(name, f"must be at least {meta['minimum']}; got {value}")
    if "maximum" in meta and value > meta["maximum"]:
        raise ProtocolError(name, f"must be at most {meta['maximum']}; got {value}")


@dataclass(frozen=True)
class ManifestRef:
    """A manifest as a job carries it: its identity and its YAML source."""

    id: int
    name: str
    version: str
    framework: str
    content_hash: str
    source: str

    @classmethod
    def from_dict(cls, data: Any, path: str) -> ManifestRef:
        data = _mapping(data, path)
        return cls(
            id=_get(data, path, "id", int),
            name=_get(data, path, "name", str),
            version=_get(data, path, "version", str),
            framework=_get(data, path, "framework", str),
            content_hash=_get(data, path, "content_hash", str),
            source=_get(data, path, "source", str),
        )


@dataclass(frozen=True)
class Job:
    """What a claim answers: the evaluation to run, under which claim, on which device."""

    id: str
    claim: str
    attempt: int
    device: str
    model: ManifestRef
    dataset: ManifestRef
    options: JobOptions
    trace_id: str | None = None
    parent_span_id: str | None = None
    # The request's limits for the evaluation's container ({"cpus": float | None,
    # "memory_mb": int | None}); None when it set none (`mlms agent --docker` applies them).
    limits: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.limits is not None:
            cpus, memory = self.limits.get("cpus"), self.limits.get("memory_mb")
            if set(self.limits) - {"cpus", "memory_mb"}:
                raise ProtocolError("limits", "takes cpus and memory_mb only")
            if cpus is not None and (
                isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0
            ):
                raise ProtocolError("limits.cpus", f"must be a positive number; got {cpus!r}")
            if memory is not None and (
                isinstance(memory, bool) or not isinstance(memory, int) or memory < 6
            ):
                raise ProtocolError(
                    "limits.memory_mb", f"must be an integer of at least 6; got {memory!r}"
                )
        if self.device not in DEVICES:
            raise ProtocolError(
                "device", f"must be one of {', '.join(DEVICES)}; got {self.device!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["options"] = self.options.to_dict()
        return values

    @classmethod
    def from_dict(cls, data: Any) -> Job:
        data = _mapping(data, "")
        return cls(
            id=_get(data, "", "id", str),
            claim=_get(data, "", "claim", str),
            attempt=_get(data, "", "attempt", int),
            device=_get(data, "", "device", str),
            model=ManifestRef.from_dict(data.get("model"), "model"),
            dataset=ManifestRef.from_dict(data.get("dataset"), "dataset"),
            options=JobOptions.from_dict(data.get("options")),
            trace_id=_get(data, "", "trace_id", str, optional=True),
            parent_span_id=_get(data, "", "parent_span_id", str, optional=True),
            limits=_get(data, "", "limits", dict, optional=True),
        )


# -- the result ---------------------------------------------------------------------------------

LATENCY_KEYS = ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms")


@dataclass(frozen=True)
class ResultUpload:
    """What an agent posts for a finished evaluation (with its claim beside it).

    `latency` and `throughput` are keyed by batch size (as a string, JSON's keys);
    `predictions` holds `top_k`, `labels`, `classes` and `probabilities` (one row per input);
    `details` the loop's full report."""

    accuracy: dict[str, Any]
    latency: dict[str, dict[str, Any]]
    throughput: dict[str, float]
    predictions: dict[str, Any]
    content_hash: str
    stack: dict[str, Any]
    details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ResultUpload:
        data = _mapping(data, "")
        known = {spec.name for spec in fields(cls)}
        unknown = sorted(set(data) - known - {"claim"})
        if unknown:
            raise ProtocolError(unknown[0], "unknown field")
        return cls(**{name: data[name] if name in data else _missing(name) for name in known})


def _missing(name: str) -> Any:
    raise ProtocolError(name, "is required")


def _mapping(data: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ProtocolError(path, f"must be an object; got {type(data).__name__}")
    return data


def _get(data: Mapping[str, Any], path: str, key: str, kind: type, optional: bool = False) -> Any:
    where = f"{path}.{key}" if path else key
    value = data.get(key)
    if value is None:
        if optional:
            return None
        raise ProtocolError(where, "is required")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ProtocolError(where, f"must be a {kind.__name__}; got {value!r}")
    return value


# -- what the evaluation loop runs ------------------------------------------------------------


# The tasks the evaluation loop scores, and the data inputs (fed from the dataset) it knows.
SCORED_TASKS = (
    "image_classification",
    "multi_label_classification",
    "regression",
    "sequence_labelling",
    "object_detection",
    "semantic_segmentation",
)
DETECTION_OUTPUTS = ("boxes", "scores", "classes")
# Tasks whose headline metrics (a result's `top1` and `top5`) are errors in the target's units,
# lower is better (every other task's are fractions from 0 to 1, higher is better).
LOWER_IS_BETTER = ("regression",)


# What a result's two headline metrics (`top1`, `top5`) hold, by task (top-1 and top-5 accuracy
# for every other).
METRIC_NAMES = {
    "sequence_labelling": ("Accuracy", "Top-5"),
    "object_detection": ("mAP", "mAP@.5"),
    "semantic_segmentation": ("mIoU", "Pixel accuracy"),
    "multi_label_classification": ("mAP", "F1 (micro)"),
    "regression": ("MAE", "RMSE"),
}
# Tasks whose scored results hold both metrics (where `top5` is never null).
BOTH_METRICS = (
    "object_detection",
    "semantic_segmentation",
    "multi_label_classification",
    "regression",
)


def metric_names(task: str) -> tuple[str, str]:
    """The names of a task's two headline metrics (`METRIC_NAMES`)."""
    return METRIC_NAMES.get(task, ("Top-1", "Top-5"))


def metric_text(task: str, value: float | None) -> str:
    """A headline metric in words: a percentage, or a regression's error as the number it is;
    "-" where there is none."""
    if value is None:
        return "-"
    return f"{value:.4g}" if task in LOWER_IS_BETTER else f"{value:.2%}"


def metrics_text(task: str, top1: float | None, top5: float | None) -> str:
    """A result's headline metrics in words, named by its task ("top-1 96.20%, top-5 99.10%",
    "MAE 46.82, RMSE 59.11"); a latency-only result's "latency only (not scored)"."""
    if top1 is None:
        return "latency only (not scored)"
    first, second = (n.lower() if n.startswith("Top") else n for n in metric_names(task))
    words = f"{first} {metric_text(task, top1)}"
    if top5 is not None:
        words += f", {second} {metric_text(task, top5)}"
    return words


def metric_problem(task: str, name: str, value: float | None) -> str | None:
    """Why a result's headline metric `name` (top1, top5) cannot be what its task reports."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        return f"{name} must be a finite number >= 0; got {value!r}"
    if task not in LOWER_IS_BETTER and value > 1:
        return f"{name} of a {task} result is a fraction from 0 to 1; got {value!r}"
    return None


# The scored output's types each task reads (detection and segmentation: see their checks).
_SCORED_OUTPUTS = {
    "image_classification": ("logits", "probabilities", "binary_probability", "binary_logit"),
    "sequence_labelling": ("logits", "probabilities", "binary_probability", "binary_logit"),
    # Each class through its own sigmoid (logits), or its own probability.
    "multi_label_classification": ("logits", "probabilities"),
    "regression": ("values",),
}
DATA_INPUTS = ("image", "tensor", "audio")


# The tasks LoadGen scenarios drive (one batched input per call; inputs of one shape):
# performance mode for these, accuracy mode for image classification alone.
LOADGEN_TASKS = ("image_classification", "multi_label_classification", "regression")


def loadgen_problem(
    data: Mapping[str, Any], scenario: str, mode: str = "performance", latency_only: bool = False
) -> str | None:
    """Why LoadGen cannot drive a model manifest (its data) in `scenario`, or None (also for
    the fixed scenario). The hub asks this at launch, and the loop again."""
    if scenario == "fixed":
        return None
    name, task = data.get("name"), data.get("task")
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    if any(i.get("type") in ("state", "constant") for i in inputs):
        return (
            f"{name} has state or constant inputs: LoadGen scenarios drive models of one "
            "batched input (scenario fixed runs streams)"
        )
    if not latency_only and task not in LOADGEN_TASKS:
        return (
            f"LoadGen scenarios drive {', '.join(LOADGEN_TASKS)} models (or any, latency only); "
            f"{name} is a {task} model"
        )
    if mode == "accuracy" and (latency_only or task != "image_classification"):
        return (
            "loadgen_mode accuracy scores image classification; "
            f"{name} is {'timed only' if latency_only else f'a {task} model'}"
        )
    binary = any(
        isinstance(o, Mapping) and o.get("type") in ("binary_logit", "binary_probability")
        for o in data.get("outputs") or []
    )
    if mode == "accuracy" and binary:
        return f"loadgen_mode accuracy scores multi-class outputs; {name} is a binary classifier"
    return None


def unsupported(data: Mapping[str, Any], *, latency_only: bool = False) -> str | None:
    """Why the evaluation loop cannot run a model manifest (its data) as it says, or None;
    `latency_only`: timed without scoring (`latency_only_problem`). The hub asks this at launch
    (a 400 rather than a run that fails), and the loop again before it runs."""
    name, kind, task = data.get("name"), data.get("kind"), data.get("task")
    if kind != "model":
        return f"{name} is a {kind} manifest, not a model"
    if latency_only:
        return latency_only_problem(data)
    outputs = [o for o in data.get("outputs") or [] if isinstance(o, Mapping)]
    if outputs and all(o.get("type") in ("tensor", "state") for o in outputs):
        return (
            f"{name}'s outputs are tensors, which are not scored (no labels): evaluate it for "
            "latency only (latency_only, mlms evaluate --latency-only)"
        )
    if task not in SCORED_TASKS:
        return (
            f"{name} is {'an' if str(task)[:1] in 'aeiou' else 'a'} {task} model; the "
            "evaluation loop scores "
            f"{', '.join(SCORED_TASKS[:-1])} and {SCORED_TASKS[-1]} models (instance "
            "segmentation scoring is not built yet); time it with latency_only"
        )
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    fed = [str(i.get("name")) for i in inputs if i.get("type") in DATA_INPUTS]
    if len(fed) != 1:
        return (
            f"{name} declares {len(fed)} inputs fed from the dataset (type image, tensor or "
            f"audio: "
            f"{', '.join(fed) or 'none'}); the evaluation loop feeds exactly one, besides "
            "constant and state inputs"
        )
    if task == "object_detection":
        return _unsupported_detector(str(name), data, inputs, outputs)
    if task == "semantic_segmentation":
        return _unsupported_segmenter(str(name), data, inputs, outputs)
    scored = [o for o in outputs if o.get("type") not in ("state", "tensor")]
    if len(scored) != 1:
        names = ", ".join(str(o.get("name")) for o in scored)
        return (
            f"{name} declares {len(scored)} scored outputs ({names}); the evaluation loop reads "
            "one: declare the others as state outputs, or leave them out"
        )
    stateful = [str(i.get("name")) for i in inputs if i.get("type") in ("state", "constant")]
    contexts = [
        str(i.get("name"))
        for i in inputs
        if isinstance(i.get("parameters"), Mapping) and "context" in i["parameters"]
    ]
    audio = [str(i.get("name")) for i in inputs if i.get("type") == "audio"]
    if audio and data.get("preprocess"):
        return (
            f"{name}'s input {audio[0]} is audio, framed by the streaming loop: custom "
            "preprocess code does not run on it (describe the processing with parameters)"
        )
    if audio and task != "sequence_labelling":
        return (
            f"{name}'s input {audio[0]} is audio, framed into chunks of a stream: only "
            "sequence_labelling models run on streams"
        )
    if contexts and task != "sequence_labelling":
        return (
            f"{name}'s input {contexts[0]} has a context window, which takes the input before "
            "it in a stream: only sequence_labelling models run on streams"
        )
    if task != "sequence_labelling":
        if stateful or len(outputs) != 1:
            return (
                f"{name} is an {task} model with constant or state inputs or state outputs "
                f"({', '.join(stateful) or 'outputs'}); the loop feeds those to "
                "sequence_labelling models, which run on ordered streams"
            )
    output_type = str(scored[0].get("type"))
    readable = _SCORED_OUTPUTS.get(str(task), _SCORED_OUTPUTS["image_classification"])
    if output_type not in readable:
        kinds = (
            readable[0] if len(readable) == 1 else f"{', '.join(readable[:-1])} or {readable[-1]}"
        )
        what = ", an object_detection output" if output_type in DETECTION_OUTPUTS else ""
        return (
            f"{name}'s output {scored[0].get('name')} is {output_type}{what}; "
            f"{'an' if str(task)[:1] in 'aeiou' else 'a'} {task} model's scored output is {kinds}"
        )
    elif (data.get("framework") or {}).get("name") == "tensorflow" and len(inputs) > 1:
        return (
            f"{name} is a tensorflow model of several inputs; the TensorFlow predictor feeds one "
            "input (export it to ONNX or TorchScript to run it with its state)"
        )
    return None


def latency_only_problem(data: Mapping[str, Any]) -> str | None:
    """Why a model cannot be timed without scoring, or None. A latency-only evaluation feeds
    one input from the dataset (an image or a tensor, in batches) and computes every output,
    whatever its task or its outputs' types; it reads no labels and scores nothing."""
    name = data.get("name")
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    if len(inputs) != 1 or inputs[0].get("type") not in ("image", "tensor"):
        kinds = ", ".join(f"{i.get('name')} ({i.get('type')})" for i in inputs) or "none"
        return (
            f"{name} takes the inputs {kinds}; a latency-only evaluation feeds one image or "
            "tensor input in batches (streams, with their constant and state inputs, are timed "
            "by their sequence_labelling evaluation)"
        )
    if data.get("postprocess"):
        return (
            f"{name}'s custom postprocess code reads the outputs for scoring, which a "
            "latency-only evaluation does not do: leave it out to time the model"
        )
    return None


def data_input_name(data: Mapping[str, Any]) -> str:
    """The name of the input fed from the dataset (the first of type image or tensor)."""
    inputs = data.get("inputs") or []
    fed = [i for i in inputs if isinstance(i, Mapping) and i.get("type") in DATA_INPUTS]
    return str((fed or inputs)[0]["name"])


def scored_output_name(data: Mapping[str, Any]) -> str:
    """The name of the output that is scored (the first that is not a state; a detector's
    classes, which name the labels)."""
    outputs = data.get("outputs") or []
    scored = [o for o in outputs if isinstance(o, Mapping) and o.get("type") == "classes"] or [
        o for o in outputs if isinstance(o, Mapping) and o.get("type") != "state"
    ]
    return str((scored or outputs)[0]["name"])


def _image_task_problem(
    name: str, task: str, what: str, data: Mapping[str, Any], inputs: list[Mapping[str, Any]]
) -> str | None:
    """The rules the detection and segmentation loops share: one image input, whose `what`
    (boxes, masks) is mapped back to the whole image through a resize and padding, not through
    a crop; no custom code (those loops do not run it)."""
    if len(inputs) != 1 or inputs[0].get("type") != "image":
        return f"{name} is an {task} model; the loop feeds it one image input"
    parameters = inputs[0].get("parameters")
    if isinstance(parameters, Mapping) and (
        parameters.get("crop_method") != "none" or parameters.get("keep_aspect_ratio")
    ):
        return (
            f"{name} is an {task} model whose input is cropped (crop_method or "
            f"keep_aspect_ratio): its {what} could not be mapped back to the whole image; "
            "resize (resize_side or resize_size) and pad instead"
        )
    code = [field for field in ("preprocess", "postprocess") if data.get(field)]
    if code:
        return (
            f"{name} is an {task} model with custom {' and '.join(code)} code, which the "
            "loop of its task does not run: describe the processing with parameters"
        )
    return None


def _unsupported_detector(
    name: str,
    data: Mapping[str, Any],
    inputs: list[Mapping[str, Any]],
    outputs: list[Mapping[str, Any]],
) -> str | None:
    """What the detection loop cannot run: it feeds one image input, and reads one output of
    each type boxes, scores and classes (`_image_task_problem` for the rest)."""
    problem = _image_task_problem(name, "object_detection", "boxes", data, inputs)
    if problem:
        return problem
    kinds = sorted(str(o.get("type")) for o in outputs)
    if kinds != sorted(DETECTION_OUTPUTS):
        return (
            f"{name} is an object_detection model with outputs of types {', '.join(kinds)}; "
            "the loop reads exactly one each of boxes, scores and classes"
        )
    if (data.get("framework") or {}).get("name") == "tensorflow":
        return (
            f"{name} is a tensorflow detector; the TensorFlow predictor reads one output "
            "(export it to ONNX or TorchScript)"
        )
    return None


def _unsupported_segmenter(
    name: str,
    data: Mapping[str, Any],
    inputs: list[Mapping[str, Any]],
    outputs: list[Mapping[str, Any]],
) -> str | None:
    """What the segmentation loop cannot run: one image input, one output of per-pixel
    logits or probabilities with its layout (`_image_task_problem` for the rest)."""
    problem = _image_task_problem(name, "semantic_segmentation", "masks", data, inputs)
    if problem:
        return problem
    if len(outputs) != 1 or outputs[0].get("type") not in ("logits", "probabilities"):
        kinds = ", ".join(str(o.get("type")) for o in outputs)
        return (
            f"{name} is a semantic_segmentation model with outputs of types {kinds}; the loop "
            "reads one output of per-pixel logits or probabilities"
        )
    parameters = outputs[0].get("parameters")
    if not isinstance(parameters, Mapping) or parameters.get("layout") not in ("NCHW", "NHWC"):
        return (
            f"{name}'s output {outputs[0].get('name')} needs parameters.layout (NCHW or NHWC): "
            "where a semantic_segmentation model's per-pixel class axis is"
        )
    return None
