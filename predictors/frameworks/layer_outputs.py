"""Every layer's output of one batch (`Predictor.layer_outputs`), framework-neutral.

A predictor captures the output of each layer of its model, in the order the model computes
them, as a list of `LayerOutput`s: PyTorch each module's output (leaves and containers: a
residual block's output is the one after its residual add), ONNX Runtime each node's, Keras
each layer's. A module (or layer) called more than once gets one output per call, the second
named `name#2`, the third `name#3` (`numbered`); a node or layer with several outputs gives
each, the second named `name:1` and so on.

ONNX nodes are named by the module they came from where the exporter says so: PyTorch's
exporter names a node `/layer1/layer1.0/conv1/Conv` (each scope a module, `layer1.0` being the
child `0` of `layer1`), whose module path is `layer1.0.conv1` (`exporter_scope`); a node of the
model's own `forward` (`/Flatten`) is in `(model)`, the name the PyTorch capture gives the
model's own output. The raw node name is kept in `LayerOutput.node`.

A capture holds a copy of every activation of the batch, so it is bounded: a predictor refuses
(PredictorError, naming the sizes) a capture whose outputs would take more than `max_bytes`
(`MAX_CAPTURE_BYTES` unless the caller says otherwise; `size_refusal`).

This module imports no framework: the analysis of two captures (`predictors.analysis.divergence`)
reads it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MAX_CAPTURE_BYTES",
    "MODEL_SCOPE",
    "LayerOutput",
    "exporter_scope",
    "module_path",
    "numbered",
    "onnx_layer_name",
    "size_refusal",
]

# The bound on the bytes of one capture's layer outputs (as computed, before compression):
# what a result carries to the hub with its input, inside the upload's limit (256 MiB of JSON,
# the capture base64 in it; the hub's LAYER_OUTPUTS_MAX_BYTES holds the layers and the input).
MAX_CAPTURE_BYTES = 128 * 2**20

# The name of the model's own output (PyTorch), and of the nodes the exporter places directly
# in the model's `forward` (ONNX).
MODEL_SCOPE = "(model)"


@dataclass(frozen=True, eq=False)
class LayerOutput:
    """One layer's output for one batch, on the host, batch axis first.

    `name` is the layer's name in its framework (a PyTorch module path such as
    `layer1.0.conv1`, a Keras layer name, an ONNX node's module path), `#2`, `#3` for its later
    calls; `op_type` its kind (the module's class, the ONNX operator, the Keras layer class);
    `node` the raw ONNX node name (empty elsewhere)."""

    name: str
    op_type: str
    array: np.ndarray
    node: str = ""


def numbered(names: Iterable[str]) -> list[str]:
    """`names` with each repeat numbered: the second `x` becomes `x#2`, the third `x#3`."""
    seen: dict[str, int] = {}
    result = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        result.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return result


def exporter_scope(node: str) -> tuple[str, ...] | None:
    """The module path of an ONNX node PyTorch's exporter named (`/layer1/layer1.0/conv1/Conv`
    → `("layer1", "0", "conv1")`; `/Flatten` → `()`), None for a node named otherwise.

    The exporter writes each scope as the module's name qualified by its parent's when the
    parent is a container (`layer1.0` under `layer1`, `downsample.0` under `downsample`): that
    prefix is dropped, so that the path's parts are attribute names, as in PyTorch's own
    `named_modules`."""
    if not node.startswith("/"):
        return None
    *scopes, _ = node[1:].split("/")
    path: list[str] = []
    for scope in scopes:
        if not scope:
            return None
        if path and scope.startswith(f"{path[-1]}.") and len(scope) > len(path[-1]) + 1:
            scope = scope[len(path[-1]) + 1 :]
        path.append(scope)
    return tuple(path)


def module_path(scope: tuple[str, ...]) -> str:
    """A module path's name: its parts joined by dots, `(model)` for the model itself."""
    return ".".join(scope) if scope else MODEL_SCOPE


def onnx_layer_name(node: str, fallback: str) -> str:
    """The layer name of an ONNX node: its module path where the exporter wrote one, else the
    node's name, else `fallback` (its first output's name)."""
    scope = exporter_scope(node)
    if scope is not None:
        return module_path(scope)
    return node or fallback


def size_refusal(framework: str, total: int, bound: int, counted: str, *, at_least: bool) -> str:
    """The message of a refused capture: what its outputs take (`at_least`: at least, where
    not all were counted; `counted` says which were) against the bound."""
    return (
        f"the {framework} layer outputs of this batch take {'at least ' if at_least else ''}"
        f"{_size(total)} ({counted}), over the bound of {_size(bound)} (max_bytes); capture a "
        "smaller batch or raise the bound"
    )


def _size(size: int) -> str:
    return f"{size / 2**20:.1f} MiB ({size} bytes)" if size >= 2**20 else f"{size} bytes"
