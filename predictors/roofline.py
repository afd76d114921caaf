"""A host's roofline: the peak compute and memory bandwidth a device reaches, measured once per
process by a short microbenchmark, against which a model's (and each layer's) achieved FLOP/s
and arithmetic intensity are placed (`predictors.flops`).

- **peak compute**: float32 matrix products of `SIZE` x `SIZE` (2·n³ FLOPs each), the best of
  `ROUNDS` timed after one warm-up: numpy (the BLAS it links, every core it may use) on the CPU,
  torch on a CUDA device (synchronized, TF32 as the process has it set).
- **memory bandwidth**: a copy of a `COPY_BYTES` array into another, counting the bytes read
  and written, the best of `ROUNDS`.

Both are what this software reaches on this device, not the datasheet's figure (a framework's
own kernels may beat the BLAS: ONNX Runtime's convolutions pass OpenBLAS's sgemm on some CPUs);
the result records how they were measured. A GPU is measured with torch: a process without it
(an ONNX Runtime or TensorFlow GPU image) records `measured: false` and why. The ridge point (peak / bandwidth, FLOP per byte) divides the
layers limited by memory from those limited by compute.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

__all__ = ["measure"]

SIZE = 1024
COPY_BYTES = 64 * 1024 * 1024
ROUNDS = 5


def _best(call: Any, rounds: int = ROUNDS, synchronize: Any = None) -> float:
    call()
    if synchronize:
        synchronize()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        if synchronize:
            synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def _cpu() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    out = np.empty_like(a)
    matmul = _best(lambda: np.matmul(a, b, out=out))
    source = np.ones(COPY_BYTES // 4, dtype=np.float32)
    target = np.empty_like(source)
    copy = _best(lambda: np.copyto(target, source))
    return {
        "peak_gflops_per_s": round(2 * SIZE**3 / matmul / 1e9, 2),
        "bandwidth_gb_per_s": round(2 * COPY_BYTES / copy / 1e9, 2),
        "method": f"numpy float32 matmul {SIZE}x{SIZE}, copy of {COPY_BYTES >> 20} MiB; "
        f"best of {ROUNDS}",
    }


def _cuda(device: str) -> dict[str, Any]:
    import torch

    size = 8 * SIZE
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def synchronize() -> None:
        torch.cuda.synchronize(device)

    # The products run in the math mode cuDNN's convolutions run in (TF32 where
    # `torch.backends.cudnn.allow_tf32`, PyTorch's default), the bulk of a vision model's work.
    tf32 = bool(torch.backends.cudnn.allow_tf32)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        matmul = _best(lambda: torch.matmul(a, b), synchronize=synchronize)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    copy_bytes = 4 * COPY_BYTES
    source = torch.ones(copy_bytes // 4, device=device)
    target = torch.empty_like(source)
    copy = _best(lambda: target.copy_(source), synchronize=synchronize)
    return {
        "peak_gflops_per_s": round(2 * size**3 / matmul / 1e9, 2),
        "bandwidth_gb_per_s": round(2 * copy_bytes / copy / 1e9, 2),
        "method": f"torch float32 matmul {size}x{size} (TF32 {'on' if tf32 else 'off'}, as "
        "cuDNN's convolutions run), copy of "
        f"{copy_bytes >> 20} MiB on the device; best of {ROUNDS}",
    }


@functools.cache
def measure(device: str = "cpu") -> dict[str, Any]:
    """The roofline of `device` (`cpu`, `cuda`, `cuda:N`) as this process measures it, once:
    peak GFLOP/s, bandwidth in GB/s, the ridge point in FLOP per byte and the method; a device
    that cannot be measured says why (`measured: false`, `reason`)."""
    try:
        found = _cpu() if device == "cpu" else _cuda(device)
        if device != "cpu":
            # Give the memory back (its tensors went with `_cuda`'s frame): an agent measures
            # once and then shares the GPU with evaluations.
            import torch

            torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001 - a device or library that fails to run the benchmark
        return {"device": device, "measured": False, "reason": f"{type(exc).__name__}: {exc}"}
    return {
        "device": device,
        "measured": True,
        **found,
        "ridge_flop_per_byte": round(found["peak_gflops_per_s"] / found["bandwidth_gb_per_s"], 3),
    }
