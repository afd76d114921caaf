"""A device's roofline: the compute peak and memory bandwidth a model's (and each layer's)
achieved FLOP/s and arithmetic intensity are set against (`predictors.analysis.flops`), each with how it
was obtained.

- **measured peak**: the best matrix product of the framework the evaluation runs on, at the
  run's thread count and dtype (float32 unless the run is another): `torch.matmul`, an ONNX
  Runtime `MatMul` graph built in memory with `onnx.helper`, `tf.linalg.matmul`; numpy's BLAS
  where no framework is named (an agent's host roofline). Products of each size in `SIZES`
  (`GPU_SIZES` on a GPU), the best of `ROUNDS` after one warm-up.
- **theoretical peak**: from the processor: cores × clock × vector lanes × FMA units × 2 flops,
  the lanes read from the CPU's flags in /proc/cpuinfo (avx512f: 16 float32 lanes, avx/avx2: 8,
  sse: 4; Arm's asimd: 4), the clock from cpufreq's `cpuinfo_max_freq` or else /proc/cpuinfo's
  `cpu MHz`; a GPU's from its properties (SMs × clock × float32 lanes per SM of its compute
  capability). The flags do not say how many FMA units a core has: two are assumed where the
  CPU has FMA. A virtual machine reports its nominal clock, not its boost clock, so a product
  may pass this figure: it is an estimate, stated as one.
- **bandwidth**: a STREAM-style triad `a[i] = b[i] + s·c[i]` over arrays of `TRIAD_LLC_TIMES`
  times the last-level cache (at least `TRIAD_MIN_BYTES` each), counting the bytes of `b` and
  `c` read and `a` written (STREAM's rule: 3 arrays per pass), the best of `ROUNDS`; the arrays
  are capped by the memory available (the method says so where that keeps them in reach of the
  cache).

`place` then chooses the roof a run's points are set against and says which: the measured
peak, unless a point passed it; then the theoretical peak, if it holds every point; else the
best point itself, which is flagged as an error of the counts (a point cannot pass both). A
point's share of the roof is therefore at most 100 % by construction, and a point above the
memory slope at its intensity carries the reason (its bytes stay in the caches, faster than the
memory the triad measured).
"""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "COUNT_NOTE",
    "FRAMEWORKS",
    "attach",
    "bandwidth",
    "matmul_peak",
    "measure",
    "note_above",
    "place",
    "roof_at",
    "theoretical_cpu",
    "theoretical_peak",
]

FRAMEWORKS = ("numpy", "onnxruntime", "pytorch", "tensorflow")
SIZES = (512, 1024)
GPU_SIZES = (4096, 8192)
ROUNDS = 5
TRIAD_MIN_BYTES = 64 << 20
TRIAD_LLC_TIMES = 4
TRIAD_MAX_BYTES = 1 << 30
TRIAD_BLOCK = 1 << 16  # elements per block, so that `s·c` stays in the cache between its ops

# FP32 lanes per streaming multiprocessor by compute capability (NVIDIA's CUDA C++ Programming
# Guide, "Arithmetic Instructions": 32-bit floating-point add, multiply, multiply-add results
# per clock cycle per multiprocessor).
_CUDA_FP32_LANES = {
    (6, 0): 64, (6, 1): 128, (6, 2): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64,
    (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128, (10, 3): 128,
    (12, 0): 128, (12, 1): 128,
}  # fmt: skip

COUNT_NOTE = (
    "above every stated peak: an error of the counts (multiply-adds by the direct formulas, "
    "with no fusion; a kernel that does less work, a Winograd or FFT convolution, passes them) "
    "or a clock above the one read"
)


def _best(call: Callable[[], Any], rounds: int = ROUNDS, synchronize: Any = None) -> float:
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


def _threads(count: int, kind: str = "") -> str:
    return f"{count} {kind}thread{'s' if count != 1 else ''}"


def _sizes(sizes: Sequence[int]) -> str:
    return " and ".join(f"{n}×{n}" for n in sizes)


# --- theoretical peaks ---------------------------------------------------------------------


def _processors(cpuinfo: str) -> list[dict[str, str]]:
    """/proc/cpuinfo's blocks, one per logical processor, as key → value."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in [*cpuinfo.splitlines(), ""]:
        if not line.strip():
            if "processor" in current:
                blocks.append(current)
            current = {}
            continue
        key, colon, value = line.partition(":")
        if colon:
            current[key.strip()] = value.strip()
    return blocks


def theoretical_cpu(
    cpuinfo: str,
    *,
    max_freq_khz: float | None = None,
    cpus: Collection[int] | None = None,
    threads: int | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    """The theoretical peak GFLOP/s of the processor `cpuinfo` (the text of /proc/cpuinfo)
    describes: its physical cores (those of the logical `cpus` where given, at most `threads`)
    × clock (`max_freq_khz`, else the highest `cpu MHz`) × `dtype` lanes of its widest vector
    flag × FMA units × 2. `{"gflops": None, "reason": …}` where the text cannot say."""
    processors = _processors(cpuinfo)
    if cpus is not None:
        processors = [p for p in processors if int(p["processor"]) in set(cpus)]
    if not processors:
        return {"gflops": None, "reason": "/proc/cpuinfo lists no processor"}
    if all("physical id" in p and "core id" in p for p in processors):
        cores = len({(p["physical id"], p["core id"]) for p in processors})
    else:
        cores = len(processors)
    used = min(cores, threads) if threads else cores
    core_text = (
        f"{used} core{'s' if used != 1 else ''} (the run's {threads} thread"
        f"{'s' if threads != 1 else ''} of {cores})"
        if threads and threads < cores
        else f"{used} core{'s' if used != 1 else ''}"
    )
    if max_freq_khz:
        ghz, clock_text = max_freq_khz / 1e6, "cpufreq cpuinfo_max_freq"
    else:
        speeds = [float(p["cpu MHz"]) for p in processors if "cpu MHz" in p]
        if not speeds:
            return {
                "gflops": None,
                "reason": "no clock: /proc/cpuinfo has no cpu MHz and cpufreq no cpuinfo_max_freq",
            }
        ghz, clock_text = max(speeds) / 1e3, "cpu MHz in /proc/cpuinfo, boost not counted"
    flags = set((processors[0].get("flags") or processors[0].get("Features") or "").split())
    if "avx512f" in flags:
        lanes, flag = 16, "avx512f"
    elif "avx2" in flags or "avx" in flags:
        lanes, flag = 8, "avx2" if "avx2" in flags else "avx"
    elif "sse" in flags or "sse2" in flags:
        lanes, flag = 4, "sse"
    elif "asimd" in flags:
        lanes, flag = 4, "asimd"
    else:
        return {
            "gflops": None,
            "reason": "no vector flag this reads (avx512f, avx2, avx, sse, asimd)",
        }
    if dtype == "float64":
        lanes //= 2
    elif dtype != "float32":
        return {"gflops": None, "reason": f"the flags give no {dtype} lanes"}
    if "fma" in flags or flag in ("avx512f", "asimd"):
        # Two FMA units a core (Haswell and later, Zen 2 and later, Arm's Neoverse): the flags
        # do not say how many, so this is assumed, and an FMA is 2 flops.
        units, flops, units_text = 2, 2, "2 FMA units (assumed) × 2 flops"
    else:  # a multiply and an add a cycle
        units, flops, units_text = 2, 1, "2 units (a multiply and an add; no fma flag) × 1 flop"
    gflops = used * ghz * lanes * units * flops
    return {
        "gflops": round(gflops, 2),
        "method": f"{core_text} × {ghz:.3f} GHz ({clock_text}) × {lanes} {dtype} lanes ({flag}) "
        f"× {units_text}",
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _nvml_clock_mhz(index: int) -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML here
        return None


def _cuda_clock_khz(index: int, props: Any) -> tuple[float | None, str]:
    rate = getattr(props, "clock_rate", None)  # kHz, where torch exposes it
    if rate:
        return float(rate), "torch device properties"
    mhz = _nvml_clock_mhz(index)
    if mhz:
        return mhz * 1e3, "NVML max SM clock"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=clocks.max.sm",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        return float(out.strip().splitlines()[0]) * 1e3, "nvidia-smi clocks.max.sm"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None, "no clock (torch, NVML and nvidia-smi gave none)"


def _theoretical_cuda(device: str, dtype: str) -> dict[str, Any]:
    try:
        import torch

        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
    except Exception as exc:  # noqa: BLE001 - no torch, or no such device
        return {"gflops": None, "reason": f"no GPU properties: {type(exc).__name__}: {exc}"}
    capability = (props.major, props.minor)
    lanes = _CUDA_FP32_LANES.get(capability)
    if lanes is None or dtype != "float32":
        return {
            "gflops": None,
            "reason": f"{dtype} lanes per SM of compute capability {props.major}.{props.minor} "
            "unknown",
        }
    khz, source = _cuda_clock_khz(index, props)
    if khz is None:
        return {"gflops": None, "reason": source}
    sms = props.multi_processor_count
    ghz = khz / 1e6
    return {
        "gflops": round(sms * ghz * lanes * 2, 2),
        "method": f"{props.name}: {sms} SMs × {ghz:.3f} GHz ({source}) × {lanes} float32 lanes "
        f"per SM (compute capability {props.major}.{props.minor}) × 2 flops (FMA); "
        "tensor cores (TF32) not counted",
    }


@functools.cache
def theoretical_peak(
    device: str = "cpu", threads: int | None = None, dtype: str = "float32"
) -> dict[str, Any]:
    """This machine's theoretical peak for `device`, as `theoretical_cpu` (from /proc/cpuinfo,
    the CPUs this process may run on) or from the GPU's properties."""
    if device != "cpu":
        return _theoretical_cuda(device, dtype)
    cpuinfo = _read("/proc/cpuinfo")
    if cpuinfo is None:
        return {"gflops": None, "reason": "no /proc/cpuinfo on this system"}
    max_freq = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        cpus: Collection[int] | None = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        cpus = None
    return theoretical_cpu(
        cpuinfo,
        max_freq_khz=float(max_freq) if max_freq and max_freq.strip().isdigit() else None,
        cpus=cpus,
        threads=threads,
        dtype=dtype,
    )


# --- measured peaks ------------------------------------------------------------------------


def _numpy_cpu(threads: int | None, dtype: str) -> dict[str, Any]:
    if threads:
        raise ValueError("numpy's BLAS runs on its own threads: measure a framework at a count")
    rng = np.random.default_rng(0)
    best = _products(
        lambda n: (
            rng.standard_normal((n, n)).astype(dtype),
            rng.standard_normal((n, n)).astype(dtype),
        ),
        lambda a, b: np.matmul(a, b),
    )
    return {**best, "method": f"numpy matmul (its BLAS, its own threads) {_sizes(SIZES)} "
            f"{dtype}, best of {ROUNDS} each"}  # fmt: skip


def _products(
    make: Callable[[int], tuple[Any, Any]],
    run: Callable[[Any, Any], Any],
    sizes: Sequence[int] = SIZES,
    synchronize: Any = None,
) -> dict[str, Any]:
    """The best GFLOP/s of `run` over square products of `sizes` (each timed apart)."""
    best = 0.0
    at = sizes[0]
    for n in sizes:
        a, b = make(n)
        seconds = _best(functools.partial(run, a, b), synchronize=synchronize)
        gflops = 2 * n**3 / seconds / 1e9
        if gflops > best:
            best, at = gflops, n
    return {"gflops": round(best, 2), "size": at}


def _torch(device: str, threads: int | None, dtype: str) -> dict[str, Any]:
    import torch

    kind = getattr(torch, dtype)
    if device == "cpu":
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            used = torch.get_num_threads()
            best = _products(
                lambda n: (torch.randn(n, n, dtype=kind), torch.randn(n, n, dtype=kind)),
                lambda a, b: torch.matmul(a, b),
            )
        finally:
            torch.set_num_threads(before)
        return {**best, "method": f"torch.matmul {_sizes(SIZES)} {dtype}, {_threads(used)}, "
                f"best of {ROUNDS} each"}  # fmt: skip

    def synchronize() -> None:
        torch.cuda.synchronize(device)

    # The products run in the math mode cuDNN's convolutions run in (TF32 where
    # `torch.backends.cudnn.allow_tf32`, PyTorch's default), the bulk of a vision model's work.
    tf32 = bool(torch.backends.cudnn.allow_tf32) and dtype == "float32"
    before_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        best = _products(
            lambda n: (
                torch.randn(n, n, device=device, dtype=kind),
                torch.randn(n, n, device=device, dtype=kind),
            ),
            lambda a, b: torch.matmul(a, b),
            GPU_SIZES,
            synchronize,
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before_tf32
        torch.cuda.empty_cache()  # an agent measures once, then shares the GPU
    return {**best, "method": f"torch.matmul {_sizes(GPU_SIZES)} {dtype} on {device} (TF32 "
            f"{'on' if tf32 else 'off'}, as cuDNN's convolutions run), best of {ROUNDS} each"}  # fmt: skip


def _onnxruntime(device: str, threads: int | None, dtype: str) -> dict[str, Any]:
    import onnx
    import onnxruntime
    from onnx import helper

    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if device == "cpu":
        providers: list[Any] = ["CPUExecutionProvider"]
        sizes, index = SIZES, 0
    else:
        index = int(device.partition(":")[2] or 0)
        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            raise RuntimeError("this onnxruntime has no CUDAExecutionProvider")
        providers = [("CUDAExecutionProvider", {"device_id": index})]
        sizes = GPU_SIZES
    rng = np.random.default_rng(0)
    sessions: dict[int, Any] = {}

    def make(n: int) -> tuple[Any, Any]:
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["A", "B"], ["Y"])],
            "matmul",
            [helper.make_tensor_value_info(name, element, [n, n]) for name in ("A", "B")],
            [helper.make_tensor_value_info("Y", element, [n, n])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=providers
        )
        a = rng.standard_normal((n, n)).astype(dtype)
        b = rng.standard_normal((n, n)).astype(dtype)
        if device == "cpu":
            sessions[n] = session
            return a, b
        # On the GPU the operands stay there: only the product is timed.
        binding = session.io_binding()
        for name, value in (("A", a), ("B", b)):
            binding.bind_ortvalue_input(
                name, onnxruntime.OrtValue.ortvalue_from_numpy(value, "cuda", index)
            )
        binding.bind_output("Y", "cuda", index)
        return session, binding

    def run(first: Any, second: Any) -> Any:
        if device == "cpu":
            return sessions[first.shape[0]].run(None, {"A": first, "B": second})
        return first.run_with_iobinding(second)  # synchronizes with the device as it returns

    best = _products(make, run, sizes)
    threads_text = _threads(threads, "intra-op ") if threads else "its default intra-op threads"
    where = "" if device == "cpu" else f" on {device} (CUDA execution provider)"
    return {**best, "method": f"onnxruntime MatMul {_sizes(sizes)} {dtype}{where}, "
            f"{threads_text}, best of {ROUNDS} each"}  # fmt: skip


def _tensorflow(device: str, threads: int | None, dtype: str) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    threading = tf.config.threading
    if threads and threading.get_intra_op_parallelism_threads() != threads:
        try:  # possible only before TensorFlow starts its pools
            threading.set_intra_op_parallelism_threads(threads)
            threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass
    used = threading.get_intra_op_parallelism_threads()
    threads_text = _threads(used, "intra-op ") if used else "its default intra-op threads"
    if threads and used != threads:
        threads_text += f" (its pools were sized before; the run asked {threads})"
    name = "/CPU:0" if device == "cpu" else f"/GPU:{int(device.partition(':')[2] or 0)}"
    kind = tf.dtypes.as_dtype(dtype)
    rng = np.random.default_rng(0)
    with tf.device(name):

        def make(n: int) -> tuple[Any, Any]:
            return (
                tf.constant(rng.standard_normal((n, n)), dtype=kind),
                tf.constant(rng.standard_normal((n, n)), dtype=kind),
            )

        def run(a: Any, b: Any) -> Any:
            # Reading one element back waits for the product (on a GPU too).
            return tf.linalg.matmul(a, b)[0, 0].numpy()

        best = _products(make, run, SIZES if device == "cpu" else GPU_SIZES)
    sizes = SIZES if device == "cpu" else GPU_SIZES
    where = "" if device == "cpu" else f" on {device} (TF32 as TensorFlow has it)"
    return {**best, "method": f"tf.linalg.matmul {_sizes(sizes)} {dtype}{where}, "
            f"{threads_text}, best of {ROUNDS} each"}  # fmt: skip


_MEASURERS: dict[str, Callable[[str, int | None, str], dict[str, Any]]] = {
    "onnxruntime": _onnxruntime,
    "pytorch": _torch,
    "tensorflow": _tensorflow,
}


def matmul_peak(
    framework: str, device: str = "cpu", threads: int | None = None, dtype: str = "float32"
) -> dict[str, Any]:
    """The best GFLOP/s of `framework`'s own matrix product on `device` at `threads` and
    `dtype`, with its `method`; `{"gflops": None, "reason": …}` where it cannot run."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}; got {framework!r}")
    try:
        if framework == "numpy":
            if device != "cpu":
                raise RuntimeError("numpy runs on the CPU only")
            found = _numpy_cpu(threads, dtype)
        else:
            found = _MEASURERS[framework](device, threads, dtype)
    except Exception as exc:  # noqa: BLE001 - a framework or device that cannot run the product
        return {"gflops": None, "framework": framework, "reason": f"{type(exc).__name__}: {exc}"}
    return {"framework": framework, "dtype": dtype, **found}


# --- bandwidth -----------------------------------------------------------------------------


def _llc_bytes() -> int | None:
    """The largest cache of cpu0 (sysfs), in bytes."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        text = _read(str(index / "size"))
        if text and text.strip()[:-1].isdigit():
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text.strip()[-1].upper(), 1)
            sizes.append(int(text.strip()[:-1]) * unit)
    return max(sizes) if sizes else None


def _available_bytes() -> int:
    """The memory this process may still take: /proc/meminfo's MemAvailable, under the cgroup's
    limit where one is set (cgroup v2 `memory.max`)."""
    available = TRIAD_MAX_BYTES * 12
    meminfo = _read("/proc/meminfo") or ""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    limit = (_read("/sys/fs/cgroup/memory.max") or "").strip()
    used = (_read("/sys/fs/cgroup/memory.current") or "").strip()
    if limit.isdigit() and used.isdigit():
        available = min(available, int(limit) - int(used))
    return max(available, 0)


def _triad_cpu(threads: int | None) -> dict[str, Any]:
    llc = _llc_bytes()
    array_bytes = max(TRIAD_MIN_BYTES, TRIAD_LLC_TIMES * (llc or 0))
    # The three arrays take at most a quarter of the memory available (a container's limit
    # included), and each at most TRIAD_MAX_BYTES.
    room = min(TRIAD_MAX_BYTES, _available_bytes() // 12)
    capped = array_bytes > room
    array_bytes = min(array_bytes, room) // (1 << 20) << 20
    n = array_bytes // 8
    workers = threads or len(os.sched_getaffinity(0))
    b = np.full(n, 1.0)
    c = np.full(n, 2.0)
    a = np.empty(n)
    scalar = 3.0
    bounds = [n * i // workers for i in range(workers + 1)]

    def part(index: int) -> None:
        scratch = np.empty(TRIAD_BLOCK)
        for start in range(bounds[index], bounds[index + 1], TRIAD_BLOCK):
            stop = min(start + TRIAD_BLOCK, bounds[index + 1])
            step = scratch[: stop - start]
            np.multiply(c[start:stop], scalar, out=step)
            np.add(b[start:stop], step, out=a[start:stop])

    with ThreadPoolExecutor(workers) as pool:
        seconds = _best(lambda: list(pool.map(part, range(workers))))
    if a[0] != 7.0 or a[-1] != 7.0:
        raise RuntimeError("the triad computed a wrong value")
    cache = f"last-level cache {llc >> 20} MiB" if llc else "last-level cache size unknown"
    if capped:
        cache += ", capped by the memory available: partly cached"
    return {
        "gb_per_s": round(3 * array_bytes / seconds / 1e9, 2),
        "method": f"STREAM triad a = b + s·c, numpy float64, 3 arrays of {array_bytes >> 20} MiB "
        f"({cache}), {_threads(workers)} in blocks of {TRIAD_BLOCK * 8 >> 10} KiB; 3 arrays' "
        f"bytes counted per pass, best of {ROUNDS}",
    }


def _triad_cuda(device: str) -> dict[str, Any]:
    import torch

    array_bytes = 4 * (TRIAD_MIN_BYTES)
    n = array_bytes // 4
    b = torch.ones(n, device=device)
    c = torch.full((n,), 2.0, device=device)
    a = torch.empty(n, device=device)

    def run() -> None:
        torch.add(b, c, alpha=3.0, out=a)

    seconds = _best(run, synchronize=lambda: torch.cuda.synchronize(device))
    return {
        "gb_per_s": round(3 * array_bytes / seconds / 1e9, 2),
        "method": f"STREAM triad a = b + s·c, torch.add float32 on {device}, 3 arrays of "
        f"{array_bytes >> 20} MiB; 3 arrays' bytes counted per pass, best of {ROUNDS}",
    }


@functools.cache
def bandwidth(device: str = "cpu", threads: int | None = None) -> dict[str, Any]:
    """The memory bandwidth of `device` in GB/s by a STREAM-style triad, with its `method`;
    `{"gb_per_s": None, "reason": …}` where it cannot run."""
    try:
        if device == "cpu":
            return _triad_cpu(threads)
        found = _triad_cuda(device)
        import torch

        torch.cuda.empty_cache()  # the arrays went with `_triad_cuda`'s frame
        return found
    except Exception as exc:  # noqa: BLE001 - a device or library that cannot run the triad
        return {"gb_per_s": None, "reason": f"{type(exc).__name__}: {exc}"}


# --- the roofline --------------------------------------------------------------------------


@functools.cache
def measure(
    device: str = "cpu",
    framework: str | None = None,
    threads: int | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    """The roofline of `device` (`cpu`, `cuda`, `cuda:N`) for `framework` (numpy on the CPU
    and torch on a GPU when none is named) at `threads` and `dtype`, measured once per
    process: both peaks (`peaks.measured`, `peaks.theoretical`) and the `bandwidth`, each with
    its method or the reason it is missing; `peak_gflops_per_s` is the measured peak where
    there is one, else the theoretical one (`place` may raise it to hold a run's points);
    `measured: false` with the `reason` where neither exists."""
    framework = framework or ("numpy" if device == "cpu" else "pytorch")
    measured = matmul_peak(framework, device, threads, dtype)
    theoretical = theoretical_peak(device, threads, dtype)
    memory = bandwidth(device, threads)
    found: dict[str, Any] = {
        "device": device,
        "framework": framework,
        "threads": threads,
        "dtype": dtype,
        "peaks": {"measured": measured, "theoretical": theoretical},
        "bandwidth": memory,
    }
    if measured.get("gflops"):
        roof = {"gflops": measured["gflops"], "source": "measured",
                "why": f"the measured peak of {framework}'s matrix product"}  # fmt: skip
    elif theoretical.get("gflops"):
        roof = {"gflops": theoretical["gflops"], "source": "theoretical",
                "why": f"the theoretical peak ({framework}'s matrix product did not run: "
                       f"{measured.get('reason')})"}  # fmt: skip
    else:
        return found | {
            "measured": False,
            "reason": f"no compute peak: {framework}'s matrix product: {measured.get('reason')}; "
            f"theoretical: {theoretical.get('reason')}",
        }
    return found | _summary(found, roof)


def _summary(found: Mapping[str, Any], roof: Mapping[str, Any]) -> dict[str, Any]:
    """The flat keys of a roofline whose roof is `roof`: the peak, bandwidth, ridge, method."""
    peaks, memory = found["peaks"], found["bandwidth"]
    parts = [
        f"{name} {peaks[name]['gflops']} GFLOP/s: {peaks[name]['method']}"
        for name in ("measured", "theoretical")
        if peaks[name].get("gflops")
    ]
    if memory.get("gb_per_s"):
        parts.append(f"bandwidth {memory['gb_per_s']} GB/s: {memory['method']}")
    bandwidth_gb = memory.get("gb_per_s")
    return {
        "measured": True,
        "roof": dict(roof),
        "peak_gflops_per_s": roof["gflops"],
        "bandwidth_gb_per_s": bandwidth_gb,
        "ridge_flop_per_byte": round(roof["gflops"] / bandwidth_gb, 3) if bandwidth_gb else None,
        "method": f"roof: {roof['why']}; " + "; ".join(parts),
    }


def roof_at(roofline: Mapping[str, Any], intensity: float | None) -> float:
    """The roof's GFLOP/s at `intensity` FLOP/byte: min(peak, bandwidth × intensity); the peak
    where the intensity or the bandwidth is unknown."""
    peak = float(roofline["peak_gflops_per_s"])
    bandwidth_gb = roofline.get("bandwidth_gb_per_s")
    if not bandwidth_gb or not intensity:
        return peak
    return min(peak, float(bandwidth_gb) * intensity)


def note_above(
    roofline: Mapping[str, Any],
    gflops: float,
    intensity: float | None,
    moved_bytes: float | None = None,
) -> str | None:
    """Why a point of `gflops` at `intensity` lies above the roof (None where it does not): above
    the compute peak, an error of the counts; under it but above the memory slope, its bytes
    (`moved_bytes`, where known) stay in the caches."""
    if not roofline.get("measured"):
        return None
    if gflops > float(roofline["peak_gflops_per_s"]) * (1 + 1e-9):
        return COUNT_NOTE
    if gflops > roof_at(roofline, intensity) * (1 + 1e-9):
        size = (
            f" ({moved_bytes / (1 << 20):.1f} MiB of weights and activations)"
            if moved_bytes
            else ""
        )
        return (
            f"above the memory slope at its intensity: its bytes{size} stay in the caches, "
            "faster than the memory the triad measured"
        )
    return None


def place(
    roofline: Mapping[str, Any], achieved: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The roofline a run's `achieved` points (`gflops_per_s` per `batch_size`, with their
    `intensity` and `bytes` where known) are set against, and the points with their share of
    its peak (`of_peak`, at most 1) and, for a point above the roof, its `note`.

    The roof is the measured peak while it holds every point; else the theoretical peak if it
    does (`roof.source` says which, `roof.why` why); else the best point itself, so that no
    share passes 100 %, and the points above every stated peak are flagged as an error of the
    counts."""
    points = [dict(point) for point in achieved]
    if not roofline.get("measured"):
        return dict(roofline), points
    values = [p["gflops_per_s"] for p in points if isinstance(p.get("gflops_per_s"), int | float)]
    best = max(values, default=0.0)
    peaks = roofline["peaks"]
    measured = peaks["measured"].get("gflops")
    theoretical = peaks["theoretical"].get("gflops")
    roof = dict(roofline["roof"])
    if best > roof["gflops"]:
        top = max(
            (p for p in points if p.get("gflops_per_s") == best), key=lambda p: p["batch_size"]
        )
        passed = ", ".join(
            f"{name} {value} GFLOP/s" for name, value in
            (("measured", measured), ("theoretical", theoretical)) if value and value < best
        )  # fmt: skip
        if theoretical and best <= theoretical:
            roof = {"gflops": theoretical, "source": "theoretical",
                    "why": f"the theoretical peak: batch size {top['batch_size']} reached {best} "
                           f"GFLOP/s, past the measured peak of {roofline['framework']}'s matrix "
                           f"product ({measured} GFLOP/s)"}  # fmt: skip
        else:
            roof = {"gflops": best, "source": "best point",
                    "why": f"the best point, batch size {top['batch_size']} at {best} GFLOP/s: it "
                           f"passed every stated peak ({passed}), which the counts or the clock "
                           "must explain"}  # fmt: skip
    placed = dict(roofline) | _summary(roofline, roof)
    stated = max(value for value in (measured, theoretical, 0.0) if value is not None)
    for point in points:
        value = point.get("gflops_per_s")
        if not isinstance(value, int | float):
            continue
        point["of_peak"] = round(value / roof["gflops"], 4)
        if roof["source"] == "best point" and value > stated:
            point["note"] = COUNT_NOTE
        else:
            note = note_above(placed, value, point.get("intensity"), point.get("bytes"))
            if note:
                point["note"] = note
    return placed, points


def attach(
    theoretical: Mapping[str, Any],
    device: str,
    framework: str,
    threads: int | None = None,
    sample: Any = None,
) -> dict[str, Any]:
    """A result's `theoretical` (`predictors.analysis.flops.theoretical`) with the roofline of its run:
    `framework`'s on `device` at `threads`, in the dtype of the batch it fed (`sample`: float16
    or float64 where it is one, else float32), its `achieved` points placed on it (`place`)."""
    dtype = str(getattr(sample, "dtype", "float32"))
    measured = measure(
        device,
        framework if framework in FRAMEWORKS else None,
        threads,
        dtype if dtype in ("float16", "float32", "float64") else "float32",
    )
    found, achieved = place(copy.deepcopy(measured), theoretical.get("achieved") or [])
    return {**theoretical, "roofline": found} | (
        {"achieved": achieved} if "achieved" in theoretical else {}
    )
