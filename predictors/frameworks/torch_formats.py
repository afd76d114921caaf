"""PyTorch's model formats besides TorchScript: torch.export programs and state dicts.

A manifest's `model.format` (`predictors.manifests.formats`) says how the PyTorch predictor reads
its files:

- `torchscript` (the default): graph_path is a TorchScript file (`torch.jit.save`);
- `torch_export`: graph_path is a `.pt2` program (`torch.export.save`), loaded with
  `torch.export.load(...).module()` (`load_program`). Every tensor the archive pickles is read
  weights-only, and an archive that carries pickled Python objects or compiled code
  (AOTInductor) is refused: a program is data here, not code;
- `state_dict`: weights_path is the state dict (`torch.save(module.state_dict())`, zip or the
  older pickle format), read weights-only and loaded strictly; graph_path is the Python source
  that defines the module and `model.entry` the class or function at its top level that builds
  it, called with no arguments (`load_state_dict_module`). The source is the manifest's own
  code: it runs only where custom code runs (`predictors.processing.custom_code`), here under
  its sandbox while it builds the module.

A file that is not what its format says is refused naming what it is and the `model.format`
that reads it (`identify`), not with torch's "checkpoint file is corrupted".
`state_dict_problems` checks a state dict's files without running the source (the hub's upload
check).

Both kinds of model are `torch.nn.Module`s, not ScriptModules, so they take forward hooks:
their layer outputs come from hooks on every module of a copy (`ModuleCapture`), and the
predictor annotates their module calls for torch.profiler. A program's module is one flat
graph with no modules to hook: for both it is unflattened (`unflattened`,
`torch.export.unflatten`) into the module hierarchy it was exported from.
"""

from __future__ import annotations

import ast
import logging
import os
import pickle
import traceback
import types
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from predictors.frameworks.layer_outputs import MODEL_SCOPE, LayerOutput, numbered, size_refusal
from predictors.frameworks.predictor import PredictorError
from predictors.frameworks.symbolic_shapes import unsafe_expression
from predictors.manifests.graph_check import ONNX_TYPES, Port, Signature
from predictors.processing.custom_code import DEFAULT_CALL_SECONDS, SandboxViolation, sandbox

__all__ = [
    "SOURCE_FIELD",
    "ModuleCapture",
    "error_line",
    "file_kind",
    "identify",
    "load_program",
    "load_state_dict_module",
    "misread",
    "module_type",
    "program_input",
    "program_signature",
    "state_dict_problems",
    "unflattened",
]

# What the sandbox calls the module source in its refusals ("custom module code tried …").
SOURCE_FIELD = "module"
# The older (non-zip) torch.save format: a pickle whose first object is this magic number.
_LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
# The records of a .pt2 archive that torch.export.load would run as code: pickled Python
# objects (unpickled with pickle.loads) and AOTInductor's compiled libraries.
_CODE_RECORDS = {
    "data/constants/opaque_obj_": "pickled Python objects (opaque constants)",
    "data/aotinductor/": "compiled code (an AOTInductor package)",
}
_ELEMENT_TYPES = frozenset(ONNX_TYPES.values())

# What each kind of file is, and how a manifest declares it.
_WHAT = {
    "torchscript": "it is TorchScript (written by torch.jit.save)",
    "torch_export": "it is a torch.export program (written by torch.export.save)",
    "state_dict": (
        "it is a state dict (torch.save of a module's state_dict()): weights without the "
        "module's code"
    ),
}
_USE = {
    "torchscript": "declare it as `model.format: torchscript`, the file as model.graph_path",
    "torch_export": "declare it as `model.format: torch_export`, the file as model.graph_path",
    "state_dict": (
        "declare it as `model.format: state_dict`: the file as model.weights_path, the Python "
        "source that defines the module as model.graph_path, and the class or function there "
        "that builds it as model.entry"
    ),
}
_PICKLE = (
    "it is a torch.save pickle of Python objects (a whole module saved with torch.save(model), "
    "say), which would run code to load and is not read: save the module's state_dict() and "
    "declare `model.format: state_dict`, or save the module with torch.jit.save or "
    "torch.export.save"
)
_NOT_PYTORCH = (
    "it is not a file PyTorch wrote: neither a zip archive (torch.save, torch.jit.save and "
    "torch.export.save write one; a truncated one is not) nor an older torch.save pickle"
)


class FormatError(ValueError):
    """A file that is not what its format says; the message says what it is instead."""


# -- what a file is --------------------------------------------------------------------------


def file_kind(path: Path) -> str | None:
    """What a PyTorch file is, from its container alone (nothing in it is loaded):
    `torchscript`, `torch_export`, `torch_save` (a torch.save file: zip, or the older pickle),
    `zip` (an archive PyTorch did not write), or None."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            # PyTorch writes every record under one folder named after the file.
            inner = {name.split("/", 1)[-1] for name in names}
            if "archive_format" in inner or "serialized_exported_program.json" in inner:
                return "torch_export"
            if "constants.pkl" in inner or any(name.startswith("code/") for name in inner):
                return "torchscript"
            return "torch_save" if "data.pkl" in inner else "zip"
        with open(path, "rb") as file:
            head = file.read(16)
    except (OSError, zipfile.BadZipFile):
        return None
    return "torch_save" if head[:1] == b"\x80" and head[2:14] == _LEGACY_MAGIC else None


def identify(path: Path) -> tuple[str | None, str]:
    """(the `model.format` that reads `path`, or None where none does; what it is, in words
    that start "it is …", or "" where it is no file PyTorch wrote)."""
    kind = file_kind(path)
    if kind in ("torchscript", "torch_export"):
        return kind, _WHAT[kind]
    if kind == "zip":
        return None, "it is a zip archive, but not one PyTorch wrote"
    if kind != "torch_save":
        return None, ""
    try:
        loaded = _load_weights(path, "cpu")
    except FormatError as error:
        return None, str(error)
    problem = _problem_of_state_dict(loaded)
    if problem is None:
        return "state_dict", _WHAT["state_dict"]
    return None, f"it is a torch.save file of {problem}"


def misread(path: Path, declared: str) -> str:
    """Why `path` does not load as the format `declared`, where it is something else: what it
    is, and the format that reads it; "" where it is what `declared` reads (the framework's
    own error says what is wrong with it)."""
    fmt, what = identify(path)
    if fmt == declared:
        return ""
    if fmt is not None:
        return f"{what}; {_USE[fmt]}"
    return what or _NOT_PYTORCH


def _load_weights(path: Path, device: torch.device | str, *, mmap: bool = False) -> Any:
    """`torch.load(path, weights_only=True)`; FormatError saying what the file is where it is
    no torch.save file or holds objects that weights-only loading refuses."""
    kind = file_kind(path)
    if kind in ("torchscript", "torch_export"):
        raise FormatError(f"{_WHAT[kind]}; {_USE[kind]}")
    if kind == "zip":
        raise FormatError("it is a zip archive, but not one torch.save wrote (it has no data.pkl)")
    if kind is None:
        raise FormatError(_NOT_PYTORCH)
    try:
        return torch.load(
            str(path),
            map_location=device,
            weights_only=True,
            mmap=mmap and zipfile.is_zipfile(path),
        )
    except pickle.UnpicklingError as exc:
        raise FormatError(_PICKLE) from exc
    except EOFError as exc:
        raise FormatError("it ends before its data does (is it truncated?)") from exc
    except (RuntimeError, ValueError, OSError) as exc:
        raise FormatError(f"it does not load as a torch.save file: {error_line(exc)}") from exc


def state_dict_in(loaded: Any, state_key: str | None) -> Any:
    """The state dict of a loaded torch.save value: the value itself, or, with `state_key`
    (`model.state_key`), the checkpoint's entry under it; FormatError where there is none."""
    if not state_key:
        return loaded
    if not isinstance(loaded, Mapping):
        raise FormatError(
            f"model.state_key is {state_key!r}, but the file holds {_describe(loaded)}, not a "
            "checkpoint mapping"
        )
    if state_key not in loaded:
        keys = ", ".join(repr(k) for k in list(loaded)[:12])
        raise FormatError(
            f"model.state_key is {state_key!r}, which the checkpoint does not hold (its keys: "
            f"{keys})"
        )
    return loaded[state_key]


def _problem_of_state_dict(loaded: Any) -> str | None:
    """What keeps a loaded torch.save value from being a state dict (a mapping of parameter
    names to tensors); None where it is one."""
    if _tensor_mapping(loaded):
        return None
    if isinstance(loaded, Mapping):
        holders = [key for key, value in loaded.items() if _tensor_mapping(value) and value]
        if len(holders) == 1:
            key = holders[0]
            others = ", ".join(repr(k) for k in list(loaded) if k != key)
            return (
                f"a checkpoint that holds its state dict under the key {key!r}, beside "
                f"{others}: name that key (`model.state_key: {key}`), or save that mapping "
                f"alone (torch.save(checkpoint[{key!r}], path))"
            )
        key, value = next(
            (k, v) for k, v in loaded.items() if not (isinstance(k, str) and _is_tensor(v))
        )
        return (
            f"a mapping, but not of parameter names to tensors: its entry {key!r} is "
            f"{_describe(value)}"
        )
    return f"{_describe(loaded)}, not a mapping of parameter names to tensors"


def _tensor_mapping(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(key, str) and _is_tensor(item) for key, item in value.items()
    )


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"one tensor of shape {tuple(value.shape)}"
    if isinstance(value, Mapping):
        return f"a mapping of {len(value)} entries"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if isinstance(value, list | tuple):
        return f"{article} {name} of {len(value)} items"
    return f"{article} {name}"


def error_line(exc: BaseException) -> str:
    """The first line of an error's message (its type where it has none)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    # torch's reader appends a paragraph on corrupted checkpoints to every error.
    return first.split(" This is an internal miniz error")[0]


# -- torch.export programs -------------------------------------------------------------------


def load_program(path: Path, device: torch.device) -> torch.export.ExportedProgram:
    """The torch.export program in `path`, on `device`; PredictorError naming the format and
    the problem where the file is not one, does not load, or carries code."""
    where = f"pytorch cannot load {path.name} as a torch.export program"
    if file_kind(path) != "torch_export":
        raise PredictorError(f"{where}: {misread(path, 'torch_export')}")
    with zipfile.ZipFile(path) as archive:
        inner = [name.split("/", 1)[-1] for name in archive.namelist()]
    carried = sorted(
        {what for prefix, what in _CODE_RECORDS.items() for n in inner if n.startswith(prefix)}
    )
    if carried:
        raise PredictorError(
            f"{where}: it carries {' and '.join(carried)}, which would run as code when loaded; "
            "export the module's tensors only"
        )
    unsafe = unsafe_expression(path)
    if unsafe is not None:
        raise PredictorError(
            f"{where}: its symbolic shape {unsafe[:120]!r} is not an expression of sizes "
            "(torch.export writes only arithmetic on its size symbols there); it would run "
            "as code when loaded"
        )
    records: list[logging.LogRecord] = []
    try:
        with _weights_only(), _export_log(records), open(path, "rb") as file:
            # A file object: torch.export.load reads a path only where its name ends in .pt2.
            program = torch.export.load(file)
    except Exception as exc:  # torch raises what its reader raised; the cause is logged
        causes = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
        raise PredictorError(f"{where}: {error_line(causes[-1] if causes else exc)}") from exc
    if device.type != "cpu":
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, device)
    return program


@contextmanager
def _weights_only() -> Iterator[None]:
    """Every torch.load in the block weights-only, whatever its caller asks (torch's
    TORCH_FORCE_WEIGHTS_ONLY_LOAD): torch.export.load unpickles the archive's pickled tensors
    with weights_only=False."""
    name = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
    previous = os.environ.get(name)
    os.environ[name] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


class _Keep(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.WARNING)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _export_log(records: list[logging.LogRecord]) -> Iterator[None]:
    """torch.export's warnings in the block kept in `records` instead of printed: it logs the
    cause of a failed load and raises an exception that only points at the log."""
    logger = logging.getLogger("torch.export")
    handler = _Keep(records)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def program_signature(program: torch.export.ExportedProgram) -> Signature:
    """The user inputs and outputs of a program: inputs named after the module's `forward`
    parameters, outputs after the keys of the dict `forward` returns, or else the graph's
    output nodes; element types and ranks from the example inputs' metadata."""
    nodes = {node.name: node for node in program.graph.nodes}
    inputs = [str(name) for name in program.graph_signature.user_inputs]
    outputs = [str(name) for name in program.graph_signature.user_outputs]
    ports = [_port(name, nodes.get(name)) for name in outputs]
    spec = program.call_spec.out_spec
    if spec is not None and spec.type is dict and len(spec.context) == len(ports):
        ports = [
            Port(str(key), p.element_type, p.rank)
            for key, p in zip(spec.context, ports, strict=True)
        ]
    return Signature(tuple(_port(name, nodes.get(name)) for name in inputs), tuple(ports))


def program_input(
    program: torch.export.ExportedProgram, index: int
) -> tuple[tuple[int | None, ...], str] | None:
    """The shape (None for a dynamic dimension) and element type of user input `index`."""
    names = list(program.graph_signature.user_inputs)
    node = next(
        (n for n in program.graph.nodes if index < len(names) and n.name == names[index]), None
    )
    value = node.meta.get("val") if node is not None else None
    if not isinstance(value, torch.Tensor):
        return None
    shape = tuple(d if isinstance(d, int) else None for d in value.shape)
    return shape, _element_type(value.dtype) or str(value.dtype).removeprefix("torch.")


def _port(name: str, node: Any) -> Port:
    value = node.meta.get("val") if node is not None else None
    if isinstance(value, torch.Tensor):
        return Port(name, _element_type(value.dtype), value.dim())
    return Port(name, None, None)


def _element_type(dtype: torch.dtype) -> str | None:
    name = str(dtype).removeprefix("torch.")
    return name if name in _ELEMENT_TYPES else None


def unflattened(program: torch.export.ExportedProgram) -> torch.nn.Module:
    """The program as the module hierarchy it was exported from (`torch.export.unflatten`):
    each submodule a module of its own, which forward hooks can annotate."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.export.unflatten(program)
    except Exception as exc:  # unflatten raises what its passes raise
        raise PredictorError(
            f"pytorch cannot recover the module hierarchy of the torch.export program, which "
            f"tracing and layer outputs need: {error_line(exc)}"
        ) from exc
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module


# -- state dicts -----------------------------------------------------------------------------


def load_state_dict_module(
    source_file: Path,
    weights_file: Path | None,
    entry: str,
    device: torch.device,
    *,
    state_key: str | None = None,
    seconds: float = DEFAULT_CALL_SECONDS,
) -> torch.nn.Module:
    """The module that `entry()` in `source_file` builds, with the state dict in `weights_file`
    (under `state_key` in a checkpoint, where it is given) loaded strictly, on `device`. The source runs under the custom code sandbox, `seconds` the
    most it may take; PredictorError naming the format and the problem."""
    if weights_file is None:
        raise PredictorError(
            "pytorch cannot load a state dict without model.weights_path: format state_dict "
            f"reads the weights from model.weights_path and the module's source from "
            f"model.graph_path ({source_file.name})"
        )
    if not entry:
        raise PredictorError(
            "pytorch cannot load a state dict without model.entry: the class or function in "
            f"{source_file.name} (model.graph_path) that builds the module"
        )
    where = f"pytorch cannot load {weights_file.name} as a state dict"
    try:
        # Read on the CPU: a checkpoint's other entries (an optimizer's state) stay there, and
        # load_state_dict copies the weights into the module on its device.
        loaded = state_dict_in(_load_weights(weights_file, "cpu"), state_key)
    except FormatError as error:
        raise PredictorError(f"{where}: {error}") from None
    problem = _problem_of_state_dict(loaded)
    if problem is not None:
        raise PredictorError(f"{where}: it is {problem}")
    module = _build_module(source_file, entry, seconds).to(device)
    try:
        module.load_state_dict(loaded, strict=True)
    except RuntimeError as exc:
        raise PredictorError(
            f"{where} into {entry}(): {_mismatch(module, loaded) or error_line(exc)}"
        ) from exc
    return module


def _build_module(source_file: Path, entry: str, seconds: float) -> torch.nn.Module:
    """`entry()` of the source, run in a module namespace of its own under the sandbox;
    tracebacks name the source file and its lines."""
    where = f"pytorch cannot build the module of a state dict from {source_file.name} (model.graph_path)"
    try:
        source = source_file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        what = identify(source_file)[1]
        raise PredictorError(
            f"{where}: it is not Python source (UTF-8 text){'; ' + what if what else ''}"
        ) from None
    try:
        code = compile(source, str(source_file), "exec")
    except (SyntaxError, ValueError) as exc:
        line = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) else ""
        raise PredictorError(
            f"{where}: it is not valid Python: {getattr(exc, 'msg', exc)}{line}"
        ) from None
    namespace = types.ModuleType("mlms_model_source")
    namespace.__file__ = str(source_file)
    with sandbox(SOURCE_FIELD, seconds):
        try:
            exec(code, namespace.__dict__)  # noqa: S102 - the manifest's code, sandboxed
        except SandboxViolation as exc:
            raise PredictorError(f"{where}: {exc}") from None
        except (Exception, SystemExit) as exc:
            raise PredictorError(
                _failure(f"{where}: running it failed", source_file, exc)
            ) from None
        factory = namespace.__dict__.get(entry)
        if factory is None:
            defined = sorted(
                name
                for name, value in vars(namespace).items()
                if getattr(value, "__module__", None) == namespace.__name__ and callable(value)
            )
            raise PredictorError(
                f"{where}: model.entry {entry!r} is not defined at its top level (it defines "
                f"{', '.join(defined) or 'no class or function'})"
            )
        if not callable(factory):
            raise PredictorError(
                f"{where}: model.entry {entry!r} is {_describe(factory)}, not a class or function"
            )
        try:
            module = factory()
        except SandboxViolation as exc:
            raise PredictorError(f"{where}: {exc}") from None
        except (Exception, SystemExit) as exc:
            raise PredictorError(_failure(f"{where}: {entry}() failed", source_file, exc)) from None
    if not isinstance(module, torch.nn.Module):
        raise PredictorError(
            f"{where}: model.entry {entry}() returned {_describe(module)}, not a torch.nn.Module"
        )
    return module


def _failure(head: str, source_file: Path, exc: BaseException) -> str:
    """The error, with the traceback lines of the source file itself."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(source_file)]
    lines = "".join(traceback.format_list(frames)).rstrip()
    message = f"{head}: {type(exc).__name__}: {exc}"
    return f"{message}\nTraceback (most recent call last):\n{lines}" if lines else message


def _mismatch(module: torch.nn.Module, loaded: Mapping[str, torch.Tensor]) -> str:
    """The keys and shapes by which a state dict does not fit a module; "" where they fit."""
    expected = module.state_dict()
    missing = [key for key in expected if key not in loaded]
    unexpected = [key for key in loaded if key not in expected]
    shapes = [
        f"{key} is {tuple(loaded[key].shape)} in the file, {tuple(expected[key].shape)} in "
        "the module"
        for key in expected
        if key in loaded and loaded[key].shape != expected[key].shape
    ]
    parts = []
    if missing:
        parts.append(f"missing keys {_few(missing)}")
    if unexpected:
        parts.append(f"unexpected keys {_few(unexpected)}")
    if shapes:
        parts.append(f"shape mismatches: {_few(shapes)}")
    found = "; ".join(parts)
    if missing and unexpected and all(key.startswith("module.") for key in loaded):
        found += (
            " (every key in the file starts with 'module.', as torch.nn.DataParallel saves "
            "them: save model.module.state_dict() instead)"
        )
    return found


def _few(items: list[str], shown: int = 5) -> str:
    more = f", and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def state_dict_problems(
    graph_file: Path, weights_file: Path | None, entry: str, state_key: str | None = None
) -> list[str]:
    """What keeps a state dict's files from loading, found without running the source: the
    source (graph_file) parses, defines `entry` at its top level as a class or function that
    takes no required argument, and the state dict (weights_file) loads weights-only as a
    mapping of parameter names to tensors. Each problem in words, naming the field."""
    problems: list[str] = []
    source_name = f"the module source {graph_file.name} (model.graph_path)"
    try:
        source = graph_file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        what = identify(graph_file)[1]
        problems.append(
            f"{source_name} is not Python source (UTF-8 text){'; ' + what if what else ''}"
        )
    except OSError as exc:
        problems.append(f"{source_name} cannot be read: {exc.strerror or exc}")
    else:
        try:
            tree = ast.parse(source, filename=graph_file.name)
        except SyntaxError as exc:
            problems.append(f"{source_name} is not valid Python: {exc.msg} (line {exc.lineno})")
        except ValueError as exc:  # a NUL byte
            problems.append(f"{source_name} is not valid Python: {exc}")
        else:
            problem = _entry_problem(tree, entry, source_name)
            if problem:
                problems.append(problem)
    if weights_file is None:
        problems.append("model.weights_path is required for format state_dict: the state dict")
        return problems
    weights_name = f"the state dict {weights_file.name} (model.weights_path)"
    try:
        loaded = state_dict_in(_load_weights(weights_file, "cpu", mmap=True), state_key)
    except FormatError as error:
        problems.append(f"{weights_name} does not load: {error}")
    else:
        problem = _problem_of_state_dict(loaded)
        if problem is not None:
            problems.append(f"{weights_name} is no state dict: it is {problem}")
    return problems


def _entry_problem(tree: ast.Module, entry: str, source_name: str) -> str | None:
    if not entry:
        return (
            "model.entry is required for format state_dict: the class or function in "
            f"{source_name} that builds the module"
        )
    defined = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    node = defined.get(entry)
    if node is None:
        return (
            f"model.entry {entry!r} is not a class or function defined at the top level of "
            f"{source_name} (it defines {', '.join(sorted(defined)) or 'none'})"
        )
    if isinstance(node, ast.AsyncFunctionDef):
        return f"model.entry {entry!r} is an async function; it must return the module"
    if isinstance(node, ast.ClassDef):
        init = next(
            (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
        )
        required = _required(init.args, skip=1) if init is not None else []  # 1: self
    else:
        required = _required(node.args, skip=0)
    if required:
        return (
            f"model.entry {entry!r} takes required arguments ({', '.join(required)}); it is "
            "called with none"
        )
    return None


def _required(arguments: ast.arguments, skip: int) -> list[str]:
    """The parameters of a function that have no default (after the first `skip`: self)."""
    positional = arguments.posonlyargs + arguments.args
    without = len(positional) - len(arguments.defaults)
    required = [a.arg for a in positional[:without]][skip:]
    required += [
        a.arg
        for a, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if default is None
    ]
    return required


# -- tracing and layer outputs of an nn.Module -----------------------------------------------


def module_type(module: torch.nn.Module) -> str:
    """A module's class name: a TorchScript module's original class, an unflattened program's
    module's exported class."""
    from torch.export.unflatten import InterpreterModule, UnflattenedModule

    if isinstance(module, InterpreterModule | UnflattenedModule):
        named = module.type_name()
        if named:
            return named.rsplit(".", 1)[-1]
    return str(getattr(module, "original_name", "") or type(module).__name__)


class ModuleCapture:
    """Every module's output of an nn.Module (`Predictor.layer_outputs`), by forward hooks on
    `module`, a copy of the timed one: leaves and containers alike, in the order their calls
    return, then the model's own output, `(model)`, as the TorchScript capture gives them
    (`predictors.frameworks.torch_capture`). A module whose call returns anything but one
    tensor gives none."""

    def __init__(self, module: torch.nn.Module, device: torch.device) -> None:
        self._module = module
        self._device = device
        self._type = module_type(module)

    def run(self, batch: np.ndarray, max_bytes: int) -> list[LayerOutput]:
        kept: list[tuple[str, str, torch.Tensor]] = []
        size = 0

        def keep(path: str, op_type: str, tensor: torch.Tensor) -> None:
            nonlocal size
            size += tensor.numel() * tensor.element_size()
            if size <= max_bytes:
                kept.append((path, op_type, tensor.detach().to("cpu", copy=True)))

        def hook(path: str, op_type: str) -> Any:
            def after(module: torch.nn.Module, args: Any, output: Any) -> None:
                if isinstance(output, torch.Tensor) and size <= max_bytes:
                    keep(path, op_type, output)

            return after

        handles = [
            module.register_forward_hook(hook(path, module_type(module)))
            for path, module in self._module.named_modules()
            if path
        ]
        try:
            with torch.inference_mode():
                outputs = self._module(torch.from_numpy(batch).to(self._device))
                if isinstance(outputs, Mapping):
                    outputs = list(outputs.values())
                if isinstance(outputs, torch.Tensor):
                    outputs = [outputs]
                tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
                for index, tensor in enumerate(tensors):
                    if size <= max_bytes:
                        keep(
                            MODEL_SCOPE if index == 0 else f"{MODEL_SCOPE}:{index}",
                            self._type,
                            tensor,
                        )
        except (RuntimeError, ValueError, TypeError, AssertionError) as exc:
            raise PredictorError(
                f"pytorch failed to capture the layer outputs: {error_line(exc)}"
            ) from exc
        finally:
            for handle in handles:
                handle.remove()
        if size > max_bytes:
            raise PredictorError(
                size_refusal(
                    "pytorch",
                    size,
                    max_bytes,
                    f"{len(kept) + 1} module outputs, up to the one that passed it",
                    at_least=True,
                )
            )
        names = numbered(path for path, _, _ in kept)
        return [
            LayerOutput(name, op_type, _host_array(tensor))
            for name, (_, op_type, tensor) in zip(names, kept, strict=True)
        ]


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    """A host tensor as NumPy; bfloat16, which NumPy has not, as float32 (exactly)."""
    array: np.ndarray = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
    return array
