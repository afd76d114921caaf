"""Models and their layers on the device's roofline: the FLOP/s each achieves against the roof
its run stated (`predictors.analysis.roofline`: the framework's own matrix product, the processor's
theoretical peak, a STREAM triad, each with its method), from the multiply-adds counted in the
graph (`predictors.analysis.flops`). A measurement, not a test; see benchmarks/README.md ("Theoretical
performance and the roofline").

    python benchmarks/roofline.py [--store DIR] [--device cpu|cuda] [--models a,b]
        [--frameworks onnxruntime,pytorch] [--batch-sizes 1,32] [--layer-batch-size 1]
        [--limit 64] [--top 5] [--json FILE]

For each model and framework: an evaluation at trace level `model` over the batch sizes gives
the model's achieved GFLOP/s at its p50 latency and its share of the roof at its intensity
(min(peak, bandwidth x intensity)), on the roofline its result carries; a second at trace level
`framework` at one batch size gives each layer's mean duration, so the `--top` layers with the
most multiply-adds are placed too. A point above the roof is printed with its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from predictors.analysis import roofline  # noqa: E402
from predictors.analysis.flops import layer_of  # noqa: E402
from predictors.data import DataManager  # noqa: E402
from predictors.evaluation import EvaluationOptions, evaluate  # noqa: E402
from predictors.manifests.catalog import Catalog  # noqa: E402
from predictors.protocol import Attr  # noqa: E402
from predictors.zoo.build import default_store  # noqa: E402

LAYER_NOTE = (
    "above the compute roof: the layer's count (multiply-adds by the direct formulas, no fusion) "
    "may overstate the work its kernel did (a Winograd or FFT convolution does less), or its "
    "span leave part of its time out"
)


def _intensity(macs: int, activation: int, weights: int, batch: int) -> float:
    return 2 * macs * batch / (activation * batch + weights)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    catalog = Catalog()
    fetch = DataManager(store_dir=args.store).fetch
    dataset = catalog.find_dataset(args.dataset)
    report: dict[str, Any] = {"device": args.device, "models": []}
    for name in args.models.split(","):
        for framework in args.frameworks.split(","):
            model = catalog.find_model(name, "*", framework)
            common = {"split": "validation", "device": args.device, "limit": args.limit}
            whole = evaluate(
                model,
                dataset,
                EvaluationOptions(
                    batch_sizes=tuple(int(b) for b in args.batch_sizes.split(",")),
                    trace_level="model",
                    **common,
                ),
                fetch,
            ).result
            theoretical = whole["theoretical"]
            if not theoretical["counted"]:
                raise SystemExit(f"{name} ({framework}): {theoretical['reason']}")
            roof = theoretical["roofline"]
            if not roof["measured"]:
                raise SystemExit(f"{name} ({framework}): no roofline: {roof['reason']}")
            layers = theoretical["layers"]
            activation = sum(layer["activation_bytes"] for layer in layers)
            weights = sum(layer["weight_bytes"] for layer in layers)
            rows = []
            for achieved in theoretical["achieved"]:
                batch = achieved["batch_size"]
                intensity = _intensity(theoretical["macs"], activation, weights, batch)
                rows.append(
                    {
                        "batch_size": batch,
                        "intensity": round(intensity, 2),
                        "gflops_per_s": achieved["gflops_per_s"],
                        "of_peak": achieved["of_peak"],
                        "of_roof": round(
                            achieved["gflops_per_s"] / roofline.roof_at(roof, intensity), 4
                        ),
                        "note": achieved.get("note"),
                    }
                )
            # Each layer's mean duration at one batch size, from a trace at level framework; on
            # a GPU, from level system_library: the layer's kernels, not its host-side launch.
            gpu = args.device != "cpu"
            traced = evaluate(
                model,
                dataset,
                EvaluationOptions(
                    batch_sizes=(args.layer_batch_size,),
                    trace_level="system_library" if gpu else "framework",
                    **common,
                ),
                fetch,
            )
            durations: dict[str, list[int]] = defaultdict(list)
            kernels: dict[str, int] = defaultdict(int)
            for span in traced.spans:
                if span.attributes.get(Attr.LEVEL) == "framework":
                    durations[span.name].append(span.end_ns - span.start_ns)
                elif span.attributes.get(Attr.OP_TYPE) == "kernel":
                    layer_name = span.attributes.get(Attr.LAYER_NAME)
                    if layer_name:
                        kernels[layer_name] += span.end_ns - span.start_ns
            if gpu:  # the kernels' time per call of the layer
                durations = {
                    name: [kernels[name] // len(calls)] * len(calls)
                    for name, calls in durations.items()
                    if name in kernels
                }
            # ONNX Runtime names a fused node after its output tensor (`flops.layer_of`).
            by_layer: dict[str, list[int]] = {}
            for span_name, calls_ns in durations.items():
                layer_name = layer_of(theoretical, span_name)
                if layer_name and layer_name not in by_layer:
                    by_layer[layer_name] = calls_ns
            durations = by_layer
            batch = args.layer_batch_size
            top = sorted((layer for layer in layers if layer["macs"]), key=lambda x: -x["macs"])
            placed = []
            for layer in top[: args.top]:
                times = durations.get(layer["name"])
                if not times:
                    continue
                mean_ns = sum(times) / len(times)
                intensity = _intensity(
                    layer["macs"], layer["activation_bytes"], layer["weight_bytes"], batch
                )
                gflops = 2 * layer["macs"] * batch / mean_ns
                note = roofline.note_above(roof, gflops, intensity)
                placed.append(
                    {
                        "layer": layer["name"],
                        "macs": layer["macs"],
                        "intensity": round(intensity, 2),
                        "mean_us": round(mean_ns / 1e3, 1),
                        "gflops_per_s": round(gflops, 2),
                        "of_roof": round(gflops / roofline.roof_at(roof, intensity), 4),
                        # A layer's own point: its count may overstate its kernel's work.
                        "note": note and note.replace(roofline.COUNT_NOTE, LAYER_NOTE),
                    }
                )
            report["models"].append(
                {
                    "model": name,
                    "framework": framework,
                    "roofline": roof,
                    "macs": theoretical["macs"],
                    "params": theoretical["params"],
                    "batch_sizes": rows,
                    "layers_at_batch_size": batch,
                    "layers": placed,
                    "layers_traced": len(durations),
                }
            )
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Peaks of {report['device']} per framework, as its runs stated them:", ""]
    seen: set[str] = set()
    for model in report["models"]:
        roof = model["roofline"]
        if model["framework"] in seen:
            continue
        seen.add(model["framework"])
        peaks = roof["peaks"]
        lines.append(f"- {model['framework']}:")
        for name, key, unit, found in (
            ("measured", "gflops", "GFLOP/s", peaks["measured"]),
            ("theoretical", "gflops", "GFLOP/s", peaks["theoretical"]),
            ("bandwidth", "gb_per_s", "GB/s", roof["bandwidth"]),
        ):
            value = found.get(key)
            lines.append(
                f"  - {name}: {value} {unit}: {found['method']}"
                if value
                else f"  - {name}: unknown: {found['reason']}"
            )
    lines += [
        "",
        "Each run's roof is its framework's measured peak unless one of its points passed it "
        "(then the theoretical peak, or the best point, flagged).",
    ]
    lines += [
        "",
        "| model | framework | roof GFLOP/s | GMACs | batch | FLOP/byte | GFLOP/s | of the peak "
        "| of the roof |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes: list[str] = []
    for model in report["models"]:
        for row in model["batch_sizes"]:
            mark = ""
            if row["note"]:
                notes.append(row["note"])
                mark = f" [{len(notes)}]"
            roof = model["roofline"]
            lines.append(
                f"| {model['model']} | {model['framework']} | {roof['peak_gflops_per_s']} "
                f"({roof['roof']['source']}) | {model['macs'] / 1e9:.3f} | "
                f"{row['batch_size']} | {row['intensity']} | {row['gflops_per_s']} | "
                f"{100 * row['of_peak']:.1f} % | {100 * row['of_roof']:.1f} %{mark} |"
            )
    lines += [
        "",
        "| model | framework | layer (batch) | MMACs | FLOP/byte | mean µs | GFLOP/s | of the roof |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for model in report["models"]:
        for layer in model["layers"]:
            mark = ""
            if layer["note"]:
                notes.append(layer["note"])
                mark = f" [{len(notes)}]"
            lines.append(
                f"| {model['model']} | {model['framework']} | {layer['layer']} "
                f"({model['layers_at_batch_size']}) | {layer['macs'] / 1e6:.1f} | "
                f"{layer['intensity']} | {layer['mean_us']} | {layer['gflops_per_s']} | "
                f"{100 * layer['of_roof']:.1f} %{mark} |"
            )
    if notes:
        lines += ["", "Above the roof:"] + [f"[{i}] {note}" for i, note in enumerate(notes, 1)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=default_store())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="resnet-18")
    parser.add_argument("--frameworks", default="onnxruntime,pytorch")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--layer-batch-size", type=int, default=1)
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = measure(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(markdown(report))


if __name__ == "__main__":
    main()
