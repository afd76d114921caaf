"""torch.profiler's trace, cut into the steps of each `predict` call.

The PyTorch predictor, when it traces through torch.profiler (`predictors.frameworks.pytorch`),
wraps every profiled call in a `record_function` annotation named `mlms.call#<n>` and, once the
evaluation's calls are done, exports the profiler's Chrome trace (Kineto's JSON: `cpu_op`,
`cuda_runtime`, `user_annotation`, `kernel`, `gpu_memcpy` and `gpu_memset` events, on one
timeline in microseconds). `steps_by_call` turns those events into the `Layer` steps of each
call, nested:

- **layers** (level `framework`): consecutive top-level ops of the same module (Kineto records
  each op's TorchScript module hierarchy, `TOP(ResNet)::forward.layer1(Sequential)::forward.
  0(BasicBlock)::forward.conv1(Conv2d)::forward.`), named by the module's qualified name
  (`layer1.0.conv1`) and typed by its class (`Conv2d`); ops of the model's own `forward`
  outside any submodule form a layer named `(model)` — or `(fused across layers)`, of type
  `Fusion`, where they are all ops TorchScript's fuser made from several modules' ops (on a
  GPU it fuses a bottleneck's last batch norm with the residual add) — and the call's work
  outside the model (copies to and from the device) one named `(outside the model)`, of type
  `host`;
- **ops** (level `ml_library`): every `cpu_op` (aten ops), nested in its enclosing op or layer;
- **CUDA runtime calls** (level `system_library`): `cudaLaunchKernel`, `cudaMemcpyAsync`, …,
  nested in the op that made them;
- **GPU activities** (level `system_library`): kernels, copies and memsets, correlated to the
  runtime call that launched them by Kineto's correlation id (CUPTI's), so to their op and
  layer; they carry their grid, block, stream and device.

This module reads JSON only (no torch import), so the correlation is tested on any machine,
from traces recorded on a GPU.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from predictors.protocol import Attr, at_least
from predictors.tracing import CLOCK_TORCH_PROFILER, Layer

__all__ = ["CALL_PREFIX", "GPU_CATEGORIES", "call_name", "module_label", "steps_by_call"]

CALL_PREFIX = "mlms.call#"
# Kineto's categories of GPU activities, and the op type each becomes.
GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_HOST_OPS = ("cpu_op",)
_RUNTIME = ("cuda_runtime", "cuda_driver")
_MODULE = re.compile(r"([^.()]*)\(([^()]*)\)::([^.]*)\.")
# TorchScript records each scripted method call as an op of this name; it is the module's
# frame, not an op of its own.
_METHOD_CALLS = frozenset({"forward"})


def module_label(path: str, module_type: str) -> str:
    """A layer's name: its module's qualified name (`layer1.0.conv1`), with the module's type
    when the name ends in a position, as the children of a `Sequential` do (`0 (Conv2d)`,
    `features.3 (ReLU)`), which alone say nothing."""
    last = path.rsplit(".", 1)[-1]
    return f"{path} ({module_type})" if last.isdigit() and module_type else path


def call_name(index: int) -> str:
    """The `record_function` annotation of profiled call `index`."""
    return f"{CALL_PREFIX}{index}"


@dataclass
class _Event:
    name: str
    category: str
    start_ns: int
    end_ns: int
    args: Mapping[str, Any]
    children: list[_Event] = field(default_factory=list)
    index: int = -1  # its position in the call's output, once emitted


def _event(raw: Mapping[str, Any]) -> _Event:
    start = round(float(raw["ts"]) * 1000)
    return _Event(
        name=str(raw.get("name", "")),
        category=str(raw.get("cat", "")),
        start_ns=start,
        end_ns=start + round(float(raw.get("dur", 0)) * 1000),
        args=raw.get("args") or {},
    )


def _module_path(hierarchy: str) -> tuple[str, str]:
    """(qualified module name, module type) of a Kineto module hierarchy; ("", top type) for
    the model's own frame."""
    frames = _MODULE.findall(hierarchy)
    if not frames:
        return "", ""
    names = [name for name, _, _ in frames[1:]]
    return ".".join(names), frames[-1][1]


def _fused(event: _Event) -> bool:
    """An op TorchScript's fuser made (`fused_batch_norm_add`, `prim::FusionGroup`, …), or a
    runtime call between two of them."""
    return (
        event.category in _RUNTIME
        or event.name.startswith(("fused_", "prim::FusionGroup", "prim::TensorExprGroup"))
        or "Fusion" in event.name
    )


def _nest(events: list[_Event]) -> list[_Event]:
    """Nest host events of one thread by time (an event inside another is its child); the
    top-level events, in start order."""
    roots: list[_Event] = []
    stack: list[_Event] = []
    for event in sorted(events, key=lambda e: (e.start_ns, -e.end_ns)):
        while stack and event.start_ns >= stack[-1].end_ns:
            stack.pop()
        (stack[-1].children if stack else roots).append(event)
        stack.append(event)
    return roots


def _unwrap(events: Iterable[_Event]) -> list[_Event]:
    """Replace TorchScript method frames (`forward`) by their children."""
    flat: list[_Event] = []
    for event in events:
        if event.category in _HOST_OPS and event.name in _METHOD_CALLS:
            flat.extend(_unwrap(event.children))
        else:
            event.children = _unwrap(event.children)
            flat.append(event)
    return flat


class _Call:
    """The steps of one call, emitted parents first."""

    def __init__(
        self,
        index: int,
        base_ns: int,
        with_ops: bool,
        with_gpu: bool,
        runtime_by_correlation: dict[int, _Event],
    ) -> None:
        self.index = index
        self.base_ns = base_ns
        self.with_ops = with_ops
        self.with_gpu = with_gpu
        self.runtime_by_correlation = runtime_by_correlation
        self.steps: list[Layer] = []
        self.launches: list[_Event] = []

    def emit(self, event: _Event, level: str, op_type: str, parent: int, **extra: Any) -> int:
        attributes: dict[str, Any] = {Attr.CLOCK: CLOCK_TORCH_PROFILER, **extra}
        self.steps.append(
            Layer(
                event.name,
                op_type,
                event.start_ns - self.base_ns,
                max(event.end_ns - event.start_ns, 0),
                attributes,
                level=level,
                parent=parent,
            )
        )
        event.index = len(self.steps) - 1
        return event.index

    def emit_tree(self, event: _Event, parent: int) -> None:
        """An op (ml_library) or runtime call (system_library) and what it encloses."""
        if event.category in _RUNTIME:
            if not self.with_gpu:
                return
            correlation = event.args.get("correlation")
            extra = {Attr.CORRELATION_ID: correlation} if correlation is not None else {}
            position = self.emit(event, "system_library", "cuda_runtime", parent, **extra)
            if isinstance(correlation, int):
                self.runtime_by_correlation[correlation] = event
                self.launches.append(event)
        else:
            if not self.with_ops:
                return
            extra = {}
            if "Input Dims" in event.args:
                extra[Attr.SHAPES] = event.args["Input Dims"]
            position = self.emit(event, "ml_library", event.name, parent, **extra)
        for child in event.children:
            self.emit_tree(child, position)


def steps_by_call(
    trace: Mapping[str, Any], calls: int, level: str, device: str = "cpu"
) -> tuple[dict[int, list[Layer]], dict[str, int]]:
    """The steps of each profiled call (`{call index: steps}`; a call with no annotation in
    the trace is absent) recorded at trace level `level` (`framework`: layers; `ml_library`:
    + ops; `system_library` or finer: + CUDA runtime calls and GPU activities), and counts of
    what the trace held (`gpu_activities`, `gpu_activities_unmatched`, `calls`)."""
    annotations: dict[int, _Event] = {}
    host_by_thread: dict[tuple[Any, Any], list[tuple[int, _Event]]] = {}
    gpu: list[_Event] = []
    thread_of_call: dict[int, tuple[Any, Any]] = {}
    with_ops = at_least(level, "ml_library")
    with_gpu = at_least(level, "system_library")
    for raw in trace.get("traceEvents", ()):
        if raw.get("ph") != "X" or not isinstance(raw.get("ts"), int | float):
            continue
        category = raw.get("cat", "")
        name = str(raw.get("name", ""))
        if category == "user_annotation" and name.startswith(CALL_PREFIX):
            try:
                index = int(name[len(CALL_PREFIX) :])
            except ValueError:
                continue
            if 0 <= index < calls:
                annotations[index] = _event(raw)
                thread_of_call[index] = (raw.get("pid"), raw.get("tid"))
        elif category in _HOST_OPS or category in _RUNTIME:
            thread = (raw.get("pid"), raw.get("tid"))
            event = _event(raw)
            host_by_thread.setdefault(thread, []).append((event.start_ns, event))
        elif category in GPU_CATEGORIES:
            gpu.append(_event(raw))
    for pairs in host_by_thread.values():
        pairs.sort(key=lambda pair: pair[0])

    runtime_by_correlation: dict[int, _Event] = {}
    owner_of: dict[int, int] = {}  # id(runtime event) -> the index of its call
    result: dict[int, list[Layer]] = {}
    for index, annotation in sorted(annotations.items()):
        thread_events = host_by_thread.get(thread_of_call[index], [])
        starts = [start for start, _ in thread_events]
        low = bisect_left(starts, annotation.start_ns)
        high = bisect_right(starts, annotation.end_ns)
        inside = [
            event for _, event in thread_events[low:high] if event.end_ns <= annotation.end_ns + 1
        ]
        roots = _unwrap(_nest(inside))
        call = _Call(index, annotation.start_ns, with_ops, with_gpu, runtime_by_correlation)
        # Layers: runs of consecutive top-level ops of one module.
        runs: list[tuple[tuple[str, str], list[_Event]]] = []
        for event in roots:
            path = _module_path(str(event.args.get("Module Hierarchy", "")))
            if event.category in _RUNTIME and runs:
                runs[-1][1].append(event)  # a runtime call between ops: the running layer's
                continue
            if runs and runs[-1][0] == path:
                runs[-1][1].append(event)
            else:
                runs.append((path, [event]))
        for (name, module_type), events in runs:
            # No module: work of the call outside the model (copies to and from the device).
            label = (
                module_label(name, module_type)
                if name
                else ("(model)" if module_type else "(outside the model)")
            )
            if not name and module_type and all(_fused(e) for e in events):
                # TorchScript's fuser merged ops of several modules (a block's last batch
                # norm with its residual add, say): they belong to no one layer.
                label, module_type = "(fused across layers)", "Fusion"
            layer = _Event(
                label,
                "layer",
                min(e.start_ns for e in events),
                max(e.end_ns for e in events),
                {},
            )
            position = call.emit(
                layer,
                "framework",
                module_type or "host",
                -1,
                **({Attr.MODULE: name} if name else {}),
            )
            for event in events:
                call.emit_tree(event, position)
        result[index] = call.steps
        owner_of.update({id(e): index for e in call.launches})

    matched = unmatched = 0
    if with_gpu:
        for activity in sorted(gpu, key=lambda e: e.start_ns):
            correlation = activity.args.get("correlation")
            launch = runtime_by_correlation.get(correlation) if correlation is not None else None
            if launch is None:
                unmatched += 1
                continue
            owner = owner_of[id(launch)]
            steps = result[owner]
            base = annotations[owner].start_ns
            args = activity.args
            attributes: dict[str, Any] = {
                Attr.CLOCK: CLOCK_TORCH_PROFILER,
                Attr.CORRELATION_ID: correlation,
                Attr.LAUNCH: launch.name,
            }
            if "device" in args:
                attributes[Attr.DEVICE] = f"cuda:{args['device']}"
            for key, attribute in (
                ("grid", Attr.GRID),
                ("block", Attr.BLOCK),
                ("stream", Attr.STREAM),
                ("registers per thread", Attr.REGISTERS_PER_THREAD),
                ("shared memory", Attr.SHARED_MEMORY),
                ("est. achieved occupancy %", Attr.ACHIEVED_OCCUPANCY_PCT),
                ("bytes", Attr.BYTES),
                ("memory bandwidth (GB/s)", Attr.BANDWIDTH_GBPS),
            ):
                if key in args:
                    attributes[attribute] = args[key]
            steps.append(
                Layer(
                    activity.name,
                    GPU_CATEGORIES[activity.category],
                    activity.start_ns - base,
                    max(activity.end_ns - activity.start_ns, 0),
                    attributes,
                    level="system_library",
                    parent=launch.index,
                )
            )
            matched += 1
    counts = {
        "calls": len(result),
        "gpu_activities": len(gpu),
        "gpu_activities_matched": matched,
        "gpu_activities_unmatched": unmatched,
    }
    return result, counts
