"""The PyTorch predictor on a CUDA GPU: latency per batch size, CPU-vs-GPU agreement, and a
system_library + hardware trace of ResNet-50. A measurement, not a test; see
benchmarks/README.md ("GPU").

    python benchmarks/gpu.py [--store DIR] [--out DIR] [--device cuda] [--json]

1. **Latency** — for each model, `evaluate` on the GPU at trace level `model` for each batch
   size (the CUDA clock: perf_counter after `torch.cuda.synchronize`), with the p50/p90/p99
   batch latency and the throughput.
2. **Agreement** — the same inputs evaluated on the CPU and on the GPU, compared input by input
   (`predictors.evaluation.compare`): top-1 agreement and max |Δ output|.
3. **Trace** — ResNet-50 at trace level `hardware` (layers, aten ops, CUDA runtime calls, GPU
   kernels and copies, NVML and host counters). It prints the number of GPU activity spans
   against torch.profiler's own count of the GPU activities it recorded in the same run, the
   layers with the most GPU time, and writes the spans to `OUT/resnet-50-trace.json.gz` (one
   JSON object per span: what `mlms` records, to export to a hub later with
   `benchmarks/trace_upload.py`). With `MLMS_TORCH_TRACE_DIR` set, torch.profiler's own Chrome
   trace is kept too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from predictors.data import DataManager  # noqa: E402
from predictors.evaluation import Evaluation, EvaluationOptions, compare, evaluate  # noqa: E402
from predictors.host import introspection  # noqa: E402
from predictors.manifests.catalog import Catalog  # noqa: E402
from predictors.protocol import Attr  # noqa: E402
from predictors.zoo.build import default_store  # noqa: E402

# (model, dataset, limit, batch sizes)
LATENCY_CASES = (
    ("digits-cnn", "digits", None, (1, 8, 32, 128)),
    ("resnet-18", "shapes-color", 256, (1, 8, 32, 128)),
    ("resnet-50", "shapes-color", 256, (1, 8, 32, 128)),
)


def log(message: str) -> None:
    print(f"[gpu] {message}", file=sys.stderr, flush=True)


def run(catalog: Catalog, fetch: Any, model: str, dataset: str, **options: Any) -> Evaluation:
    return evaluate(
        catalog.find_model(model, "*", "pytorch"),
        catalog.find_dataset(dataset),
        EvaluationOptions(**options),
        fetch,
    )


def latency_and_agreement(
    catalog: Catalog, fetch: Any, device: str, repeat: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    latency_rows: list[dict[str, Any]] = []
    agreement_rows: list[dict[str, Any]] = []
    for model, dataset, limit, sizes in LATENCY_CASES:
        log(f"{model}: batch sizes {sizes} on {device}")
        gpu = run(
            catalog,
            fetch,
            model,
            dataset,
            device=device,
            batch_sizes=sizes,
            limit=limit,
            warmup=5,
            repeat=repeat,
        )
        for entry in gpu.result["batch_sizes"]:
            latency = entry["latency"]
            latency_rows.append(
                {
                    "model": model,
                    "batch_size": entry["batch_size"],
                    "timed_batches": latency["count"],
                    "p50_ms": latency["p50_ms"],
                    "p90_ms": latency["p90_ms"],
                    "p99_ms": latency["p99_ms"],
                    "mean_ms": latency["mean_ms"],
                    "throughput_ips": entry["throughput_ips"],
                }
            )
        log(f"{model}: the same inputs on the cpu, for agreement")
        cpu = run(
            catalog,
            fetch,
            model,
            dataset,
            device="cpu",
            batch_sizes=(sizes[0],),
            limit=limit,
            warmup=1,
            trace_level="none",
        )
        comparison = compare(cpu, gpu)
        agreement_rows.append(
            {
                "model": model,
                "inputs": comparison["count"],
                "top1_agreement": comparison["top1_agreement"],
                "top1_disagreements": comparison["top1_disagreements"],
                "max_abs_diff": comparison["max_abs_diff"],
                "output_type": comparison["output_type"],
                "cpu_top1": cpu.result["accuracy"]["top1"],
                "gpu_top1": gpu.result["accuracy"]["top1"],
                "clock": gpu.result["clock"],
            }
        )
    return latency_rows, agreement_rows


def trace(catalog: Catalog, fetch: Any, device: str, out: Path) -> dict[str, Any]:
    log("resnet-50: trace level hardware, 4 batches of 8")
    started = time.perf_counter()
    evaluation = run(
        catalog,
        fetch,
        "resnet-50",
        "shapes-color",
        device=device,
        batch_sizes=(8,),
        limit=32,
        warmup=3,
        trace_level="hardware",
    )
    seconds = time.perf_counter() - started
    spans = evaluation.spans
    summary = evaluation.result["trace"]
    kernels = [s for s in spans if s.attributes.get(Attr.OP_TYPE) == "kernel"]
    gpu_activities = [
        s for s in spans if s.attributes.get(Attr.OP_TYPE) in ("kernel", "memcpy", "memset")
    ]
    per_layer: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for span in kernels:
        layer = str(span.attributes.get(Attr.LAYER_NAME, "?"))
        per_layer[layer][0] += 1
        per_layer[layer][1] += span.end_ns - span.start_ns
    with_layer = sum(1 for s in kernels if Attr.LAYER_NAME in s.attributes)
    counters = sorted(
        {
            key.removeprefix(Attr.COUNTER_PREFIX)
            for s in spans
            if s.attributes.get(Attr.OP_TYPE) == "counter"
            for key in s.attributes
            if key.startswith(Attr.COUNTER_PREFIX)
        }
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / "resnet-50-trace.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as file:
        json.dump(
            {
                "result": evaluation.result,
                "spans": [
                    {
                        "name": s.name,
                        "start_ns": s.start_ns,
                        "end_ns": s.end_ns,
                        "attributes": s.attributes,
                        "span_id": s.span_id,
                        "parent_id": s.parent_id,
                    }
                    for s in spans
                ],
            },
            file,
            default=str,
        )
    top = sorted(per_layer.items(), key=lambda item: -item[1][1])[:10]
    return {
        "seconds": seconds,
        "spans": len(spans),
        "levels": summary.get("levels"),
        "gpu_activity_spans": len(gpu_activities),
        "kernel_spans": len(kernels),
        "kernel_spans_with_layer": with_layer,
        "profiler": summary.get("profiler"),
        "counters": counters,
        "counter_samples": summary.get("levels", {}).get("hardware", 0),
        "top_layers": [
            {"layer": name, "kernels": count, "gpu_ms": total / 1e6} for name, (count, total) in top
        ],
        "notes": evaluation.result["notes"],
        "file": str(path),
        "p50_ms": evaluation.result["batch_sizes"][0]["latency"]["p50_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=default_store())
    parser.add_argument("--out", type=Path, default=Path("var/gpu"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per batch size")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--trace-only", action="store_true", help="only the ResNet-50 trace (part 3)"
    )
    args = parser.parse_args(argv)

    catalog = Catalog()
    fetch = DataManager(store_dir=args.store).fetch
    if args.trace_only:
        traced = trace(catalog, fetch, args.device, args.out)
        print(json.dumps(traced, indent=2, default=str))
        return 0
    latency, agreement = latency_and_agreement(catalog, fetch, args.device, args.repeat)
    traced = trace(catalog, fetch, args.device, args.out)
    stack = introspection.stack(["pytorch"])
    document = {"latency": latency, "agreement": agreement, "trace": traced, "stack": stack}
    (args.out / "gpu.json").write_text(json.dumps(document, indent=2, default=str))
    if args.json:
        print(json.dumps(document, indent=2, default=str))
        return 0
    gpu = stack["gpus"][0]["name"] if stack.get("gpus") else args.device
    print(
        f"{gpu}, host {stack['cpu']['model']}; pytorch {stack['frameworks'].get('pytorch')}; "
        f"clock: {agreement[0]['clock']}"
    )
    print()
    print("| model | batch | timed batches | p50 ms | p90 ms | p99 ms | throughput (inputs/s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in latency:
        print(
            f"| {r['model']} | {r['batch_size']} | {r['timed_batches']} | {r['p50_ms']:.3f} "
            f"| {r['p90_ms']:.3f} | {r['p99_ms']:.3f} | {r['throughput_ips']:.0f} |"
        )
    print()
    print("| model | inputs | top-1 agreement CPU vs GPU | max abs diff | CPU top-1 | GPU top-1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in agreement:
        print(
            f"| {r['model']} | {r['inputs']} | {r['top1_agreement']:.4f} "
            f"({r['top1_disagreements']} differ) | {r['max_abs_diff']:.2e} ({r['output_type']}) "
            f"| {r['cpu_top1']:.4f} | {r['gpu_top1']:.4f} |"
        )
    print()
    print(json.dumps(traced, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
