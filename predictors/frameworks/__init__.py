"""One predictor per framework: `pytorch`, `tensorflow`, `onnxruntime`.

Each module imports its framework at the top, so it is imported only when its predictor is asked
for (`predictors.frameworks.predictor.predictor_class`), never by `import predictors`. A module implements
only what differs between frameworks (loading, one inference, device synchronisation, the device
check); the evaluation loop around it is `predictors.evaluation`.
"""

from __future__ import annotations

__all__ = ["cuda_index"]


def cuda_index(device: str) -> int:
    """The device index of "cuda" (0) or "cuda:N" (N); ValueError for anything else."""
    if device == "cuda":
        return 0
    prefix, _, index = device.partition(":")
    if prefix == "cuda" and index.isdigit():
        return int(index)
    raise ValueError(f"not a CUDA device name: {device!r}")
