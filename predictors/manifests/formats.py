"""The file formats a model manifest's `model.format` names, by framework.

A framework reads several formats; the manifest says which one its `graph_path` is, and when it
says nothing, the framework's first format below is meant. Each format's files:

| format | framework | graph_path | weights_path | more |
| --- | --- | --- | --- | --- |
| onnx | onnxruntime | the ONNX graph | its external data, if the weights lie beside it | |
| torchscript | pytorch | a TorchScript file (`torch.jit.save`) | | |
| torch_export | pytorch | a `.pt2` program (`torch.export.save`) | | |
| state_dict | pytorch | the Python source that defines the module | the state dict (required) | `entry` |
| keras | tensorflow | a Keras 3 `.keras` file | | |
| h5 | tensorflow | a legacy Keras HDF5 file | | |
| saved_model | tensorflow | an archive (.tar, .tar.gz, .zip) of a SavedModel folder | | `signature` |
| tflite | tensorflow | a TensorFlow Lite flat buffer | | |

A state dict's module is built by the manifest's own source: it is custom code, and runs only
where custom code runs (`predictors.processing.custom_code`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

FORMATS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnx",),
    "pytorch": ("torchscript", "torch_export", "state_dict"),
    "tensorflow": ("keras", "h5", "saved_model", "tflite"),
}
# What each format is called in messages.
FORMAT_NAMES = {
    "onnx": "an ONNX model",
    "torchscript": "TorchScript",
    "torch_export": "a torch.export program",
    "state_dict": "a state dict",
    "keras": "a Keras 3 file",
    "h5": "a Keras HDF5 file",
    "saved_model": "a SavedModel archive",
    "tflite": "a TFLite model",
}
# The SavedModel signature called when the manifest names none.
DEFAULT_SIGNATURE = "serving_default"


def _framework(data: Mapping[str, Any]) -> Any:
    framework = data.get("framework")
    return framework.get("name") if isinstance(framework, Mapping) else None


def default_format(framework: str) -> str:
    """The format a manifest of `framework` means when it names none."""
    return FORMATS[framework][0]


def model_format(data: Mapping[str, Any]) -> str:
    """The format of a model manifest's `graph_path`: its `model.format`, or its framework's
    default."""
    files = data.get("model") if isinstance(data.get("model"), Mapping) else {}
    assert isinstance(files, Mapping)
    named = files.get("format")
    if isinstance(named, str) and named:
        return named
    framework = _framework(data)
    return default_format(framework) if framework in FORMATS else "onnx"


def format_problems(data: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], str]]:
    """(field path, message) for every way `model`'s format fields do not fit together."""
    files = data.get("model")
    framework = _framework(data)
    if not isinstance(files, Mapping) or framework not in FORMATS:
        return
    named = files.get("format")
    if isinstance(named, str) and named not in FORMATS[framework]:
        owner = next((name for name, formats in FORMATS.items() if named in formats), None)
        yield (
            ("model", "format"),
            f"'{named}' is a format of {owner}, not of {framework}; {framework} reads "
            + ", ".join(FORMATS[framework]),
        )
        return
    chosen = model_format(data)
    if files.get("signature") is not None and chosen != "saved_model":
        yield (
            ("model", "signature"),
            f"names a SavedModel signature; this model's format is {chosen}",
        )
    if chosen == "state_dict":
        if not files.get("entry"):
            yield (
                ("model", "entry"),
                "is required for format state_dict: the class or function in graph_path's source "
                "that builds the module",
            )
        if not files.get("weights_path"):
            yield (
                ("model", "weights_path"),
                "is required for format state_dict: the state dict the module is loaded with",
            )
    else:
        for key in ("entry", "state_key"):
            if files.get(key) is not None:
                yield (
                    ("model", key),
                    f"is read for format state_dict only; this model's format is {chosen}",
                )
    if files.get("weights_path") is not None and chosen not in ("state_dict", "onnx"):
        yield (
            ("model", "weights_path"),
            f"is read for formats state_dict (the state dict) and onnx (external data) only; "
            f"{chosen} holds its weights in graph_path",
        )
