"""Every module's output of a TorchScript model, for `PyTorchPredictor.layer_outputs`.

TorchScript modules take no forward hooks, so the capture rewrites the graphs of a copy of the
module instead (a second `torch.jit.load` of its file, which has graphs of its own: the timed
module is never touched). Around each call of a submodule's `forward` (`prim::CallMethod` on a
`prim::GetAttr` of the module; a module called twice has `forward1` for its second call) it
inserts operators of its own, registered once per process with `torch.library`:

    mlms_capture::enter("layer1")            before the call
    mlms_capture::leave(%out, "Sequential")  after it, where the call returns one tensor
    mlms_capture::exit()                     after it, where it returns anything else

They are Python functions marked as having side effects (alias analysis CONSERVATIVE), so that
TorchScript neither drops nor moves them. At run time they keep a stack of the attribute names
entered, which gives each output its module path (`layer1.0.conv1`): graphs are shared by every
module of one type, so a graph can name the attribute it calls but not the path to it.

`leave` copies the output to the host as the model runs, leaves and containers alike (a
block's output is the one after its residual add), in the order the calls return; the model's
own output comes last, named `(model)`. The copy runs with TorchScript's optimizations off
(`torch.jit.optimized_execution(False)`), in inference mode, on the predictor's device.
"""

from __future__ import annotations

import functools
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from predictors.frameworks.layer_outputs import MODEL_SCOPE, LayerOutput, numbered, size_refusal
from predictors.frameworks.predictor import PredictorError

NAMESPACE = "mlms_capture"


@dataclass
class _Recorder:
    """The outputs of one call of the rewritten module, up to `max_bytes`."""

    max_bytes: int
    stack: list[str] = field(default_factory=list)
    outputs: list[tuple[str, str, torch.Tensor]] = field(default_factory=list)
    size: int = 0
    over: bool = False

    def enter(self, name: str) -> None:
        self.stack.append(name)

    def leave(self, tensor: torch.Tensor | None, op_type: str) -> None:
        path = ".".join(self.stack)
        self.stack.pop()
        if tensor is None or self.over:
            return
        self.keep(path, op_type, tensor)

    def keep(self, path: str, op_type: str, tensor: torch.Tensor) -> None:
        self.size += tensor.numel() * tensor.element_size()
        if self.size > self.max_bytes:
            self.over = True
            return
        self.outputs.append((path, op_type, tensor.detach().to("cpu", copy=True)))


# The recorder of the call in progress in this context; the operators do nothing without one.
_RECORDER: ContextVar[_Recorder | None] = ContextVar("mlms_capture_recorder", default=None)


def _enter(name: str) -> None:
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.enter(name)


def _leave(tensor: torch.Tensor, op_type: str) -> None:
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.leave(tensor, op_type)


def _exit() -> None:
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.leave(None, "")


@functools.cache
def _operators() -> torch.library.Library:
    """The capture's operators, registered once per process (the library is kept alive by the
    cache: a collected library unregisters them)."""
    library = torch.library.Library(NAMESPACE, "DEF")
    for schema, function in (
        ("enter(str name) -> ()", _enter),
        ("leave(Tensor output, str op_type) -> ()", _leave),
        ("exit() -> ()", _exit),
    ):
        library.define(schema, alias_analysis="CONSERVATIVE")
        library.impl(schema.split("(")[0], function, "CompositeExplicitAutograd")
    return library


def _callee(node: torch._C.Node) -> str | None:
    """The attribute path of the module a `prim::CallMethod` calls (`layer1` or, for
    `self.a.b(x)`, `a.b`), None where the callee is not an attribute."""
    names: list[str] = []
    value = node.inputsAt(0)
    while value.node().kind() == "prim::GetAttr":
        names.append(value.node().s("name"))
        value = value.node().inputsAt(0)
    return ".".join(reversed(names)) or None


def _rewritten(graph: torch._C.Graph) -> bool:
    return any(node.kind().startswith(f"{NAMESPACE}::") for node in graph.nodes())


def _rewrite(graph: torch._C.Graph, block: torch._C.Block) -> None:
    """Put `enter` and `leave`/`exit` around each submodule call of `block` (and of its inner
    blocks: the branches of an `if`, the body of a loop)."""
    for node in list(block.nodes()):
        for inner in node.blocks():
            _rewrite(graph, inner)
        if node.kind() != "prim::CallMethod" or not node.s("name").startswith("forward"):
            continue
        name = _callee(node)
        if name is None:
            continue
        op_type = str(node.inputsAt(0).type()).rsplit(".", 1)[-1]
        with graph.insert_point_guard(node):
            name_value = graph.insertConstant(name)  # type: ignore[attr-defined]
            type_value = graph.insertConstant(op_type)  # type: ignore[attr-defined]
        enter = graph.create(f"{NAMESPACE}::enter", [name_value], 0)
        enter.insertBefore(node)
        outputs = list(node.outputs())
        if len(outputs) == 1 and isinstance(outputs[0].type(), torch._C.TensorType):
            leave = graph.create(f"{NAMESPACE}::leave", [outputs[0], type_value], 0)
        else:
            leave = graph.create(f"{NAMESPACE}::exit", [], 0)
        leave.insertAfter(node)


class TorchCapture:
    """A second copy of a TorchScript model, rewritten to record every module's output."""

    def __init__(self, graph_file: Path, device: torch.device) -> None:
        _operators()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.load.* is deprecated")
            module = torch.jit.load(str(graph_file), map_location=device)
        for parameter in module.parameters():
            parameter.requires_grad_(False)
        self._module = module.eval()
        self._device = device
        self._type = str(getattr(module, "original_name", type(module).__name__))
        # The rewritten graphs, kept referenced: a graph is shared by the modules of one type
        # and is rewritten once (an id is only unique while its graph's wrapper lives).
        self._graphs: list[torch._C.Graph] = []
        seen: set[int] = set()
        for _, submodule in module.named_modules():
            methods = submodule._c._method_names()
            for method in (m for m in methods if m.startswith("forward")):
                graph = submodule._c._get_method(method).graph
                if id(graph) in seen or _rewritten(graph):
                    continue
                seen.add(id(graph))
                self._graphs.append(graph)
                _rewrite(graph, graph.block())

    def run(self, batch: np.ndarray, max_bytes: int) -> list[LayerOutput]:
        recorder = _Recorder(max_bytes)
        token = _RECORDER.set(recorder)
        try:
            with torch.inference_mode(), torch.jit.optimized_execution(False):
                outputs = self._module(torch.from_numpy(batch).to(self._device))
                for index, tensor in enumerate(_tensors(outputs)):
                    name = MODEL_SCOPE if index == 0 else f"{MODEL_SCOPE}:{index}"
                    recorder.keep(name, self._type, tensor)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PredictorError(f"pytorch failed to capture the layer outputs: {first}") from exc
        finally:
            _RECORDER.reset(token)
        if recorder.over:
            raise PredictorError(
                size_refusal(
                    "pytorch",
                    recorder.size,
                    max_bytes,
                    f"{len(recorder.outputs) + 1} module outputs, up to the one that passed it",
                    at_least=True,
                )
            )
        names = numbered(path for path, _, _ in recorder.outputs)
        return [
            LayerOutput(name, op_type, _host_array(tensor))
            for name, (_, op_type, tensor) in zip(names, recorder.outputs, strict=True)
        ]


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    """A host tensor as NumPy; bfloat16, which NumPy has not, as float32 (exactly)."""
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    array: np.ndarray = tensor.numpy()
    return array


def _tensors(outputs: Any) -> list[torch.Tensor]:
    """The tensors a model returned: one, or those of a tuple, list or dict of them."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if isinstance(outputs, tuple | list):
        return [o for o in outputs if isinstance(o, torch.Tensor)]
    return []
