"""The preprocessor of a manifest input, by its type: image, tensor, audio or bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from predictors.processing.audio import AudioPreprocessor
from predictors.processing.clips import ClipPreprocessor
from predictors.processing.image import ImagePreprocessor
from predictors.processing.parameters import ProcessingError
from predictors.processing.raw_bytes import RawBytesPreprocessor
from predictors.processing.tensor import TensorPreprocessor


def preprocessor_for(input_spec: Mapping[str, Any]) -> Any:
    """The preprocessor for one manifest input (`name`, `type`, `parameters`)."""
    kind = input_spec.get("type")
    parameters = input_spec.get("parameters")
    if parameters is None:
        raise ProcessingError(
            f"input {input_spec.get('name')!r} has no parameters", parameter="parameters"
        )
    if kind == "image":
        return ImagePreprocessor(parameters)
    if kind == "tensor":
        return TensorPreprocessor(parameters)
    if kind == "audio":  # framed into a stream's chunks, or whole clips
        if isinstance(parameters, Mapping) and "chunk" in parameters:
            return AudioPreprocessor(parameters)
        return ClipPreprocessor(parameters)
    if kind == "bytes":
        return RawBytesPreprocessor(parameters)
    raise ProcessingError(
        f"input type must be image, tensor, audio or bytes; got {kind!r}", parameter="type"
    )
