"""The job options: each written once, with its default, bounds, help and where it applies;
the launch request, the form, the CLI, Reproduce and the loop are generated from `JobOptions`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from predictors.protocol.errors import ProtocolError, mapping
from predictors.protocol.vocabulary import TRACE_LEVEL_MEANINGS, TRACE_LEVELS

# -- the job ------------------------------------------------------------------------------------


MAX_BATCH_SIZE = 65536
# The most inputs whose layer outputs one evaluation captures (`capture_inputs`).
MAX_CAPTURED_INPUTS = 16
# How an evaluation drives the model: the fixed batches alone, or after them an MLPerf LoadGen
# scenario (`predictors.evaluation.scenarios.loadgen`).
SCENARIOS = ("fixed", "single_stream", "multi_stream", "server", "offline")
LOADGEN_SCENARIOS = SCENARIOS[1:]
LOADGEN_MODES = ("performance", "accuracy")
# Where the launch form shows an option: beside the dataset, beside the batch sizes, under
# "more" (the default), or with the LoadGen scenario (also the CLI's LoadGen group).
OPTION_GROUPS = ("data", "measurement", "more", "loadgen")


def _option(default: Any, help: str, *, label: str, group: str = "more", **more: Any) -> Any:
    """A job option: its default, `help` (where `{name}` names another option, as each entry
    point spells it: `describe`), the launch form's `label` and `group`, and the rest of its
    metadata. What the launch request checks: `minimum` and `maximum` (given as `bounds`),
    `choices`, `nullable` (where the default is null), `pattern`, `number` ("float"); for
    lists `item` (int or str), `min_items`, `max_items`, `item_max_length`. What the entry
    points read: `scenarios` (the LoadGen scenarios it applies to; else every scenario),
    `needs` (an option without which it does nothing), `unless` (an option with which it is
    off: its default is then 0), `unset` (what null means), `meanings` (each choice's),
    `written` ("share": 2% or 0.02), and the CLI's `flag` (where not --name-with-dashes),
    `part_of` (the flag it is written in) and `metavar`. The `help` kept is the API's text
    (`describe` with the names as they are)."""
    assert group in OPTION_GROUPS, group
    if "bounds" in more:
        more["minimum"], more["maximum"] = more.pop("bounds")
    meta = {"about": help, "label": label, "group": group, "nullable": default is None, **more}
    unset = f" (null: {meta['unset']})" if "unset" in meta else ""
    return field(default=default, metadata={**meta, "help": _described(meta, str) + unset})


def _described(meta: Mapping[str, Any], refer: Any, meanings: bool = True) -> str:
    class Names(dict[str, str]):
        def __missing__(self, name: str) -> str:
            return str(refer(name))

    text = str(meta["about"]).format_map(Names())
    scenarios = meta.get("scenarios")
    if scenarios:
        which = "" if tuple(scenarios) == LOADGEN_SCENARIOS else " " + ", ".join(scenarios)
        text = f"LoadGen{which}: {text}"
    if meanings and meta.get("meanings"):
        text += " (" + "; ".join(f"{k}: {v}" for k, v in meta["meanings"].items()) + ")"
    return text


def describe(spec: Any, refer: Any, meanings: bool = True) -> str:
    """The help of job option `spec` (a field of `JobOptions`), each option it names spelled
    by `refer(name)` (a flag, a label), after the LoadGen scenarios it applies to and, with
    `meanings`, followed by each choice's meaning."""
    return _described(spec.metadata, refer, meanings)


def inert(name: str, values: Mapping[str, Any]) -> bool:
    """Whether job option `name` does nothing where the options are `values` (by name; a
    value left out is unset): the option it `needs` is unset, or the one it is off `unless`
    is set."""
    meta = JobOptions.__dataclass_fields__[name].metadata
    needs, unless = meta.get("needs"), meta.get("unless")
    return bool(needs and values.get(needs) in (None, "")) or bool(unless and values.get(unless))


def scenario_problem(options: Any) -> tuple[str, str] | None:
    """(option, why) where the LoadGen options do not fit the scenario (each LoadGen option
    applies to the `scenarios` its field names: one given elsewhere would do nothing); None
    where they fit. Shared by the hub's launch check, the CLI and the loop's options."""
    scenario = options.scenario
    # Given: other than its default.
    applies = {
        spec.name: spec.metadata["scenarios"]
        for spec in fields(JobOptions)
        if "scenarios" in spec.metadata and getattr(options, spec.name) != spec.default
    }
    if scenario == "fixed":
        if applies:
            name = sorted(applies)[0]
            return name, "applies to a LoadGen scenario; scenario is fixed (set scenario)"
        return None
    for name in sorted(name for name, where in applies.items() if scenario not in where):
        return name, f"does not apply to scenario {scenario}"
    if scenario == "server" and options.loadgen_mode == "performance":
        if options.latency_bound_ms is None:
            return "latency_bound_ms", "scenario server needs the latency bound its p99 keeps"
        if options.target_qps is None and not options.find_peak_qps:
            return "target_qps", "scenario server needs a target QPS (or find_peak_qps)"
    if options.find_peak_qps and options.loadgen_mode != "performance":
        return "find_peak_qps", "searches in performance mode only"
    return None


def target_ci_problem(options: Any) -> tuple[str, str] | None:
    """(option, why) where `target_ci` is not a share strictly between 0 and 1, or where an
    option that `needs` another (`target_ci_seconds`) is given (other than its default)
    without it; None where they fit. Shared by the hub's launch check, the CLI and the loop's
    options."""
    target = options.target_ci
    if target is not None:
        if isinstance(target, bool) or not isinstance(target, int | float):
            return "target_ci", f"must be a number; got {target!r}"
        if not (math.isfinite(target) and 0 < target < 1):
            return (
                "target_ci",
                f"must be a share more than 0 and less than 1 (0.02 is ±2 %); got {target}",
            )
    for spec in fields(JobOptions):
        needs = spec.metadata.get("needs")
        given = getattr(options, spec.name) != spec.default
        if needs and given and getattr(options, needs) is None:
            return spec.name, f"applies with {needs} only (set {needs})"
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


@dataclass(frozen=True)
class JobOptions:
    """How the agent runs the evaluation loop. The hub's launch request takes these fields
    (each with its bounds below); the agent passes them to the loop by name."""

    split: str = _option(
        "validation",
        "the dataset split to evaluate",
        label="Split",
        group="data",
        part_of="--dataset",
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
    )
    # At most what the hub's progress columns count (PostgreSQL integer: 2^31 - 1).
    limit: int | None = _option(
        None,
        "evaluate the first N inputs",
        label="Limit",
        group="data",
        unset="the whole split",
        bounds=(1, 2**31 - 1),
    )
    batch_sizes: tuple[int, ...] = _option(
        (1,),
        "batch sizes to time, in order",
        label="Batch sizes",
        group="measurement",
        metavar="N[,N...]",
        bounds=(1, MAX_BATCH_SIZE),
        max_items=16,
    )
    # Two: TorchScript profiles its first run and compiles an optimized graph on the second.
    warmup: int = _option(
        2,
        "untimed predictions before each batch size's timed ones (0 with {cold_start}, which "
        "times the first ones)",
        label="Warm-up",
        unless="cold_start",
        bounds=(0, 10000),
    )
    repeat: int = _option(
        1,
        "timed passes over the inputs at each batch size, pooled",
        label="Repetitions",
        bounds=(1, 10000),
    )
    seed: int = _option(
        0, "the seed of every random generator", label="Seed", bounds=(0, 2**32 - 1)
    )
    threads: int | None = _option(
        None,
        "intra-op threads of the framework (inter-op: 1)",
        label="Threads",
        unset="the framework's own",
        bounds=(1, 1024),
    )
    cold_start: bool = _option(
        False,
        "time the first predictions, with no warm-up ({warmup} must then be left out or 0)",
        label="Cold start",
    )
    overrides: tuple[str, ...] = _option(
        (),
        "manifest parameters to override, PATH=VALUE, applied in order and checked against the "
        "manifest like an upload, e.g. inputs.0.parameters.color_mode=BGR",
        label="Processing overrides",
        flag="--set",
        metavar="PATH=VALUE",
        item="str",
        min_items=0,
        max_items=8,
        item_max_length=120,
    )
    trace_level: str = _option(
        "model",
        "what to trace; each level adds to the ones before it",
        label="Trace level",
        group="measurement",
        choices=TRACE_LEVELS,
        meanings=TRACE_LEVEL_MEANINGS,
    )
    allow_label_mismatch: bool = _option(
        False,
        "run a trained model although its labels are not the dataset's (refused otherwise, "
        "naming both label sets); the result shows the mismatch",
        label="Allow a label mismatch",
        group="data",
    )
    latency_only: bool = _option(
        False,
        "time the model without scoring it: no labels are read and no accuracy is reported "
        "(for models whose outputs have no labels, such as embeddings, tasks the loop does not "
        "score, and datasets of any task); the result is kept off the accuracy leaderboards",
        label="Latency only",
        group="data",
    )
    # MLPerf LoadGen (`predictors.evaluation.scenarios.loadgen`): after the fixed batches,
    # LoadGen drives the loaded model in a scenario, and its summary and log are kept with the
    # result.
    scenario: str = _option(
        "fixed",
        "how the model is driven after the fixed batches",
        label="Scenario",
        group="loadgen",
        choices=SCENARIOS,
        meanings={
            "fixed": "the fixed batches alone",
            "single_stream": "LoadGen SingleStream, one sample per query",
            "multi_stream": "LoadGen MultiStream, several samples per query",
            "server": "LoadGen Server, queries at a target rate under a latency bound",
            "offline": "LoadGen Offline, every sample at once",
        },
    )
    target_qps: float | None = _option(
        None,
        "queries per second to send (server: required unless {find_peak_qps}; offline: the "
        "expected rate)",
        label="Target QPS",
        group="loadgen",
        scenarios=("server", "offline"),
        metavar="QPS",
        number="float",
        bounds=(0.01, 1_000_000),
    )
    latency_bound_ms: float | None = _option(
        None,
        "the latency its 99th percentile must stay under, in ms (required)",
        label="Latency bound (ms)",
        group="loadgen",
        scenarios=("server",),
        metavar="MS",
        number="float",
        bounds=(0.01, 3_600_000),
    )
    min_duration_ms: int = _option(
        1000,
        "the shortest run, in ms",
        label="Minimum duration (ms)",
        group="loadgen",
        scenarios=LOADGEN_SCENARIOS,
        metavar="MS",
        bounds=(100, 3_600_000),
    )
    min_query_count: int = _option(
        100,
        "the fewest queries a run sends",
        label="Minimum queries",
        group="loadgen",
        scenarios=LOADGEN_SCENARIOS,
        bounds=(1, 10_000_000),
    )
    samples_per_query: int | None = _option(
        None,
        "the samples of each query",
        label="Samples per query",
        group="loadgen",
        scenarios=("multi_stream",),
        unset="8",
        bounds=(1, MAX_BATCH_SIZE),
    )
    loadgen_mode: str = _option(
        "performance",
        "what the run measures",
        label="LoadGen mode",
        group="loadgen",
        scenarios=LOADGEN_SCENARIOS,
        choices=LOADGEN_MODES,
        meanings={"performance": "time the queries", "accuracy": "every sample once, scored"},
    )
    find_peak_qps: bool = _option(
        False,
        "search for the highest target QPS LoadGen judges VALID (its p99 under "
        "{latency_bound_ms}); the result keeps every run and reports the one at the peak",
        label="QPS search",
        group="loadgen",
        scenarios=("server",),
    )
    # Timing until the answer is known (`predictors.evaluation.target_ci`): past `repeat`
    # passes, a batch size is timed until the median's 95 % interval is within the share asked
    # (`predictors.statistics.median_interval_width`), or until `target_ci_seconds`.
    target_ci: float | None = _option(
        None,
        "past the {repeat} passes, time each batch size until the median's 95 % interval is "
        "within ± this share of the median (2% or 0.02: ±2 %), or until {target_ci_seconds}",
        label="Target interval",
        unset="the repeat passes only",
        written="share",
        metavar="SHARE",
        number="float",
    )
    target_ci_seconds: float = _option(
        60.0,
        "with {target_ci}: the longest a batch size is timed for it, in seconds, counted from "
        "the batch size's first read (its repeat passes always run)",
        label="Time bound (s)",
        needs="target_ci",
        metavar="S",
        number="float",
        bounds=(0.1, 3600),
    )
    cooldown_ms: int = _option(
        0,
        "a pause before each batch size after the first, in ms, so that the device's clocks "
        "and temperature settle between batch sizes",
        label="Cool-down (ms)",
        metavar="MS",
        bounds=(0, 600_000),
    )

    # The first divergence (`predictors.analysis.divergence`): every layer's output of a few
    # chosen inputs, kept with the result.
    capture_inputs: tuple[int, ...] = _option(
        (),
        "dataset indices (from 0) of inputs whose every layer's output is captured after the "
        "timed batches and kept with the result, to find where two runs part",
        label="Capture layer outputs of inputs",
        metavar="I[,I...]",
        bounds=(0, 2**31 - 1),
        min_items=0,
        max_items=MAX_CAPTURED_INPUTS,
    )

    def __post_init__(self) -> None:
        for spec in fields(JobOptions):  # a subclass's own fields are its own to check
            _check_option(spec, getattr(self, spec.name))
        problem = scenario_problem(self) or target_ci_problem(self) or cold_start_problem(self)
        if problem:
            raise ProtocolError(*problem)

    def to_dict(self) -> dict[str, Any]:
        return {key: list(v) if isinstance(v, tuple) else v for key, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any, path: str = "options") -> JobOptions:
        data = mapping(data, path)
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


# The options that shape what the model computes, kept when a job is run again to capture its
# layer outputs (`capture_run`); every other option only drives or times it.
COMPUTING_OPTIONS = (
    "split",
    "seed",
    "threads",
    "overrides",
    "allow_label_mismatch",
    "latency_only",
)


def capture_run(options: Mapping[str, Any], inputs: tuple[int, ...]) -> JobOptions:
    """The job options that run a job again to capture the layer outputs of `inputs`: its
    `COMPUTING_OPTIONS` as it ran, one input timed at batch size 1 with no warm-up and no
    trace, and every other option its default. ProtocolError naming an option at fault."""
    kept: dict[str, Any] = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in options.items()
        if name in COMPUTING_OPTIONS
    }
    kept.update(batch_sizes=(1,), limit=1, warmup=0, trace_level="none", capture_inputs=inputs)
    return JobOptions(**kept)


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
