"""A model manifest's declared inputs and outputs, checked against the model's own graph.

The hub runs `onnx_problems` on an uploaded ONNX file before it stores the manifest (every
problem is a 400 naming the manifest field), and the ONNX Runtime predictor runs the same check
on the session it loads (a file given by https://, which the hub never reads). What is checked:

- every declared input and output name is one of the graph's (ONNX Runtime feeds and reads by
  name; a misspelt name would otherwise be ignored);
- the graph has no input that the manifest leaves undeclared (it could not be fed);
- the rank: an image input is a batch of images, rank 4 (NCHW or NHWC); a tensor or state
  input with a `shape` has rank 1 + len(shape) (with its batch axis); a constant input has
  its value's rank (it is not batched);
- the element type: the input's `element_type` is the graph input's type;
- a ctc output's rank: 3, (N, T, C) or (T, N, C).

TorchScript and Keras files carry no such names and types without loading them in their
framework; they are checked when an agent loads them (the first batch's shape and type,
`FixedBatches.check_input`).

An ONNX graph whose weights lie beside it (external data) names the one file that holds them;
`external_data_problems` checks the manifest's `weights_path` against what the graph names.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ONNX TensorProto data types as the manifests' element types.
ONNX_TYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}
# ONNX Runtime's type strings ("tensor(float)") as the manifests' element types.
ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
}


@dataclass(frozen=True)
class Port:
    """One graph input or output: its name, element type (None when unknown) and rank (None
    when the graph does not say)."""

    name: str
    element_type: str | None
    rank: int | None
    # Each axis's size where the graph fixes it, its symbol where it names one, else None;
    # None altogether where the graph gives no shape.
    dims: tuple[int | str | None, ...] | None = None

    def show(self) -> str:
        rank = "rank ?" if self.rank is None else f"rank {self.rank}"
        return f"{self.name} ({self.element_type or '?'}, {rank})"


@dataclass(frozen=True)
class Signature:
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]


class GraphError(ValueError):
    """The file is not a readable ONNX model."""


def onnx_signature(path: Path) -> Signature:
    """The inputs (initializers excluded) and outputs of an ONNX file, read with the `onnx`
    package without loading external data or running anything."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a protobuf that does not parse
        raise GraphError(f"not a readable ONNX model: {exc}") from None
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}

    def port(value: Any) -> Port:
        tensor = value.type.tensor_type
        rank = len(tensor.shape.dim) if tensor.HasField("shape") else None
        dims = (
            tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tensor.shape.dim
            )
            if tensor.HasField("shape")
            else None
        )
        return Port(value.name, ONNX_TYPES.get(tensor.elem_type), rank, dims)

    return Signature(
        tuple(port(v) for v in graph.input if v.name not in initializers),
        tuple(port(v) for v in graph.output),
    )


def session_signature(session: Any) -> Signature:
    """The same from a loaded ONNX Runtime session."""

    def port(node: Any) -> Port:
        shape = node.shape
        if shape is None:
            return Port(node.name, ORT_TYPES.get(node.type), None)
        dims = tuple(d if isinstance(d, int | str) else None for d in shape)
        return Port(node.name, ORT_TYPES.get(node.type), len(shape), dims)

    return Signature(
        tuple(port(node) for node in session.get_inputs()),
        tuple(port(node) for node in session.get_outputs()),
    )


def problems(data: Mapping[str, Any], signature: Signature) -> Iterator[tuple[str, str]]:
    """(field path, message) for every way the manifest's inputs and outputs do not fit."""
    by_name = {port.name: port for port in signature.inputs}
    declared = set()
    misnamed = False
    shown = ", ".join(port.show() for port in signature.inputs) or "none"
    for index, entry in enumerate(data.get("inputs") or []):
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name"))
        declared.add(name)
        port = by_name.get(name)
        if port is None:
            misnamed = True
            yield (
                f"inputs.{index}.name",
                f"'{name}' is not an input of the graph (its inputs: {shown})",
            )
            continue
        parameters = entry.get("parameters") if isinstance(entry.get("parameters"), Mapping) else {}
        assert isinstance(parameters, Mapping)
        element_type = parameters.get("element_type")
        if entry.get("type") in ("text", "text_feature") and element_type is None:
            element_type = _text_element_type(data, entry)
        if port.element_type and element_type and element_type != port.element_type:
            default = (
                ""
                if "element_type" in parameters
                else " (by default)"
                if entry.get("type") == "text"
                else " (the text input's, by default)"
            )
            yield (
                f"inputs.{index}.parameters.element_type",
                f"is {element_type}{default}, but the graph's input '{name}' takes "
                f"{port.element_type}",
            )
        expected = None
        what = "the batch axis + shape"
        if entry.get("type") == "image":
            expected, what = 4, "a batch of images"
        elif entry.get("type") == "audio" and "chunk" in parameters:
            expected, what = 2, "a batch of chunks"
        elif entry.get("type") == "audio":
            # Whole clips (or their windows): samples (N, T) or (N, T, 1), or spectrograms.
            if "spectrogram" in parameters:
                expected, what = 3, "a batch of spectrograms"
            elif parameters.get("layout") == "NTC":
                expected, what = 3, "a batch of clips' samples with a channel axis (layout NTC)"
            else:
                expected, what = 2, "a batch of clips' samples (layout NT)"
        elif entry.get("type") == "bytes":
            expected, what = 2, "a batch of files' bytes"
        elif entry.get("type") in ("text", "text_feature"):
            expected = 2
            what = (
                f"a batch of rows of {'token ids' if entry.get('type') == 'text' else 'a feature'}"
            )
            yield from _length_problems(data, index, port)
        elif entry.get("type") == "constant" and "value" in parameters:
            expected = _rank(parameters["value"])
            what = "the constant's value (not batched)"
        elif isinstance(parameters.get("shape"), list):
            expected = 1 + len(parameters["shape"])
        if expected is not None and port.rank is not None and port.rank != expected:
            yield (
                f"inputs.{index}",
                f"the graph's input '{name}' has rank {port.rank}, but {what} has rank {expected}",
            )
    undeclared = [port for port in signature.inputs if port.name not in declared]
    if undeclared and not misnamed:  # a misspelt name says it already
        yield (
            "inputs",
            "the graph takes inputs the manifest does not declare, which could not be fed: "
            + ", ".join(port.show() for port in undeclared),
        )
    outputs = {port.name: port for port in signature.outputs}
    shown_outputs = ", ".join(port.show() for port in signature.outputs) or "none"
    for index, entry in enumerate(data.get("outputs") or []):
        if not isinstance(entry, Mapping):
            continue
        output = outputs.get(str(entry.get("name")))
        if output is None:
            yield (
                f"outputs.{index}.name",
                f"'{entry.get('name')}' is not an output of the graph (its outputs: "
                f"{shown_outputs})",
            )
        elif entry.get("type") == "ctc" and output.rank is not None and output.rank != 3:
            yield (
                f"outputs.{index}",
                f"the graph's output '{output.name}' has rank {output.rank}, but a ctc output "
                "is (N, T, C) or (T, N, C): rank 3",
            )
        elif entry.get("type") == "token_ids" and (
            (output.rank is not None and output.rank != 2)
            or (output.element_type is not None and "int" not in output.element_type)
        ):
            yield (
                f"outputs.{index}",
                f"the graph's output '{output.name}' is {output.element_type or '?'} of rank "
                f"{output.rank if output.rank is not None else '?'}, but a token_ids output is "
                "(N, L) integer ids: rank 2, an integer type",
            )
        else:
            yield from _axis_problems(data, signature, index, entry, output)


def _text_input(data: Mapping[str, Any]) -> Mapping[str, Any]:
    return next(
        (
            entry
            for entry in data.get("inputs") or []
            if isinstance(entry, Mapping) and entry.get("type") == "text"
        ),
        {},
    )


def _text_element_type(data: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
    """The element type of a text input's ids, or of a text_feature input, where the entry
    does not say: int64 for the ids, the ids' own for a feature."""
    from predictors.processing.text import DEFAULT_ELEMENT_TYPE

    text = entry if entry.get("type") == "text" else _text_input(data)
    parameters = text.get("parameters")
    declared = parameters.get("element_type") if isinstance(parameters, Mapping) else None
    return str(declared or DEFAULT_ELEMENT_TYPE)


def _length_problems(data: Mapping[str, Any], index: int, port: Port) -> Iterator[tuple[str, str]]:
    """A text input's rows (and its features') are max_length long: a graph that fixes the
    length of its rows to another is named before a run."""
    entry = (data.get("inputs") or [])[index]
    # A text input's rows are its own max_length (a model may take several texts, from
    # columns of their own); a feature's, the text input's.
    own = entry if isinstance(entry, Mapping) and entry.get("type") == "text" else None
    parameters = (own or _text_input(data)).get("parameters")
    length = parameters.get("max_length") if isinstance(parameters, Mapping) else None
    fixed = port.dims[1] if port.dims is not None and len(port.dims) == 2 else None
    if isinstance(length, int) and isinstance(fixed, int) and fixed > 0 and fixed != length:
        field = ".parameters.max_length" if entry.get("type") == "text" else ""
        yield (
            f"inputs.{index}{field}",
            f"the text input's max_length is {length}, but the graph's input '{port.name}' "
            f"takes rows of {fixed}",
        )


# The tasks whose scored output is one row of class scores per input.
_CLASS_SCORES = ("image_classification", "sequence_labelling", "multi_label_classification")


def _axis_problems(
    data: Mapping[str, Any], signature: Signature, index: int, entry: Mapping[str, Any], port: Port
) -> Iterator[tuple[str, str]]:
    """What the graph fixes of a declared output's axes that the task cannot read: a first
    axis of a fixed size where the batch varies (it is not the batch: every output is read
    batch first), and a number of classes other than the labels'."""
    if port.dims is None or entry.get("type") in ("state", "ctc", "token_ids"):
        return
    fed = next(
        (
            p
            for p in signature.inputs
            for declared in data.get("inputs") or []
            if isinstance(declared, Mapping)
            and declared.get("name") == p.name
            and declared.get("type") in ("image", "tensor", "audio", "bytes", "text")
        ),
        None,
    )
    batch = fed.dims[0] if fed is not None and fed.dims else None
    first = port.dims[0] if port.dims else None
    if not isinstance(batch, int) and isinstance(first, int) and first > 1:
        yield (
            f"outputs.{index}",
            f"the graph's output '{port.name}' has a first axis of {first} whatever the batch "
            f"(its input '{fed.name if fed else '?'}' takes any batch size): it is not the "
            "batch axis, and every output is read batch first; export it with the batch first",
        )
        return
    parameters = entry.get("parameters") if isinstance(entry.get("parameters"), Mapping) else {}
    assert isinstance(parameters, Mapping)
    labels = parameters.get("labels")
    if not isinstance(labels, list) or entry.get("type") not in ("logits", "probabilities"):
        return
    task = data.get("task")
    if task == "semantic_segmentation":
        axis = {"NCHW": 1, "NHWC": -1}.get(str(parameters.get("layout")))
        classes = port.dims[axis] if axis is not None and len(port.dims) == 4 else None
        where = f"its class axis ({parameters.get('layout')})"
    elif task in _CLASS_SCORES and all(isinstance(d, int) for d in port.dims[1:]):
        classes = 1
        for size in port.dims[1:]:
            assert isinstance(size, int)
            classes *= size
        where = "per input"
    else:
        return
    if isinstance(classes, int) and classes != len(labels):
        yield (
            f"outputs.{index}",
            f"the graph's output '{port.name}' gives {classes} class score(s) {where}, but the "
            f"labels name {len(labels)} classes",
        )


def _rank(value: Any) -> int:
    """The rank of a constant's value (a number: 0; a nested list: its depth)."""
    rank = 0
    while isinstance(value, list) and value:
        rank, value = rank + 1, value[0]
    return rank + (1 if isinstance(value, list) else 0)


def onnx_problems(data: Mapping[str, Any], path: Path) -> list[tuple[str, str]]:
    """`problems` of an ONNX file; an unreadable file is one problem of `model.graph_path`."""
    try:
        signature = onnx_signature(path)
    except GraphError as error:
        return [("model.graph_path", str(error))]
    return list(problems(data, signature))


@dataclass(frozen=True)
class ExternalFile:
    """One external-data file an ONNX graph names (`location`, relative to the graph's
    folder): the tensors it holds, and the bytes it must hold at least (`end`: the largest
    offset + length a tensor declares, its size by shape where it declares no length; `last`
    the tensor that reads furthest)."""

    location: str
    tensors: int
    end: int
    last: str


def external_data(path: Path) -> list[ExternalFile]:
    """The external-data files of an ONNX file, in the order its tensors name them, read with
    the `onnx` package without loading them; GraphError where the graph does not parse."""
    import numpy as np
    import onnx
    from onnx import external_data_helper

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a protobuf that does not parse
        raise GraphError(f"not a readable ONNX model: {exc}") from None
    found: dict[str, ExternalFile] = {}
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        length = info.length
        if length is None and tensor.data_type != onnx.TensorProto.STRING:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
            length = itemsize * int(np.prod(tensor.dims, dtype=np.int64))
        end = (info.offset or 0) + (length or 0)
        known = found.get(info.location)
        if known is None:
            found[info.location] = ExternalFile(info.location, 1, end, tensor.name)
        else:
            furthest = end > known.end
            found[info.location] = ExternalFile(
                info.location,
                known.tensors + 1,
                end if furthest else known.end,
                tensor.name if furthest else known.last,
            )
    return list(found.values())


def external_data_problems(graph_file: Path, weights_file: Path | None) -> list[tuple[str, str]]:
    """(field path, message) for every way an ONNX graph and the manifest's `weights_path`
    (its external data, the one file its tensors name) do not fit: external data and no
    weights_path, a weights_path and no external data, several files, a location outside the
    graph's folder, a weights file shorter than the graph reads."""
    try:
        files = external_data(graph_file)
    except GraphError as error:
        return [("model.graph_path", str(error))]
    return external_files_problems(files, weights_file)


def external_files_problems(
    files: list[ExternalFile], weights_file: Path | None
) -> list[tuple[str, str]]:
    """`external_data_problems` of a graph's external-data files (`external_data`)."""
    shown = ", ".join(f"{f.location} ({f.tensors} tensors)" for f in files)
    if not files:
        if weights_file is None:
            return []
        return [
            (
                "model.weights_path",
                "ONNX external data: the graph holds its weights itself (no tensor names an "
                "external-data file); drop model.weights_path",
            )
        ]
    found: list[tuple[str, str]] = []
    outside = [
        f.location
        for f in files
        if os.path.isabs(f.location) or ".." in Path(f.location).parts or not f.location
    ]
    if outside:
        found.append(
            (
                "model.graph_path",
                "ONNX external data: the graph names external-data files outside its own "
                f"folder ({', '.join(outside)}); save it with a plain file name as location",
            )
        )
    if len(files) > 1:
        found.append(
            (
                "model.graph_path",
                f"ONNX external data: the graph's tensors name {len(files)} external-data files "
                f"({shown}); model.weights_path gives one: save the graph with "
                "all_tensors_to_one_file=True",
            )
        )
    if weights_file is None:
        found.append(
            (
                "model.weights_path",
                f"ONNX external data: the graph keeps its weights in {shown} beside it; give "
                "that file as model.weights_path",
            )
        )
    elif len(files) == 1 and weights_file.stat().st_size < files[0].end:
        (file,) = files
        found.append(
            (
                "model.weights_path",
                f"ONNX external data: {weights_file.name} holds {weights_file.stat().st_size} "
                f"bytes, but the graph reads {file.location} up to byte {file.end} (tensor "
                f"{file.last}): is it truncated, or the weights of another graph?",
            )
        )
    return found
