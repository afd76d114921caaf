"""Repeat studies: one evaluation request run N times, each in a fresh process, reported per
metric as mean, standard deviation and 95 % confidence interval, with whether the outputs are
bitwise identical across the runs and, where not, which inputs' top-1 class flips (the
command, its report and plot: `predictors.cli.study`).

A study is a grid of groups: every thread count of `threads` (docs/pitfalls.md: the
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

import hashlib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from predictors import statistics
from predictors.evaluation.options import EvaluationOptions
from predictors.manifests import Manifest

# The most inputs a report names whose top-1 class flips between runs.
# The output types whose predictions are texts (a text recognizer's), compared as texts.
TEXT_OUTPUTS = ("frame_confidences", "token_ids")
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
    top1: np.ndarray | None = None
    if result.get("output_type") in TEXT_OUTPUTS:
        # A text recognizer's prediction is its decoded text, not a class.
        top1 = np.array([row[0][1] for row in evaluation.predictions], dtype=object)
    elif outputs.ndim == 2 and outputs.shape[1]:
        top1 = outputs.argmax(axis=1)
    return {
        "pid": os.getpid(),
        "metrics": metrics_of(result),
        "outputs_sha256": hashlib.sha256(outputs.tobytes()).hexdigest(),
        "top1_classes": top1,
        "output_type": result.get("output_type"),
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
    first_top1: dict[tuple[str, int | None, int], np.ndarray | None] = {}
    ids = False
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
                first_top1[(device, thread_count, seed)] = results[0]["top1_classes"]
                ids = results[0]["output_type"] == "token_ids"
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
        "across_devices": across_devices(first_outputs, first_top1, ids=ids),
    }


def across_devices(
    outputs: dict[tuple[str, int | None, int], np.ndarray],
    top1: dict[tuple[str, int | None, int], np.ndarray | None] | None = None,
    *,
    ids: bool = False,
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
            # Emitted token ids are no scores: two devices may emit sequences of other
            # lengths, compared by their texts alone.
            if theirs is None or (theirs.shape != reference.shape and not ids):
                continue
            same_shape = theirs.shape == reference.shape
            entry: dict[str, Any] = {
                "devices": [devices[0], other],
                "threads": thread_count,
                "seed": seed,
                "inputs": int(reference.shape[0]) if reference.ndim else 0,
                "max_abs_diff": None
                if ids
                else float(np.max(np.abs(reference - theirs)))
                if reference.size
                else 0.0,
                "bitwise_identical": same_shape and bool(np.array_equal(reference, theirs)),
            }
            given = (top1 or {}).get((device, thread_count, seed))
            taken = (top1 or {}).get((other, thread_count, seed))
            if given is not None and taken is not None and len(given) == len(taken):
                flips = np.flatnonzero(given != taken)
                entry["top1_agreement"] = 1.0 - flips.size / len(given)
                entry["flipped_inputs"] = int(flips.size)
                entry["flipped_first"] = [int(i) for i in flips[:FLIPS_SHOWN]]
            elif reference.ndim == 2 and reference.shape[1]:
                flips = np.flatnonzero(reference.argmax(axis=1) != theirs.argmax(axis=1))
                entry["top1_agreement"] = 1.0 - flips.size / reference.shape[0]
                entry["flipped_inputs"] = int(flips.size)
                entry["flipped_first"] = [int(i) for i in flips[:FLIPS_SHOWN]]
            found.append(entry)
    return found
