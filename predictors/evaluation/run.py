"""`evaluate`: one model, one dataset split, one framework, several batch sizes.

Its steps: prepare (check the manifests and the options, fetch the split, read the labels,
choose the job's scenario and its readers), load the model, measure (the scenario, batch size
after batch size, then its follow-up), and report (the tracing overhead, the theoretical work,
the hygiene warnings, the result).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from predictors.analysis import flops, roofline
from predictors.analysis.hygiene import Watch, overhead_warnings, tracing_overhead
from predictors.evaluation.base import ModelSpec, Progress, Scenario, Setup
from predictors.evaluation.capture import capture_layers, capture_problem
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.report import Evaluation, Measured, result_of
from predictors.evaluation.scenarios import follow_up_for, scenario_for
from predictors.evaluation.sinks import SpanList, SpanSink
from predictors.frameworks.feeds import SeveralFeeds
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    predictor_class,
)
from predictors.manifests import Manifest, apply_overrides, versioning
from predictors.manifests.formats import model_format
from predictors.processing import load_labels, preprocessor_for
from predictors.processing.columns import ColumnsPreprocessor, columns_preprocessor
from predictors.processing.ctc import load_charset
from predictors.processing.custom_code import (
    MAX_CODE_FILES,
    RUNS_WHERE,
    CustomCode,
    CustomPreprocessor,
    code_files_problems,
    code_in,
    fields_with_code,
)
from predictors.processing.labels import REFUSAL_HINT as LABEL_HINT
from predictors.processing.labels import is_untrained
from predictors.processing.labels import mismatch as label_mismatch
from predictors.processing.text import TextFeeds
from predictors.protocol import at_least
from predictors.tasks import (
    data_input_name,
    data_inputs,
    dataset_problem,
    loadgen_problem,
    scored_output,
    trace_level_problem,
    unsupported,
)
from predictors.tracing.counters import CounterSampler

__all__ = ["Fetch", "evaluate", "split_entry"]

Fetch = Callable[[str, str | None], Path]
"""`fetch(url, sha256)`: a local file for a manifest's URL (e.g. `DataManager.fetch`)."""


@dataclass
class _Job:
    """What `evaluate` knows before the model loads."""

    setup: Setup
    scenario: type[Scenario]
    split: dict[str, Any]  # the split's manifest entry
    predictor_type: type[Predictor]
    software: dict[str, Any]
    readers: list[Any]  # one per batch size
    total: int  # the predictions to make (progress)


@dataclass
class _Loaded:
    """The model loaded, its files, and when the load started and ended (perf_counter)."""

    predictor: Predictor
    graph_file: Path
    weights_file: Path | None
    start_ns: int
    end_ns: int


def evaluate(
    model: Manifest,
    dataset: Manifest,
    options: EvaluationOptions,
    fetch: Fetch,
    *,
    progress: Progress | None = None,
    cancelled: Callable[[], bool] | None = None,
    sink: SpanSink | None = None,
) -> Evaluation:
    """Evaluate `model` on a split of `dataset` (see `predictors.evaluation` for the loop).

    The spans go to `sink` as the loop goes (an agent's sink exports them, so that no span is
    held twice); by default they are kept, in `Evaluation.spans`."""
    kept = SpanList()  # the spans, where no sink is given
    started = datetime.now(UTC)
    job = _prepare(model, dataset, options, fetch)
    # The machine's state from here to the end of the run (`hygiene`).
    watch = Watch.start()
    random.seed(options.seed)
    np.random.seed(options.seed)
    loaded = _load(job, fetch)
    measured = _measure(job, loaded, watch, progress, cancelled, kept if sink is None else sink)
    result = _report(job, loaded, measured, watch, started)
    first = measured.loop.first
    assert first is not None
    return Evaluation(
        result=result,
        outputs=first.outputs,
        labels=first.labels,
        predictions=first.predictions,
        spans=kept.spans,
        detections=measured.loop.detections,
        capture=measured.capture,
    )


def _prepare(model: Manifest, dataset: Manifest, options: EvaluationOptions, fetch: Fetch) -> _Job:
    """Check the model (with the job's overrides), the framework, the device and the labels;
    fetch the split; choose the job's scenario, and its readers."""
    if options.overrides:
        model = apply_overrides(model.data, list(options.overrides))
    spec = _model_spec(model, options.latency_only)
    problem = (
        dataset_problem(model.data, dataset.data)
        or loadgen_problem(model.data, options.scenario, options.loadgen_mode, options.latency_only)
        or trace_level_problem(model.data, options.trace_level, options.latency_only)
    )
    if problem:
        raise EvaluationError(problem)
    split = split_entry(dataset, options.split)
    split_file = fetch(split["path"], split.get("sha256"))
    predictor_type = predictor_class(model.framework)
    software = predictor_type.software()
    _check_version(model, software["version"])
    predictor_type.check_device(options.device)
    custom = _custom_code(model, options, fetch)
    # Several inputs from the dataset's columns: each preprocessed by its own, packed.
    preprocessor: Any = columns_preprocessor(
        data_inputs(model.data), lambda entry: preprocessor_for(entry, fetch)
    ) or preprocessor_for(spec.input, fetch, TextFeeds.of(model.data["inputs"]))
    if custom is not None and "preprocess" in custom.functions:
        preprocessor = CustomPreprocessor(preprocessor, custom)
    labels, dataset_labels = _labels(model, dataset, spec, options, fetch)
    scenario = scenario_for(model.task, options.latency_only)
    scenario.check_trace_level(options.trace_level, model.task)
    setup = Setup(
        model,
        dataset,
        options,
        spec,
        labels,
        dataset_labels,
        preprocessor,
        split_file,
        custom,
        fetch,
    )
    if options.capture_inputs:
        problem = capture_problem(model.data, preprocessor)
        if problem:
            raise EvaluationError(problem)
        rows = int(split.get("count", 2**62))
        beyond = [index for index in options.capture_inputs if index >= rows]
        if beyond:
            raise EvaluationError(
                f"capture_inputs: input {beyond[0]} is beyond the {options.split} split's "
                f"{split['count']} rows"
            )
    readers, total = scenario.readers(setup)
    if readers[0].count == 0:
        raise EvaluationError(f"the {options.split} split of {dataset.name} has no rows")
    return _Job(setup, scenario, split, predictor_type, software, readers, total)


def _labels(
    model: Manifest, dataset: Manifest, spec: ModelSpec, options: EvaluationOptions, fetch: Fetch
) -> tuple[list[str], list[str] | None]:
    """The model's labels and the dataset's (None where it names none), checked. Labels are
    read to score; a latency-only evaluation reads none (its outputs may have none)."""
    if options.latency_only:
        return [], None

    def fetch_labels(url: str) -> Path:
        return fetch(url, None)

    dataset_labels = (
        load_labels(dataset.data, fetch_labels)
        if "labels" in dataset.data or "labels_path" in dataset.data
        else None
    )
    if spec.output_type == "embedding":
        # An embedding has no classes: the dataset's labels name its inputs' identities.
        if dataset_labels is None:
            raise EvaluationError(
                f"{dataset.name} {dataset.version} names no labels: embeddings are scored by "
                "identity, which a feature_extraction dataset's labels name"
            )
        return dataset_labels, dataset_labels
    if spec.output_type == "token_ids":
        # Emitted ids have no classes: the tokenizer file names them (and decodes them).
        return [], dataset_labels
    # A ctc output's labels are its charset's symbols (`predictors.processing.ctc`).
    labels = (
        load_charset(spec.output_parameters, fetch)
        if spec.output_type == "ctc"
        else load_labels(spec.output_parameters, fetch_labels)
    )
    _check_labels(model, dataset, labels, dataset_labels, options)
    return labels, dataset_labels


def _load(job: _Job, fetch: Fetch) -> _Loaded:
    """Fetch the model's files and load it, timed."""
    spec, options = job.setup.spec, job.setup.options
    graph_file = fetch(spec.graph_path, spec.graph_sha256)
    weights_file = fetch(spec.weights_path, spec.weights_sha256) if spec.weights_path else None
    predictor = _predictor(job)
    start = time.perf_counter_ns()
    predictor.load(
        job.setup.model, _predictor_options(options, graph_file, weights_file, options.trace_level)
    )
    return _Loaded(predictor, graph_file, weights_file, start, time.perf_counter_ns())


def _predictor(job: _Job) -> Predictor:
    """A predictor of the job's framework; of a model fed several inputs from each text, or
    from several columns, the one that takes each packed batch apart into them
    (`SeveralFeeds`)."""
    predictor = job.predictor_type()
    preprocessor = job.setup.preprocessor
    if isinstance(preprocessor, ColumnsPreprocessor):
        return SeveralFeeds(predictor, preprocessor)
    feeds = TextFeeds.of(job.setup.model.data["inputs"])
    return predictor if feeds is None else SeveralFeeds(predictor, feeds)


def _untraced(job: _Job, loaded: _Loaded) -> Predictor:
    """The model loaded again as the run loaded it, but tracing nothing (the calibration of
    the tracing overhead)."""
    untraced = _predictor(job)
    options = _predictor_options(job.setup.options, loaded.graph_file, loaded.weights_file, "none")
    untraced.load(job.setup.model, options)
    return untraced


def _predictor_options(
    options: EvaluationOptions, graph_file: Path, weights_file: Path | None, trace_level: str
) -> PredictorOptions:
    return PredictorOptions(
        graph_file=graph_file,
        weights_file=weights_file,
        device=options.device,
        threads=options.threads,
        seed=options.seed,
        trace_level=trace_level,
        graph_optimization=options.graph_optimization,
    )


def _measure(
    job: _Job,
    loaded: _Loaded,
    watch: Watch,
    progress: Progress | None,
    cancelled: Callable[[], bool] | None,
    sink: SpanSink,
) -> Measured:
    """Drive the loaded model with the job's scenario, batch size after batch size, then with
    its follow-up; the predictor is closed at the end, whatever happens."""
    setup, predictor = job.setup, loaded.predictor
    options, model = setup.options, setup.model
    sampler = None
    loop: Scenario | None = None
    try:
        loop = job.scenario(setup, predictor, job.total, progress, cancelled, sink)
        loop.stage_span("load", loaded.start_ns, loaded.end_ns, {})
        if at_least(options.trace_level, "hardware"):
            sampler = CounterSampler(
                options.device, attributes={"framework": model.framework, "model": model.name}
            )
            sampler.start()
        watch.timing()
        per_batch_size = _batch_sizes(loop, job.readers, setup.preprocessor, predictor)
        if sampler is not None:
            loop.spans.extend(sampler.stop())
        settings = predictor.settings()
        predictor.stop_tracing()
        if loop.layers:
            loop.add_layer_spans(predictor.take_layers())
        profiler = predictor.trace_summary()
        loop.flush()
        followed = _follow_up(loop, job, per_batch_size, cancelled)
        captured = capture_layers(setup, predictor)
    except BaseException:
        # A cancelled or failed run: what it measured so far goes to the sink all the same.
        if loop is not None:
            _flush_measured(loop, predictor, sampler)
        raise
    finally:
        if sampler is not None:
            sampler.stop()
        predictor.close()
    load_ns = loaded.end_ns - loaded.start_ns
    return Measured(loop, per_batch_size, settings, profiler, followed, sampler, load_ns, captured)


def _batch_sizes(
    loop: Scenario, readers: list[Any], preprocessor: Any, predictor: Predictor
) -> list[dict[str, Any]]:
    """Each batch size's summary; its spans go to the sink when it ends."""
    per_batch_size = []
    streams_layers = loop.layers and predictor.layers_as_they_come()
    for index, reader in enumerate(readers):
        if index and loop.options.cooldown_ms:  # the device's clocks settle in between
            time.sleep(loop.options.cooldown_ms / 1000)
        per_batch_size.append(loop.run(reader, preprocessor))
        if streams_layers:
            loop.add_layer_spans(predictor.take_layers())  # this batch size's layers
        loop.flush()  # this batch size's spans
    return per_batch_size


def _follow_up(
    loop: Scenario,
    job: _Job,
    per_batch_size: list[dict[str, Any]],
    cancelled: Callable[[], bool] | None,
) -> dict[str, Any]:
    """What drives the same model after the scenario (an MLPerf LoadGen scenario, by the job
    option `scenario`): its answer under its result key; nothing for the fixed batches alone."""
    options = job.setup.options
    follow_up = follow_up_for(options.scenario)
    if follow_up is None:
        return {}
    smallest = min(per_batch_size, key=lambda entry: entry["batch_size"])
    answer = follow_up.drive(
        loop,
        job.readers[0],
        job.setup.preprocessor,
        options,
        start_qps=max(1.0, smallest["throughput_ips"] / 2),
        measured_qps=max(entry["throughput_ips"] for entry in per_batch_size),
        cancelled=cancelled,
    )
    return {follow_up.key: answer}


def _flush_measured(loop: Scenario, predictor: Predictor, sampler: CounterSampler | None) -> None:
    """Write what a cancelled or failed run measured so far to the sink."""
    if loop.layers and predictor.layers_as_they_come():
        try:
            loop.add_layer_spans(predictor.take_layers())
        except EvaluationError:
            pass  # the calls traced and the batches timed part ways: no layers
    if sampler is not None:
        loop.spans.extend(sampler.stop())
    loop.flush()


def _report(
    job: _Job, loaded: _Loaded, measured: Measured, watch: Watch, started: datetime
) -> dict[str, Any]:
    """The result: with the tracing overhead, the theoretical work and the hygiene warnings."""
    setup, loop = job.setup, measured.loop
    options, model = setup.options, setup.model
    overhead = tracing_overhead(loop, measured.per_batch_size[0], lambda: _untraced(job, loaded))
    feeds = TextFeeds.of(model.data["inputs"])
    # Parameters and multiply-adds per layer at the shape fed, the FLOP/s achieved, and where
    # they sit on the roofline of this framework on this device at the run's threads.
    theoretical = roofline.attach(
        flops.theoretical(
            model.framework,
            loaded.graph_file,
            setup.spec.input["name"],
            loop.sample,
            measured.per_batch_size,
            file_format=model_format(model.data),
            windowed=bool(getattr(setup.preprocessor, "windowed", False)),
            input_names=feeds.names if feeds is not None else (),
            columns=setup.preprocessor.names
            if isinstance(setup.preprocessor, ColumnsPreprocessor)
            else (),
        ),
        options.device,
        model.framework,
        options.threads,
        loop.sample,
    )
    hygiene = (
        watch.finish(options.threads)
        + [warning for entry in measured.per_batch_size for warning in entry["hygiene"]]
        + overhead_warnings(overhead)
    )
    return result_of(
        setup,
        measured,
        split=job.split,
        software=job.software,
        predictor_type=job.predictor_type,
        overhead=overhead,
        theoretical=theoretical,
        hygiene=hygiene,
        started=started,
    ).to_dict()


def split_entry(dataset: Manifest, split: str) -> dict[str, Any]:
    """The manifest entry of a dataset split (`path`, `sha256`, `count`), checked."""
    if dataset.kind != "dataset":
        raise EvaluationError(f"{dataset.name} is a {dataset.kind} manifest, not a dataset")
    if dataset.data.get("format") != "parquet":
        raise EvaluationError(
            f"dataset {dataset.name} is in {dataset.data.get('format')!r} format; the loop "
            "reads parquet"
        )
    splits = dataset.data["splits"]
    if split not in splits:
        raise EvaluationError(
            f"dataset {dataset.name} {dataset.version} has no split {split!r} "
            f"(it has {', '.join(splits)})"
        )
    entry: dict[str, Any] = splits[split]
    return entry


def _model_spec(model: Manifest, latency_only: bool = False) -> ModelSpec:
    problem = unsupported(model.data, latency_only=latency_only)
    if problem:
        raise EvaluationError(problem)
    # The input fed from the dataset, and the output scored (whose parameters name the labels).
    fed = data_input_name(model.data)
    data_input = next(entry for entry in model.data["inputs"] if entry["name"] == fed)
    output = scored_output(model.data)
    files = model.data["model"]
    return ModelSpec(
        input=data_input,
        output_type=output["type"],
        output_parameters=output.get("parameters") or {},
        graph_path=files["graph_path"],
        graph_sha256=files.get("graph_sha256"),
        weights_path=files.get("weights_path"),
        weights_sha256=files.get("weights_sha256"),
    )


def _custom_code(model: Manifest, options: EvaluationOptions, fetch: Fetch) -> CustomCode | None:
    """The manifest's custom processing code, compiled in the sandbox with its files
    (`_code_files`); None when it has none. Refused where it would not run (outside a
    container whose agent opts in)."""
    fields = code_in(model.data)
    if not fields:
        return None
    if not options.custom_code:
        raise EvaluationError(
            f"{model.name} {model.version} has custom {' and '.join(fields)} code, and "
            f"{RUNS_WHERE}; here it would not run, so the evaluation is refused rather than "
            "run without it"
        )
    if not fields_with_code(model.data):
        return None  # a state dict's module source only: the predictor runs it
    return CustomCode(
        model.data, call_seconds=options.custom_code_seconds, files=_code_files(model, fetch)
    )


def _code_files(model: Manifest, fetch: Fetch) -> dict[str, str]:
    """The manifest's `code_files`, fetched: the local path of each, by name. A file over the
    limits (`custom_code.code_files_problems`: an https:// file the hub could not measure) is
    refused, naming its field."""
    entries = [entry for entry in model.data.get("code_files") or [] if isinstance(entry, dict)]
    if len(entries) > MAX_CODE_FILES:
        raise EvaluationError(
            f"code_files: {model.name} {model.version} names {len(entries)} code files; at "
            f"most {MAX_CODE_FILES} are allowed"
        )
    paths = [fetch(str(entry["path"]), entry.get("sha256")) for entry in entries]
    problems = code_files_problems([(i, path.stat().st_size) for i, path in enumerate(paths)])
    if problems:
        index, problem = problems[0]
        raise EvaluationError(f"code_files.{index}.path ({entries[index]['path']}): {problem}")
    return {str(entry["name"]): str(path) for entry, path in zip(entries, paths, strict=True)}


def _check_labels(
    model: Manifest,
    dataset: Manifest,
    labels: list[str],
    dataset_labels: list[str] | None,
    options: EvaluationOptions,
) -> None:
    """A trained model whose labels are not the dataset's is refused unless the options allow
    it (`predictors.processing.labels`); the result's notes show an allowed mismatch."""
    if options.allow_label_mismatch or dataset_labels is None:
        return
    if is_untrained(model.data):
        return
    problem = label_mismatch(
        f"{model.name} {model.version}", labels, f"{dataset.name} {dataset.version}", dataset_labels
    )
    if problem:
        raise EvaluationError(f"{problem}. {LABEL_HINT}")


def _check_version(model: Manifest, version: str) -> None:
    if not versioning.satisfies(version, model.framework_range):
        raise PredictorError(
            f"{model.name} {model.version} needs {model.framework} {model.framework_range}, "
            f"but {model.framework} {version} is installed"
        )
