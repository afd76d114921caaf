"""Pre- and post-processing of model inputs and outputs, driven by manifest parameters: image
inputs (`image`, with the geometry steps of `geometry`), tensor inputs (`tensor`), audio inputs
(`audio`), a file's raw bytes (`raw_bytes`), text tokenised by a tokenizer file (`text`), the
preprocessor of an input by its type (`inputs`), model outputs (`outputs`), class names and
whether a model's are a dataset's (`labels`), and a manifest's own processing code
(`custom_code`)."""

from predictors.processing.image import IMAGE_PARAMETERS, ImagePreprocessor
from predictors.processing.inputs import preprocessor_for
from predictors.processing.outputs import load_labels, postprocess
from predictors.processing.parameters import ELEMENT_TYPES, ProcessingError
from predictors.processing.tensor import TensorPreprocessor

__all__ = [
    "ELEMENT_TYPES",
    "IMAGE_PARAMETERS",
    "ImagePreprocessor",
    "ProcessingError",
    "TensorPreprocessor",
    "load_labels",
    "postprocess",
    "preprocessor_for",
]
