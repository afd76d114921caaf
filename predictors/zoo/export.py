"""Export one set of PyTorch weights three ways, and run each export in its own runtime.

- TorchScript (``torch.jit.trace``), NCHW input.
- ONNX (the TorchScript-based exporter, ``dynamo=False``), opset 17, input ``input``, output
  ``logits``, dynamic batch axis, NCHW input.
- Keras 3 (``.keras``) with the same weights copied over. TensorFlow on CPU wants NHWC, so the
  Keras model takes NHWC input: conv kernels go from OIHW to HWIO, and the dense layer after
  ``Flatten`` gets its input rows permuted from (C, H, W) order to (H, W, C) order.

Every export is returned as bytes, written the same way each time: TorchScript and ONNX are
serialised to memory (a TorchScript archive is named after the file it is saved to), and the
``.keras`` zip is rewritten without its ``date_saved`` stamp and with fixed member times.

TensorFlow is imported only inside the functions that need it: it is slow to import.
"""

from __future__ import annotations

import io
import json
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from predictors.zoo.common import labels_text, store_model

OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def torchscript_bytes(model: nn.Module, example: torch.Tensor | tuple[torch.Tensor, ...]) -> bytes:
    """The traced module (`example`: its input, or a tuple of its inputs) as a TorchScript
    archive, without its ``*.debug_pkl`` records.

    Those records hold the Python call stack at trace time (absolute paths and line numbers of
    the code that called ``trace``), so that the same weights would give different bytes from
    another checkout or after any edit. The archive is rewritten record by record with torch's
    own writer (which keeps tensor data aligned); ``torch.jit.load`` does not need them.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream; traced on purpose
        traced = torch.jit.trace(model.eval(), example, check_trace=False)  # checked by callers
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer)
    return strip_debug_records(buffer.getvalue())


def strip_debug_records(archive: bytes) -> bytes:
    """A TorchScript archive without its ``*.debug_pkl`` records (`torchscript_bytes`)."""
    reader = torch._C.PyTorchFileReader(io.BytesIO(archive))
    stripped = io.BytesIO()
    writer = torch._C.PyTorchFileWriter(stripped)
    for name in reader.get_all_records():
        # The writer adds its own serialization id, computed from the records it writes.
        if name.endswith(".debug_pkl") or name == ".data/serialization_id":
            continue
        data = reader.get_record(name)
        writer.write_record(name, data, len(data))
    writer.write_end_of_file()
    return stripped.getvalue()


def onnx_bytes(
    model: nn.Module,
    example: torch.Tensor | tuple[torch.Tensor, ...],
    *,
    spatial: bool = False,
    input_names: Sequence[str] = (INPUT_NAME,),
    output_names: Sequence[str] = (OUTPUT_NAME,),
    dynamic_axes: dict[str, dict[int, str]] | None = None,
) -> bytes:
    """The model (`example`: its input, or a tuple of its inputs) as ONNX. Unless
    `dynamic_axes` says otherwise, the batch axis of every input and output is dynamic (and,
    with `spatial`, their height and width, for a fully convolutional model)."""
    import onnx

    if dynamic_axes is None:
        dynamic_axes = {
            name: {0: "batch", 2: "height", 3: "width"} if spatial else {0: "batch"}
            for name in (*input_names, *output_names)
        }
    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter, on purpose
        path = Path(directory) / "model.onnx"
        torch.onnx.export(
            model.eval(),
            example if isinstance(example, tuple) else (example,),
            path,
            dynamo=False,
            opset_version=OPSET,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes=dynamic_axes,
        )
        data = path.read_bytes()
    onnx.checker.check_model(onnx.load_from_string(data))
    return data


def to_keras(model: nn.Sequential, input_chw: tuple[int, int, int]):
    """A Keras model (NHWC input) computing what ``model`` computes (NCHW input), same weights.

    Handles the layers the zoo's small CNNs use: Conv2d (groups 1, dilation 1), ReLU,
    MaxPool2d, Flatten, Dropout (an identity at inference) and Linear.
    """
    import keras

    channels, height, width = input_chw
    inputs = keras.Input(shape=(height, width, channels), name=INPUT_NAME)
    x = inputs
    flattened_from: tuple[int, int, int] | None = None  # (C, H, W) feeding the next Linear
    shape = (channels, height, width)
    assignments: list[tuple[keras.layers.Layer, list[np.ndarray]]] = []
    linears = sum(isinstance(layer, nn.Linear) for layer in model)
    for index, layer in enumerate(model):
        if isinstance(layer, nn.Conv2d):
            if layer.groups != 1 or layer.dilation != (1, 1) or layer.bias is None:
                raise ValueError(f"layer {index}: unsupported Conv2d {layer}")
            (kh, kw), (sh, sw), padding = layer.kernel_size, layer.stride, layer.padding
            if not isinstance(padding, tuple):
                raise ValueError(f"layer {index}: unsupported padding {padding!r}")
            if padding != (0, 0):
                x = keras.layers.ZeroPadding2D(padding, name=f"pad{index}")(x)
            conv = keras.layers.Conv2D(
                layer.out_channels, (kh, kw), strides=(sh, sw), padding="valid", name=f"conv{index}"
            )
            x = conv(x)
            kernel = layer.weight.detach().numpy().transpose(2, 3, 1, 0)  # OIHW -> HWIO
            assignments.append((conv, [kernel, layer.bias.detach().numpy()]))
            shape = (
                layer.out_channels,
                (shape[1] + 2 * padding[0] - kh) // sh + 1,
                (shape[2] + 2 * padding[1] - kw) // sw + 1,
            )
        elif isinstance(layer, nn.ReLU):
            x = keras.layers.ReLU(name=f"relu{index}")(x)
        elif isinstance(layer, nn.MaxPool2d):
            if layer.padding != 0 or layer.dilation != 1 or layer.ceil_mode:
                raise ValueError(f"layer {index}: unsupported MaxPool2d {layer}")
            k = layer.kernel_size
            s = layer.stride
            x = keras.layers.MaxPooling2D(k, strides=s, padding="valid", name=f"pool{index}")(x)
            k = k if isinstance(k, int) else k[0]
            s = s if isinstance(s, int) else s[0]
            shape = (shape[0], (shape[1] - k) // s + 1, (shape[2] - k) // s + 1)
        elif isinstance(layer, nn.Flatten):
            x = keras.layers.Flatten(name=f"flatten{index}")(x)
            flattened_from = shape
        elif isinstance(layer, nn.Dropout):
            continue
        elif isinstance(layer, nn.Linear):
            linears -= 1
            name = OUTPUT_NAME if linears == 0 else f"dense{index}"
            dense = keras.layers.Dense(layer.out_features, name=name)
            x = dense(x)
            weight = layer.weight.detach().numpy()  # (out, in), in ordered (C, H, W)
            if flattened_from is not None:
                c, h, w = flattened_from
                weight = weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(-1, c * h * w)
                flattened_from = None
            assignments.append((dense, [weight.T, layer.bias.detach().numpy()]))
        else:
            raise ValueError(f"layer {index}: no Keras equivalent for {type(layer).__name__}")
    keras_model = keras.Model(inputs, x, name="model")
    for keras_layer, weights in assignments:
        keras_layer.set_weights([np.ascontiguousarray(w, dtype=np.float32) for w in weights])
    return keras_model


def _renumber_shared_objects(config: object, numbers: dict[int, int]) -> object:
    """Keras names an object shared between layers by its ``id()``: number them 1, 2, ..."""
    if isinstance(config, dict):
        return {
            key: numbers.setdefault(value, len(numbers) + 1)
            if key == "shared_object_id"
            else _renumber_shared_objects(value, numbers)
            for key, value in config.items()
        }
    if isinstance(config, list):
        return [_renumber_shared_objects(value, numbers) for value in config]
    return config


def keras_bytes(keras_model) -> bytes:
    """The ``.keras`` file, made reproducible: no save date, shared objects numbered in order
    instead of by memory address, fixed member times, members sorted."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.keras"
        keras_model.save(path)
        with zipfile.ZipFile(path) as source:
            members = {info.filename: source.read(info) for info in source.infolist()}
    metadata = json.loads(members["metadata.json"])
    metadata.pop("date_saved", None)
    members["metadata.json"] = json.dumps(metadata).encode()
    config = json.loads(members["config.json"])
    members["config.json"] = json.dumps(_renumber_shared_objects(config, {})).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as target:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            target.writestr(info, members[name])
    return buffer.getvalue()


# --- running the exports, each in its own runtime -------------------------------------------


def load_torchscript(path: Path) -> Any:
    """A TorchScript file, loaded on the CPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream
        return torch.jit.load(str(path), map_location="cpu")


def onnx_session(path: Path) -> Any:
    """An ONNX Runtime session of an ONNX file, on the CPU."""
    import onnxruntime

    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_torchscript(path: Path, x_nchw: np.ndarray, batch_size: int = 256) -> np.ndarray:
    module = load_torchscript(path).eval()
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(x_nchw), batch_size):
            outputs.append(module(torch.from_numpy(x_nchw[start : start + batch_size])).numpy())
    return np.concatenate(outputs)


def run_onnx(path: Path, x_nchw: np.ndarray, batch_size: int = 256) -> np.ndarray:
    session = onnx_session(path)
    return np.concatenate(
        [
            session.run([OUTPUT_NAME], {INPUT_NAME: x_nchw[start : start + batch_size]})[0]
            for start in range(0, len(x_nchw), batch_size)
        ]
    )


def run_keras(path: Path, x_nhwc: np.ndarray, batch_size: int = 256) -> np.ndarray:
    import keras

    model = keras.models.load_model(path, compile=False)
    return np.concatenate(
        [
            np.asarray(model(x_nhwc[start : start + batch_size], training=False))
            for start in range(0, len(x_nhwc), batch_size)
        ]
    )


def stage_exports(
    staging: Any,
    name: str,
    model: nn.Module,
    example: torch.Tensor,
    labels: Sequence[str],
    x: np.ndarray,
    *,
    spatial: bool = False,
) -> tuple[np.ndarray, float]:
    """Write `model` as ONNX and TorchScript (``<name>.onnx``, ``<name>.pt``) and its
    ``labels.txt`` into `staging` (a ``store.Staging``); run both exports on `x` in their own
    runtimes and refuse them if they differ by 1e-3 or more. The ONNX outputs, and the largest
    difference."""
    onnx_path = staging.write(f"{name}.onnx", onnx_bytes(model, example, spatial=spatial))
    script_path = staging.write(f"{name}.pt", torchscript_bytes(model, example))
    staging.write("labels.txt", labels_text(labels))
    onnx = run_onnx(onnx_path, x)
    delta = float(np.abs(onnx - run_torchscript(script_path, x)).max())
    if not delta < 1e-3:
        raise RuntimeError(f"{name}: exports disagree (max |Δ output| {delta:.3g})")
    return onnx, delta


def store_exports(
    store: str | Path,
    name: str,
    dataset: str,
    model: nn.Module,
    training: dict,
    labels: Sequence[str],
    x: np.ndarray,
    check: Callable[[np.ndarray], dict],
    *,
    spatial: bool = False,
    difference: str = "max_abs_logit_diff",
) -> dict:
    """Store a trained model as ONNX and TorchScript (`stage_exports`, traced on ``x[:1]``)
    once `check` has passed its ONNX outputs on `x`: `check` raises where they miss their
    mark, and returns what it measured. The model's record (`store_model`), with the exports'
    largest difference as `difference`."""
    example = torch.from_numpy(x[:1])

    def stage(staging: Any) -> dict:
        onnx, delta = stage_exports(staging, name, model, example, labels, x, spatial=spatial)
        return {**check(onnx), difference: delta}

    return store_model(store, name, dataset, model, training, stage)
