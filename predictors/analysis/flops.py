"""Theoretical performance: parameters and multiply-adds per layer and in total, read from the
model's own graph (ONNX, TorchScript, Keras), so that a latency can be set against the work the
model does and a layer placed on a roofline.

What is counted, in every framework alike:
- **multiply-adds (MACs)** of the layers that do them: convolutions (transposed too), matrix
  products (`Gemm`, `MatMul`; PyTorch's `mm`/`addmm`/`bmm`/`baddbmm`; Keras `Dense`) and
  attention, by the formulas of `torch.utils.flop_counter` (a convolution's output elements
  times its kernel's size per output channel; a product's M·N·K). Element-wise work (bias,
  normalization, activations, pooling, additions) counts no multiply-adds, as in the papers'
  figures (ResNet-50: 4.1 G). FLOPs are twice the MACs.
- **parameters**: the floating-point weights a layer holds (PyTorch: its module's own
  parameters; ONNX: the initializers it reads; Keras: its weights).
- **bytes** a layer moves at the least: its input and output activations (per input of the
  batch) and its weights (once per call), so that its **arithmetic intensity** at batch size B is
  2·MACs·B / (activation bytes·B + weight bytes) FLOP per byte.

Counts are per input (batch size 1) at the input shape given: the evaluation counts at the shape
it fed. A layer's `name` is the one its framework's trace gives it (ONNX Runtime's node name,
PyTorch's module path as `predictors.frameworks.torch_trace.module_label` writes it, the Keras
layer's name), so that a trace's per-layer durations meet their counts; `module` is the module
path where the framework keeps one (the PyTorch exporter writes it into ONNX node names), which
is what lines the same layer up across frameworks.

ONNX is counted with `onnx`'s shape inference alone (no torch: an ONNX Runtime image has none);
TorchScript by one forward pass at batch size 1 under a `TorchDispatchMode` that reads the flop
formulas of `torch.utils.flop_counter` and attributes each op to the module whose parameter it
reads; Keras from its layers' shapes. torch, onnx and TensorFlow are imported inside the
functions that need them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CountError",
    "Count",
    "Layer",
    "count",
    "count_keras",
    "count_onnx",
    "count_torchscript",
    "layer_of",
    "model_input_shape",
    "si",
]

# ONNX element types → bytes (onnx.TensorProto): FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64,
# BOOL, FLOAT16, DOUBLE, UINT32, UINT64, BFLOAT16.
_ONNX_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_ONNX_FLOATS = {1, 10, 11, 16}
_FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")


class CountError(ValueError):
    """The model's work cannot be counted as asked (a message that names why)."""


@dataclass
class Layer:
    name: str
    module: str
    op_type: str
    macs: int = 0
    params: int = 0
    activation_bytes: int = 0
    weight_bytes: int = 0

    def intensity(self, batch_size: int = 1) -> float | None:
        """FLOPs per byte moved at `batch_size` (None for a layer that does no multiply-adds)."""
        moved = self.activation_bytes * batch_size + self.weight_bytes
        if not self.macs or not moved:
            return None
        return 2 * self.macs * batch_size / moved


@dataclass
class Count:
    framework: str
    input_shapes: dict[str, list[int]]
    layers: list[Layer] = field(default_factory=list)
    params: int = 0  # every parameter of the model, each once (a shared weight counts once)
    # ONNX: a tensor's name → the layer whose multiply-adds made it, through the element-wise
    # ops after that layer; ONNX Runtime names the nodes it fuses after their output tensor
    # (`/layer1/layer1.0/relu/Relu_output_0_nchwc` is conv1 with its ReLU), so that a trace's
    # fused nodes meet their counts.
    aliases: dict[str, str] = field(default_factory=dict)
    # Layers that multiply-add but whose shapes could not be inferred (counted as 0): the total
    # is a lower bound while any are listed.
    uncounted: list[str] = field(default_factory=list)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form stored with a result and printed by `mlms flops --format json`."""
        return {
            "framework": self.framework,
            "input_shapes": self.input_shapes,
            "macs": self.macs,
            "flops": 2 * self.macs,
            "params": self.params,
            "layers": [
                {**asdict(layer), "intensity": _rounded(layer.intensity())} for layer in self.layers
            ],
            **({"aliases": self.aliases} if self.aliases else {}),
            **({"uncounted_layers": self.uncounted} if self.uncounted else {}),
        }


def layer_of(counted: Mapping[str, Any], span_name: str) -> str | None:
    """The counted layer (its name) a trace's layer span `span_name` is, in a count's JSON form
    (`Count.as_dict`, a result's `theoretical`): by its name, or for a node ONNX Runtime fused,
    by the tensor it is named after (`aliases`; `/relu/Relu_output_0_nchwc` → `/conv1/Conv`).
    The pages do the same in JavaScript (evaluation.js, timeline.js)."""
    names = {layer["name"] for layer in counted.get("layers") or []}
    if span_name in names:
        return span_name
    found = (counted.get("aliases") or {}).get(span_name.removesuffix("_nchwc"))
    return found if found in names else None


def si(value: float) -> str:
    """A count with its SI prefix: `1.814 G`, `18.432 K`, `320`."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.0f}"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# The file format each framework's counter reads.
_COUNTED_FORMATS = {
    "onnxruntime": ("onnx",),
    "pytorch": ("torchscript",),
    "tensorflow": ("keras", "h5"),
}


def count(
    framework: str,
    graph_file: Path,
    input_shapes: Mapping[str, Sequence[int]],
    element_type: str = "float32",
) -> Count:
    """The count of the model in `graph_file` as `framework` loads it, for inputs of
    `input_shapes` (name → shape of one input, without the batch axis) of `element_type` (a
    NumPy type name: what a TorchScript module is run on, zeros, to count its work)."""
    if framework == "onnxruntime":
        return count_onnx(graph_file, input_shapes)
    if framework == "pytorch":
        return count_torchscript(graph_file, input_shapes, element_type)
    if framework == "tensorflow":
        return count_keras(graph_file, input_shapes)
    raise CountError(f"no counter for framework {framework!r} (known: {', '.join(_FRAMEWORKS)})")


def model_input_shape(parameters: Mapping[str, Any]) -> list[int] | None:
    """The shape of one input (no batch axis) that an image input's parameters make, when they
    fix it (a crop or a resize to a size); None where it depends on each image."""
    size = parameters.get("crop_size") or parameters.get("resize_size")
    if not size or parameters.get("resize_side") or parameters.get("pad"):
        return None
    channels = 1 if parameters.get("color_mode") == "GRAY" else 3
    height, width = int(size[0]), int(size[1])
    if parameters.get("layout", "NCHW") == "NHWC":
        return [height, width, channels]
    return [channels, height, width]


# --- ONNX ----------------------------------------------------------------------------------


def _onnx_module(node_name: str) -> str:
    """The module path the PyTorch exporter wrote into a node's name
    (`/layer1/layer1.0/conv1/Conv` → `layer1.0.conv1`); the node's name where it wrote none."""
    parts = [part for part in node_name.split("/") if part]
    if len(parts) < 2 or not node_name.startswith("/"):
        return node_name
    # Each scope is an attribute of the one before, or a child of a container named after
    # that attribute (`downsample`, then `downsample.0`).
    path: list[str] = []
    for part in parts[:-1]:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return ".".join(path)


def count_onnx(graph_file: Path, input_shapes: Mapping[str, Sequence[int]]) -> Count:
    import onnx
    from onnx import shape_inference

    try:
        model = onnx.load(str(graph_file))
    except Exception as exc:  # noqa: BLE001 - a file onnx cannot parse
        raise CountError(f"{graph_file.name} is not an ONNX model onnx can read: {exc}") from None
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    fed = [value for value in graph.input if value.name not in initializers]
    unknown = sorted(set(input_shapes) - {value.name for value in fed})
    if unknown:
        raise CountError(
            f"input {unknown[0]!r} is not an input of the graph (its inputs: "
            f"{', '.join(value.name for value in fed)})"
        )
    # Fix every fed input's shape: batch 1, and the shape given where one is.
    for value in fed:
        dims = value.type.tensor_type.shape.dim
        given = input_shapes.get(value.name)
        if given is not None:
            if len(given) + 1 != len(dims):
                raise CountError(
                    f"input {value.name!r}: shape {list(given)} has rank {len(given)}, the "
                    f"graph's input rank {len(dims)} less its batch axis"
                )
            wanted = [1, *given]
        else:
            wanted = [d.dim_value if d.HasField("dim_value") else 1 for d in dims]
            if any(not d.HasField("dim_value") for d in list(dims)[1:]):
                raise CountError(
                    f"input {value.name!r} has a dynamic size: give its shape "
                    "(mlms flops --input-shape)"
                )
            wanted[0] = 1
        for dim, size in zip(dims, wanted, strict=True):
            dim.Clear()
            dim.dim_value = int(size)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx's own inference refused the graph
        raise CountError(f"onnx shape inference failed on {graph_file.name}: {exc}") from None

    shapes: dict[str, tuple[list[int], int]] = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
            shapes[value.name] = (dims, _ONNX_BYTES.get(tensor.elem_type, 4))
    for name, tensor in initializers.items():
        shapes[name] = (list(tensor.dims), _ONNX_BYTES.get(tensor.data_type, 4))
    # An Identity of a weight is the weight under another name.
    weights = {name for name, t in initializers.items() if t.data_type in _ONNX_FLOATS}
    for node in graph.node:
        if node.op_type == "Identity" and node.input and node.input[0] in weights:
            weights.add(node.output[0])
            shapes[node.output[0]] = shapes[node.input[0]]

    result = Count(
        framework="onnxruntime",
        input_shapes={value.name: list(input_shapes.get(value.name, [])) for value in fed},
        params=sum(math.prod(initializers[name].dims) for name in weights if name in initializers),
    )
    for value in fed:
        if not result.input_shapes[value.name]:
            result.input_shapes[value.name] = shapes.get(value.name, ([1], 4))[0][1:]
    made_by: dict[str, str] = {}  # a MAC layer's own output tensor → the layer
    for index, node in enumerate(graph.node):
        if node.op_type in ("Identity", "Constant"):
            continue
        reads = [name for name in node.input if name]
        weight_names = [name for name in reads if name in weights]
        macs = _onnx_macs(node, shapes)
        if macs is None:  # a layer that multiply-adds, of shapes inference left unknown
            result.uncounted.append(node.name or f"{node.op_type}_{index}")
            macs = 0
        params = sum(math.prod(shapes[name][0]) for name in weight_names)
        if not macs and node.op_type in _ELEMENTWISE and node.output:
            # An element-wise op after a layer that multiply-adds: a fusion's name may be its
            # output's. Its own layer's output first (a residual Add's convolution, not the
            # shortcut's).
            inputs = [name for name in reads if name not in weights]
            source = next((made_by[n] for n in inputs if n in made_by), None) or next(
                (result.aliases[n] for n in inputs if n in result.aliases), None
            )
            if source is not None:
                result.aliases[node.output[0]] = source
        if not macs and not params:
            continue
        if macs and node.output:
            layer_name = node.name or f"{node.op_type}_{index}"
            made_by[node.output[0]] = layer_name
            result.aliases[node.output[0]] = layer_name
        activations = [name for name in reads if name not in weights] + list(node.output)
        result.layers.append(
            Layer(
                name=node.name or f"{node.op_type}_{index}",
                module=_onnx_module(node.name) if node.name else f"{node.op_type}_{index}",
                op_type=node.op_type,
                macs=macs,
                params=params,
                activation_bytes=sum(_bytes(shapes.get(name)) for name in activations),
                weight_bytes=sum(_bytes(shapes.get(name)) for name in weight_names),
            )
        )
    return result


# Element-wise ops ONNX Runtime fuses into the convolution or product before them.
_ELEMENTWISE = frozenset(
    {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Add", "Mul",
     "Sum", "BatchNormalization", "Elu", "Selu", "PRelu"}
)  # fmt: skip


def _bytes(entry: tuple[list[int], int] | None) -> int:
    if entry is None:
        return 0
    dims, size = entry
    return math.prod(dims) * size


def _onnx_macs(node: Any, shapes: Mapping[str, tuple[list[int], int]]) -> int | None:
    """Multiply-adds of one node at batch size 1: 0 for ops that do none, None for an op that
    does but whose shapes inference left unknown."""

    def shape(name: str) -> list[int] | None:
        entry = shapes.get(name)
        return entry[0] if entry and all(entry[0]) else None

    if node.op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        x_name, w_name = (
            (node.input[0], node.input[3]) if node.op_type == "QLinearConv" else node.input[:2]
        )
        x, w, y = shape(x_name), shape(w_name), shape(node.output[0])
        if x is None or w is None or y is None:
            return None
        # torch.utils.flop_counter.conv_flop_count: the kernel's size times the positions it
        # is applied at (the output's for a convolution, the input's for a transposed one).
        positions = x[2:] if node.op_type == "ConvTranspose" else y[2:]
        return int(x[0] * math.prod(w) * math.prod(positions))
    if node.op_type in ("Gemm", "MatMul", "MatMulInteger", "QLinearMatMul"):
        a_name = node.input[0]
        y = shape(node.output[0])
        a = shape(a_name)
        if y is None or a is None:
            return None
        trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
        depth = a[-2] if (node.op_type == "Gemm" and trans_a) else a[-1]
        return int(math.prod(y) * depth)
    return 0


# --- TorchScript ---------------------------------------------------------------------------


def count_torchscript(
    graph_file: Path, input_shapes: Mapping[str, Sequence[int]], element_type: str = "float32"
) -> Count:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    from predictors.frameworks.torch_trace import module_label

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated upstream
            module = torch.jit.load(str(graph_file), map_location="cpu").eval()
    except Exception as exc:  # noqa: BLE001 - a file torch cannot load
        raise CountError(
            f"{graph_file.name} is not a TorchScript file torch can load: {exc}"
        ) from None
    if not input_shapes:
        raise CountError("a TorchScript model is counted by running it: give its input's shape")

    # Each parameter's storage → its module's path, type and parameter count.
    owners: dict[int, str] = {}
    layers: dict[str, Layer] = {}
    total = 0
    for path, child in module.named_modules():
        own = list(child.named_parameters(recurse=False))
        if not own:
            continue
        kind = getattr(child, "original_name", type(child).__name__)
        name = module_label(path, kind) if path else "(model)"
        params = sum(p.numel() for _, p in own if p.is_floating_point())
        total += params
        layers[name] = Layer(name=name, module=path or "(model)", op_type=kind, params=params)
        for _, parameter in own:
            owners[parameter.untyped_storage().data_ptr()] = name
    order: list[str] = []

    def tensors(value: Any) -> list[Any]:
        if isinstance(value, torch.Tensor):
            return [value]
        if isinstance(value, (list, tuple)):
            return [t for item in value for t in tensors(item)]
        return []

    class Attribute(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is None:
                return out
            flops = formula(*args, **kwargs, out_val=out)
            inputs = tensors(list(args) + list(kwargs.values()))
            owned = [t for t in inputs if t.untyped_storage().data_ptr() in owners]
            name = owners[owned[0].untyped_storage().data_ptr()] if owned else "(model)"
            if name not in layers:
                layers[name] = Layer(name=name, module="(model)", op_type=str(func._overloadpacket))
            layer = layers[name]
            if name not in order:
                order.append(name)
            layer.macs += int(flops) // 2
            owned_ids = {id(t) for t in owned}
            layer.activation_bytes += sum(
                t.numel() * t.element_size()
                for t in inputs + tensors(out)
                if id(t) not in owned_ids
            )
            layer.weight_bytes += sum(t.numel() * t.element_size() for t in owned)
            return out

    # Zeros of the type fed (token ids are integers, and 0 is an id), one per input in the
    # order of `input_shapes` (a text's ids, then its features: zeros of one shape each).
    dtype = getattr(torch, element_type, torch.float32)
    examples = [torch.zeros((1, *shape), dtype=dtype) for shape in input_shapes.values()]
    try:
        with torch.no_grad(), Attribute():
            module(*examples)
    except Exception as exc:  # noqa: BLE001 - the model refused the input
        shapes = " and ".join(str([1, *shape]) for shape in input_shapes.values())
        what = "an input" if len(input_shapes) == 1 else "inputs"
        raise CountError(f"the model did not run on {what} of shape {shapes}: {exc}") from None
    # Layers in the order their work ran, then those that did none (normalizations).
    ordered = [layers[name] for name in order] + [
        layer for name, layer in layers.items() if name not in order
    ]
    return Count(
        framework="pytorch",
        input_shapes={name: list(shape) for name, shape in input_shapes.items()},
        layers=ordered,
        params=total,
    )


# --- Keras ---------------------------------------------------------------------------------


def count_keras(graph_file: Path, input_shapes: Mapping[str, Sequence[int]]) -> Count:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    try:
        model = keras.models.load_model(str(graph_file), compile=False)
    except Exception as exc:  # noqa: BLE001 - a file Keras cannot load
        raise CountError(f"{graph_file.name} is not a Keras model Keras can load: {exc}") from None
    inputs = {
        tensor.name: [int(d) if d else 0 for d in tensor.shape[1:]] for tensor in model.inputs
    }
    if len(input_shapes) == 1 and len(inputs) == 1:
        # One input: fed by position, whatever the manifest calls it.
        input_shapes = {next(iter(inputs)): next(iter(input_shapes.values()))}
    for name, shape in input_shapes.items():
        if name not in inputs:
            raise CountError(
                f"input {name!r} is not an input of the model (its inputs: {', '.join(inputs)})"
            )
        if list(shape) != inputs[name]:
            raise CountError(
                f"input {name!r}: the Keras model is built for shape {inputs[name]}, not "
                f"{list(shape)}"
            )
    if any(0 in shape for shape in inputs.values()):
        raise CountError("the Keras model has inputs of dynamic size: it is counted at a fixed one")

    def one(shape: Any) -> list[int]:
        return [int(d) for d in tuple(shape)[1:]]

    result = Count(framework="tensorflow", input_shapes=inputs)
    for layer in model.layers:
        params = sum(math.prod(w.shape) for w in layer.weights if "float" in str(w.dtype))
        result.params += params
        try:
            out = one(layer.output.shape)
            ins = [
                one(t.shape)
                for t in (layer.input if isinstance(layer.input, list) else [layer.input])
            ]
        except (AttributeError, ValueError):
            continue
        kind = type(layer).__name__
        macs = 0
        if kind in ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D", "Conv2DTranspose"):
            kernel = [int(d) for d in layer.kernel.shape]
            if kind == "Conv2DTranspose":
                # kernel (kh, kw, out, in): applied at every input position
                macs = math.prod(ins[0][:-1]) * math.prod(kernel)
            elif kind == "DepthwiseConv2D":
                macs = math.prod(out) * math.prod(kernel[:-2])
            else:
                macs = math.prod(out) * math.prod(kernel[:-1])  # kernel (…, in/groups, out)
        elif kind == "Dense":
            macs = math.prod(out) * int(layer.kernel.shape[0])
        if not macs and not params:
            continue
        weight_bytes = sum(
            math.prod(w.shape) * (2 if "16" in str(w.dtype) else 4) for w in layer.weights
        )
        result.layers.append(
            Layer(
                name=layer.name,
                module=layer.name,
                op_type=kind,
                macs=int(macs),
                params=int(params),
                activation_bytes=4 * (sum(math.prod(s) for s in ins) + math.prod(out)),
                weight_bytes=int(weight_bytes),
            )
        )
    return result


# --- on a result ---------------------------------------------------------------------------


def theoretical(
    framework: str,
    graph_file: Path,
    input_name: str,
    sample: Any,
    per_batch_size: Sequence[Mapping[str, Any]],
    *,
    file_format: str | None = None,
    windowed: bool = False,
    input_names: Sequence[str] = (),
    columns: Sequence[str] = (),
) -> dict[str, Any]:
    """A result's `theoretical`: the count at the shape the run fed (`sample`, its first batch;
    where `input_names` are given, the inputs packed side by side on its second axis)
    and, per batch size, the FLOP/s its p50 latency achieved, at its arithmetic intensity (set
    on the roofline by `predictors.analysis.roofline.place`). A model that cannot be counted
    says why (`counted: false`, `reason`), and the evaluation goes on."""
    if sample is None or getattr(sample, "ndim", 0) < 1:
        return {
            "counted": False,
            "reason": "the run has no single batched input to count at (streams feed several)",
        }
    if columns:
        return {
            "counted": False,
            "reason": f"the model takes several inputs from the dataset's columns "
            f"({', '.join(columns)}), each of its own type: FLOPs are counted for one batched "
            "input (or a text's ids with their features)",
        }
    if windowed:
        return {
            "counted": False,
            "reason": "each input is cut into windows, as many as its length makes: a batch's "
            "work is not that of its batch size",
        }
    counted_formats = _COUNTED_FORMATS.get(framework, ())
    if file_format is not None and file_format not in counted_formats:
        return {
            "counted": False,
            "reason": f"FLOPs are counted from {' and '.join(counted_formats)} files in "
            f"{framework}; this model's format is {file_format}",
        }
    shape = [int(d) for d in sample.shape[1:]]
    # A text's ids with its features, packed (N, 1 + F, L): each input is a row of L.
    shapes = {name: shape[1:] for name in input_names} if input_names else {input_name: shape}
    try:
        counted = count(framework, graph_file, shapes, str(sample.dtype))
    except CountError as exc:
        return {"counted": False, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a counter's library failed on this graph
        return {"counted": False, "reason": f"{type(exc).__name__}: {exc}"}
    activation_bytes = sum(layer.activation_bytes for layer in counted.layers)
    weight_bytes = sum(layer.weight_bytes for layer in counted.layers)
    achieved = []
    for entry in per_batch_size:
        p50 = (entry.get("latency") or {}).get("p50_ms")
        batch = int(entry.get("batch_size") or 0)
        if p50 and batch:
            flops = 2 * counted.macs * batch
            moved = activation_bytes * batch + weight_bytes
            achieved.append(
                {
                    "batch_size": batch,
                    "gflops_per_s": round(flops / (p50 / 1e3) / 1e9, 3),
                    # Where it sits on a roofline: FLOPs per byte moved at the least, and those
                    # bytes (its layers' activations for the batch, their weights once).
                    "intensity": _rounded(flops / moved if moved and flops else None),
                    "bytes": moved,
                }
            )
    return {"counted": True, **counted.as_dict(), "achieved": achieved}
