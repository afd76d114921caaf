"""Timing until the answer is known (`target_ci`) against a fixed count of batches: how long each
takes and how narrow the median's interval it ends with. A measurement, not a test; see
benchmarks/README.md ("Timing until the answer is known").

    python benchmarks/target_ci.py [--store DIR] [--model digits-cnn] [--dataset digits]
        [--frameworks onnxruntime,pytorch] [--batch-sizes 1,32] [--target 0.02]
        [--seconds 60] [--fixed-repeat 1,5] [--rounds 3] [--limit N] [--busy] [--json FILE]

For each framework and batch size, `--rounds` rounds of evaluations, in turn (the order
reversed from round to round): one with `target_ci` (`--target`, bounded by `--seconds`), and
one with a fixed count of batches for each of `--fixed-repeat` (that many passes over the split;
1 is the default run). Each is one `predictors.evaluation.evaluate` call of its own, untraced,
with the job's default warm-up; its wall time holds the model's load, the staging, the warm-up
and the scoring, alike in all; its timed time is the sum of its timed loops. One evaluation
first, not counted, loads the libraries. Printed per run: the timed batches, the wall and
timed seconds, the median and the larger half-width of its 95 % interval as a share of it
(`predictors.statistics.median_interval_width`, what the target stops on), and for the target
run what stopped it. With `--busy`, another process burns one core throughout (a busy machine).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics as py_statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from predictors import statistics  # noqa: E402
from predictors.data import DataManager  # noqa: E402
from predictors.evaluation import EvaluationOptions, evaluate  # noqa: E402
from predictors.host import introspection  # noqa: E402
from predictors.manifests.catalog import Catalog  # noqa: E402
from predictors.zoo.build import default_store  # noqa: E402


def _burn() -> None:
    while True:
        pass


def _run(model: Any, dataset: Any, fetch: Any, options: EvaluationOptions) -> dict[str, Any]:
    start = time.perf_counter()
    result = evaluate(model, dataset, options, fetch).result
    wall = time.perf_counter() - start
    entry = result["batch_sizes"][0]
    latency = entry["latency"]
    return {
        "batches": latency["count"],
        "wall_s": wall,
        "timed_s": entry["timed_wall_ms"] / 1e3,
        "p50_ms": latency["p50_ms"],
        "half_width": statistics.median_interval_width(latency["samples_ms"]),
        "target_ci": entry.get("target_ci"),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    catalog = Catalog()
    fetch = DataManager(store_dir=args.store).fetch
    dataset = catalog.find_dataset(args.dataset)
    report: dict[str, Any] = {
        "model": args.model,
        "target": args.target,
        "seconds": args.seconds,
        "fixed_repeat": args.fixed_repeat,
        "threads": args.threads,
        "cpu": introspection.stack([])["cpu"]["model"],
        "runs": [],
    }
    for framework in args.frameworks.split(","):
        model = catalog.find_model(args.model, "*", framework)
        for size in (int(s) for s in args.batch_sizes.split(",")):
            common: dict[str, Any] = {
                "batch_sizes": (size,),
                "limit": args.limit,
                "trace_level": "none",
                "threads": args.threads,
            }
            kinds = {
                "target": EvaluationOptions(
                    **common, target_ci=args.target, target_ci_seconds=args.seconds
                ),
                **{
                    f"fixed ×{repeat}": EvaluationOptions(**common, repeat=repeat)
                    for repeat in (int(r) for r in args.fixed_repeat.split(","))
                },
            }
            if not report["runs"]:  # the libraries' first load, not counted
                _run(model, dataset, fetch, kinds["target"])
            for round_ in range(args.rounds):
                order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    run = _run(model, dataset, fetch, kinds[kind])
                    run.update(framework=framework, batch_size=size, kind=kind, round=round_)
                    report["runs"].append(run)
                    print(
                        f"{framework} batch {size} round {round_} {kind}: {run['batches']} "
                        f"batches, {run['wall_s']:.2f} s (timed {run['timed_s']:.2f} s), "
                        f"±{_percent(run['half_width'])}",
                        file=sys.stderr,
                    )
    return report


def _percent(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.2f} %"


def markdown(report: dict[str, Any]) -> str:
    threads = report["threads"] or "default"
    busy = ", another process burning a core" if report.get("busy") else ""
    load = ", ".join(f"{value:.2f}" for value in report.get("load_average") or ())
    lines = [
        f"{report['model']} on {report['cpu']} ({threads} threads{busy}; load average after: "
        f"{load}): target ±"
        f"{report['target'] * 100:g} % (bound {report['seconds']:g} s) against "
        f"{report['fixed_repeat']} passes over the split",
        "",
        "| framework | batch | run | batches | wall s | timed s | p50 ms | ± of p50 | stopped |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for run in report["runs"]:
        target = run["target_ci"]
        lines.append(
            f"| {run['framework']} | {run['batch_size']} | {run['kind']} ({run['round'] + 1}) | "
            f"{run['batches']} | {run['wall_s']:.2f} | {run['timed_s']:.3f} | "
            f"{run['p50_ms']:.4f} | {_percent(run['half_width'])} | "
            + (f"{target['stopped']} after {target['seconds']:.2f} s" if target else "—")
            + " |"
        )
    kinds = list(dict.fromkeys(run["kind"] for run in report["runs"]))
    lines += [
        "",
        "Medians over the rounds: batches, wall s, timed s, ± of p50",
        "",
        "| framework | batch | " + " | ".join(kinds) + " |",
        "|---|---:|" + "---|" * len(kinds),
    ]
    pairs = sorted({(r["framework"], r["batch_size"]) for r in report["runs"]})
    for framework, size in pairs:
        cells = []
        for kind in kinds:
            runs = [
                r
                for r in report["runs"]
                if (r["framework"], r["batch_size"], r["kind"]) == (framework, size, kind)
            ]

            def median(key: str, of: list[dict[str, Any]] = runs) -> float:
                values = [r[key] for r in of if r[key] is not None]
                return py_statistics.median(values) if values else float("nan")

            cells.append(
                f"{median('batches'):.0f}, {median('wall_s'):.2f} s, {median('timed_s'):.3f} s, "
                f"±{median('half_width') * 100:.2f} %"
            )
        lines.append(f"| {framework} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=default_store())
    parser.add_argument("--model", default="digits-cnn")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--frameworks", default="onnxruntime,pytorch")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--fixed-repeat", default="1,5")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--busy", action="store_true", help="burn one core in another process")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    burner = None
    if args.busy:
        burner = multiprocessing.get_context("spawn").Process(target=_burn, daemon=True)
        burner.start()
    try:
        report = measure(args)
    finally:
        if burner is not None:
            burner.terminate()
            burner.join()
    report["busy"] = args.busy
    report["load_average"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(markdown(report))


if __name__ == "__main__":
    main()
