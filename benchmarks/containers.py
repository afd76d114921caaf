"""What running an evaluation in its predictor container costs: digits-cnn through a hub, on
the same machine, once by an agent in its own process (the host's virtualenv) and once by an
agent with `--docker` (the framework's image), per framework. A measurement, not a test; see
benchmarks/README.md.

    .venv/bin/python benchmarks/containers.py [--frameworks onnxruntime,pytorch,tensorflow]
        [--rounds 5] [--batch-sizes 1,32] [--repeat 2] [--json]

Needs a Docker engine and the framework images (`make images`), and the zoo's digits-cnn and
digits (built into tests/artifacts where missing). The hub is the embedded default in a
temporary folder (`tests.livehub`, as the suite runs it), with two agents: `host`
(no container) and `docker` (`--docker`, no limits). Each round launches the same evaluation on
both, one after the other, alternating which goes first, and never two at once; the latencies
are the ones each result reports (the evaluation loop's own timing of each batch, in the
process that runs the model). For each framework and batch size the table gives the median
over the rounds of each host's p50 and of the ratio container / host of a round, with its
range, and whether the two runs' predictions agree input by input (the hub's comparison).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks._hub import log, machine  # noqa: E402
from tests.livehub import LiveHub  # noqa: E402

IMAGES = {
    "onnxruntime": "mlmodelscope/onnxruntime:1.31-cpu",
    "pytorch": "mlmodelscope/pytorch:2.13-cpu",
    "tensorflow": "mlmodelscope/tensorflow:2.21-cpu",
}


def _run(hub: LiveHub, host: str, framework: str, batch_sizes: list[int], repeat: int) -> Any:
    evaluation_id = hub.launch(
        framework=framework, host=host, batch_sizes=batch_sizes, repeat=repeat
    )
    body = hub.finished(evaluation_id, timeout=600)
    if body["status"] != "succeeded":
        raise SystemExit(f"{framework} on {host}: {body['status']}: {body['history'][-1]}")
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", default="onnxruntime,pytorch,tensorflow")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument(
        "--repeat", type=int, default=2, help="passes over the dataset per evaluation"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON as well")
    args = parser.parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = [f for f in frameworks if f not in IMAGES]
    if unknown:
        parser.error(f"--frameworks: unknown {', '.join(unknown)}; choose from {', '.join(IMAGES)}")
    if args.rounds < 1 or args.repeat < 1:
        parser.error("--rounds and --repeat must be at least 1")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    for framework in frameworks:
        found = subprocess.run(
            ["docker", "image", "inspect", IMAGES[framework]], capture_output=True
        ).returncode
        if found != 0:
            raise SystemExit(f"no image {IMAGES[framework]}: run `make images` first")

    from tests.predictors.zoo_store import zoo_store

    store = zoo_store(("digits", "digits-cnn"))
    log(f"machine: {machine()}")
    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlms-containers-") as folder:
        settings = {"ARTIFACT_ROOT": str(store), "EVALUATION_SWEEP_SECONDS": "0"}
        with LiveHub(Path(folder), settings=settings) as hub:
            hub.migrate()
            hub.load_manifests()
            hub.add_users()
            hub.start()
            listed = ",".join(frameworks)
            hub.start_agent("host", frameworks=listed)
            hub.start_agent("docker", frameworks=listed, options=["--docker"])
            hub.wait(lambda: {"host", "docker"} <= hub.live_hosts(), "the agents", 120)
            for framework in frameworks:
                # One unmeasured run each: the container's first start reads its image from
                # disk, the host's first run warms the page cache.
                for host in ("host", "docker"):
                    _run(hub, host, framework, [1], 1)
                p50: dict[str, dict[int, list[float]]] = {
                    host: {b: [] for b in batch_sizes} for host in ("host", "docker")
                }
                agreement: list[float] = []
                digest = ""
                for index in range(args.rounds):
                    order = ("host", "docker") if index % 2 == 0 else ("docker", "host")
                    bodies = {
                        host: _run(hub, host, framework, batch_sizes, args.repeat) for host in order
                    }
                    for host, body in bodies.items():
                        for b in batch_sizes:
                            p50[host][b].append(body["result"]["latency"][str(b)]["p50_ms"])
                    digest = bodies["docker"]["result"]["stack"]["container"]["digest"]
                    status, compared = hub.get(
                        f"compare/?evaluations={bodies['host']['id']},{bodies['docker']['id']}"
                    )
                    if status != 200:
                        raise SystemExit(f"compare: {status} {compared}")
                    agreement.append(compared["accuracy"]["rows"][1]["agreement"])
                    log(f"{framework}: round {index + 1}/{args.rounds} done")
                for b in batch_sizes:
                    ratios = [d / h for d, h in zip(p50["docker"][b], p50["host"][b], strict=True)]
                    rows.append(
                        {
                            "framework": framework,
                            "image": IMAGES[framework],
                            "digest": digest,
                            "batch": b,
                            "rounds": args.rounds,
                            "host_p50_ms": statistics.median(p50["host"][b]),
                            "container_p50_ms": statistics.median(p50["docker"][b]),
                            "ratio": statistics.median(ratios),
                            "ratio_min": min(ratios),
                            "ratio_max": max(ratios),
                            "agreement": min(agreement),
                        }
                    )
    print(
        "| framework | image (digest) | batch | rounds | host p50 ms | container p50 ms "
        "| p50 ratio container / host (range) | per-input agreement |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['framework']} | `{row['image']}` ({row['digest'][7:19]}) | {row['batch']} "
            f"| {row['rounds']} | {row['host_p50_ms']:.3f} | {row['container_p50_ms']:.3f} "
            f"| {row['ratio']:.3f} ({row['ratio_min']:.3f}–{row['ratio_max']:.3f}) "
            f"| {row['agreement']:.2%} |"
        )
    log(f"{time.monotonic() - started:.0f} s")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
