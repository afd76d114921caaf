"""The hardware and software stack of this host, as an evaluation result records it.

`stack(frameworks)` reads the CPU (model, cores, the cores this process may use), memory, the
operating system, Python and NumPy, the versions of the given frameworks (from the installed
packages' metadata, without importing them), NVIDIA GPUs through NVML when `pynvml` is
importable, and the container this process runs in when it can tell. Nothing here needs root or
the network.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import psutil

__all__ = [
    "DISTRIBUTIONS",
    "architecture",
    "container",
    "container_digest",
    "cpu",
    "framework_versions",
    "gpus",
    "stack",
]

# The installed distribution that provides each framework, in order of preference.
DISTRIBUTIONS = {
    "pytorch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
}

logger = logging.getLogger(__name__)

_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_CONTAINER_ID = re.compile(r"([0-9a-f]{64})")


def architecture() -> str:
    """The architecture as container images name it (amd64, arm64), or the machine's name."""
    machine = platform.machine().lower()
    return _ARCHITECTURES.get(machine, machine)


def cpu() -> dict[str, Any]:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                model = value.strip()
                break
    except OSError:
        pass
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    frequency = psutil.cpu_freq()
    return {
        "model": model or platform.processor() or None,
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": usable,
        "max_mhz": round(frequency.max) if frequency and frequency.max else None,
    }


def gpus() -> list[dict[str, Any]]:
    """NVIDIA GPUs as NVML reports them; empty without pynvml or without a driver."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no device
        return []
    found = []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(
                {
                    "index": index,
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "memory_bytes": int(memory.total),
                    "compute_capability": f"{major}.{minor}",
                    "driver": driver,
                    "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                }
            )
    except Exception as exc:  # NVMLError on one query: report what was read
        logger.warning("NVML stopped answering: %s", exc)
    finally:
        pynvml.nvmlShutdown()
    return found


# The image's digest, which no image can hold itself (it is the hash of the image's own
# configuration): whoever starts the container passes it (`mlms agent --docker` does,
# `make compose-up` does, `docker run -e MLMS_CONTAINER_DIGEST=…` does).
DIGEST_VARIABLE = "MLMS_CONTAINER_DIGEST"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def container_digest() -> str | None:
    """The digest of the image this process runs in, as given in MLMS_CONTAINER_DIGEST; None
    when not given. A malformed value is refused (ValueError naming the variable)."""
    value = os.environ.get(DIGEST_VARIABLE, "").strip()
    if not value:
        return None
    if not _DIGEST.match(value):
        raise ValueError(
            f"{DIGEST_VARIABLE}={value[:80]!r} is not an image digest (sha256: and 64 hex "
            "digits, as `docker image inspect --format '{{.Id}}' IMAGE` prints it)"
        )
    return value


def container() -> dict[str, Any] | None:
    """The container this process runs in: image (from MLMS_CONTAINER_IMAGE, which the
    predictor images set), its digest (MLMS_CONTAINER_DIGEST, see `container_digest`; None
    where nobody gave it) and id (from the cgroup or mount paths), or None outside one."""
    image = os.environ.get("MLMS_CONTAINER_IMAGE")
    identifier = None
    for path in ("/proc/self/cgroup", "/proc/self/mountinfo"):
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if any(word in line for word in ("docker", "containerd", "crio", "libpod")):
                match = _CONTAINER_ID.search(line)
                if match:
                    identifier = match.group(1)
                    break
        if identifier:
            break
    in_container = bool(image or identifier) or Path("/.dockerenv").exists()
    if not in_container:
        return None
    try:
        digest = container_digest()
    except ValueError:
        digest = None  # the agent refuses it at its start, saying why
    return {"image": image, "digest": digest, "id": identifier}


def framework_versions(frameworks: list[str]) -> dict[str, str | None]:
    """The installed version of each framework, None where it is not installed."""
    versions: dict[str, str | None] = {}
    for name in frameworks:
        versions[name] = None
        for distribution in DISTRIBUTIONS.get(name, (name,)):
            try:
                versions[name] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def stack(frameworks: list[str] | None = None) -> dict[str, Any]:
    """The hardware/software stack (see the module docstring); JSON-able."""
    memory = psutil.virtual_memory()
    uname = platform.uname()
    return {
        "host": socket.gethostname(),
        "architecture": architecture(),
        "cpu": cpu(),
        "memory_bytes": int(memory.total),
        "gpus": gpus(),
        "os": {
            "system": uname.system,
            "release": uname.release,
            "platform": platform.platform(),
            "libc": " ".join(platform.libc_ver()).strip() or None,
        },
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "numpy": np.__version__,
        "frameworks": framework_versions(list(frameworks or DISTRIBUTIONS)),
        "container": container(),
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
