"""An output with a time axis read as one score per class: an output parameter `frames`
(`axis`, `trim`, `pool`) of a classifier's or a multi-label classifier's scored output.

Audio taggers and transcribers give a score per frame; what such a model says of its input
(which classes sound in it) is each class's score pooled over the frames, after dropping the
frames that overlapping windows share at each end of a call's output. The pooling is of the
scores as the model gives them, before a softmax or a sigmoid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError

__all__ = ["pool_frames"]


def pool_frames(outputs: Any, frames: Mapping[str, Any]) -> np.ndarray:
    """(N, classes) of (N, T, classes) (`axis: 1`) or (N, classes, T) (`axis: 2`): `trim`
    frames dropped at each end of the time axis, the rest pooled by `pool` (max, mean)."""
    values = np.asarray(outputs)
    axis, trim, pool = int(frames["axis"]), int(frames.get("trim", 0)), str(frames["pool"])
    if values.ndim != 3:
        raise ProcessingError(
            f"output parameter frames reads (N, T, classes) or (N, classes, T) scores; the "
            f"model gives shape {values.shape}",
            parameter="frames",
        )
    length = values.shape[axis]
    if length <= 2 * trim:
        raise ProcessingError(
            f"output parameter frames.trim drops {trim} frames at each end of {length}: none "
            "would be left",
            parameter="frames.trim",
        )
    kept = np.take(values, np.arange(trim, length - trim), axis=axis)
    return (kept.max(axis=axis) if pool == "max" else kept.mean(axis=axis)).astype(
        np.float32, copy=False
    )
