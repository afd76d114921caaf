"""Latency and throughput compared: per batch size against the baseline (the ratio of the
medians, its interval and a verdict), normalised across systems, and as the theoretical work
each result counted against the roofline's peak."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist

from evaluations.compare.differences import label
from evaluations.models import Evaluation
from predictors import statistics
from predictors.analysis import hygiene


def _samples(row: Any) -> list[float] | None:
    try:
        return list(row.samples.samples_ms)
    except ObjectDoesNotExist:
        return None


# A side of a comparison in a verdict's words.
_SIDES = {"baseline": "the baseline", "this": "this run"}


def _questioned_by(sides: tuple[Evaluation, Evaluation], size: int) -> list[dict[str, Any]]:
    """Each side (the baseline, then the other) whose hygiene warnings question its latencies
    at batch size `size` (`hygiene.latency_questions`): which side it is (`baseline`, `this`:
    two runs of one model on one host have one label), its evaluation, label, the codes and
    their messages."""
    questioned = []
    for side, evaluation in zip(("baseline", "this"), sides, strict=True):
        details = getattr(getattr(evaluation, "result", None), "details", None)
        warnings = details.get("hygiene", []) if isinstance(details, dict) else []
        found = hygiene.latency_questions(warnings if isinstance(warnings, list) else [], size)
        if found:
            questioned.append(
                {
                    "side": side,
                    "evaluation": str(evaluation.pk),
                    "label": label(evaluation),
                    "codes": sorted({warning["code"] for warning in found}),
                    "messages": [str(warning.get("message", "")) for warning in found],
                }
            )
    return questioned


def compare(evaluations: list[Evaluation], noise: float = statistics.NOISE) -> dict[str, Any]:
    """Per batch size, each evaluation's median with its interval (the statistics layer's
    summary of its row) and, after the baseline, the difference from it: the ratio of the
    medians with its bootstrap interval, the Mann–Whitney U test and the verdict
    (`predictors.statistics.difference`). A result stored without its samples gets the ratio
    of its medians and no verdict."""
    by_size: dict[int, list[Any]] = {}
    for position, evaluation in enumerate(evaluations):
        result = getattr(evaluation, "result", None)
        for row in result.batch_results.all() if result else []:
            by_size.setdefault(row.batch_size, [None] * len(evaluations))[position] = row
    sizes = []
    for size in sorted(by_size):
        cells: list[dict[str, Any] | None] = []
        base = by_size[size][0]
        base_samples = _samples(base) if base is not None else None
        for position, row in enumerate(by_size[size]):
            if row is None:
                cells.append(None)
                continue
            cell: dict[str, Any] = {
                **row.latency,
                "batches": row.count,
                "throughput_ips": row.throughput_ips,
                "ratio": None,
                "throughput_ratio": None,
                "difference": None,
                "verdict": None,
                "questioned_by": [],
            }
            if position and base is not None and base.p50_ms > 0 and row.p50_ms > 0:
                cell["ratio"] = row.p50_ms / base.p50_ms
                cell["throughput_ratio"] = (
                    row.throughput_ips / base.throughput_ips if base.throughput_ips else None
                )
                samples = _samples(row)
                if base_samples and samples and len(base_samples) > 1 and len(samples) > 1:
                    difference = statistics.difference(base_samples, samples, noise=noise)
                    cell["difference"] = difference.to_dict()
                    cell["verdict"] = difference.words
                    cell["questioned_by"] = _questioned_by(
                        (evaluations[0], evaluations[position]), size
                    )
                    if cell["questioned_by"] and difference.verdict != statistics.NO_DIFFERENCE:
                        cell["verdict"] += "; in question: " + "; ".join(
                            f"{_SIDES[entry['side']]} warns {', '.join(entry['codes'])}"
                            for entry in cell["questioned_by"]
                        )
                else:
                    cell["verdict"] = (
                        f"×{statistics.ratio(cell['ratio'])} of the medians; no verdict: "
                        "too few samples kept to test a difference"
                    )
            cells.append(cell)
        sizes.append({"batch_size": size, "cells": cells})
    return {
        "batch_sizes": sizes,
        "headline": "median latency per batch",
        "interval": statistics.MEDIAN_INTERVAL,
        "noise": noise,
        "test": f"{statistics.LATENCY_TEST} on the timed batches; {statistics.RATIO_INTERVAL}; "
        f"a difference is called only when the test rejects at {statistics.ALPHA:g} and the "
        f"whole interval lies beyond ±{noise:.0%} (run-to-run noise)",
    }


def systems(evaluations: list[Evaluation]) -> dict[str, Any] | None:
    """Latency per batch size normalised to the baseline's host, when the evaluations ran one
    model, framework and dataset on two or more hosts."""
    keys = {(e.model_name, e.model_version, e.framework, e.dataset_name) for e in evaluations}
    hosts = {e.host_id for e in evaluations}
    if len(keys) != 1 or len(hosts) < 2:
        return None
    base = evaluations[0]
    base_rows = (
        {r.batch_size: r for r in base.result.batch_results.all()}
        if hasattr(base, "result")
        else {}
    )
    series = []
    for evaluation in evaluations:
        rows = (
            {r.batch_size: r for r in evaluation.result.batch_results.all()}
            if hasattr(evaluation, "result")
            else {}
        )
        points = [
            {
                "batch_size": size,
                "p50_ms": rows[size].p50_ms,
                "normalised": rows[size].p50_ms / base_rows[size].p50_ms,
            }
            for size in sorted(rows)
            if size in base_rows and base_rows[size].p50_ms > 0
        ]
        series.append(
            {
                "evaluation": str(evaluation.pk),
                "host": evaluation.host.name if evaluation.host else None,
                "hardware": (evaluation.result.gpu_model or evaluation.result.cpu_model)
                if hasattr(evaluation, "result")
                else "",
                "points": points,
            }
        )
    return {"reference": base.host.name if base.host else None, "series": series}


def theoretical(evaluations: list[Evaluation]) -> dict[str, Any]:
    """Each evaluation's theoretical performance as its result counted it
    (`predictors.analysis.flops`): multiply-adds and parameters per input, the FLOP/s each batch size
    achieved and its share of the roofline's peak the run measured; whether the multiply-adds
    agree (the same model in two formats must count the same work)."""
    cells: list[dict[str, Any]] = []
    for evaluation in evaluations:
        result = getattr(evaluation, "result", None)
        details = result.details if result is not None and isinstance(result.details, dict) else {}
        counted = details.get("theoretical")
        if not isinstance(counted, dict):
            cells.append({"label": label(evaluation), "present": False})
            continue
        found = counted.get("roofline")
        roof: dict[str, Any] = found if isinstance(found, dict) else {}
        peak = roof.get("peak_gflops_per_s") if roof.get("measured") else None
        achieved = [a for a in counted.get("achieved") or [] if isinstance(a, dict)]
        cells.append(
            {
                "label": label(evaluation),
                "present": True,
                "counted": bool(counted.get("counted")),
                "reason": counted.get("reason"),
                "macs": counted.get("macs"),
                "params": counted.get("params"),
                "framework": counted.get("framework"),
                "peak_gflops_per_s": peak,
                # Which peak the roof is (`predictors.analysis.roofline.place`) and why.
                "peak_why": (roof.get("roof") or {}).get("why") if peak else None,
                "bandwidth_gb_per_s": roof.get("bandwidth_gb_per_s") if peak else None,
                "achieved": [
                    {
                        "batch_size": a.get("batch_size"),
                        "gflops_per_s": a.get("gflops_per_s"),
                        # The share the run stored (at most 1, the roof holding every point);
                        # a result from before it did, against its peak.
                        "of_peak": a.get("of_peak")
                        if isinstance(a.get("of_peak"), int | float)
                        else (
                            a["gflops_per_s"] / peak
                            if peak and isinstance(a.get("gflops_per_s"), int | float)
                            else None
                        ),
                        "note": a.get("note"),
                    }
                    for a in achieved
                ],
            }
        )
    counts = {cell["macs"] for cell in cells if cell.get("counted")}
    return {
        "cells": cells,
        "macs_agree": len(counts) <= 1 if counts else None,
    }
