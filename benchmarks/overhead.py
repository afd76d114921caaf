"""Overhead of the evaluation loop against a bare framework loop, on the same model, batch size,
inputs and thread settings. A measurement, not a test; see benchmarks/README.md.

    .venv/bin/python benchmarks/overhead.py [--store DIR] [--threads 1] [--rounds 5] [--json]

For each model, framework and batch size, in one process:

- *bare*: the model loaded with the framework's own API and run in the shortest loop that
  measures it: `perf_counter_ns()` before and after the framework's inference call on each
  batch, nothing else (PyTorch: `model(torch.from_numpy(x)).numpy()` inside one
  `torch.inference_mode()`; ONNX Runtime: `session.run`; TensorFlow: the Keras model traced into
  a `tf.function`, then `.numpy()`).
- *ours*: `predictors.evaluation.evaluate` at trace level `model` (a span per batch) with a
  progress callback feeding a tqdm bar, as `mlms evaluate` runs it.

Both see the same preprocessed batches, the same warm-up and the same number of timed batches.
They alternate in rounds (bare, ours, ours, bare, …), and each round gives two ratios:

- latency ratio = ours' mean batch latency / bare mean batch latency;
- loop ratio = ours' timed-loop wall time per input / bare loop wall time per input (the
  inverse ratio of throughputs; it includes the loop's own bookkeeping between batches).

The reported ratio is the median over rounds; a ratio of 1.00 is no overhead. Pairing each
round's two loops cancels most of the drift of a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from predictors import introspection  # noqa: E402
from predictors.catalog import Catalog  # noqa: E402
from predictors.cli import default_store  # noqa: E402
from predictors.data import DataManager, DatasetReader  # noqa: E402
from predictors.evaluation import EvaluationOptions, evaluate  # noqa: E402
from predictors.manifests import Manifest  # noqa: E402
from predictors.processing import preprocessor_for  # noqa: E402


@dataclass(frozen=True)
class Case:
    model: str
    dataset: str
    limit: int | None
    repeat: int  # timed passes over the inputs per loop


CASES = (
    Case("digits-cnn", "digits", None, 3),
    Case("resnet-18", "shapes-color", 64, 1),
)
BATCH_SIZES = (1, 32)
WARMUP = 3


# -- bare loops: the framework's own API, nothing else ----------------------------------------


def bare_pytorch(
    path: Path, threads: int
) -> Callable[[list[np.ndarray], int], tuple[list[int], int]]:
    import torch

    torch.set_num_threads(threads)
    model = torch.jit.load(str(path)).eval()

    def loop(batches: list[np.ndarray], warmup: int) -> tuple[list[int], int]:
        perf = time.perf_counter_ns
        durations = []
        with torch.inference_mode():
            for i in range(warmup):
                model(torch.from_numpy(batches[i % len(batches)])).numpy()
            loop_start = perf()
            for batch in batches:
                start = perf()
                model(torch.from_numpy(batch)).numpy()
                durations.append(perf() - start)
            return durations, perf() - loop_start

    return loop


def bare_onnxruntime(
    path: Path, threads: int
) -> Callable[[list[np.ndarray], int], tuple[list[int], int]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    output = session.get_outputs()[0].name

    def loop(batches: list[np.ndarray], warmup: int) -> tuple[list[int], int]:
        perf = time.perf_counter_ns
        durations = []
        for i in range(warmup):
            session.run([output], {name: batches[i % len(batches)]})
        loop_start = perf()
        for batch in batches:
            start = perf()
            session.run([output], {name: batch})
            durations.append(perf() - start)
        return durations, perf() - loop_start

    return loop


def bare_tensorflow(
    path: Path, threads: int
) -> Callable[[list[np.ndarray], int], tuple[list[int], int]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # already set, to the same numbers, by the evaluation loop
    model = keras.saving.load_model(path, compile=False)
    spec = model.inputs[0]
    function = tf.function(
        lambda x: model(x, training=False),
        input_signature=[tf.TensorSpec((None, *spec.shape[1:]), spec.dtype)],
    )

    def loop(batches: list[np.ndarray], warmup: int) -> tuple[list[int], int]:
        perf = time.perf_counter_ns
        durations = []
        for i in range(warmup):
            function(batches[i % len(batches)]).numpy()
        loop_start = perf()
        for batch in batches:
            start = perf()
            function(batch).numpy()
            durations.append(perf() - start)
        return durations, perf() - loop_start

    return loop


BARE = {"pytorch": bare_pytorch, "onnxruntime": bare_onnxruntime, "tensorflow": bare_tensorflow}


# -- one case ----------------------------------------------------------------------------------


def staged_batches(
    model: Manifest, dataset: Manifest, fetch: Callable[..., Path], size: int, limit: int | None
) -> list[np.ndarray]:
    split = dataset.data["splits"]["validation"]
    preprocessor = preprocessor_for(model.data["inputs"][0])
    reader = DatasetReader(fetch(split["path"], split.get("sha256")), size, limit=limit)
    return [preprocessor.batch(images) for images, _ in reader]


def full_batch_mean(durations: list[int], sizes: list[int], size: int) -> float:
    full = [d for d, n in zip(durations, sizes, strict=True) if n == size] or durations
    return float(np.mean(full)) / 1e6


def measure(
    case: Case,
    framework: str,
    size: int,
    threads: int,
    rounds: int,
    catalog: Catalog,
    fetch: Callable[..., Path],
) -> dict[str, Any]:
    from tqdm import tqdm

    model = catalog.find_model(case.model, "*", framework)
    dataset = catalog.find_dataset(case.dataset)
    batches = staged_batches(model, dataset, fetch, size, case.limit) * case.repeat
    sizes = [len(b) for b in batches]
    inputs = sum(sizes)
    bare = BARE[framework](fetch(model.data["model"]["graph_path"]), threads)
    options = EvaluationOptions(
        batch_sizes=(size,),
        limit=case.limit,
        warmup=WARMUP,
        repeat=case.repeat,
        threads=threads,
        trace_level="model",
    )

    def ours() -> tuple[float, float]:
        with open(os.devnull, "w") as sink, tqdm(file=sink, unit="batch") as bar:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            result = evaluate(model, dataset, options, fetch, progress=progress).result
        entry = result["batch_sizes"][0]
        assert entry["timed_inputs"] == inputs
        return entry["latency"]["mean_ms"], entry["timed_wall_ms"] / inputs

    def baseline() -> tuple[float, float]:
        durations, wall = bare(batches, WARMUP)
        return full_batch_mean(durations, sizes, size), wall / 1e6 / inputs

    latency_ratios, loop_ratios = [], []
    bare_means, our_means = [], []
    for index in range(rounds):
        first, second = (baseline, ours) if index % 2 == 0 else (ours, baseline)
        a, b = first(), second()
        (bare_mean, bare_per_input), (our_mean, our_per_input) = (
            (a, b) if first is baseline else (b, a)
        )
        bare_means.append(bare_mean)
        our_means.append(our_mean)
        latency_ratios.append(our_mean / bare_mean)
        loop_ratios.append(our_per_input / bare_per_input)
    return {
        "model": case.model,
        "framework": framework,
        "batch_size": size,
        "timed_batches": len(batches),
        "bare_mean_ms": statistics.median(bare_means),
        "ours_mean_ms": statistics.median(our_means),
        "latency_ratio": statistics.median(latency_ratios),
        "loop_ratio": statistics.median(loop_ratios),
        "latency_ratio_range": [min(latency_ratios), max(latency_ratios)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=default_store())
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default=",".join(c.model for c in CASES))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    catalog = Catalog()
    fetch = DataManager(store_dir=args.store).fetch
    wanted = args.models.split(",")
    rows: list[dict[str, Any]] = []
    for case in CASES:
        if case.model not in wanted:
            continue
        for framework in catalog.model_frameworks(case.model, "*"):
            for size in BATCH_SIZES:
                row = measure(case, framework, size, args.threads, args.rounds, catalog, fetch)
                rows.append(row)
                print(
                    f"{case.model} {framework} batch {size}: latency x{row['latency_ratio']:.3f}"
                    f", loop x{row['loop_ratio']:.3f}",
                    file=sys.stderr,
                )
    stack = introspection.stack(sorted({str(r["framework"]) for r in rows}))
    if args.json:
        print(json.dumps({"threads": args.threads, "rows": rows, "stack": stack}, indent=2))
        return 0
    cpu = stack["cpu"]
    print(
        f"{cpu['model']}, {cpu['usable_cores']} usable cores, {args.threads} intra-op thread(s), "
        f"trace level model, {args.rounds} rounds, {WARMUP} warm-up batches; "
        + ", ".join(f"{k} {v}" for k, v in stack["frameworks"].items())
    )
    print()
    print(
        "| model | framework | batch | timed batches | bare mean ms | ours mean ms "
        "| latency ratio (range) | loop ratio |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        low, high = r["latency_ratio_range"]
        print(
            f"| {r['model']} | {r['framework']} | {r['batch_size']} | {r['timed_batches']} "
            f"| {r['bare_mean_ms']:.3f} | {r['ours_mean_ms']:.3f} "
            f"| {r['latency_ratio']:.3f} ({low:.2f}–{high:.2f}) | {r['loop_ratio']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
