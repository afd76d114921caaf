"""The preprocessor of a manifest input, by its type: image, tensor, audio, bytes or text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from predictors.processing.audio import AudioPreprocessor
from predictors.processing.clips import ClipPreprocessor
from predictors.processing.image import ImagePreprocessor
from predictors.processing.parameters import ProcessingError
from predictors.processing.raw_bytes import RawBytesPreprocessor
from predictors.processing.tensor import TensorPreprocessor
from predictors.processing.text import Fetch, TextFeeds, TextPreprocessor


def preprocessor_for(
    input_spec: Mapping[str, Any], fetch: Fetch | None = None, feeds: TextFeeds | None = None
) -> Any:
    """The preprocessor for one manifest input (`name`, `type`, `parameters`); `fetch(url,
    sha256)` brings the files an input names (a text input's tokenizer); `feeds`: the inputs
    a text input feeds besides its ids (`TextFeeds.of` the model's inputs)."""
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
    if kind == "text":
        if fetch is None:
            raise ProcessingError(
                f"input {input_spec.get('name')!r} is text: its tokenizer file is fetched with "
                "the model's files"
            )
        return TextPreprocessor(parameters, fetch, feeds)
    raise ProcessingError(
        f"input type must be image, tensor, audio, bytes or text; got {kind!r}", parameter="type"
    )
