#!/usr/bin/env bash
# The GPU figures in benchmarks/README.md, as they were produced on an H100 machine (Python 3.12
# with its own PyTorch; no Django, no TensorFlow): run from the repository root, with the
# zoo's trained models (built where TensorFlow is, by `python -m predictors.zoo build`) in
# $STORE, and the Python packages the machine lacks in $WHEELS.
#
#   STORE=.gpu_store WHEELS=.whl OUT=/tmp/gpu bash benchmarks/h100.sh [part]
#
# part: all (default), check (tests, latency, agreement, trace), overhead (overhead ratios),
# trace (the ResNet-50 trace and the overhead of levels system_library and hardware),
# roofline (the GPU tests, then ResNet-18/50 and their layers on the GPU's measured roofline).
set -euo pipefail
STORE=${STORE:-var/artifacts}
OUT=${OUT:-var/gpu}
PART=${1:-all}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 ARTIFACT_ROOT=$PWD/$STORE
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -m predictors.zoo build --store "$STORE" --only datasets/shapes-color datasets/digits \
  resnet-18 resnet-50 --jobs 3 > "$OUT/zoo.json"

if [ "$PART" = all ] || [ "$PART" = check ]; then
  echo "=== GPU tests"
  python3 -m pytest --noconftest -p no:cacheprovider -m gpu -q -rs tests/predictors \
    2>&1 | tee "$OUT/pytest.txt" || echo "=== GPU tests FAILED (see above)"
  echo "=== trace fixture"
  MLMS_STORE=$STORE python3 tests/fixtures/traces/record.py \
    "$OUT/digits-cnn-h100-system_library.json.gz"
  echo "=== latency, agreement, ResNet-50 trace"
  python3 benchmarks/gpu.py --store "$STORE" --out "$OUT" | tee "$OUT/gpu.md"
fi
if [ "$PART" = trace ]; then
  echo "=== ResNet-50 trace; the hardware level's overhead"
  python3 benchmarks/gpu.py --store "$STORE" --out "$OUT" --trace-only | tee "$OUT/trace.json"
  python3 benchmarks/overhead.py --store "$STORE" --device cuda --frameworks pytorch \
    --models digits-cnn,resnet-50 --batch-sizes 1,32 --rounds 3 --baseline none \
    --trace-level system_library,hardware | tee "$OUT/overhead-hardware.md"
fi
if [ "$PART" = all ] || [ "$PART" = overhead ]; then
  echo "=== loop overhead against a bare loop, on the GPU"
  python3 benchmarks/overhead.py --store "$STORE" --device cuda --frameworks pytorch \
    --models digits-cnn,resnet-50 --rounds 7 | tee "$OUT/overhead-bare.md"
  echo "=== tracing overhead per level, on the GPU"
  python3 benchmarks/overhead.py --store "$STORE" --device cuda --frameworks pytorch \
    --models digits-cnn,resnet-50 --batch-sizes 1,32 --rounds 3 --baseline none \
    --trace-level application,model,framework,ml_library,system_library,hardware \
    | tee "$OUT/overhead-levels.md"
fi
if [ "$PART" = roofline ]; then
  echo "=== GPU tests (the predictor tests' own fixtures; none of the hub's)"
  python3 -m pytest --confcutdir tests/predictors -p no:cacheprovider -m gpu -q -rs \
    tests/predictors 2>&1 | tee "$OUT/pytest.txt" || echo "=== GPU tests FAILED (see above)"
  echo "=== a result's theoretical performance on the GPU"
  python3 -m predictors.cli evaluate resnet-50 --framework pytorch --dataset digits \
    --device cuda --batch-sizes 32 --limit 64 --store "$STORE" --no-progress --format json \
    > "$OUT/evaluate-cuda.json" && python3 -c "import json, sys
t = json.load(open(sys.argv[1]))['results'][0]['theoretical']
print({k: t[k] for k in ('counted', 'macs', 'params', 'achieved', 'roofline')})" \
    "$OUT/evaluate-cuda.json"
  echo "=== a repeat study of digits-cnn in PyTorch on the CPU and the GPU, input by input"
  python3 -m predictors.cli study digits-cnn --framework pytorch --dataset digits \
    --device cpu,cuda --runs 3 --threads 1 --batch-sizes 8 --limit 256 --store "$STORE" \
    --no-progress | tee "$OUT/study-cpu-cuda.txt"
  echo "=== LoadGen on the GPU: ResNet-50, offline and a server QPS search"
  python3 -m predictors.cli evaluate resnet-50 --framework pytorch --dataset digits \
    --device cuda --batch-sizes 32 --limit 256 --store "$STORE" --no-progress \
    --scenario offline --min-duration-ms 2000 | tee "$OUT/loadgen-offline.txt" | grep -E "LoadGen|Result is|per second"
  python3 -m predictors.cli evaluate resnet-50 --framework pytorch --dataset digits \
    --device cuda --batch-sizes 8 --limit 256 --store "$STORE" --no-progress \
    --scenario server --find-peak-qps --latency-bound-ms 15 --target-qps 200 \
    --min-duration-ms 1000 --min-query-count 256 | tee "$OUT/loadgen-server.txt" \
    | sed -n '/QPS search/,$p'
  echo "=== the roofline of the GPU, and ResNet-18/50 on it"
  python3 benchmarks/roofline.py --store "$STORE" --device cuda --models resnet-18,resnet-50 \
    --frameworks pytorch --batch-sizes 1,32,128 --layer-batch-size 32 --limit 256 \
    --json "$OUT/roofline-cuda.json" | tee "$OUT/roofline-cuda.md"
fi
