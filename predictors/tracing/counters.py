"""Hardware counters, sampled while an evaluation runs (trace level `hardware`).

A `CounterSampler` runs a background thread that reads, every `interval_s` (default 20 ms)
for the host and every `gpu_interval_s` (default 100 ms) for the GPU:

- on the host (psutil): the system's CPU utilization since the previous sample
  (`cpu.util_pct`) and this process's resident memory (`process.rss_mib`);
- on a CUDA device, through NVML (`pynvml`, from nvidia-ml-py): power draw (`gpu.power_w`), SM
  and memory-controller utilization over NVML's own sample period (`gpu.sm_util_pct`,
  `gpu.mem_util_pct`), memory used (`gpu.mem_used_mib`), SM and memory clocks
  (`gpu.sm_clock_mhz`, `gpu.mem_clock_mhz`) and temperature (`gpu.temperature_c`).

Each sample becomes one span of level `hardware`, op type `counter`, with one numeric attribute
`mlms.counter.<name>` per counter (the name ends in its unit): the hub draws them as counter
tracks. A counter NVML does not support on a device is left out, with a note.

The thread holds the GIL for a few tens of microseconds per host sample; at 20 ms that is well
under 1% of a core. NVML queries are slower and go through the GPU driver, which the
evaluation's own CUDA calls also use, and NVML refreshes power and utilization only every few
tens of milliseconds (utilization is itself an average over NVML's sample period), so GPU
counters are read less often. What sampling costs shows in the `hardware` rows of the tracing
overhead benchmark (benchmarks/README.md).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from predictors.protocol import COUNTER_OP_TYPE, Attr
from predictors.tracing import Span

__all__ = ["CounterSampler", "GPU_SAMPLE_INTERVAL_S", "SAMPLE_INTERVAL_S", "nvml_index"]

SAMPLE_INTERVAL_S = 0.02
GPU_SAMPLE_INTERVAL_S = 0.1
CLOCK_SAMPLER = "time.time_ns at each sample (host wall clock); a sample spans one interval"


def nvml_index(device: str) -> int:
    """NVML's index of CUDA device `device` (`cuda` or `cuda:N`): CUDA numbers the devices
    CUDA_VISIBLE_DEVICES lists, NVML all of them."""
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [entry.strip() for entry in visible.split(",")]
        if index < len(entries) and entries[index].isdigit():
            return int(entries[index])
    return index


class CounterSampler:
    """Samples counters in a background thread between `start()` and `stop()`; `stop()`
    returns the samples as spans. `notes` says what could not be read."""

    def __init__(
        self,
        device: str,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
        gpu_interval_s: float = GPU_SAMPLE_INTERVAL_S,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive; got {interval_s}")
        if gpu_interval_s < interval_s:
            raise ValueError(
                f"gpu_interval_s must be at least interval_s ({interval_s}); got {gpu_interval_s}"
            )
        self.device = device
        self.interval_s = interval_s
        # The GPU is read on every n-th host sample.
        self._gpu_every = max(round(gpu_interval_s / interval_s), 1)
        self._ticks = 0
        self.attributes = attributes or {}
        self.notes: list[str] = []
        self._samples: list[tuple[str, int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()
        self._gpu: list[tuple[str, Callable[[], float]]] = []
        self._nvml: Any = None

    # -- the readers ----------------------------------------------------------------------------

    def _open_nvml(self) -> None:
        if not self.device.startswith("cuda"):
            return
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
        except Exception as exc:  # no nvidia-ml-py, or no driver
            self.notes.append(f"no GPU counters: NVML is not available ({exc})")
            return
        self._nvml = pynvml
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(self.device))
        readers: list[tuple[str, Callable[[], float]]] = [
            ("gpu.power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            ("gpu.sm_util_pct", lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            (
                "gpu.mem_util_pct",
                lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).memory),
            ),
            (
                "gpu.mem_used_mib",
                lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
            ),
            (
                "gpu.sm_clock_mhz",
                lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            ),
            (
                "gpu.mem_clock_mhz",
                lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
            ),
            (
                "gpu.temperature_c",
                lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
            ),
        ]
        for name, read in readers:
            try:
                read()
            except Exception as exc:  # NVMLError_NotSupported and the like
                self.notes.append(f"{name} is not available on {self.device}: {exc}")
            else:
                self._gpu.append((name, read))

    def _sample(self, gpu: bool = True) -> None:
        now = time.time_ns()
        host = {
            "cpu.util_pct": float(psutil.cpu_percent(interval=None)),
            "process.rss_mib": self._process.memory_info().rss / 2**20,
        }
        self._samples.append(("host", now, host))
        if self._gpu and gpu:
            values: dict[str, float] = {}
            for name, read in self._gpu:
                try:
                    values[name] = float(read())
                except Exception:  # noqa: S112 - a failed read leaves a gap, not an error
                    continue
            self._samples.append((f"nvml {self.device}", now, values))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._ticks += 1
            self._sample(gpu=self._ticks % self._gpu_every == 0)

    # -- the API ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sampler is already running")
        self._open_nvml()
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement
        self._sample()
        self._thread = threading.Thread(target=self._run, name="mlms-counters", daemon=True)
        self._thread.start()

    def stop(self) -> list[Span]:
        """Stop sampling (one last sample first); the samples as spans, in time order."""
        if self._thread is None:
            return []
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: S110 - shutting down is best effort
                pass
            self._nvml = None
        host_ns = int(self.interval_s * 1e9)
        gpu_ns = host_ns * self._gpu_every
        spans = []
        for source, start, values in self._samples:
            on_gpu = source.startswith("nvml")
            device = self.device if on_gpu else "cpu"
            interval_ns = gpu_ns if on_gpu else host_ns
            attributes: dict[str, Any] = {
                **self.attributes,
                Attr.LEVEL: "hardware",
                Attr.OP_TYPE: COUNTER_OP_TYPE,
                Attr.DEVICE: device,
                Attr.CLOCK: CLOCK_SAMPLER,
                **{f"{Attr.COUNTER_PREFIX}{name}": value for name, value in values.items()},
            }
            spans.append(Span(source, start, start + interval_ns, attributes))
        self._samples = []
        return spans
