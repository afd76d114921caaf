"""Repeat studies: one evaluation request run N times, each in a fresh process, reported per
metric as mean, standard deviation and 95 % confidence interval, with whether the outputs are
bitwise identical across the runs and, where not, which inputs' top-1 class flips
(`mlms study`).

A study is a grid of groups: every thread count of `threads` (pitfall 6 of seed `000`: the
thread setting changes latency and, through the order of reductions, outputs) crossed with every
seed of `seeds`; each group runs its `runs` evaluations one after another, each in a process of
its own (`ProcessPoolExecutor` of one worker, one task per worker process, spawned: no
framework state, allocator or cache is carried from one run to the next). The metrics of a run
are its accuracy (`top1`, `top5` where the task has them) and, per batch size, its p50, mean
and p99 latency and throughput. The statistics across runs are the statistics layer's
(`predictors.statistics.between_runs`: mean, standard deviation and Student's t interval of the
mean over the runs). The outputs of a run are hashed (SHA-256 of the first batch size's float32
outputs, every input, in dataset order); runs agree bitwise when their hashes are equal.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from predictors import statistics
from predictors.evaluation.options import EvaluationOptions
from predictors.manifests import Manifest
from predictors.protocol import JOB_DEFAULTS, JobOptions, ProtocolError

# The most inputs a report names whose top-1 class flips between runs.
FLIPS_SHOWN = 20


def _one_run(
    model: Manifest,
    dataset: Manifest,
    options: EvaluationOptions,
    store: str,
    keep_outputs: bool = False,
) -> dict:
    """One run of the study, in its own process: the metrics, the outputs' hash and each
    input's top-1 class."""
    from predictors.data import DataManager
    from predictors.evaluation import evaluate

    evaluation = evaluate(model, dataset, options, DataManager(store_dir=Path(store)).fetch)
    result = evaluation.result
    outputs = np.ascontiguousarray(evaluation.outputs, dtype=np.float32)
    return {
        "pid": os.getpid(),
        "metrics": metrics_of(result),
        "outputs_sha256": hashlib.sha256(outputs.tobytes()).hexdigest(),
        "top1_classes": outputs.argmax(axis=1) if outputs.ndim == 2 and outputs.shape[1] else None,
        # The outputs themselves only where a device comparison reads them (a group's first).
        "outputs": outputs if keep_outputs else None,
        "hygiene": [warning["code"] for warning in result.get("hygiene") or []],
    }


def metrics_of(result: dict[str, Any]) -> dict[str, float]:
    """A run's metrics by name: top1 and top5 (where measured), and per batch size N
    `p50_ms@N`, `mean_ms@N`, `p99_ms@N` and `throughput_ips@N`."""
    metrics: dict[str, float] = {}
    accuracy = result.get("accuracy") or {}
    for name in ("top1", "top5"):
        if isinstance(accuracy.get(name), int | float):
            metrics[name] = float(accuracy[name])
    for entry in result["batch_sizes"]:
        size = entry["batch_size"]
        for name in ("p50_ms", "mean_ms", "p99_ms"):
            metrics[f"{name}@{size}"] = float(entry["latency"][name])
        metrics[f"throughput_ips@{size}"] = float(entry["throughput_ips"])
    return metrics


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A group's statistics per metric (`mean`, `std`, `ci95`: the half-width of the 95 %
    confidence interval of the mean; std and ci95 None for a single run; the runs' `values`) and its determinism
    verdict (`bitwise_identical`, the distinct output hashes, the inputs whose top-1 class
    differs between runs)."""
    names = list(runs[0]["metrics"])
    summary = {
        name: statistics.between_runs([run["metrics"][name] for run in runs]) for name in names
    }
    hashes = sorted({run["outputs_sha256"] for run in runs})
    classes = [run["top1_classes"] for run in runs if run["top1_classes"] is not None]
    flipped: list[int] = []
    if len(classes) == len(runs) and len(classes) > 1:
        stacked = np.stack(classes)
        flipped = [int(i) for i in np.flatnonzero((stacked != stacked[0]).any(axis=0))]
    return {
        "runs": len(runs),
        "metrics": summary,
        "bitwise_identical": len(hashes) == 1,
        "output_hashes": hashes,
        "flipped_inputs": len(flipped),
        "flipped_first": flipped[:FLIPS_SHOWN],
        "processes": len({run["pid"] for run in runs}),
        "hygiene": sorted({code for run in runs for code in run["hygiene"]}),
    }


def run_study(
    model: Manifest,
    dataset: Manifest,
    options: EvaluationOptions,
    store: Path,
    *,
    runs: int,
    threads: list[int | None],
    seeds: list[int],
    devices: list[str] | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Every group of the study (each device by each thread count by each seed), `runs` fresh
    processes each, summarized (`summarize`); with several devices, each other device's
    outputs against the first's, input by input (`across_devices`)."""
    groups = []
    first_outputs: dict[tuple[str, int | None, int], np.ndarray] = {}
    context = get_context("spawn")
    for device in devices or [options.device]:
        for thread_count in threads:
            for seed in seeds:
                settings = replace(options, threads=thread_count, seed=seed, device=device)
                results = []
                for index in range(runs):
                    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                        results.append(
                            pool.submit(
                                _one_run, model, dataset, settings, str(store), index == 0
                            ).result()
                        )
                    if progress is not None:
                        progress(device, thread_count, seed, index + 1, runs)
                first_outputs[(device, thread_count, seed)] = results[0]["outputs"]
                groups.append(
                    {"device": device, "threads": thread_count, "seed": seed, **summarize(results)}
                )
    return {
        "model": {"name": model.name, "version": model.version, "framework": model.framework},
        "dataset": {"name": dataset.name, "version": dataset.version, "split": options.split},
        "runs": runs,
        "batch_sizes": list(options.batch_sizes),
        "limit": options.limit,
        "devices": devices or [options.device],
        "groups": groups,
        "across_devices": across_devices(first_outputs),
    }


def across_devices(
    outputs: dict[tuple[str, int | None, int], np.ndarray],
) -> list[dict[str, Any]]:
    """Each device's first run against the first device's at the same thread count and seed,
    input by input: the share of inputs whose top-1 class agrees, the inputs that flip, and
    the largest absolute difference of an output (the seeds' `003`: CPUs and GPUs move error
    rates through non-deterministic kernels)."""
    devices = list(dict.fromkeys(device for device, _, _ in outputs))
    found = []
    for other in devices[1:]:
        for (device, thread_count, seed), reference in outputs.items():
            if device != devices[0]:
                continue
            theirs = outputs.get((other, thread_count, seed))
            if theirs is None or theirs.shape != reference.shape:
                continue
            entry: dict[str, Any] = {
                "devices": [devices[0], other],
                "threads": thread_count,
                "seed": seed,
                "inputs": int(reference.shape[0]) if reference.ndim else 0,
                "max_abs_diff": float(np.max(np.abs(reference - theirs)))
                if reference.size
                else 0.0,
                "bitwise_identical": bool(np.array_equal(reference, theirs)),
            }
            if reference.ndim == 2 and reference.shape[1]:
                flips = np.flatnonzero(reference.argmax(axis=1) != theirs.argmax(axis=1))
                entry["top1_agreement"] = 1.0 - flips.size / reference.shape[0]
                entry["flipped_inputs"] = int(flips.size)
                entry["flipped_first"] = [int(i) for i in flips[:FLIPS_SHOWN]]
            found.append(entry)
    return found


def format_study(report: dict[str, Any]) -> str:
    model, dataset = report["model"], report["dataset"]
    lines = [
        f"{model['name']} {model['version']} ({model['framework']}) on {dataset['name']} "
        f"{dataset['version']}:{dataset['split']}: {report['runs']} runs per group, each in a "
        "fresh process"
    ]
    for group in report["groups"]:
        threads = "default" if group["threads"] is None else group["threads"]
        if group["bitwise_identical"]:
            verdict = (
                f"outputs bitwise identical in all {group['runs']} runs "
                f"(sha256 {group['output_hashes'][0][:12]}…)"
            )
        else:
            verdict = (
                f"outputs differ: {len(group['output_hashes'])} distinct in {group['runs']} "
                f"runs; {group['flipped_inputs']} inputs' top-1 class flips"
                + (
                    f" (first: {', '.join(map(str, group['flipped_first']))})"
                    if group["flipped_first"]
                    else ""
                )
            )
        device = f"{group['device']}, " if len(report.get("devices") or []) > 1 else ""
        lines += ["", f"{device}threads {threads}, seed {group['seed']}: {verdict}"]
        if group["hygiene"]:
            lines.append(f"  hygiene warnings in some runs: {', '.join(group['hygiene'])}")
        rows = [["metric", "mean", "std", "95% CI"]]
        for name, values in group["metrics"].items():
            rows.append(
                [
                    name,
                    f"{values['mean']:.6g}",
                    "-" if values["std"] is None else f"{values['std']:.3g}",
                    "-" if values["ci95"] is None else f"±{values['ci95']:.3g}",
                ]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for index, row in enumerate(rows):
            cells = [row[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  " + "  ".join(cells))
            if index == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
    for entry in report.get("across_devices") or []:
        a, b = entry["devices"]
        threads = "default" if entry["threads"] is None else entry["threads"]
        agreement = (
            f"top-1 agrees on {100 * entry['top1_agreement']:.2f} % of {entry['inputs']} inputs "
            f"({entry['flipped_inputs']} flip"
            + (f": {', '.join(map(str, entry['flipped_first']))}" if entry["flipped_first"] else "")
            + "), "
            if "top1_agreement" in entry
            else ""
        )
        lines += [
            "",
            f"{b} against {a} (threads {threads}, seed {entry['seed']}, first runs, input by "
            f"input): {agreement}max |difference| {entry['max_abs_diff']:.3g}"
            + (", bitwise identical" if entry["bitwise_identical"] else ""),
        ]
    return "\n".join(lines)


def plot_study(report: dict[str, Any], path: Path) -> None:
    """A standalone HTML page (plotly's, its JavaScript inline: it opens offline) of the sweep:
    for the accuracy, the p50 latency and the throughput at the first batch size, each group's
    mean with its 95 % confidence interval as an error bar, and each run as a point."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    size = report["batch_sizes"][0]
    names = [
        name
        for name in ("top1", f"p50_ms@{size}", f"throughput_ips@{size}")
        if name in report["groups"][0]["metrics"]
    ]
    titles = {
        "top1": "top-1",
        f"p50_ms@{size}": f"p50 latency (ms), batch size {size}",
        f"throughput_ips@{size}": f"throughput (inputs/s), batch size {size}",
    }
    several = len(report.get("devices") or []) > 1
    labels = [
        (f"{g['device']}, " if several else "")
        + f"threads {'default' if g['threads'] is None else g['threads']}, seed {g['seed']}"
        for g in report["groups"]
    ]
    figure = make_subplots(rows=1, cols=len(names), subplot_titles=[titles[n] for n in names])
    for column, name in enumerate(names, start=1):
        metrics = [group["metrics"][name] for group in report["groups"]]
        figure.add_trace(
            go.Bar(
                x=labels,
                y=[m["mean"] for m in metrics],
                error_y={"type": "data", "array": [m["ci95"] or 0.0 for m in metrics]},
                name=f"{titles[name]}: mean, 95% CI",
                showlegend=False,
            ),
            row=1,
            col=column,
        )
        figure.add_trace(
            go.Scatter(
                x=[label for label, m in zip(labels, metrics, strict=True) for _ in m["values"]],
                y=[value for m in metrics for value in m["values"]],
                mode="markers",
                marker={"color": "#222", "size": 6},
                name="runs",
                showlegend=column == 1,
            ),
            row=1,
            col=column,
        )
    model = report["model"]
    figure.update_layout(
        title=f"{model['name']} {model['version']} ({model['framework']}): "
        f"{report['runs']} runs per group, each in a fresh process",
        height=480,
    )
    figure.write_html(path, include_plotlyjs=True, full_html=True)


# -- the command ---------------------------------------------------------------------------


def add_commands(commands: Any) -> None:
    """The `study` command."""
    from predictors.cli import _count

    study = commands.add_parser(
        "study",
        help="run one evaluation N times, each in a fresh process: mean, std and 95% CI per "
        "metric, and whether the outputs are bitwise identical",
        description="Run MODEL's evaluation RUNS times per group (each thread count by each "
        "seed), each run in a fresh process; report every metric's mean, standard deviation "
        "and 95%% confidence interval, and whether the outputs are bitwise identical across "
        "the runs (and if not, which inputs' top-1 class flips).",
    )
    study.add_argument("model", metavar="MODEL", help="model name, e.g. digits-cnn")
    study.add_argument("--version", default="*", metavar="RANGE", help="npm version range")
    study.add_argument("--framework", required=True, metavar="F", help="one framework")
    study.add_argument("--dataset", required=True, metavar="NAME[:SPLIT]")
    study.add_argument("--dataset-version", default="*", metavar="RANGE")
    study.add_argument("--runs", type=_count(2), default=5, metavar="N", help="default: 5")
    study.add_argument(
        "--threads",
        default="",
        metavar="N[,N...]",
        help="thread counts to sweep, a group each (default: the framework's own)",
    )
    seed = str(JOB_DEFAULTS["seed"])
    study.add_argument(
        "--seeds", default=seed, metavar="S[,S...]", help=f"seeds to sweep (default: {seed})"
    )
    sizes = ",".join(str(size) for size in JOB_DEFAULTS["batch_sizes"])
    study.add_argument(
        "--batch-sizes", default=sizes, metavar="N[,N...]", help=f"(default: {sizes})"
    )
    study.add_argument("--limit", type=_count(1), metavar="N")
    study.add_argument(
        "--warmup",
        type=_count(0),
        default=JOB_DEFAULTS["warmup"],
        metavar="N",
        help=f"(default: {JOB_DEFAULTS['warmup']})",
    )
    study.add_argument(
        "--repeat",
        type=_count(1),
        default=JOB_DEFAULTS["repeat"],
        metavar="N",
        help=f"(default: {JOB_DEFAULTS['repeat']})",
    )
    study.add_argument(
        "--device",
        default="cpu",
        metavar="D[,D...]",
        help="devices to sweep, a group each (cpu, cuda, cuda:N; default: cpu); with several, "
        "each device's outputs are compared with the first's input by input",
    )
    study.add_argument("--format", choices=("table", "json"), default="table")
    study.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.html",
        help="also write the sweep as a plot: a standalone HTML page (needs plotly, as the "
        "hub's requirements pin it)",
    )
    study.add_argument("--manifests", type=Path, default=None)
    study.add_argument("--store", type=Path, default=None)
    study.add_argument("--no-progress", action="store_true")


def _numbers(text: str, flag: str, minimum: int) -> list[int]:
    from predictors.cli import UsageError

    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise UsageError(f"{flag}: {part.strip()!r} is not an integer") from None
        if value < minimum:
            raise UsageError(f"{flag}: {value} is less than {minimum}")
        values.append(value)
    if len(set(values)) != len(values):
        raise UsageError(f"{flag}: {text!r} repeats a value")
    return values


def study_options(args: argparse.Namespace, split: str, device: str) -> EvaluationOptions:
    """The loop's options of every run of the study: the job options its flags spell, each
    other one at its one default (`predictors.protocol.JOB_DEFAULTS`); each group sets its
    thread count, seed and device."""
    from predictors.cli import UsageError, _batch_sizes

    try:
        job = JobOptions(
            split=split,
            limit=args.limit,
            batch_sizes=_batch_sizes(args.batch_sizes),
            warmup=args.warmup,
            repeat=args.repeat,
        )
    except ProtocolError as error:
        raise UsageError(f"--{error.path.replace('_', '-')}: {error.message}") from None
    return EvaluationOptions.from_job(job, device=device)


def run(args: argparse.Namespace) -> str:
    from predictors.cli import (
        UsageError,
        _check_store,
        _dataset,
        _dataset_manifest,
    )
    from predictors.evaluation import split_entry
    from predictors.manifests.catalog import DEFAULT_ROOT, Catalog
    from predictors.zoo.build import default_store

    if "," in args.framework:
        raise UsageError("--framework: a study runs one framework")
    catalog = Catalog(args.manifests or DEFAULT_ROOT)
    model = catalog.find_model(args.model, args.version, args.framework)
    dataset_name, split = _dataset(args.dataset)
    dataset = _dataset_manifest(catalog, dataset_name, args.dataset_version)
    split_entry(dataset, split)
    threads: list[int | None] = (
        list(_numbers(args.threads, "--threads", 1)) if args.threads else [None]
    )
    seeds = _numbers(args.seeds, "--seeds", 0)
    devices = [part.strip() for part in args.device.split(",")]
    if len(set(devices)) != len(devices) or not all(devices):
        raise UsageError(f"--device: {args.device!r} names a device twice or none")
    from predictors.frameworks.predictor import PredictorError, predictor_class

    for device in devices:
        try:
            EvaluationOptions(device=device)
            predictor_class(model.framework).check_device(device)
        except (PredictorError, ValueError) as exc:
            raise UsageError(f"--device: {exc}") from None
    options = study_options(args, split, devices[0])
    store = (args.store or default_store()).resolve()
    _check_store(store, [model, dataset], split)

    def progress(device: str, thread_count: int | None, seed: int, done: int, total: int) -> None:
        if not args.no_progress:
            shown = "default" if thread_count is None else thread_count
            print(f"{device}, threads {shown}, seed {seed}: run {done} of {total}", file=sys.stderr)

    if args.plot is not None:
        from predictors.cli import CommandError

        try:
            import plotly  # noqa: F401
        except ImportError:
            raise CommandError(
                "--plot needs the plotly package (pip install plotly==7.1.0, as the hub's "
                "requirements pin it)"
            ) from None
        if not args.plot.parent.is_dir():
            raise CommandError(f"--plot: no folder {args.plot.parent}")
    report = run_study(
        model,
        dataset,
        options,
        store,
        runs=args.runs,
        threads=threads,
        seeds=seeds,
        devices=devices,
        progress=progress,
    )
    if args.plot is not None:
        plot_study(report, args.plot)
    if args.format == "json":
        import json

        return json.dumps(report, indent=2)
    return format_study(report) + (f"\n\nplot: {args.plot}" if args.plot is not None else "")
