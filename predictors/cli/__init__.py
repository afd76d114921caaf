"""`mlms`: evaluate a model locally, from the manifests in a folder and the files in an artifact
store, with no hub.

    mlms evaluate MODEL --framework F[,F...] --dataset NAME[:SPLIT] [options]

Results go to stdout (a table, or JSON with `--format json`), the progress bar to stderr. A
mistake of the user (an unknown model, a version range nothing satisfies, a bad `--set`, a file
missing from the store, …) is one line on stderr and exit status 1 (2 for malformed arguments),
never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from predictors import statistics
from predictors.agent.hub_client import HubError, HubUnreachable
from predictors.analysis import study
from predictors.analysis.flops import si
from predictors.cli import datasets as datasets_cli
from predictors.cli import flops as flops_cli
from predictors.cli import history as history_cli
from predictors.data import DataManager
from predictors.evaluation import (
    GRAPH_OPTIMIZATIONS,
    USER_ERRORS,
    Evaluation,
    EvaluationCancelled,
    EvaluationOptions,
    compare,
    evaluate,
    split_entry,
)
from predictors.evaluation.target_ci import target_ci_text
from predictors.frameworks.predictor import predictor_class, registered
from predictors.host import introspection
from predictors.manifests import Manifest, ManifestError, apply_overrides, load_file
from predictors.manifests.catalog import DEFAULT_ROOT, Catalog, CatalogError
from predictors.protocol import (
    JOB_DEFAULTS,
    LOADGEN_MODES,
    SCENARIOS,
    TRACE_LEVELS,
    JobOptions,
    ProtocolError,
    default_warmup,
    device_kind,
    metrics_text,
    parse_share,
)
from predictors.tracing.chrome import chrome_trace, rows_of_spans
from predictors.zoo.build import default_store

__all__ = ["main"]

PROG = "mlms"


class UsageError(Exception):
    """Arguments that cannot be run as given (exit status 2)."""


class CommandError(Exception):
    """Something the user can fix, other than the arguments' syntax (exit status 1)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, not the usage text plus a line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="Evaluate models here (from the manifests under manifests/) or on a hub "
        "(--hub), and serve a hub's evaluations on this host (mlms agent).",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser(
        "evaluate",
        help="evaluate a model's accuracy and latency in one or more frameworks",
        description="Evaluate MODEL on a dataset split in each framework given, at each batch "
        "size, and compare the frameworks input by input.",
    )
    run.add_argument("model", metavar="MODEL", help="model name, e.g. digits-cnn")
    run.add_argument(
        "--version", default="*", metavar="RANGE", help="npm version range (default: *)"
    )
    run.add_argument(
        "--framework",
        required=True,
        metavar="F[,F...]",
        help=f"comma-separated frameworks ({', '.join(registered())}), or 'all' for every "
        "framework the model has a manifest for",
    )
    run.add_argument(
        "--dataset",
        required=True,
        metavar="NAME[:SPLIT]",
        help="dataset name and split (default split: validation); locally also a dataset "
        "manifest file, FILE.yaml[:SPLIT] (what `mlms datasets from-folder` writes)",
    )
    run.add_argument(
        "--dataset-version", default="*", metavar="RANGE", help="dataset version range"
    )
    run.add_argument(
        "--batch-sizes",
        default=_BATCH_SIZES,
        metavar="N[,N...]",
        help=f"comma-separated (default: {_BATCH_SIZES})",
    )
    run.add_argument("--limit", type=_count(1), metavar="N", help="evaluate the first N inputs")
    run.add_argument(
        "--device", default="cpu", metavar="cpu|cuda[:N]", help="where to run (default: cpu)"
    )
    run.add_argument(
        "--warmup",
        type=_count(0),
        default=None,
        metavar="N",
        help="untimed predictions before each batch size's timed ones (default: "
        f"{JOB_DEFAULTS['warmup']}, 0 with --cold-start)",
    )
    run.add_argument(
        "--cold-start",
        action="store_true",
        help="time the first predictions: no warm-up (--warmup must then be left out or 0)",
    )
    run.add_argument(
        "--repeat",
        type=_count(1),
        default=JOB_DEFAULTS["repeat"],
        metavar="N",
        help=f"timed passes over the inputs at each batch size (default: {JOB_DEFAULTS['repeat']})",
    )
    run.add_argument(
        "--target-ci",
        type=_share,
        metavar="SHARE",
        help="past the --repeat passes, time each batch size until the median's 95%% interval "
        "is within ± SHARE of it (2%% or 0.02), or until --target-ci-seconds; the result says "
        "which stopped it",
    )
    run.add_argument(
        "--target-ci-seconds",
        type=_positive_number,
        default=JOB_DEFAULTS["target_ci_seconds"],
        metavar="S",
        help="with --target-ci: the longest a batch size is timed, counted from its first read "
        f"(default: {JOB_DEFAULTS['target_ci_seconds']:g})",
    )
    run.add_argument(
        "--threads",
        type=_count(1),
        metavar="N",
        help="intra-op threads of every framework, inter-op 1 (default: the frameworks' own)",
    )
    run.add_argument(
        "--seed", type=_count(0), default=JOB_DEFAULTS["seed"], metavar="N", help="random seed"
    )
    run.add_argument(
        "--trace-level",
        choices=TRACE_LEVELS,
        default=JOB_DEFAULTS["trace_level"],
        help="each level adds to the ones before it: none; application: pipeline stages "
        "(load, read, preprocess, warm-up, predict, postprocess); model: one span per timed batch "
        "(default); framework: one per layer; ml_library: framework ops and kernels; "
        "system_library: CUDA runtime calls, GPU kernels and copies (PyTorch on a GPU); "
        "hardware: CPU and GPU counters; full: also op input shapes",
    )
    run.add_argument(
        "--graph-optimization",
        choices=GRAPH_OPTIMIZATIONS,
        help="ONNX Runtime's graph optimization level (none: no fusion, one layer span per "
        "graph node); default: ONNX Runtime's own (all)",
    )
    run.add_argument(
        "--trace-file", type=Path, metavar="PATH", help="write the spans as a Chrome trace"
    )
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a manifest field, e.g. inputs.0.parameters.color_mode=BGR (repeatable; "
        "with --hub, sent as the launch's overrides)",
    )
    run.add_argument(
        "--allow-label-mismatch",
        action="store_true",
        help="run a trained model although its labels are not the dataset's (refused "
        "otherwise, naming both label sets); the result notes the mismatch",
    )
    run.add_argument(
        "--latency-only",
        action="store_true",
        help="time the model without scoring it: no labels are read, no accuracy is reported "
        "(for models whose outputs have no labels, tasks the loop does not score, and datasets "
        "of any task); every output is computed in each call",
    )
    loadgen = run.add_argument_group(
        "MLPerf LoadGen",
        "after the fixed batches, LoadGen drives the loaded model in a scenario; its summary "
        "(VALID/INVALID and why) is printed and kept with the result",
    )
    loadgen.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=JOB_DEFAULTS["scenario"],
        help="fixed: the fixed batches alone (default); single_stream, multi_stream, server, "
        "offline: LoadGen's scenarios",
    )
    loadgen.add_argument(
        "--target-qps",
        type=_positive_number,
        metavar="QPS",
        help="server: queries per second to send (required unless --find-peak-qps); "
        "offline: the expected rate",
    )
    loadgen.add_argument(
        "--latency-bound-ms",
        type=_positive_number,
        metavar="MS",
        help="server: the latency the 99th percentile must stay under (required)",
    )
    loadgen.add_argument(
        "--min-duration-ms",
        type=_count(100),
        default=JOB_DEFAULTS["min_duration_ms"],
        metavar="MS",
        help=f"the shortest LoadGen run (default: {JOB_DEFAULTS['min_duration_ms']})",
    )
    loadgen.add_argument(
        "--min-query-count",
        type=_count(1),
        default=JOB_DEFAULTS["min_query_count"],
        metavar="N",
        help=f"the fewest queries a LoadGen run sends (default: {JOB_DEFAULTS['min_query_count']})",
    )
    loadgen.add_argument(
        "--samples-per-query",
        type=_count(1),
        metavar="N",
        help="multi_stream: samples per query (default: 8)",
    )
    loadgen.add_argument(
        "--loadgen-mode",
        choices=LOADGEN_MODES,
        default=JOB_DEFAULTS["loadgen_mode"],
        help="performance (default) or accuracy: every sample sent once, and scored",
    )
    loadgen.add_argument(
        "--find-peak-qps",
        action="store_true",
        help="server: search for the highest target QPS LoadGen judges VALID (its p99 "
        "under --latency-bound-ms), report that run and print the curve it walked",
    )
    run.add_argument("--format", choices=("table", "json"), default="table")
    run.add_argument(
        "--manifests",
        type=Path,
        default=DEFAULT_ROOT,
        metavar="DIR",
        help=f"folder of manifests (default: {DEFAULT_ROOT})",
    )
    run.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"artifact store folder (default: $ARTIFACT_ROOT or {default_store()})",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument(
        "--hub",
        metavar="URL",
        help="submit to this hub and follow the run live, instead of running here",
    )
    run.add_argument(
        "--token",
        metavar="T",
        default=os.environ.get("MLMS_TOKEN"),
        help="API token with the 'evaluate' scope, for --hub (default: $MLMS_TOKEN)",
    )
    run.add_argument(
        "--hosts",
        choices=("one", "all"),
        default="one",
        help="with --hub: run on one matching host, or on every one (default: one)",
    )
    history_cli.add_commands(commands)
    datasets_cli.add_commands(commands)
    study.add_commands(commands)
    flops_cli.add_commands(commands)
    commands.add_parser(
        "agent",
        help="serve evaluations for a hub on this host (see `mlms agent --help`)",
        add_help=False,
    )
    return parser


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def _share(text: str) -> float:
    """`--target-ci`: 2%, 2 % or 0.02; more than 0 and less than 1 (100 %)."""
    try:
        value = parse_share(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} is not a share more than 0 and less than 100% (write e.g. 2% or 0.02)"
        )
    return value


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


# The default of --batch-sizes, as it is written.
_BATCH_SIZES = ",".join(str(size) for size in JOB_DEFAULTS["batch_sizes"])

# The flag of each job option whose flag is not named after it.
_FLAGS = {"split": "--dataset", "overrides": "--set"}


def job_options(args: argparse.Namespace, *, overrides: bool = True) -> JobOptions:
    """The job options the command line spells, here and with --hub alike: each flag left out
    takes its one default (`predictors.protocol.JOB_DEFAULTS`; the warm-up, none for a cold
    start), checked as the hub checks them. UsageError naming the flag at fault. Without
    `overrides`, the --set items are left out (a local run checks them against the manifest
    as it applies them)."""
    _, split = _dataset(args.dataset)
    given = {
        # An option without a flag takes its default (tests/predictors/test_cli.py checks
        # that every job option has one).
        name: getattr(args, name, JOB_DEFAULTS[name])
        for name in JobOptions.names()
    }
    given.update(
        split=split,
        batch_sizes=_batch_sizes(args.batch_sizes),
        overrides=tuple(args.overrides) if overrides else (),
        warmup=default_warmup(args.cold_start) if args.warmup is None else args.warmup,
    )
    try:
        return JobOptions(**given)
    except ProtocolError as error:
        flag = _FLAGS.get(error.path, f"--{error.path.replace('_', '-')}")
        raise UsageError(f"{flag}: {error.message}") from None


def _batch_sizes(text: str) -> tuple[int, ...]:
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) < 1:
            raise UsageError(f"--batch-sizes: {item!r} is not a positive integer (write e.g. 1,32)")
        sizes.append(int(item))
    if len(set(sizes)) != len(sizes):
        raise UsageError(f"--batch-sizes: {text!r} names a batch size twice")
    return tuple(sizes)


def _frameworks(text: str, catalog: Catalog, model: str, version: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return catalog.model_frameworks(model, version)
    if not names:
        raise UsageError("--framework: name at least one framework")
    for name in names:
        if name not in registered():
            raise UsageError(
                f"--framework: unknown framework {name!r} (known: {', '.join(registered())})"
            )
    if len(set(names)) != len(names):
        raise UsageError(f"--framework: {text!r} names a framework twice")
    return names


def _dataset(text: str) -> tuple[str, str]:
    name, _, split = text.partition(":")
    if not name:
        raise UsageError(f"--dataset: {text!r} has no dataset name (write NAME[:SPLIT])")
    return name, split or JOB_DEFAULTS["split"]


def _dataset_manifest(catalog: Catalog, name: str, version_range: str) -> Manifest:
    """The catalog's dataset `name`, or the dataset manifest file `name` names (.yaml)."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name)
        if not path.is_file():
            raise CommandError(f"--dataset: no manifest file {name}")
        return load_file(path, kind="dataset")
    return catalog.find_dataset(name, version_range)


def _override(model: Manifest, overrides: list[str]) -> Manifest:
    if not overrides:
        return model
    try:
        return apply_overrides(model.data, overrides)
    except ManifestError as exc:
        where = f"{model.name} {model.version} ({model.framework})"
        raise CommandError(f"--set on {where}: {exc}") from None


def _check_store(store: Path, manifests: list[Manifest], split: str) -> None:
    """Every repo:// file the evaluation reads must be in the store (fail before running)."""
    if not store.is_dir():
        raise CommandError(
            f"the artifact store {store} does not exist: build the zoo with "
            f"`python -m predictors.zoo build --store {store}` or pass --store"
        )
    for manifest in manifests:
        for field, relative in manifest.repo_paths():
            if (
                manifest.kind == "dataset"
                and field.startswith("splits.")
                and field.split(".")[1] != split
            ):
                continue
            if not (store / relative).is_file():
                raise CommandError(
                    f"{manifest.kind} file repo://{relative} ({manifest.name} {manifest.version}"
                    f" {field}) is not in the artifact store {store}: build it with "
                    f"`python -m predictors.zoo build --store {store}`"
                )


def local_options(args: argparse.Namespace) -> EvaluationOptions:
    """The loop's options for `mlms evaluate` here: the job options (`job_options`) and what
    only a local run sets (the device's index, ONNX Runtime's graph optimization). The
    overrides are applied to the manifests before (`_override`), not again by the loop."""
    return EvaluationOptions.from_job(
        job_options(args, overrides=False),
        device=args.device,
        graph_optimization=args.graph_optimization,
    )


def run_evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Find the manifests, evaluate each framework in turn, compare them; the JSON report."""
    # Every flag is checked before anything is looked up.
    options = local_options(args)
    dataset_name, split = _dataset(args.dataset)
    catalog = Catalog(args.manifests)
    frameworks = _frameworks(args.framework, catalog, args.model, args.version)
    models = [
        _override(catalog.find_model(args.model, args.version, name), args.overrides)
        for name in frameworks
    ]
    dataset = _dataset_manifest(catalog, dataset_name, args.dataset_version)
    split_entry(dataset, split)
    store = (args.store or default_store()).resolve()
    _check_store(store, [*models, dataset], split)
    fetch = DataManager(store_dir=store).fetch
    for model in models:
        predictor_class(model.framework).check_device(options.device)

    evaluations: list[Evaluation] = []
    for model in models:
        with _progress_bar(model.framework, disable=args.no_progress) as progress:
            evaluations.append(evaluate(model, dataset, options, fetch, progress=progress))
    comparisons = [compare(a, b) for a, b in itertools.combinations(evaluations, 2)]
    if args.trace_file is not None:
        spans = [span for e in evaluations for span in e.spans]
        document = chrome_trace(rows_of_spans(spans))
        args.trace_file.write_text(json.dumps(document), encoding="utf-8")
    return {
        "model": {"name": args.model, "version_range": args.version},
        "dataset": {"name": dataset.name, "version": dataset.version, "split": split},
        "overrides": list(args.overrides),
        "results": [e.result for e in evaluations],
        "comparisons": comparisons,
        "stack": introspection.stack(frameworks),
    }


@contextlib.contextmanager
def _progress_bar(label: str, *, disable: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A `progress(done, total)` callback for the loop that draws a tqdm bar on stderr."""
    if disable:
        yield None
        return
    from tqdm import tqdm

    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=label, unit="batch", file=sys.stderr)
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        if bar is not None:
            bar.close()


# -- output ----------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _scores(entry: dict[str, Any], task: str | None) -> list[str]:
    accuracy = entry["accuracy"]
    if accuracy is None:  # latency only: nothing scored
        return ["-"]
    if task == "object_detection":
        sizes = entry.get("input_sizes") or {}
        shown = "-"
        if sizes:
            low, high = sizes["smallest"][-2:], sizes["largest"][-2:]
            shown = f"{sizes['distinct']}: {low[0]}x{low[1]}..{high[0]}x{high[1]}"
        return [f"{accuracy['map']:.4f}", f"{accuracy['map_50']:.4f}", shown]
    if task == "semantic_segmentation":
        return [
            f"{accuracy['miou']:.4f}",
            f"{accuracy['pixel_accuracy']:.2%}",
            f"{accuracy['mean_class_accuracy']:.2%}",
        ]
    if task == "multi_label_classification":
        return [
            f"{accuracy['map']:.4f}",
            f"{accuracy['f1_micro']:.4f}",
            f"{accuracy['exact_match']:.2%}",
        ]
    if task == "regression":
        r2 = accuracy.get("r2")
        return [
            f"{accuracy['mae']:.4g}",
            f"{accuracy['rmse']:.4g}",
            "-" if r2 is None else f"{r2:.4f}",
        ]
    if task != "sequence_labelling":
        top5 = accuracy.get("top5")
        return [f"{accuracy['top1']:.2%}", "-" if top5 is None else f"{top5:.2%}"]
    reset = entry.get("accuracy_state_reset")
    auc = accuracy.get("roc_auc")
    return [
        f"{accuracy['top1']:.2%}",
        f"{reset['top1']:.2%}" if reset else "-",
        f"{accuracy['f1']:.4f}",
        "-" if auc is None else f"{auc:.4f}",
    ]


def format_table(report: dict[str, Any]) -> str:
    results = report["results"]
    first = results[0]
    dataset = first["dataset"]
    out = [
        f"{first['model']['name']} {first['model']['version']} on {dataset['name']} "
        f"{dataset['version']}:{dataset['split']} ({dataset['count']} inputs), "
        f"device {first['device']}, clock: {first['clock']}",
    ]
    if report["overrides"]:
        out.append("overrides: " + " ".join(report["overrides"]))
    # Sequence labelling: frame accuracy with the state carried (and reset at every call, for
    # a stateful model), F1 and ROC AUC, in place of top-1 and top-5.
    # Object detection: COCO's mAP (IoU .50:.95), mAP at IoU .50, and the input sizes.
    # Multi-label: mAP, micro F1 and exact matches; regression: MAE, RMSE and R².
    task = first["model"].get("task")
    scores = (
        ["accuracy"]
        if first["accuracy"] is None
        else ["accuracy", "state reset", "F1", "ROC AUC"]
        if task == "sequence_labelling"
        else ["mAP", "mAP@.5", "input sizes"]
        if task == "object_detection"
        else ["mIoU", "pixel acc", "class acc"]
        if task == "semantic_segmentation"
        else ["mAP", "F1 micro", "exact"]
        if task == "multi_label_classification"
        else ["MAE", "RMSE", "R2"]
        if task == "regression"
        else ["top1", "top5"]
    )
    rows = [
        [
            "framework",
            "version",
            "batch",
            *scores,
            "median ms",
            "95 % CI",
            "p90 ms",
            "p99 ms",
            "mean ms",
            "min ms",
            "max ms",
            "std ms",
            "inputs/s",
        ],
    ]
    for result in results:
        for entry in result["batch_sizes"]:
            latency = entry["latency"]
            rows.append(
                [
                    result["framework"]["name"],
                    result["framework"]["version"],
                    str(entry["batch_size"]),
                    *_scores(entry, task),
                    *(
                        text[key]
                        for text in [statistics.latency_text(latency)]
                        for key in (
                            "p50",
                            "p50_interval",
                            "p90",
                            "p99",
                            "mean",
                            "min",
                            "max",
                            "std",
                        )
                    ),
                    statistics.per_second(entry["throughput_ips"]),
                ]
            )
    out += ["", _table(rows)]
    if report["comparisons"]:
        rows = [["frameworks", "", "top-1 agreement", "differ", "max |Δ output|"]]
        for comparison in report["comparisons"]:
            a, b = comparison["frameworks"]
            rows.append(
                [
                    f"{a} vs {b}",
                    "",
                    "-"
                    if comparison["top1_agreement"] is None
                    else f"{comparison['top1_agreement']:.2%}",
                    "-"
                    if comparison["top1_disagreements"] is None
                    else f"{comparison['top1_disagreements']} of {comparison['count']}",
                    "-"
                    if comparison["max_abs_diff"] is None
                    else f"{comparison['max_abs_diff']:.3g}",
                ]
            )
        out += ["", _table(rows)]
    stack = report["stack"]
    cpu = stack["cpu"]
    out += [
        "",
        f"host: {cpu['model']}, {cpu['usable_cores']} usable cores, "
        f"{stack['memory_bytes'] / 2**30:.1f} GiB, {stack['os']['platform']}, "
        f"Python {stack['python']['version']}"
        + "".join(f", GPU {gpu['name']}" for gpu in stack["gpus"]),
    ]
    for result in results:
        settings = {k: v for k, v in result["settings"].items() if v is not None}
        shown = ", ".join(f"{k} {v}" for k, v in settings.items())
        out.append(f"{result['framework']['name']}: {shown}")
        out += _target_ci_lines(result["framework"]["name"], result["batch_sizes"])
        out += [f"note: {note}" for note in result["notes"]]
        out += [
            f"warning ({warning['code']}): {warning['message']}"
            for warning in result.get("hygiene") or []
        ]
        theoretical = result.get("theoretical") or {}
        if theoretical.get("counted"):
            achieved = ", ".join(
                f"{a['gflops_per_s']:.2f} GFLOP/s at batch size {a['batch_size']}"
                for a in theoretical["achieved"]
            )
            out.append(
                f"{result['framework']['name']}: {si(theoretical['macs'])} multiply-adds "
                f"and {theoretical['params']:,} parameters per input; achieved {achieved} "
                "(mlms flops lists the layers)"
            )
        if result.get("loadgen"):
            out += ["", *format_loadgen(result["framework"]["name"], result["loadgen"])]
    return "\n".join(out)


def _target_ci_lines(label: str, entries: list[dict[str, Any]]) -> list[str]:
    """A line per batch size timed toward a target_ci: why its timing stopped."""
    return [
        f"{label}: batch size {entry['batch_size']}: "
        + (entry["target_ci"].get("text") or target_ci_text(entry["target_ci"]))
        for entry in entries
        if entry.get("target_ci")
    ]


def format_loadgen(framework: str, loadgen: dict[str, Any]) -> list[str]:
    """LoadGen's verdict and the run it is of, why an INVALID run is, LoadGen's warnings and
    errors apart from its notes, its summary as it wrote it, the accuracy of an accuracy run,
    and the curve of a QPS search with the reported run marked: the verdict, target, summary
    and marked row are all the reported run's."""
    settings = loadgen["settings"]
    verdict = {True: "VALID", False: "INVALID", None: "no performance verdict (an accuracy run)"}
    heading = (
        f"LoadGen {settings['scenario']} ({framework}, {settings['mode']} mode, "
        f"{settings['samples']} samples): " + verdict[loadgen["valid"]]
    )
    if settings.get("target_qps") is not None:
        heading += f", target {_qps(settings['target_qps'])} QPS"
    lines = [heading]
    reported = loadgen.get("reported")
    search = loadgen.get("search")
    if search and reported:
        lines.append(f"QPS search: showing {reported['statement']}.")
    lines += [f"INVALID: {reason}" for reason in loadgen.get("invalid_reasons") or []]
    for problem in loadgen.get("problems") or []:
        times = f" (x{problem['count']})" if problem["count"] > 1 else ""
        lines.append(f"LoadGen {problem['level']} ({problem['key']}): {problem['message']}{times}")
    notes = loadgen.get("notes")
    if notes is None:  # a result kept before notes were read apart
        notes = [f"Early stopping: {line}" for line in loadgen.get("early_stopping") or []]
    lines += [f"note: {note}" for note in notes]
    lines.append(loadgen["summary_text"].rstrip())
    accuracy = loadgen.get("accuracy")
    if accuracy:
        top5 = accuracy.get("top5")
        lines.append(
            f"LoadGen accuracy: top-1 {accuracy['top1']:.4f}"
            + (f", top-5 {top5:.4f}" if isinstance(top5, float) else "")
            + f" over {accuracy['samples']} samples"
        )
    if search:
        peak = search["peak_qps"]
        held = search.get("highest_held_qps")
        lines += [
            "",
            f"QPS search (p99 under {search['latency_bound_ms']} ms): "
            + (
                f"peak {_qps(peak)} QPS, the highest target LoadGen judged VALID"
                if peak is not None
                else "no run was VALID"
            ),
        ]
        if held is not None and (peak is None or held > peak):
            above: dict[str, Any] = next(
                (p for p in search["curve"] if p["target_qps"] == held), {}
            )
            why = "; ".join(above.get("invalid_reasons") or [])
            lines.append(
                f"The p99 also held at {_qps(held)} QPS (run {above.get('run', '?')}), a run "
                "LoadGen judged INVALID" + (f": {why}" if why else ".")
            )
        rows = [["run", "target QPS", "completed QPS", "p99 ms", "p99 held", "LoadGen", "shown"]]
        for point in search["curve"]:
            rows.append(
                [
                    str(point.get("run", "")),
                    _qps(point["target_qps"]),
                    f"{point['completed_qps']:.2f}" if point["completed_qps"] is not None else "—",
                    f"{point['p99_ms']:.3f}" if point["p99_ms"] is not None else "—",
                    "yes" if point["latency_held"] else "no",
                    {True: "VALID", False: "INVALID", None: "—"}[point["valid"]],
                    "<- reported" if point.get("reported") else "",
                ]
            )
        lines.append(_table(rows))
    return lines


def _qps(value: float) -> str:
    """A QPS as the result's statement writes it: at most three decimals, no trailing zeros."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


# -- entry point -----------------------------------------------------------------------------


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return status


def remote_request(args: argparse.Namespace) -> dict[str, Any]:
    """The `POST /api/v1/evaluations/` body for `mlms evaluate … --hub`."""
    if not args.token:
        raise UsageError("--hub needs --token (or $MLMS_TOKEN), a token with the 'evaluate' scope")
    for flag, value in (
        ("--graph-optimization", args.graph_optimization),
        ("--trace-file", args.trace_file),
        ("--store", args.store),
    ):
        if value is not None:
            raise UsageError(
                f"{flag} works only locally: the hub's agents run the job (the trace is on the "
                "evaluation's timeline page, and its Chrome trace at "
                "/api/v1/evaluations/<id>/trace?format=chrome)"
            )
    if args.device not in ("cpu", "cuda"):
        raise UsageError(
            f"--device: with --hub, use cpu or cuda, not {args.device!r} (the hub's host picks "
            "the GPU)"
        )
    frameworks = [f.strip() for f in args.framework.split(",") if f.strip()]
    if len(frameworks) != 1:
        raise UsageError("--framework: with --hub, name exactly one framework per evaluation")
    dataset, _ = _dataset(args.dataset)
    # The job options, checked here as the hub checks them (`predictors.protocol`).
    options = job_options(args)
    return {
        "model": args.model,
        "model_version": args.version,
        "framework": frameworks[0],
        "dataset": dataset,
        "dataset_version": args.dataset_version,
        "device": device_kind(args.device),
        "hosts": args.hosts,
        **options.to_dict(),
    }


def run_remote(args: argparse.Namespace) -> dict[str, Any]:
    """Submit to the hub, show each status change and the progress, return the evaluations."""
    from predictors.agent.hub_client import evaluate_remote

    request = remote_request(args)
    bars: dict[str, Any] = {}

    def on_update(evaluation: dict[str, Any]) -> None:
        key, progress = evaluation["id"], evaluation["progress"]
        if args.no_progress:
            print(
                f"{key[:8]} {evaluation['status']} {progress['done']}/{progress['total']}",
                file=sys.stderr,
            )
            return
        from tqdm import tqdm

        bar = bars.get(key)
        if bar is None:
            bar = bars[key] = tqdm(total=progress["total"] or None, unit="pred", file=sys.stderr)
        if progress["total"]:
            bar.total = progress["total"]
        bar.n = progress["done"]
        bar.set_description(
            f"{key[:8]} {evaluation.get('host') or ''} {evaluation['status']}".strip()
        )
        bar.refresh()

    try:
        finished = evaluate_remote(args.hub, args.token, request, on_update=on_update)
    finally:
        for bar in bars.values():
            bar.close()
    failed = [e for e in finished if e["status"] != "succeeded"]
    if failed:
        reasons = "; ".join(f"{e['id'][:8]} {e['status']}: {e.get('reason') or ''}" for e in failed)
        raise CommandError(reasons)
    return {"hub": args.hub, "evaluations": finished}


def format_remote(report: dict[str, Any]) -> str:
    lines = []
    for evaluation in report["evaluations"]:
        result = evaluation.get("result") or {}
        accuracy = result.get("accuracy") or {}
        lines.append(
            f"{evaluation['id']}  {evaluation['model']['name']} {evaluation['model']['version']} on "
            f"{evaluation['framework']} {evaluation.get('framework_version') or ''}, host {evaluation.get('host')}: "
            + (
                metrics_text(
                    str(evaluation.get("task") or ""), accuracy.get("top1"), accuracy.get("top5")
                )
                if accuracy
                else "no result"
            )
        )
        lines.append(
            f"  {'batch':>5} {'median ms':>10} {'95 % CI':>17} {'p90':>9} {'p99':>9} "
            f"{'mean ms':>9} {'inputs/s':>10}"
        )
        for size, stats in sorted((result.get("latency") or {}).items(), key=lambda kv: int(kv[0])):
            text = statistics.latency_text(stats)
            throughput = (result.get("throughput") or {}).get(size)
            lines.append(
                f"  {size:>5} {text['p50']:>10} {text['p50_interval']:>17} {text['p90']:>9} "
                f"{text['p99']:>9} {text['mean']:>9} {statistics.per_second(throughput):>10}"
            )
        lines += _target_ci_lines(
            "  target CI", (result.get("details") or {}).get("batch_sizes") or []
        )
        loadgen = (result.get("details") or {}).get("loadgen")
        if loadgen:  # as the hub stored it
            lines += ["", *format_loadgen(str(evaluation["framework"]), loadgen)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["agent"]:
        from predictors.agent.daemon import main as agent_main

        return agent_main(arguments[1:])
    try:
        args = _parser().parse_args(arguments)
        if args.command == "evaluations":
            print(history_cli.run(args))
            return 0
        if args.command == "datasets":
            print(datasets_cli.run(args))
            return 0
        if args.command == "study":
            print(study.run(args))
            return 0
        if args.command == "flops":
            print(flops_cli.run(args))
            return 0
        report = run_remote(args) if args.hub else run_evaluate(args)
    except (UsageError, history_cli.HistoryUsageError) as exc:
        return _fail(str(exc), 2)
    except (CommandError, CatalogError, datasets_cli.DatasetsCommandError) as exc:
        return _fail(str(exc), 1)
    except USER_ERRORS as exc:
        return _fail(str(exc), 1)
    except (HubError, HubUnreachable, TimeoutError) as exc:
        return _fail(str(exc), 1)
    except (KeyboardInterrupt, EvaluationCancelled):
        return _fail("interrupted", 130)
    if args.format == "json":
        print(json.dumps(report, indent=2))
    else:
        print(format_remote(report) if args.hub else format_table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
