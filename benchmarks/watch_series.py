"""A watch's verdicts on real runs: series of ten re-runs of one configuration through the real
evaluation loop, some of them at a slower setting, labelled by the statistics layer
(`predictors.statistics.series_verdicts`, what a watch's series shows). A measurement, not a
test; see benchmarks/README.md ("A watch's verdicts on real runs").

    python benchmarks/watch_series.py [--store DIR] [--series 3] [--limit 300] [--repeat 30]
        [--slow 8] [--record FILE]

Each run is one `predictors.evaluation.evaluate` call of the zoo's digits-cnn on ONNX Runtime
on the CPU, batch size 1, one intra-op thread, `--limit` inputs `--repeat` times. The runs named
by `--slow` (from 1; "8", "8,9,10", or "" for none) run at trace level `framework`: ONNX
Runtime's profiler records every node of every timed batch, which makes each batch slower by
construction (about 2× at batch size 1, benchmarks/README.md, "Tracing overhead per level");
the others at trace level `model`. One evaluation first, not counted, loads the libraries (the
first run of a process is slower). Printed per series: each run's median and the verdict; then
how many series got the labels the settings call for (the first slow run a regression, every
other run noise). `--record FILE` writes each series' samples (ms, to the ns) as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from predictors import statistics  # noqa: E402
from predictors.data import DataManager  # noqa: E402
from predictors.evaluation import EvaluationOptions, evaluate  # noqa: E402
from predictors.manifests.catalog import Catalog  # noqa: E402

RUNS = 10


def _runs(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def expected(slow: list[int]) -> list[str]:
    """The labels the settings call for: the first slow run a regression, the rest noise."""
    labels = [statistics.SERIES_NOISE] * RUNS
    if slow:
        labels[slow[0] - 1] = statistics.REGRESSION
    return labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--series", type=int, default=3)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--slow", default="8", help="runs at trace level framework, from 1")
    parser.add_argument("--record", type=Path, default=None)
    args = parser.parse_args()
    slow = _runs(args.slow)
    if args.store is None:
        from tests.predictors.zoo_store import zoo_store

        store = zoo_store(("digits", "digits-cnn"))
    else:
        store = args.store
    catalog = Catalog()
    model = catalog.find_model("digits-cnn", "*", "onnxruntime")
    dataset = catalog.find_dataset("digits")
    fetch = DataManager(store_dir=store).fetch

    def run(level: str, limit: int, repeat: int) -> list[float]:
        options = EvaluationOptions(
            threads=1, batch_sizes=(1,), limit=limit, repeat=repeat, trace_level=level
        )
        result = evaluate(model, dataset, options, fetch).result
        return list(result["batch_sizes"][0]["latency"]["samples_ms"])

    run("model", 50, 1)
    print(
        f"digits-cnn, onnxruntime, cpu, batch size 1, 1 thread, {args.limit} inputs × "
        f"{args.repeat}; runs {args.slow or 'none'} at trace level framework; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    matched = 0
    recorded = []
    for number in range(1, args.series + 1):
        started = time.perf_counter()
        levels = ["framework" if place in slow else "model" for place in range(1, RUNS + 1)]
        samples = [run(level, args.limit, args.repeat) for level in levels]
        verdicts = statistics.series_verdicts(samples)
        labels = [verdict.verdict for verdict in verdicts]
        matched += labels == expected(slow)
        print(f"\nseries {number} ({time.perf_counter() - started:.1f} s)")
        print("| run | trace level | median ms [95 % CI] | verdict | note |")
        print("|---:|---|---|---|---|")
        for verdict, level in zip(verdicts, levels, strict=True):
            low, high = verdict.median_low_ms, verdict.median_high_ms
            print(
                f"| {verdict.index + 1} | {level} | {statistics.ms(verdict.median_ms)} "
                f"[{statistics.ms(low)}–{statistics.ms(high)}] | {verdict.words} | "
                f"{verdict.note()} |"
            )
        recorded.append(
            [
                {"trace_level": level, "samples_ms": [round(value, 6) for value in values]}
                for level, values in zip(levels, samples, strict=True)
            ]
        )
    print(f"\n{matched} of {args.series} series labelled as the settings call for")
    if args.record is not None:
        body = {
            "model": "digits-cnn",
            "framework": "onnxruntime",
            "batch_size": 1,
            "limit": args.limit,
            "repeat": args.repeat,
            "slow": slow,
            "series": recorded,
        }
        args.record.write_text(json.dumps(body, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
