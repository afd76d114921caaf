"""The offline model zoo: built-in datasets and models, built deterministically, no downloads.

``python -m predictors.zoo build [--store DIR] [--only NAME ...] [--force]`` (or ``build()``)
writes the datasets (Parquet) and models (TorchScript, ONNX, Keras) that the built-in manifests
reference into the artifact store. Importing this package is cheap: torch and TensorFlow are
imported only by the code that trains and exports.
"""

from predictors.zoo.build import ENTRIES, build, default_store

__all__ = ["ENTRIES", "build", "default_store"]
