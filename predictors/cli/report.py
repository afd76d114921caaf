"""What `mlms evaluate` prints: a run's table (accuracy and latency per framework and batch
size, the frameworks' agreement, the host, notes and warnings), LoadGen's verdict and summary,
and the evaluations a hub ran (--hub)."""

from __future__ import annotations

from typing import Any

from predictors import statistics
from predictors.analysis.flops import si
from predictors.cli.args import table
from predictors.evaluation.target_ci import target_ci_text
from predictors.tasks import metrics_text

__all__ = ["format_loadgen", "format_remote", "format_table", "target_ci_lines"]


def _scores(entry: dict[str, Any], task: str | None) -> list[str]:
    accuracy = entry["accuracy"]
    if accuracy is None:  # latency only: nothing scored
        return ["-"]
    if task == "object_detection":
        sizes = entry.get("input_sizes") or {}
        shown = "-"
        if sizes:
            low, high = sizes["smallest"][-2:], sizes["largest"][-2:]
            shown = f"{sizes['distinct']}: {low[0]}x{low[1]}..{high[0]}x{high[1]}"
        return [f"{accuracy['map']:.4f}", f"{accuracy['map_50']:.4f}", shown]
    if task == "semantic_segmentation":
        return [
            f"{accuracy['miou']:.4f}",
            f"{accuracy['pixel_accuracy']:.2%}",
            f"{accuracy['mean_class_accuracy']:.2%}",
        ]
    if task == "multi_label_classification":
        return [
            f"{accuracy['map']:.4f}",
            f"{accuracy['f1_micro']:.4f}",
            f"{accuracy['exact_match']:.2%}",
        ]
    if task == "regression":
        r2 = accuracy.get("r2")
        return [
            f"{accuracy['mae']:.4g}",
            f"{accuracy['rmse']:.4g}",
            "-" if r2 is None else f"{r2:.4f}",
        ]
    if task == "text_recognition":
        return [
            f"{accuracy['cer']:.2%}",
            f"{accuracy['wer']:.2%}",
            f"{accuracy['exact_match']:.2%}",
        ]
    if task == "feature_extraction":
        eer = accuracy.get("eer")
        return [
            f"{accuracy['recall_at_1']:.2%}",
            f"{accuracy['recall_at_5']:.2%}",
            "-" if eer is None else f"{eer:.2%}",
        ]
    if task != "sequence_labelling":
        top5 = accuracy.get("top5")
        return [f"{accuracy['top1']:.2%}", "-" if top5 is None else f"{top5:.2%}"]
    reset = entry.get("accuracy_state_reset")
    auc = accuracy.get("roc_auc")
    return [
        f"{accuracy['top1']:.2%}",
        f"{reset['top1']:.2%}" if reset else "-",
        f"{accuracy['f1']:.4f}",
        "-" if auc is None else f"{auc:.4f}",
    ]


def format_table(report: dict[str, Any]) -> str:
    results = report["results"]
    first = results[0]
    dataset = first["dataset"]
    out = [
        f"{first['model']['name']} {first['model']['version']} on {dataset['name']} "
        f"{dataset['version']}:{dataset['split']} ({dataset['count']} inputs), "
        f"device {first['device']}, clock: {first['clock']}",
    ]
    if report["overrides"]:
        out.append("overrides: " + " ".join(report["overrides"]))
    # Sequence labelling: frame accuracy with the state carried (and reset at every call, for
    # a stateful model), F1 and ROC AUC, in place of top-1 and top-5.
    # Object detection: COCO's mAP (IoU .50:.95), mAP at IoU .50, and the input sizes.
    # Multi-label: mAP, micro F1 and exact matches; regression: MAE, RMSE and R²; text
    # recognition: CER, WER (jiwer's, in percent) and the lines read exactly.
    task = first["model"].get("task")
    scores = (
        ["accuracy"]
        if first["accuracy"] is None
        else ["accuracy", "state reset", "F1", "ROC AUC"]
        if task == "sequence_labelling"
        else ["mAP", "mAP@.5", "input sizes"]
        if task == "object_detection"
        else ["mIoU", "pixel acc", "class acc"]
        if task == "semantic_segmentation"
        else ["mAP", "F1 micro", "exact"]
        if task == "multi_label_classification"
        else ["MAE", "RMSE", "R2"]
        if task == "regression"
        else ["CER", "WER", "exact"]
        if task == "text_recognition"
        else ["recall@1", "recall@5", "EER"]
        if task == "feature_extraction"
        else ["top1", "top5"]
    )
    rows = [
        [
            "framework",
            "version",
            "batch",
            *scores,
            "median ms",
            "95 % CI",
            "p90 ms",
            "p99 ms",
            "mean ms",
            "min ms",
            "max ms",
            "std ms",
            "inputs/s",
        ],
    ]
    for result in results:
        for entry in result["batch_sizes"]:
            latency = entry["latency"]
            rows.append(
                [
                    result["framework"]["name"],
                    result["framework"]["version"],
                    str(entry["batch_size"]),
                    *_scores(entry, task),
                    *(
                        text[key]
                        for text in [statistics.latency_text(latency)]
                        for key in (
                            "p50",
                            "p50_interval",
                            "p90",
                            "p99",
                            "mean",
                            "min",
                            "max",
                            "std",
                        )
                    ),
                    statistics.per_second(entry["throughput_ips"]),
                ]
            )
    out += ["", table(rows)]
    if report["comparisons"]:
        rows = [["frameworks", "", "top-1 agreement", "differ", "max |Δ output|"]]
        for comparison in report["comparisons"]:
            a, b = comparison["frameworks"]
            rows.append(
                [
                    f"{a} vs {b}",
                    "",
                    "-"
                    if comparison["top1_agreement"] is None
                    else f"{comparison['top1_agreement']:.2%}",
                    "-"
                    if comparison["top1_disagreements"] is None
                    else f"{comparison['top1_disagreements']} of {comparison['count']}",
                    "-"
                    if comparison["max_abs_diff"] is None
                    else f"{comparison['max_abs_diff']:.3g}",
                ]
            )
        out += ["", table(rows)]
    stack = report["stack"]
    cpu = stack["cpu"]
    out += [
        "",
        f"host: {cpu['model']}, {cpu['usable_cores']} usable cores, "
        f"{stack['memory_bytes'] / 2**30:.1f} GiB, {stack['os']['platform']}, "
        f"Python {stack['python']['version']}"
        + "".join(f", GPU {gpu['name']}" for gpu in stack["gpus"]),
    ]
    for result in results:
        settings = {k: v for k, v in result["settings"].items() if v is not None}
        shown = ", ".join(f"{k} {v}" for k, v in settings.items())
        out.append(f"{result['framework']['name']}: {shown}")
        out += target_ci_lines(result["framework"]["name"], result["batch_sizes"])
        out += [f"note: {note}" for note in result["notes"]]
        out += [
            f"warning ({warning['code']}): {warning['message']}"
            for warning in result.get("hygiene") or []
        ]
        theoretical = result.get("theoretical") or {}
        if theoretical.get("counted"):
            achieved = ", ".join(
                f"{a['gflops_per_s']:.2f} GFLOP/s at batch size {a['batch_size']}"
                for a in theoretical["achieved"]
            )
            out.append(
                f"{result['framework']['name']}: {si(theoretical['macs'])} multiply-adds "
                f"and {theoretical['params']:,} parameters per input; achieved {achieved} "
                "(mlms flops lists the layers)"
            )
        if result.get("loadgen"):
            out += ["", *format_loadgen(result["framework"]["name"], result["loadgen"])]
    return "\n".join(out)


def target_ci_lines(label: str, entries: list[dict[str, Any]]) -> list[str]:
    """A line per batch size timed toward a target_ci: why its timing stopped."""
    return [
        f"{label}: batch size {entry['batch_size']}: "
        + (entry["target_ci"].get("text") or target_ci_text(entry["target_ci"]))
        for entry in entries
        if entry.get("target_ci")
    ]


def format_loadgen(framework: str, loadgen: dict[str, Any]) -> list[str]:
    """LoadGen's verdict and the run it is of, why an INVALID run is, LoadGen's warnings and
    errors apart from its notes, its summary as it wrote it, the accuracy of an accuracy run,
    and the curve of a QPS search with the reported run marked: the verdict, target, summary
    and marked row are all the reported run's."""
    settings = loadgen["settings"]
    verdict = {True: "VALID", False: "INVALID", None: "no performance verdict (an accuracy run)"}
    heading = (
        f"LoadGen {settings['scenario']} ({framework}, {settings['mode']} mode, "
        f"{settings['samples']} samples): " + verdict[loadgen["valid"]]
    )
    if settings.get("target_qps") is not None:
        heading += f", target {_qps(settings['target_qps'])} QPS"
    lines = [heading]
    reported = loadgen.get("reported")
    search = loadgen.get("search")
    if search and reported:
        lines.append(f"QPS search: showing {reported['statement']}.")
    lines += [f"INVALID: {reason}" for reason in loadgen.get("invalid_reasons") or []]
    for problem in loadgen.get("problems") or []:
        times = f" (x{problem['count']})" if problem["count"] > 1 else ""
        lines.append(f"LoadGen {problem['level']} ({problem['key']}): {problem['message']}{times}")
    notes = loadgen.get("notes")
    if notes is None:  # a result kept before notes were read apart
        notes = [f"Early stopping: {line}" for line in loadgen.get("early_stopping") or []]
    lines += [f"note: {note}" for note in notes]
    lines.append(loadgen["summary_text"].rstrip())
    accuracy = loadgen.get("accuracy")
    if accuracy:
        top5 = accuracy.get("top5")
        lines.append(
            f"LoadGen accuracy: top-1 {accuracy['top1']:.4f}"
            + (f", top-5 {top5:.4f}" if isinstance(top5, float) else "")
            + f" over {accuracy['samples']} samples"
        )
    if search:
        peak = search["peak_qps"]
        held = search.get("highest_held_qps")
        lines += [
            "",
            f"QPS search (p99 under {search['latency_bound_ms']} ms): "
            + (
                f"peak {_qps(peak)} QPS, the highest target LoadGen judged VALID"
                if peak is not None
                else "no run was VALID"
            ),
        ]
        if held is not None and (peak is None or held > peak):
            above: dict[str, Any] = next(
                (p for p in search["curve"] if p["target_qps"] == held), {}
            )
            why = "; ".join(above.get("invalid_reasons") or [])
            lines.append(
                f"The p99 also held at {_qps(held)} QPS (run {above.get('run', '?')}), a run "
                "LoadGen judged INVALID" + (f": {why}" if why else ".")
            )
        rows = [["run", "target QPS", "completed QPS", "p99 ms", "p99 held", "LoadGen", "shown"]]
        for point in search["curve"]:
            rows.append(
                [
                    str(point.get("run", "")),
                    _qps(point["target_qps"]),
                    f"{point['completed_qps']:.2f}" if point["completed_qps"] is not None else "—",
                    f"{point['p99_ms']:.3f}" if point["p99_ms"] is not None else "—",
                    "yes" if point["latency_held"] else "no",
                    {True: "VALID", False: "INVALID", None: "—"}[point["valid"]],
                    "<- reported" if point.get("reported") else "",
                ]
            )
        lines.append(table(rows))
    return lines


def _qps(value: float) -> str:
    """A QPS as the result's statement writes it: at most three decimals, no trailing zeros."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def format_remote(report: dict[str, Any]) -> str:
    lines = []
    for evaluation in report["evaluations"]:
        result = evaluation.get("result") or {}
        accuracy = result.get("accuracy") or {}
        lines.append(
            f"{evaluation['id']}  {evaluation['model']['name']} {evaluation['model']['version']} on "
            f"{evaluation['framework']} {evaluation.get('framework_version') or ''}, host {evaluation.get('host')}: "
            + (
                metrics_text(
                    str(evaluation.get("task") or ""), accuracy.get("top1"), accuracy.get("top5")
                )
                if accuracy
                else "no result"
            )
        )
        lines.append(
            f"  {'batch':>5} {'median ms':>10} {'95 % CI':>17} {'p90':>9} {'p99':>9} "
            f"{'mean ms':>9} {'inputs/s':>10}"
        )
        for size, stats in sorted((result.get("latency") or {}).items(), key=lambda kv: int(kv[0])):
            text = statistics.latency_text(stats)
            throughput = (result.get("throughput") or {}).get(size)
            lines.append(
                f"  {size:>5} {text['p50']:>10} {text['p50_interval']:>17} {text['p90']:>9} "
                f"{text['p99']:>9} {text['mean']:>9} {statistics.per_second(throughput):>10}"
            )
        lines += target_ci_lines(
            "  target CI", (result.get("details") or {}).get("batch_sizes") or []
        )
        loadgen = (result.get("details") or {}).get("loadgen")
        if loadgen:  # as the hub stored it
            lines += ["", *format_loadgen(str(evaluation["framework"]), loadgen)]
    return "\n".join(lines)
