"""Where two runs of one model part: the first layer whose output differs (pure NumPy).

Two captures (`Capture`: the batch fed to the model and every layer's output,
`Predictor.layer_outputs`) of one model, run twice (two frameworks, two devices, two versions,
two preprocessings), are compared layer by layer (`diverge`).

**How the layers are matched.** Two captures of one framework are matched by layer name. A
PyTorch capture and an ONNX Runtime one (of the model PyTorch's exporter wrote) are matched by
module path: the exporter names each node by the module it came from
(`/layer1/layer1.0/conv1/Conv` is module `layer1.0.conv1`; a module's second call, `relu#2` in
PyTorch, is `relu_1` there), and a module's output is the last node inside it (a residual
block's, the ReLU after its add). Where the export fused layers (a BatchNorm folded into the
Conv before it: PyTorch has `conv1` then `bn1`, ONNX only `/conv1/Conv`, whose output is
`bn1`'s), the node is compared with the PyTorch output at the end of the fused run: the last
module before the next one that has a node of its own (each row lists the run as `fused`).
Where neither gives a pair, the layers are matched in order by shape (the longest common
subsequence of their shapes). Only outputs of one shape are compared (a batch axis first; axes
of size 1 and a flattening of the rest aside); where the inputs' layouts differ (NCHW against
NHWC, PyTorch against Keras), the second capture's 4-axis outputs are transposed to the
first's. Across frameworks a layer whose values are the same but in another order (Keras
flattens channels last) is reported as `permuted`, not as a divergence. The layers left over
on each side are listed (`unmatched`).

**What the tolerance means.** Each matched pair gets its largest absolute difference, its
relative error ‖a − b‖ / ‖a‖ (a being the first capture, the reference) and the cosine
similarity of the two outputs, computed in float64. A layer diverges when its relative error
passes `tolerance` *and* is more than `growth` times the largest relative error of the layers
before it (the inputs' for the first): the error a layer carries in from earlier layers is not
blamed on it. The default tolerance, 1e-4, sits between what float32 arithmetic gives and what
lower precision gives: two correct float32 computations of a layer that add in different orders
(other kernels, thread counts, a BatchNorm folded into its Conv) differ by about 1e-7 to 1e-5
relative to the output's norm, while float16 (11 significant bits) and TF32 (the 10-bit
mantissa GPUs use for float32 convolutions and matrix products where allowed) differ by about
1e-4 to 1e-3. A growth of 10 lets an error grow tenfold through a layer before that layer is
blamed. Two identical runs give errors of exactly 0. Where the inputs themselves differ beyond
the tolerance, the first divergence is the input: the preprocessing differs.

A capture is saved as one `.npz` file (`Capture.save`): its arrays and a JSON index (names, op
types, node names, dtypes, shapes); `Capture.load` refuses a file that is not one, is larger
than its bound, or holds pickled objects.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from predictors.frameworks.layer_outputs import (
    MAX_CAPTURE_BYTES,
    MODEL_SCOPE,
    LayerOutput,
    exporter_scope,
)

__all__ = [
    "DEFAULT_GROWTH",
    "DEFAULT_TOLERANCE",
    "MAX_CAPTURE_FILE_BYTES",
    "Capture",
    "diverge",
]

DEFAULT_TOLERANCE = 1e-4
DEFAULT_GROWTH = 10.0
# The most bytes a capture file may hold, its arrays uncompressed: the layer outputs' bound
# and as much again for the input and the index.
MAX_CAPTURE_FILE_BYTES = 2 * MAX_CAPTURE_BYTES

FORMAT = "mlms-capture"
VERSION = 1
NO_DIVERGENCE = "no divergence beyond float32 tolerance"
INPUTS_DIFFER = "the inputs differ: preprocessing"
MATCHED_BY_NAME = "name"
MATCHED_BY_MODULE_PATH = "module path"
MATCHED_BY_ORDER = "order and shape"


# -- captures and their files ----------------------------------------------------------------


@dataclass(eq=False)
class Capture:
    """One run of a model on one batch: the `framework` that ran it, the preprocessed batch it
    was fed (`input`), every layer's output (`layers`, in the order the model computed them)
    and the dataset indices of the batch's rows (`indices`)."""

    framework: str
    input: np.ndarray
    layers: list[LayerOutput]
    indices: list[int] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        """The capture as one compressed `.npz`: `index` (the JSON index, as UTF-8 bytes),
        `input` and `layer_00000`, `layer_00001`, … in order."""
        arrays: dict[str, Any] = {"input": np.asarray(self.input)}
        arrays.update(
            (f"layer_{i:05d}", np.asarray(layer.array)) for i, layer in enumerate(self.layers)
        )
        for key, array in arrays.items():
            if array.dtype.hasobject or array.dtype.kind not in "biufc":
                raise ValueError(f"{key}: a capture holds numbers, not {array.dtype}")
        index = {
            "format": FORMAT,
            "version": VERSION,
            "framework": self.framework,
            "indices": [int(i) for i in self.indices],
            "input": _describe(arrays["input"]),
            "layers": [
                {
                    "name": layer.name,
                    "op_type": layer.op_type,
                    "node": layer.node,
                    **_describe(arrays[f"layer_{i:05d}"]),
                }
                for i, layer in enumerate(self.layers)
            ],
        }
        encoded = np.frombuffer(json.dumps(index).encode("utf-8"), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, index=encoded, **arrays)
        return buffer.getvalue()

    def save(self, path: Path | str) -> None:
        """Write the capture to `path` (`to_bytes`)."""
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: Path | str, *, max_bytes: int = MAX_CAPTURE_FILE_BYTES) -> Capture:
        """The capture saved at `path` (`from_bytes`); ValueError naming the file."""
        path = Path(path)
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{path.name}: {size} bytes, over the bound of {max_bytes} bytes")
        return cls.from_bytes(path.read_bytes(), max_bytes=max_bytes, name=path.name)

    @classmethod
    def from_bytes(
        cls, data: bytes, *, max_bytes: int = MAX_CAPTURE_FILE_BYTES, name: str = "the file"
    ) -> Capture:
        """The capture in `data`; ValueError, saying what is wrong, for bytes that are not a
        capture (not a zip of `.npy` arrays, truncated, an index that does not describe its
        arrays), that would take more than `max_bytes` (as sent or uncompressed), or that hold
        pickled objects (never unpickled)."""
        if len(data) > max_bytes:
            raise ValueError(f"{name}: {len(data)} bytes, over the bound of {max_bytes} bytes")
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                _check_members(archive, max_bytes)
            with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
                index = _index(loaded)
                arrays = {key: loaded[key] for key in _keys(index)}
        except ValueError as exc:
            raise ValueError(f"{name} is not a capture: {exc}") from exc
        except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
            raise ValueError(f"{name} is not a capture (.npz): {exc}") from exc
        for key, entry in zip(_keys(index), [index["input"], *index["layers"]], strict=True):
            if _describe(arrays[key]) != {"dtype": entry["dtype"], "shape": entry["shape"]}:
                raise ValueError(
                    f"{name} is not a capture: {key} is {_describe(arrays[key])}, its "
                    f"index says {entry['dtype']} {entry['shape']}"
                )
        layers = [
            LayerOutput(entry["name"], entry["op_type"], arrays[f"layer_{i:05d}"], entry["node"])
            for i, entry in enumerate(index["layers"])
        ]
        return cls(index["framework"], arrays["input"], layers, list(index["indices"]))


def _describe(array: np.ndarray) -> dict[str, Any]:
    return {"dtype": array.dtype.str, "shape": list(array.shape)}


def _keys(index: dict[str, Any]) -> list[str]:
    return ["input", *(f"layer_{i:05d}" for i in range(len(index["layers"])))]


def _check_members(archive: zipfile.ZipFile, max_bytes: int) -> None:
    """Refuse an archive whose members would take more than `max_bytes` uncompressed, whose
    arrays hold objects (pickles), or whose array headers claim more data than their member
    holds (numpy would allocate it before reading)."""
    members = archive.infolist()
    total = sum(member.file_size for member in members)
    if total > max_bytes:
        raise ValueError(f"its arrays take {total} bytes uncompressed, over {max_bytes} bytes")
    for member in members:
        with archive.open(member) as file:
            version = np.lib.format.read_magic(file)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(file)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(file)
        if dtype.hasobject:
            raise ValueError(f"{member.filename} holds Python objects (a pickle): refused")
        if int(np.prod(shape)) * dtype.itemsize > member.file_size:
            raise ValueError(f"{member.filename} claims more data than it holds")


def _index(data: Any) -> dict[str, Any]:
    """The capture's JSON index, checked to be one."""
    raw = data["index"]
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError("its index is not UTF-8 bytes")
    try:
        index = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"its index is not JSON: {exc}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"its index is not a {FORMAT} index")
    if index.get("version") != VERSION:
        raise ValueError(f"version {index.get('version')!r}; this reads version {VERSION}")
    described: dict[str, type] = {"dtype": str, "shape": list}
    named: dict[str, type] = {"name": str, "op_type": str, "node": str, **described}
    checks: list[tuple[Any, dict[str, type]]] = [(index, {"framework": str, "indices": list})]
    checks.append((index.get("input"), described))
    layers = index.get("layers")
    if not isinstance(layers, list):
        raise ValueError("its index has no list of layers")
    checks.extend((entry, named) for entry in layers)
    for entry, fields in checks:
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(key), kind) for key, kind in fields.items()
        ):
            raise ValueError(f"its index entry {str(entry)[:80]} lacks one of {', '.join(fields)}")
    if not all(isinstance(i, int) for i in index["indices"]):
        raise ValueError("its dataset indices are not integers")
    return index


# -- comparing two captures ------------------------------------------------------------------


@dataclass(frozen=True)
class _Pair:
    """Layer `a` of the first capture matched with layer `b` of the second; `fused`: the
    indices, on the side of module paths (`fused_side`), of the run of modules the other side
    computes as one node, whose last is the one compared (module path matching)."""

    a: int
    b: int
    fused: tuple[int, ...] = ()
    fused_side: str = ""


def diverge(
    a: Capture,
    b: Capture,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    growth: float = DEFAULT_GROWTH,
) -> dict[str, Any]:
    """Compare two captures of one model (`a` the reference) layer by layer (the rules: the
    module's docstring). The report, JSON-able (finite numbers only):

    - `tolerance`, `growth`, `frameworks` {a, b}, `matched_by` (`name`, `module path`,
      `order and shape`), `layout` (None, or how 4-axis outputs were transposed),
      `indices_match` (the two batches hold the same dataset rows);
    - `input`: `dtypes`, `shapes` {a, b}, `comparable` (one shape), `max_abs_error`,
      `relative_error`, `cosine` (None where not comparable), `differs`;
    - `layers`: one row per matched pair, in the first capture's order: `name`, `op_type` (the
      first capture's), `a` and `b` (each `name`, `op_type`, `node`, `dtype`, `shape`),
      `fused` (the modules one node stands for, else empty), `max_abs_error`,
      `relative_error`, `cosine`, `nonfinite_mismatch` (elements NaN or infinite in one run
      only), `permuted`, `diverges`;
    - `counts` {a, b, matched}, `unmatched` {a, b}: the names left out on each side;
    - `first_divergence`: None where nothing diverges; else `at` `input` (with the inputs'
      errors, `dtypes`, `shapes`, `reason`) or `layer`: `row`, `name`, `op_type`, `names`,
      `op_types` and `dtypes` {a, b}, `relative_error`, `max_abs_error`, `cosine`,
      `input_error` and `input_error_from` (the relative error of the row before, or of the
      input, and its name), `largest_error_before`;
    - `verdict`: one line (`NO_DIVERGENCE`, `INPUTS_DIFFER`, or "first divergence at …").
    """
    if not tolerance > 0 or not growth >= 1:
        raise ValueError("tolerance must be above 0 and growth at least 1")
    layout = _layout(a.input.shape, b.input.shape)
    inputs = _input_errors(a.input, _aligned(b.input, layout), tolerance)
    matched_by, pairs = _match(a, b, layout)
    cross = a.framework != b.framework
    rows: list[dict[str, Any]] = []
    worst = inputs["relative_error"] if inputs["comparable"] else 0.0
    first: dict[str, Any] | None = None
    if inputs["differs"]:
        first = {"at": "input", "reason": INPUTS_DIFFER, **_input_summary(inputs)}
    for pair in pairs:
        x, y = a.layers[pair.a], b.layers[pair.b]
        errors = _errors(x.array, _aligned(y.array, layout), tolerance, permutable=cross)
        diverges = (
            not errors["permuted"]
            and errors["relative_error"] > tolerance
            and errors["relative_error"] > growth * worst
        )
        fused_from = a if pair.fused_side == "a" else b
        row = {
            "name": x.name,
            "op_type": x.op_type,
            "a": _layer(x),
            "b": _layer(y),
            "fused": [fused_from.layers[index].name for index in pair.fused],
            **errors,
            "diverges": diverges,
        }
        if diverges and first is None:
            first = _first_divergence(row, rows, inputs, worst)
        if not errors["permuted"]:
            worst = max(worst, errors["relative_error"])
        rows.append(row)
    used = {
        side: {pair.a if side == "a" else pair.b for pair in pairs}
        | {index for pair in pairs if pair.fused_side == side for index in pair.fused}
        for side in ("a", "b")
    }
    return {
        "tolerance": tolerance,
        "growth": growth,
        "frameworks": {"a": a.framework, "b": b.framework},
        "matched_by": matched_by,
        "layout": _layout_text(layout),
        "indices_match": list(a.indices) == list(b.indices),
        "input": inputs,
        "layers": rows,
        "counts": {"a": len(a.layers), "b": len(b.layers), "matched": len(rows)},
        "unmatched": {
            "a": [x.name for i, x in enumerate(a.layers) if i not in used["a"]],
            "b": [y.name for i, y in enumerate(b.layers) if i not in used["b"]],
        },
        "first_divergence": first,
        "verdict": _verdict(first, rows),
    }


def _verdict(first: dict[str, Any] | None, rows: list[dict[str, Any]]) -> str:
    if first is not None and first["at"] == "input":
        return INPUTS_DIFFER
    if first is not None:
        return f"first divergence at {first['name']} ({first['op_type']})"
    if not rows:
        return "no layer of one run matched a layer of the other: only the inputs were compared"
    return NO_DIVERGENCE


def _layer(layer: LayerOutput) -> dict[str, Any]:
    return {
        "name": layer.name,
        "op_type": layer.op_type,
        "node": layer.node,
        "dtype": str(layer.array.dtype),
        "shape": list(layer.array.shape),
    }


def _input_summary(inputs: dict[str, Any]) -> dict[str, Any]:
    keys = ("relative_error", "max_abs_error", "cosine", "dtypes", "shapes")
    return {key: inputs[key] for key in keys}


def _first_divergence(
    row: dict[str, Any], before: list[dict[str, Any]], inputs: dict[str, Any], worst: float
) -> dict[str, Any]:
    """The first divergence at `row`, with the error of what it was fed: the row before it's,
    or the inputs' for the first row."""
    if before:
        fed, fed_from = before[-1]["relative_error"], before[-1]["name"]
    else:
        fed, fed_from = inputs["relative_error"], "input"
    a, b = row["a"], row["b"]
    return {
        "at": "layer",
        "row": len(before),
        "name": a["name"],
        "op_type": a["op_type"],
        "names": {"a": a["name"], "b": b["name"]},
        "op_types": {"a": a["op_type"], "b": b["op_type"]},
        "dtypes": {"a": a["dtype"], "b": b["dtype"]},
        "relative_error": row["relative_error"],
        "max_abs_error": row["max_abs_error"],
        "cosine": row["cosine"],
        "input_error": fed,
        "input_error_from": fed_from,
        "largest_error_before": worst,
    }


# Layouts: the permutation that takes the second capture's 4-axis arrays to the first's.
_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


def _layout(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    if a == b or len(a) != 4 or len(b) != 4:
        return None
    if b == (a[0], a[2], a[3], a[1]):
        return _TO_NCHW
    if b == (a[0], a[3], a[1], a[2]):
        return _TO_NHWC
    return None


def _layout_text(layout: tuple[int, ...] | None) -> str | None:
    if layout is None:
        return None
    first, second = ("NCHW", "NHWC") if layout == _TO_NCHW else ("NHWC", "NCHW")
    return (
        f"the first run's inputs are {first}, the second's {second}: the second's 4-axis "
        f"outputs are compared transposed to {first}"
    )


def _aligned(array: np.ndarray, layout: tuple[int, ...] | None) -> np.ndarray:
    return array.transpose(layout) if layout is not None and array.ndim == 4 else array


def _rows(array: np.ndarray) -> np.ndarray:
    """The array as (batch, everything else), a 0-axis array as one row."""
    return array.reshape(1, -1) if array.ndim == 0 else array.reshape(array.shape[0], -1)


def _comparable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two outputs can be compared element by element: one shape, or one batch axis
    and one shape past it once axes of size 1 are dropped, or one of them the other flattened
    past its batch axis."""
    if a == b:
        return True
    if not a or not b or a[0] != b[0]:
        return False
    if tuple(d for d in a[1:] if d != 1) == tuple(d for d in b[1:] if d != 1):
        return True
    return (len(a) == 2 or len(b) == 2) and int(np.prod(a[1:])) == int(np.prod(b[1:]))


def _errors(a: np.ndarray, b: np.ndarray, tolerance: float, *, permutable: bool) -> dict[str, Any]:
    """The largest absolute difference, the relative error ‖a − b‖ / ‖a‖ and the cosine
    similarity of two outputs of one shape, in float64 over the elements finite in both; an
    element finite in one and not the other (or another infinity) makes the relative error
    at least 1. `permuted`: the same values, per batch row, in another order."""
    x = _rows(a).astype(np.float64)
    y = _rows(b).astype(np.float64)
    finite = np.isfinite(x) & np.isfinite(y)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    mismatched = int(np.count_nonzero(~finite & ~same))
    relative, largest, cosine = _norms(x[finite], y[finite])
    if mismatched:
        relative = max(relative, 1.0)
    permuted = False
    if permutable and not mismatched and relative > tolerance and x.size:
        again, _, _ = _norms(np.sort(x, axis=1).ravel(), np.sort(y, axis=1).ravel())
        permuted = again <= tolerance
    return {
        "max_abs_error": largest,
        "relative_error": relative,
        "cosine": cosine,
        "nonfinite_mismatch": mismatched,
        "permuted": permuted,
    }


def _norms(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(relative error, largest absolute difference, cosine similarity) of two flat arrays."""
    difference = x - y
    largest = float(np.max(np.abs(difference))) if difference.size else 0.0
    norm_x, norm_y = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    norm_d = float(np.linalg.norm(difference))
    if norm_x > 0:
        relative = norm_d / norm_x
    else:
        relative = 0.0 if norm_d == 0 else 1.0
    if norm_d == 0:  # the same values: exactly 1, not 1 less a rounding
        cosine = 1.0
    elif norm_x > 0 and norm_y > 0:
        cosine = float(np.clip(np.dot(x, y) / (norm_x * norm_y), -1.0, 1.0))
    else:
        cosine = 0.0
    return relative, largest, cosine


def _input_errors(a: np.ndarray, b: np.ndarray, tolerance: float) -> dict[str, Any]:
    described = {
        "dtypes": {"a": str(a.dtype), "b": str(b.dtype)},
        "shapes": {"a": list(a.shape), "b": list(b.shape)},
    }
    if a.shape != b.shape:
        return {
            **described,
            "comparable": False,
            "max_abs_error": None,
            "relative_error": None,
            "cosine": None,
            "differs": True,
        }
    errors = _errors(a, b, tolerance, permutable=False)
    return {
        **described,
        "comparable": True,
        "max_abs_error": errors["max_abs_error"],
        "relative_error": errors["relative_error"],
        "cosine": errors["cosine"],
        "differs": errors["relative_error"] > tolerance,
    }


# -- matching the layers ---------------------------------------------------------------------


def _match(a: Capture, b: Capture, layout: tuple[int, ...] | None) -> tuple[str, list[_Pair]]:
    """How the layers were matched, and the pairs whose outputs can be compared, in the
    first capture's order: the way that pairs the most layers (of ways that pair as many,
    the first listed), so that one name two frameworks happen to share does not stand for
    the whole model."""
    ways: list[tuple[str, Callable[[], list[_Pair]]]] = []
    if a.framework == b.framework:
        ways.append((MATCHED_BY_NAME, lambda: _by_name(a.layers, b.layers)))
    elif "onnxruntime" in (a.framework, b.framework):
        ways.append((MATCHED_BY_MODULE_PATH, lambda: _by_module_path(a, b)))
        ways.append((MATCHED_BY_NAME, lambda: _by_name(a.layers, b.layers)))
    else:
        ways.append((MATCHED_BY_NAME, lambda: _by_name(a.layers, b.layers)))
    ways.append((MATCHED_BY_ORDER, lambda: _by_order(a.layers, b.layers, layout)))
    best: tuple[str, list[_Pair]] = (MATCHED_BY_ORDER, [])
    for way, pairs_of in ways:
        pairs = [
            pair
            for pair in pairs_of()
            if _comparable(
                a.layers[pair.a].array.shape, _aligned(b.layers[pair.b].array, layout).shape
            )
        ]
        if len(pairs) > len(best[1]):
            best = (way, sorted(pairs, key=lambda pair: (pair.a, pair.b)))
    return best


def _by_name(a: Sequence[LayerOutput], b: Sequence[LayerOutput]) -> list[_Pair]:
    where = {layer.name: index for index, layer in enumerate(b)}
    return [_Pair(i, where[layer.name]) for i, layer in enumerate(a) if layer.name in where]


def _by_module_path(a: Capture, b: Capture) -> list[_Pair]:
    """A capture of module paths (PyTorch) against one of ONNX nodes PyTorch's exporter named
    (see the module's docstring)."""
    graph_is_a = a.framework == "onnxruntime"
    graph, modules = (a, b) if graph_is_a else (b, a)
    # The last node inside each module path (a node's first output only).
    last: dict[tuple[str, ...], int] = {}
    for index, layer in enumerate(graph.layers):
        scope = exporter_scope(layer.node)
        if scope is None or (index and graph.layers[index - 1].node == layer.node):
            continue
        for depth in range(len(scope) + 1):
            last[scope[:depth]] = index
    nodes = [
        None if scope is None else last.get(scope)
        for scope in (_scope_of(layer.name) for layer in modules.layers)
    ]
    pairs = []
    start = 0
    while start < len(nodes):
        node = nodes[start]
        if node is None:
            start += 1
            continue
        end = start
        while end + 1 < len(nodes) and nodes[end + 1] is None:
            end += 1
        fused = tuple(range(start, end + 1)) if end > start else ()
        side = "b" if graph_is_a else "a"
        pairs.append(_Pair(node, end, fused, side) if graph_is_a else _Pair(end, node, fused, side))
        start = end + 1
    return pairs


def _scope_of(name: str) -> tuple[str, ...] | None:
    """The exporter's scope of a PyTorch module output's name: `layer1.0.conv1` →
    ("layer1", "0", "conv1"); a second call, `relu#2`, → ("relu_1",); the model's own output
    → (); None for a second output of a module (`x:1`)."""
    if ":" in name:
        return None
    path, _, call = name.partition("#")
    if path == MODEL_SCOPE:
        return () if not call else None
    parts = path.split(".")
    if call:
        if not call.isdigit():
            return None
        parts[-1] = f"{parts[-1]}_{int(call) - 1}"
    return tuple(parts)


def _by_order(
    a: Sequence[LayerOutput], b: Sequence[LayerOutput], layout: tuple[int, ...] | None
) -> list[_Pair]:
    """The longest common subsequence of the two captures' output shapes (batch axis and the
    axes past it that are not 1)."""

    def key(array: np.ndarray) -> tuple[int, ...]:
        shape = array.shape
        return (shape[0], *(d for d in shape[1:] if d != 1)) if shape else ()

    keys_a = [key(layer.array) for layer in a]
    keys_b = [key(_aligned(layer.array, layout)) for layer in b]
    lengths = np.zeros((len(a) + 1, len(b) + 1), dtype=np.int64)
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            if keys_a[i] == keys_b[j]:
                lengths[i, j] = lengths[i + 1, j + 1] + 1
            else:
                lengths[i, j] = max(lengths[i + 1, j], lengths[i, j + 1])
    pairs = []
    i = j = 0
    while i < len(a) and j < len(b):
        if keys_a[i] == keys_b[j]:
            pairs.append(_Pair(i, j))
            i, j = i + 1, j + 1
        elif lengths[i + 1, j] >= lengths[i, j + 1]:
            i += 1
        else:
            j += 1
    return pairs
