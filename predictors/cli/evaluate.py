"""`mlms evaluate`: a model evaluated here, in each framework given, from the manifests in a
folder and the files in an artifact store; or, with --hub, launched on a hub and followed live.

    mlms evaluate MODEL --framework F[,F...] --dataset NAME[:SPLIT] [options]

Its job options' flags are the protocol's (`predictors.cli.options`); the rest are written
here."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from predictors.cli.args import (
    CommandError,
    UsageError,
    check_store,
    dataset,
    dataset_manifest,
    frameworks,
    override,
)
from predictors.cli.options import add_job_options, job_options
from predictors.cli.report import format_remote, format_table
from predictors.data import DataManager
from predictors.evaluation import (
    GRAPH_OPTIMIZATIONS,
    Evaluation,
    EvaluationOptions,
    compare,
    evaluate,
    split_entry,
)
from predictors.frameworks.predictor import predictor_class, registered
from predictors.host import introspection
from predictors.manifests.catalog import DEFAULT_ROOT, Catalog
from predictors.protocol import device_kind
from predictors.tracing.chrome import chrome_trace, rows_of_spans
from predictors.zoo.build import default_store

__all__ = ["add_commands", "local_options", "remote_request", "run"]


def add_commands(commands: Any) -> None:
    """The `evaluate` command."""
    command = commands.add_parser(
        "evaluate",
        help="evaluate a model's accuracy and latency in one or more frameworks",
        description="Evaluate MODEL on a dataset split in each framework given, at each batch "
        "size, and compare the frameworks input by input.",
    )
    command.add_argument("model", metavar="MODEL", help="model name, e.g. digits-cnn")
    command.add_argument(
        "--version", default="*", metavar="RANGE", help="npm version range (default: *)"
    )
    command.add_argument(
        "--framework",
        required=True,
        metavar="F[,F...]",
        help=f"comma-separated frameworks ({', '.join(registered())}), or 'all' for every "
        "framework the model has a manifest for",
    )
    command.add_argument(
        "--dataset",
        required=True,
        metavar="NAME[:SPLIT]",
        help="dataset name and split (default split: validation); locally also a dataset "
        "manifest file, FILE.yaml[:SPLIT] (what `mlms datasets from-folder` writes)",
    )
    command.add_argument(
        "--dataset-version", default="*", metavar="RANGE", help="dataset version range"
    )
    command.add_argument(
        "--device", default="cpu", metavar="cpu|cuda[:N]", help="where to run (default: cpu)"
    )
    add_job_options(command)
    command.add_argument(
        "--graph-optimization",
        choices=GRAPH_OPTIMIZATIONS,
        help="ONNX Runtime's graph optimization level (none: no fusion, one layer span per "
        "graph node); default: ONNX Runtime's own (all)",
    )
    command.add_argument(
        "--trace-file", type=Path, metavar="PATH", help="write the spans as a Chrome trace"
    )
    command.add_argument(
        "--capture-file",
        type=Path,
        metavar="PATH.npz",
        help="write the layer outputs --capture-inputs captured (one framework: PATH; several: "
        "PATH with the framework before .npz); compare two with mlms diverge A.npz B.npz",
    )
    command.add_argument("--format", choices=("table", "json"), default="table")
    command.add_argument(
        "--manifests",
        type=Path,
        default=DEFAULT_ROOT,
        metavar="DIR",
        help=f"folder of manifests (default: {DEFAULT_ROOT})",
    )
    command.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"artifact store folder (default: $ARTIFACT_ROOT or {default_store()})",
    )
    command.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    command.add_argument(
        "--hub",
        metavar="URL",
        help="submit to this hub and follow the run live, instead of running here",
    )
    command.add_argument(
        "--token",
        metavar="T",
        default=os.environ.get("MLMS_TOKEN"),
        help="API token with the 'evaluate' scope, for --hub (default: $MLMS_TOKEN)",
    )
    command.add_argument(
        "--hosts",
        choices=("one", "all"),
        default="one",
        help="with --hub: run on one matching host, or on every one (default: one)",
    )


def run(args: argparse.Namespace) -> str:
    """What `mlms evaluate …` prints: here, or with --hub on the hub."""
    report = run_remote(args) if args.hub else run_evaluate(args)
    if args.format == "json":
        return json.dumps(report, indent=2)
    return format_remote(report) if args.hub else format_table(report)


def local_options(args: argparse.Namespace) -> EvaluationOptions:
    """The loop's options for `mlms evaluate` here: the job options (`job_options`) and what
    only a local run sets (the device's index, ONNX Runtime's graph optimization). The
    overrides are applied to the manifests before (`override`), not again by the loop."""
    return EvaluationOptions.from_job(
        job_options(args, dataset(args.dataset)[1], overrides=False),
        device=args.device,
        graph_optimization=args.graph_optimization,
    )


def run_evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Find the manifests, evaluate each framework in turn, compare them; the JSON report."""
    # Every flag is checked before anything is looked up.
    options = local_options(args)
    if options.capture_inputs and args.capture_file is None:
        raise UsageError(
            "--capture-inputs: locally the layer outputs need --capture-file PATH.npz to be "
            "written to"
        )
    if args.capture_file is not None and not options.capture_inputs:
        raise UsageError("--capture-file: name the inputs to capture with --capture-inputs")
    dataset_name, split = dataset(args.dataset)
    catalog = Catalog(args.manifests)
    names = frameworks(args.framework, catalog, args.model, args.version)
    models = [
        override(catalog.find_model(args.model, args.version, name), args.overrides)
        for name in names
    ]
    data = dataset_manifest(catalog, dataset_name, args.dataset_version)
    split_entry(data, split)
    store = (args.store or default_store()).resolve()
    check_store(store, [*models, data], split)
    fetch = DataManager(store_dir=store).fetch
    for model in models:
        predictor_class(model.framework).check_device(options.device)

    evaluations: list[Evaluation] = []
    for model in models:
        with _progress_bar(model.framework, disable=args.no_progress) as progress:
            evaluations.append(evaluate(model, data, options, fetch, progress=progress))
    comparisons = [compare(a, b) for a, b in itertools.combinations(evaluations, 2)]
    for model, evaluated in zip(models, evaluations, strict=True):
        if evaluated.capture is not None:
            path = args.capture_file
            if len(models) > 1:
                path = path.with_name(f"{path.stem}.{model.framework}.npz")
            evaluated.capture.save(path)
    if args.trace_file is not None:
        spans = [span for e in evaluations for span in e.spans]
        document = chrome_trace(rows_of_spans(spans))
        args.trace_file.write_text(json.dumps(document), encoding="utf-8")
    return {
        "model": {"name": args.model, "version_range": args.version},
        "dataset": {"name": data.name, "version": data.version, "split": split},
        "overrides": list(args.overrides),
        "results": [e.result for e in evaluations],
        "comparisons": comparisons,
        "stack": introspection.stack(names),
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


def remote_request(args: argparse.Namespace) -> dict[str, Any]:
    """The `POST /api/v1/evaluations/` body for `mlms evaluate … --hub`."""
    if not args.token:
        raise UsageError("--hub needs --token (or $MLMS_TOKEN), a token with the 'evaluate' scope")
    for flag, value in (
        ("--graph-optimization", args.graph_optimization),
        ("--trace-file", args.trace_file),
        ("--capture-file", args.capture_file),
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
    names = [f.strip() for f in args.framework.split(",") if f.strip()]
    if len(names) != 1:
        raise UsageError("--framework: with --hub, name exactly one framework per evaluation")
    name, split = dataset(args.dataset)
    # The job options, checked here as the hub checks them (`predictors.protocol`).
    options = job_options(args, split)
    return {
        "model": args.model,
        "model_version": args.version,
        "framework": names[0],
        "dataset": name,
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
