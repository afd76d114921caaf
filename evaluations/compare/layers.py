"""Per-layer comparison, from the traces' per-layer aggregates: layers matched by name within
one framework, across frameworks by op type and order; each layer's median time, its ratio to
the baseline's and a verdict on its spans; the kernels added, removed, faster and slower."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluations.models import Evaluation
from predictors import statistics
from traces.actions import layer_durations, span_aggregates

# Per layer, a comparison tests every matched layer: a coarser bootstrap (resamples, and the
# spans of a layer it draws from) keeps a page of a deep model quick.
LAYER_RESAMPLES = 400
LAYER_SAMPLES = 400


def _layer_batch_size(per_layer: list[list[Any]]) -> int | None:
    """The batch size the layers are compared at: the smallest that every evaluation with
    layers traced, else the baseline's smallest (None: its layer spans carry no batch size)."""
    sizes = [{r.batch_size for r in rows} for rows in per_layer if rows]
    shared = set.intersection(*sizes) if sizes else set()
    for candidates in (shared, sizes[0] if sizes else set()):
        known = sorted(size for size in candidates if size is not None)
        if known:
            return known[0]
    return None


def compare(evaluations: list[Evaluation], noise: float = statistics.NOISE) -> dict[str, Any]:
    """Layers matched across the evaluations at one batch size, with their time and ratio to
    the baseline, the kernels inside each, and which kernels differ."""
    every = [span_aggregates(evaluation.trace_id) for evaluation in evaluations]
    per_layer = [[r for r in rows if r.level == "framework"] for rows in every]
    if not per_layer[0] or not any(per_layer[1:]):
        return {
            "matched_by": None,
            "batch_size": None,
            "rows": [],
            "kernels": [],
            "note": "no per-layer spans: launch at trace level framework or deeper",
        }
    # Statistics are never mixed across batch sizes: one batch size, the same for all.
    size = _layer_batch_size(per_layer)
    per_layer = [[r for r in rows if r.batch_size == size] for rows in per_layer]
    same_framework = len({e.framework for e in evaluations}) == 1
    samples = [layer_durations(evaluation.trace_id, size) for evaluation in evaluations]
    rows: list[dict[str, Any]] = []
    if same_framework:
        matched_by = "name"
        index = [{row.name: row for row in layer_rows} for layer_rows in per_layer]
        for row in sorted(
            per_layer[0], key=lambda r: (r.layer_index is None, r.layer_index, r.name)
        ):
            rows.append(
                _layer_row(
                    row.name, row.op_type, [found.get(row.name) for found in index], samples, noise
                )
            )
    else:
        matched_by = "op type and order"
        ordered = [
            sorted(layer_rows, key=lambda r: (r.layer_index is None, r.layer_index, r.name))
            for layer_rows in per_layer
        ]
        paired = [pair_by_op_type(ordered[0], layer_rows) for layer_rows in ordered[1:]]
        for position, row in enumerate(ordered[0]):
            cells: list[Any] = [row, *(pairs[position] for pairs in paired)]
            rows.append(_layer_row(row.name, row.op_type, cells, samples, noise))
    kernel_sets = [
        _kernels_by_name(
            r
            for r in rows_
            if r.level == "system_library" and r.op_type == "kernel" and r.batch_size == size
        )
        for rows_ in every
    ]
    return {
        "matched_by": matched_by,
        "batch_size": size,
        "rows": rows,
        "kernels": _kernel_diff(kernel_sets),
        "note": (
            "matched by name within one framework"
            if same_framework
            else "matched across frameworks by op type and order (best effort): layers of one "
            "op type pair up in the order they run"
        )
        + (f", at batch size {size}" if size is not None else ""),
    }


def _op_key(op_type: str | None) -> str:
    text = (op_type or "").lower()
    for plain in (
        "conv",
        "relu",
        "pool",
        "gemm",
        "linear",
        "matmul",
        "dense",
        "softmax",
        "norm",
        "add",
        "flatten",
        "dropout",
        "reshape",
    ):
        if plain in text:
            return {"linear": "gemm", "matmul": "gemm", "dense": "gemm", "reshape": "flatten"}.get(
                plain, plain
            )
    return text


def pair_by_op_type(base: Sequence[Any], other: Sequence[Any]) -> list[Any]:
    """Layers of two frameworks paired, best effort: for each of `base` (layers with an
    `op_type`, in the order they run) the layer of `other` it pairs with, or None. Layers of
    one op type (`conv`, `gemm`, …, each framework's spelling of it) pair up in the order they
    run."""
    queues: dict[str, list[Any]] = {}
    for row in other:
        queues.setdefault(_op_key(row.op_type), []).append(row)
    return [(queues.get(_op_key(row.op_type)) or [None]).pop(0) for row in base]


def _layer_row(
    name: str,
    op_type: str | None,
    cells: list[Any],
    samples: list[dict[str, np.ndarray]],
    noise: float,
) -> dict[str, Any]:
    """A matched layer: each evaluation's median time with its interval, and after the
    baseline the ratio of the medians and the verdict of the statistics layer on the layer's
    spans (`predictors.statistics.difference`)."""
    found = [
        samples[position].get(cell.name) if cell is not None else None
        for position, cell in enumerate(cells)
    ]
    medians: list[float | None] = []
    intervals: list[list[float] | None] = []
    for cell, durations in zip(cells, found, strict=True):
        if cell is None:
            medians.append(None)
            intervals.append(None)
            continue
        if durations is not None and len(durations):
            summary = statistics.latency(durations)
            medians.append(summary["p50_ms"])
            low, high = summary["p50_low_ms"], summary["p50_high_ms"]
            intervals.append([low, high] if low is not None and high is not None else None)
        else:
            medians.append(cell.p50_ns / 1e6)
            intervals.append(None)
    verdicts: list[str | None] = [None]
    for durations in found[1:]:
        base_durations = found[0]
        if (
            base_durations is None
            or durations is None
            or len(base_durations) < 2
            or len(durations) < 2
            or np.median(base_durations) <= 0
            or np.median(durations) <= 0
        ):
            verdicts.append(None)
            continue
        verdicts.append(
            statistics.difference(
                base_durations,
                durations,
                noise=noise,
                resamples=LAYER_RESAMPLES,
                most=LAYER_SAMPLES,
            ).verdict
        )
    base_median = medians[0]
    return {
        "name": name,
        "op_type": op_type,
        "names": [cell.name if cell is not None else None for cell in cells],
        "p50_ms": medians,
        "p50_interval_ms": intervals,
        "mean_ms": [cell.mean_ns / 1e6 if cell is not None else None for cell in cells],
        "count": [cell.count if cell is not None else None for cell in cells],
        "ratio": [
            median / base_median if median is not None and base_median else None
            for median in medians
        ],
        "verdict": verdicts,
        # The kernels run inside the layer: [count, total ns], or None (none traced).
        "kernels": [
            [cell.kernel_count, cell.kernel_total_ns]
            if cell is not None and cell.kernel_count is not None
            else None
            for cell in cells
        ],
    }


@dataclass
class _Kernel:
    count: int
    total_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


def _kernels_by_name(rows: Iterable[Any]) -> dict[str, _Kernel]:
    """{kernel name: its calls and time over the whole trace}: the aggregates keep a row per
    kernel name and parent path (the op and layer that ran it), summed here."""
    kernels: dict[str, _Kernel] = {}
    for row in rows:
        found = kernels.setdefault(row.name, _Kernel(0, 0))
        found.count += row.count
        found.total_ns += row.total_ns
    return kernels


def _kernel_diff(kernel_sets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per evaluation after the baseline: the kernels added, removed, faster and slower (by
    their mean time, beyond 10 %)."""
    base = kernel_sets[0]
    diffs = []
    for kernels in kernel_sets[1:]:
        common = sorted(set(base) & set(kernels))
        faster = [n for n in common if kernels[n].mean_ns < 0.9 * base[n].mean_ns]
        slower = [n for n in common if kernels[n].mean_ns > 1.1 * base[n].mean_ns]
        diffs.append(
            {
                "added": sorted(set(kernels) - set(base))[:50],
                "removed": sorted(set(base) - set(kernels))[:50],
                "faster": faster[:50],
                "slower": slower[:50],
            }
        )
    return diffs
