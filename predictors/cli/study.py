"""`mlms study`: one evaluation run N times per group, each run in a fresh process
(`predictors.evaluation.study`), printed per metric as mean, standard deviation and 95 %
confidence interval with the determinism verdict, and drawn as a standalone HTML page (--plot).

    mlms study MODEL --framework F --dataset NAME[:SPLIT] [--runs N] [--threads N[,N...]]
               [--seeds S[,S...]] [--device D[,D...]] [job options] [--plot FILE.html]

The groups sweep the thread counts, seeds and devices; every other job option has its flag, as
for `mlms evaluate` (`predictors.cli.options`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from predictors.cli.args import (
    CommandError,
    UsageError,
    check_store,
    count,
    dataset,
    dataset_manifest,
    integers,
    override,
    table,
)
from predictors.cli.options import add_job_options, job_options
from predictors.evaluation import split_entry
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.study import run_study
from predictors.frameworks.predictor import PredictorError, predictor_class
from predictors.manifests.catalog import DEFAULT_ROOT, Catalog
from predictors.protocol import JOB_DEFAULTS
from predictors.zoo.build import default_store

__all__ = ["add_commands", "format_study", "plot_study", "run", "study_options"]

# The job options a study sweeps, a group each, by flags of its own.
SWEPT = ("threads", "seed")


def add_commands(commands: Any) -> None:
    """The `study` command."""
    study = commands.add_parser(
        "study",
        help="run one evaluation N times, each in a fresh process: mean, std and 95% CI per "
        "metric, and whether the outputs are bitwise identical",
        description="Run MODEL's evaluation RUNS times per group (each thread count by each "
        "seed), each run in a fresh process; report every metric's mean, standard deviation "
        "and 95% confidence interval, and whether the outputs are bitwise identical across "
        "the runs (and if not, which inputs' top-1 class flips).",
    )
    study.add_argument("model", metavar="MODEL", help="model name, e.g. digits-cnn")
    study.add_argument("--version", default="*", metavar="RANGE", help="npm version range")
    study.add_argument("--framework", required=True, metavar="F", help="one framework")
    study.add_argument("--dataset", required=True, metavar="NAME[:SPLIT]")
    study.add_argument("--dataset-version", default="*", metavar="RANGE")
    study.add_argument("--runs", type=count(2), default=5, metavar="N", help="default: 5")
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
    study.add_argument(
        "--device",
        default="cpu",
        metavar="D[,D...]",
        help="devices to sweep, a group each (cpu, cuda, cuda:N; default: cpu); with several, "
        "each device's outputs are compared with the first's input by input",
    )
    add_job_options(study, leave_out=SWEPT)
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


def study_options(args: argparse.Namespace, split: str, device: str) -> EvaluationOptions:
    """The loop's options of every run of the study: the job options its flags spell, each
    other one at its one default (`predictors.protocol.JOB_DEFAULTS`); each group sets its
    thread count, seed and device. The overrides are applied to the manifest before."""
    return EvaluationOptions.from_job(job_options(args, split, overrides=False), device=device)


def run(args: argparse.Namespace) -> str:
    """What `mlms study …` prints (and, with --plot, the page it writes)."""
    if "," in args.framework:
        raise UsageError("--framework: a study runs one framework")
    if args.capture_inputs.strip():
        raise UsageError(
            "--capture-inputs: a study compares figures, not layer outputs; capture them with "
            "mlms evaluate --capture-inputs … --capture-file F"
        )
    catalog = Catalog(args.manifests or DEFAULT_ROOT)
    model = override(catalog.find_model(args.model, args.version, args.framework), args.overrides)
    dataset_name, split = dataset(args.dataset)
    data = dataset_manifest(catalog, dataset_name, args.dataset_version)
    split_entry(data, split)
    threads: list[int | None] = (
        list(integers(args.threads, "--threads", twice="a thread count"))
        if args.threads
        else [None]
    )
    seeds = integers(args.seeds, "--seeds", minimum=0, twice="a seed")
    devices = [part.strip() for part in args.device.split(",")]
    if len(set(devices)) != len(devices) or not all(devices):
        raise UsageError(f"--device: {args.device!r} names a device twice or none")
    for device in devices:
        try:
            EvaluationOptions(device=device)
            predictor_class(model.framework).check_device(device)
        except (PredictorError, ValueError) as exc:
            raise UsageError(f"--device: {exc}") from None
    options = study_options(args, split, devices[0])
    store = (args.store or default_store()).resolve()
    check_store(store, [model, data], split)

    def progress(device: str, thread_count: int | None, seed: int, done: int, total: int) -> None:
        if not args.no_progress:
            shown = "default" if thread_count is None else thread_count
            print(f"{device}, threads {shown}, seed {seed}: run {done} of {total}", file=sys.stderr)

    if args.plot is not None:
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
        data,
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
        return json.dumps(report, indent=2)
    return format_study(report) + (f"\n\nplot: {args.plot}" if args.plot is not None else "")


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
        lines += ["  " + line for line in table(rows, left=1).splitlines()]
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
            f"input): {agreement}"
            + (
                f"max |difference| {entry['max_abs_diff']:.3g}"
                if entry["max_abs_diff"] is not None
                else "emitted token ids, compared by their texts"
            )
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
