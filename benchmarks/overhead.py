"""Overhead of the evaluation loop against a bare framework loop, on the same model, batch size,
inputs and thread settings. A measurement, not a test; see benchmarks/README.md.

    .venv/bin/python benchmarks/overhead.py [--store DIR] [--threads 1] [--rounds N] [--json]
        [--trace-level LEVEL[,LEVEL…]] [--baseline bare|none] [--device cpu|cuda]

For each model, framework and batch size, in one process:

- *bare*: the model loaded with the framework's own API and run in the shortest loop that
  measures it: `perf_counter_ns()` before and after the framework's inference call on each
  batch, nothing else (PyTorch: `model(torch.from_numpy(x)).numpy()` inside one
  `torch.inference_mode()`; ONNX Runtime: `session.run`; TensorFlow: the Keras model traced into
  a `tf.function`, then `.numpy()`).
- *ours*: `predictors.evaluation.evaluate` at trace level `model` (a span per batch; or the
  level `--trace-level` names: `framework` adds a span per layer per batch) with a progress
  callback feeding a tqdm bar, as `mlms evaluate` runs it.

Both load the model afresh every round and see the same preprocessed batches, the same warm-up
and the same number of timed batches, with Python's garbage collector paused while they time
(as `timeit` does). They alternate in
rounds (bare then ours, ours then bare, …), and each round gives three ratios, ours / bare:

- p50 ratio: of the median batch latency;
- mean ratio: of the mean batch latency;
- loop ratio: of the timed loop's wall time per input (the inverse ratio of the throughputs),
  which includes what the loop does between two batches: spans, progress, bookkeeping.

`--baseline none` measures tracing instead: the baseline is then our own loop untraced
(`evaluate` at trace level `none`), and each level `--trace-level` lists is compared with it —
the cost of each trace level, as ratios against untraced runs.

`--device cuda` runs PyTorch on the GPU: the bare loop copies each batch to the device, runs
the model, synchronises and copies the output back (`model(x.to(dev)).cpu().numpy()` then
`torch.cuda.synchronize()`), as the predictor does. Only PyTorch runs there.

Latencies are of full batches. Each ratio reported is the median over the rounds; 1.00 is no
overhead. Pairing the two loops of a round cancels most of the drift of a shared machine; the
median batch latency is the statistic least moved by other jobs' interference.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
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

from predictors.data import DataManager, DatasetReader  # noqa: E402
from predictors.evaluation import EvaluationOptions, evaluate  # noqa: E402
from predictors.host import introspection  # noqa: E402
from predictors.manifests import Manifest  # noqa: E402
from predictors.manifests.catalog import Catalog  # noqa: E402
from predictors.processing import preprocessor_for  # noqa: E402
from predictors.protocol import TRACE_LEVELS, Attr  # noqa: E402
from predictors.zoo.build import default_store  # noqa: E402

Loop = Callable[[list[np.ndarray], int], tuple[list[int], int]]


@dataclass(frozen=True)
class Case:
    model: str
    dataset: str
    limit: int | None
    repeat: int  # timed passes over the inputs per loop
    rounds: int  # pairs of loops; more where a round is short


CASES = (
    Case("digits-cnn", "digits", None, 3, rounds=15),
    Case("resnet-18", "shapes-color", 96, 1, rounds=7),
    Case("resnet-50", "shapes-color", 96, 1, rounds=7),
)
DEFAULT_MODELS = ("digits-cnn", "resnet-18")
BATCH_SIZES = (1, 32)
WARMUP = 3


# -- bare loops: the framework's own API, nothing else ----------------------------------------


def bare_pytorch(path: Path, threads: int, device: str = "cpu") -> Loop:
    import torch

    torch.set_num_threads(threads)
    model = torch.jit.load(str(path), map_location=device).eval()
    if device != "cpu":
        target = torch.device(device)

        def gpu_loop(batches: list[np.ndarray], warmup: int) -> tuple[list[int], int]:
            perf = time.perf_counter_ns
            durations = []
            with torch.inference_mode():
                for i in range(warmup):
                    model(torch.from_numpy(batches[i % len(batches)]).to(target)).cpu().numpy()
                    torch.cuda.synchronize(target)
                loop_start = perf()
                for batch in batches:
                    start = perf()
                    model(torch.from_numpy(batch).to(target)).cpu().numpy()
                    torch.cuda.synchronize(target)
                    durations.append(perf() - start)
                return durations, perf() - loop_start

        return gpu_loop

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


def bare_onnxruntime(path: Path, threads: int) -> Loop:
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


def bare_tensorflow(path: Path, threads: int) -> Loop:
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


def gc_paused(loop: Loop) -> Loop:
    """The loop with Python's garbage collector paused while it runs, as in the evaluation
    loop's timed predictions (and in `timeit`)."""

    def paused(batches: list[np.ndarray], warmup: int) -> tuple[list[int], int]:
        gc.disable()
        try:
            return loop(batches, warmup)
        finally:
            gc.enable()

    return paused


# -- one case ----------------------------------------------------------------------------------


def staged_batches(
    model: Manifest, dataset: Manifest, fetch: Callable[..., Path], size: int, limit: int | None
) -> list[np.ndarray]:
    split = dataset.data["splits"]["validation"]
    preprocessor = preprocessor_for(model.data["inputs"][0], fetch)
    reader = DatasetReader(fetch(split["path"], split.get("sha256")), size, limit=limit)
    return [preprocessor.batch(images) for images, _ in reader]


@dataclass(frozen=True)
class Sample:
    """One loop's run: p50 and mean of its full batches' latencies (ms), and the wall time of
    its timed loop per input (ms)."""

    p50_ms: float
    mean_ms: float
    wall_ms_per_input: float


def full_batch_sample(durations: list[int], sizes: list[int], size: int, wall: int) -> Sample:
    full = [d for d, n in zip(durations, sizes, strict=True) if n == size] or durations
    ms = np.asarray(full, dtype=np.float64) / 1e6
    return Sample(float(np.median(ms)), float(ms.mean()), wall / 1e6 / sum(sizes))


def measure(
    case: Case,
    framework: str,
    size: int,
    threads: int,
    rounds: int,
    catalog: Catalog,
    fetch: Callable[..., Path],
    trace_level: str = "model",
    device: str = "cpu",
    baseline_level: str | None = None,
) -> dict[str, Any]:
    """One case: `rounds` pairs of (baseline, ours). The baseline is the bare framework loop,
    or, with `baseline_level`, our own loop at that trace level."""
    from tqdm import tqdm

    model = catalog.find_model(case.model, "*", framework)
    dataset = catalog.find_dataset(case.dataset)
    batches = staged_batches(model, dataset, fetch, size, case.limit) * case.repeat
    sizes = [len(b) for b in batches]
    graph = fetch(model.data["model"]["graph_path"])
    options = EvaluationOptions(
        batch_sizes=(size,),
        limit=case.limit,
        warmup=WARMUP,
        repeat=case.repeat,
        threads=threads,
        trace_level=trace_level,
        device=device,
    )

    def ours(options: EvaluationOptions = options) -> Sample:
        with open(os.devnull, "w") as sink, tqdm(file=sink, unit="batch") as bar:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            evaluation = evaluate(model, dataset, options, fetch, progress=progress)
        entry = evaluation.result["batch_sizes"][0]
        batch_spans = [s for s in evaluation.spans if s.attributes[Attr.LEVEL] == "model"]
        traced = options.trace_level not in ("none", "application")
        assert entry["timed_inputs"] == sum(sizes)
        assert len(batch_spans) == (len(batches) if traced else 0)
        latency = entry["latency"]
        return Sample(latency["p50_ms"], latency["mean_ms"], entry["timed_wall_ms"] / sum(sizes))

    def baseline() -> Sample:
        if baseline_level is not None:
            return ours(dataclasses.replace(options, trace_level=baseline_level))
        # A fresh load every round, as `evaluate` does: where a model's weights land in memory
        # moves its latency by a few percent, and one lucky or unlucky load must not bias
        # every round's ratio the same way.
        bare = gc_paused(
            bare_pytorch(graph, threads, device)
            if framework == "pytorch"
            else BARE[framework](graph, threads)
        )
        durations, wall = bare(batches, WARMUP)
        return full_batch_sample(durations, sizes, size, wall)

    pairs: list[tuple[Sample, Sample]] = []  # (bare, ours) of each round
    for index in range(rounds):
        if index % 2 == 0:
            pairs.append((baseline(), ours()))
        else:  # every other round runs ours first, so that drift favours neither
            mine = ours()
            pairs.append((baseline(), mine))

    def ratios(field: str) -> list[float]:
        return [getattr(o, field) / getattr(b, field) for b, o in pairs]

    return {
        "model": case.model,
        "framework": framework,
        "trace_level": trace_level,
        "baseline": baseline_level or "bare",
        "device": device,
        "batch_size": size,
        "timed_batches": len(batches),
        "rounds": rounds,
        "bare_p50_ms": statistics.median(b.p50_ms for b, _ in pairs),
        "ours_p50_ms": statistics.median(o.p50_ms for _, o in pairs),
        "p50_ratio": statistics.median(ratios("p50_ms")),
        "p50_ratio_range": [min(ratios("p50_ms")), max(ratios("p50_ms"))],
        "mean_ratio": statistics.median(ratios("mean_ms")),
        "loop_ratio": statistics.median(ratios("wall_ms_per_input")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=default_store())
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, help="rounds of every case (default: per case)")
    parser.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help=f"comma-separated, of {', '.join(c.model for c in CASES)} "
        f"(default: {','.join(DEFAULT_MODELS)})",
    )
    parser.add_argument("--frameworks", default="pytorch,tensorflow,onnxruntime")
    parser.add_argument("--batch-sizes", default=",".join(map(str, BATCH_SIZES)))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--trace-level",
        default="model",
        help="comma-separated trace levels, each measured against the baseline (default: model)",
    )
    parser.add_argument(
        "--baseline",
        choices=("bare", "none"),
        default="bare",
        help="bare: the framework's own loop (default); none: our loop untraced",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N] (PyTorch)")
    args = parser.parse_args(argv)
    levels = args.trace_level.split(",")
    for level in levels:
        if level not in TRACE_LEVELS:
            parser.error(f"unknown trace level {level!r}; choose from {', '.join(TRACE_LEVELS)}")
    frameworks = args.frameworks.split(",")
    if args.device != "cpu":
        frameworks = [f for f in frameworks if f == "pytorch"]
    known = {c.model for c in CASES}
    wanted = args.models.split(",")
    if unknown := [m for m in wanted if m not in known]:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")

    catalog = Catalog()
    fetch = DataManager(store_dir=args.store).fetch
    baseline_level = None if args.baseline == "bare" else args.baseline
    rows: list[dict[str, Any]] = []
    for case in CASES:
        if case.model not in wanted:
            continue
        for framework in catalog.model_frameworks(case.model, "*"):
            if framework not in frameworks:
                continue
            for size in map(int, args.batch_sizes.split(",")):
                for level in levels:
                    rounds = args.rounds or case.rounds
                    row = measure(
                        case,
                        framework,
                        size,
                        args.threads,
                        rounds,
                        catalog,
                        fetch,
                        level,
                        device=args.device,
                        baseline_level=baseline_level,
                    )
                    rows.append(row)
                    print(
                        f"{case.model} {framework} batch {size} level {level}: "
                        f"p50 x{row['p50_ratio']:.3f}, mean x{row['mean_ratio']:.3f}, "
                        f"loop x{row['loop_ratio']:.3f}",
                        file=sys.stderr,
                    )
    stack = introspection.stack(sorted({str(r["framework"]) for r in rows}))
    if args.json:
        document = {
            "threads": args.threads,
            "device": args.device,
            "baseline": args.baseline,
            "rows": rows,
        }
        print(json.dumps(document | {"stack": stack}, indent=2))
        return 0
    cpu = stack["cpu"]
    where = cpu["model"]
    if args.device != "cpu" and stack.get("gpus"):
        where = f"{stack['gpus'][0]['name']} (host: {cpu['model']})"
    print(
        f"{where}, {cpu['usable_cores']} usable cores, {args.threads} intra-op thread(s), "
        f"device {args.device}, baseline {args.baseline}, {WARMUP} warm-up batches; "
        + ", ".join(f"{k} {v}" for k, v in stack["frameworks"].items())
    )
    print()
    print(
        "| model | framework | level | batch | timed batches | rounds | baseline p50 ms "
        "| ours p50 ms | p50 ratio (range) | mean ratio | loop ratio |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        low, high = r["p50_ratio_range"]
        print(
            f"| {r['model']} | {r['framework']} | {r['trace_level']} | {r['batch_size']} "
            f"| {r['timed_batches']} | {r['rounds']} "
            f"| {r['bare_p50_ms']:.3f} | {r['ours_p50_ms']:.3f} "
            f"| {r['p50_ratio']:.3f} ({low:.2f}–{high:.2f}) | {r['mean_ratio']:.3f} "
            f"| {r['loop_ratio']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
