"""TensorFlow's profiler trace (XPlane), cut into the layers and ops of each `predict` call.

At trace level `ml_library` or finer the TensorFlow predictor runs its model graph under
`tf.profiler.experimental` (started after the warm-up calls), each call inside a
`tf.profiler.experimental.Trace(Attr.CALL, call=<n>)` annotation. TensorFlow writes an XSpace
(`*.xplane.pb`): per plane (`/host:CPU`, `/device:GPU:0`, …) lines of events in picoseconds;
every op the executor runs is an event named `<op name>:<op type>` (for instance
`sequential/conv0/Conv2D:Conv2D`), its name scoped by the Keras layer that made it.

`steps_by_call` gives each call's steps: one layer (level `framework`) per Keras layer that ran
ops in the call, from its first op's start to its last op's end (the executor may run ops of
different layers at once, on its threads), and the ops (level `ml_library`) nested in their
layer, named by op name, typed by op type. An op whose scope names no layer of the model (the
graph's own plumbing) belongs to a layer named `(model)`. TensorFlow's graph optimizer fuses
ops across Keras layers (a convolution with the ReLU after it becomes one `_FusedConv2D` op,
named and scoped by the ReLU): such an op belongs to the layer whose scope names it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from predictors.protocol import Attr
from predictors.tracing import Layer

__all__ = ["CLOCK_TF_PROFILER", "CALL_ANNOTATION", "steps_by_call"]

CALL_ANNOTATION = Attr.CALL
CLOCK_TF_PROFILER = (
    "TensorFlow profiler (XPlane): the executor's op events on the host clock, offsets from the "
    "start of each call's mlms.call annotation; a layer spans its ops, which may overlap"
)
_OP = re.compile(r"^(?P<name>[^:]+):(?P<type>[A-Za-z0-9_]+)$")
_SUFFIX = re.compile(r"_\d+$")


def _layer_of(op_name: str, layers: set[str]) -> str:
    """The Keras layer whose name scope holds `op_name` (`model/conv0_1/Conv2D` → `conv0`, as
    TensorFlow makes scope names unique with `_<n>` suffixes), or `(model)`."""
    for part in op_name.split("/")[1:-1] or op_name.split("/")[:1]:
        candidate = part
        while True:
            if candidate in layers:
                return candidate
            stripped = _SUFFIX.sub("", candidate)
            if stripped == candidate:
                break
            candidate = stripped
    return "(model)"


# Ops that move values rather than compute them.
_PLUMBING = frozenset({"ReadVariableOp", "Const", "Identity", "NoOp", "_Arg", "_Retval"})


def _first_compute(ops: list[tuple[int, int, str, str]]) -> int:
    computing = [o for o in ops if o[3] not in _PLUMBING] or ops
    return min(o[0] for o in computing)


def _stat(plane: Any, event: Any, name: str) -> Any:
    for stat in event.stats:
        if plane.stat_metadata[stat.metadata_id].name == name:
            kind = stat.WhichOneof("value")
            return getattr(stat, kind) if kind else None
    return None


def steps_by_call(
    space: Any, calls: int, layer_names: Iterable[str], layer_types: dict[str, str]
) -> tuple[dict[int, list[Layer]], dict[str, int]]:
    """Each annotated call's layers and ops (`{call index: steps}`), and counts (`calls`,
    `ops`, `ops_outside_calls`). `space` is a parsed XSpace; `layer_names` the model's Keras
    layer names, `layer_types` their class names."""
    layers = set(layer_names)
    windows: dict[int, tuple[int, int]] = {}
    ops: list[tuple[int, int, str, str]] = []
    for plane in space.planes:
        metadata = plane.event_metadata
        for line in plane.lines:
            base = int(line.timestamp_ns)
            for event in line.events:
                name = metadata[event.metadata_id].name
                start = base + event.offset_ps // 1000
                end = start + event.duration_ps // 1000
                if name == CALL_ANNOTATION:
                    index = _stat(plane, event, "call")
                    if isinstance(index, int) and 0 <= index < calls:
                        windows[index] = (start, end)
                    continue
                if "::" in name:
                    continue
                match = _OP.match(name)
                if match and plane.name.startswith("/host:"):
                    ops.append((start, end, match["name"], match["type"]))
    ops.sort()
    ordered = sorted(windows.items(), key=lambda item: item[1][0])
    result: dict[int, list[Layer]] = {index: [] for index, _ in ordered}
    grouped: dict[int, dict[str, list[tuple[int, int, str, str]]]] = {
        index: {} for index, _ in ordered
    }
    outside = 0
    position = 0
    for op in ops:
        while position < len(ordered) and ordered[position][1][1] < op[0]:
            position += 1
        if position == len(ordered) or op[0] < ordered[position][1][0]:
            outside += 1
            continue
        index = ordered[position][0]
        grouped[index].setdefault(_layer_of(op[2], layers), []).append(op)
    for index, (call_start, _end) in ordered:
        steps = result[index]
        by_layer = sorted(grouped[index].items(), key=lambda item: _first_compute(item[1]))
        for layer, layer_ops in by_layer:
            # A layer spans its computing ops; reading its variables (which the executor may do
            # long before) does not stretch it.
            computing = [o for o in layer_ops if o[3] not in _PLUMBING] or layer_ops
            first = min(o[0] for o in computing)
            last = max(o[1] for o in computing)
            steps.append(
                Layer(
                    layer,
                    layer_types.get(layer, "model"),
                    first - call_start,
                    last - first,
                    {Attr.CLOCK: CLOCK_TF_PROFILER},
                )
            )
            parent = len(steps) - 1
            for start, end, name, op_type in layer_ops:
                steps.append(
                    Layer(
                        name,
                        op_type,
                        start - call_start,
                        end - start,
                        {Attr.CLOCK: CLOCK_TF_PROFILER},
                        level="ml_library",
                        parent=parent,
                    )
                )
    counts = {"calls": len(result), "ops": len(ops) - outside, "ops_outside_calls": outside}
    return result, counts
