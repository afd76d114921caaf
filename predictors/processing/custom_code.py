"""Custom processing code from a model manifest: checked anywhere, run only in a sandbox.

A manifest's `preprocess` and `postprocess` hold Python source that defines a function of the
same name:

    def preprocess(example):      # one input after the built-in steps (an ndarray, e.g. CHW
        return example             #   float32); returns the example the model takes
    def postprocess(outputs):     # a batch of the model's output (ndarray, N first); returns
        return outputs             #   the (N, classes) scores, read as the output's `type`

Both run after what the manifest's parameters describe, never instead of it: a parameter is
always applied, and the code continues from there (`docs/manifest.md` shows how to hand the
code the decoded pixels untouched).

Every output, by name. A manifest with `postprocess` code that declares more than one output
that is not a state output (`named_outputs`) has each call compute all of them, and
`postprocess` receives a dict {output name: batch array (N first)} in the manifest's order;
it returns the (N, classes) scores, read as the type of the first of them (the scored
output). With one such output it receives that output's batch array, as before. The timed
call computes the extra outputs only then; otherwise it is the one-output call.

Detectors and segmenters. Their code returns what the manifest's `postprocess_outputs`
declare (`predictors.tasks.decoded_outputs`): a detector's boxes, scores and classes, a
segmenter's per-pixel scores, as a dict by name of batch arrays or of lists of one array per
input (`custom_returns`), read as the task's loop reads a model's own outputs.

Files. The manifest's `code_files` ({name, path, sha256} each) are fetched with the job, and
the code finds them in a read-only mapping `files` in its namespace, {name: local path (a
str)}: `open(files["charset.txt"])`; in a predictor container they lie in the job's read-only
files folder (`predictors.agent.relay.FILES_MOUNT`), where the agent puts every file of the
job's manifests. They are read-only: reading them is allowed (as reading anything is), writing
to them is refused like a write outside the sandbox folder. At most MAX_CODE_FILES
files, each at most MAX_CODE_FILE_BYTES, all together at most MAX_CODE_FILES_BYTES
(`code_files_problems`: the hub refuses an upload over a limit, naming `code_files.N.path`; the
evaluation refuses an https:// file over it once fetched).

Where it runs. Only inside a predictor container (`predictors.agent.contained`) started by an agent
that opts in (`mlms agent --docker --allow-custom-code`). The container is the boundary: no
network at all, a read-only root file system and read-only mounts, no capabilities, a process
limit, the job's memory limit. Inside it, `sandbox()` adds clear refusals while the code runs
(an audit hook: a socket, a new process, or a write outside the sandbox folder raises
`SandboxViolation` naming what was tried), and a watchdog ends the run when one call takes
longer than its time limit. Anywhere else (`mlms evaluate`, an agent without containers) a
manifest with code is refused before anything runs, saying where it can run.

`check_source` is what the hub runs on upload: it parses the code (never executes it) and
names the field and line of a syntax error or a missing function.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

import numpy as np

from predictors.tasks import named_outputs

FIELDS = ("preprocess", "postprocess")
# The most source a field may hold.
MAX_SOURCE_BYTES = 64 * 1024
# The files the code may read (`code_files`): how many, the most bytes of one, and of all.
MAX_CODE_FILES = 16
MAX_CODE_FILE_BYTES = 16 * 1024 * 1024
MAX_CODE_FILES_BYTES = 64 * 1024 * 1024
# The longest one call may take (seconds), unless the host sets its own.
DEFAULT_CALL_SECONDS = 60.0
# Where the code may write: the container's private /tmp (a tmpfs, gone with the container).
SANDBOX_DIR = "/tmp"  # noqa: S108 - the container's own tmpfs

RUNS_WHERE = (
    "custom processing code runs only inside a predictor container on a host whose agent opts "
    "in (`mlms agent --docker --allow-custom-code`)"
)


class CustomCodeError(Exception):
    """Custom code that cannot be loaded or that failed; `str()` says which field, where, why,
    with the code's own traceback lines."""


class SandboxViolation(PermissionError):
    """Custom code tried something the sandbox does not allow (network, processes, writes
    outside the sandbox folder)."""


def fields_with_code(data: Mapping[str, Any]) -> list[str]:
    """The manifest's fields that hold code, in order."""
    return [field for field in FIELDS if isinstance(data.get(field), str) and data[field].strip()]


def code_in(data: Mapping[str, Any]) -> list[str]:
    """What of the manifest is code an evaluation runs: its processing fields, and the module
    source of a state dict (`model.format: state_dict`, `predictors.manifests.formats`), which
    builds the module the weights are loaded into. Each runs only where custom code runs."""
    found = fields_with_code(data)
    files = data.get("model")
    if isinstance(files, Mapping) and files.get("format") == "state_dict":
        found.append("module")
    return found


def code_files_problems(sizes: Sequence[tuple[int, int]]) -> list[tuple[int, str]]:
    """The code files over their limits: `sizes` holds (index in `code_files`, size in bytes)
    of the files whose size is known; answers (index, problem in words) for each file over
    MAX_CODE_FILE_BYTES, and for the file at which all of them together pass
    MAX_CODE_FILES_BYTES."""
    problems: list[tuple[int, str]] = []
    total = 0
    for index, size in sizes:
        if size > MAX_CODE_FILE_BYTES:
            problems.append(
                (
                    index,
                    f"the file is {_mib(size)}, over the limit of "
                    f"{_mib(MAX_CODE_FILE_BYTES)} for one code file",
                )
            )
        before, total = total, total + size
        if before <= MAX_CODE_FILES_BYTES < total:
            problems.append(
                (
                    index,
                    f"with this file the code files come to {_mib(total)}, over the limit of "
                    f"{_mib(MAX_CODE_FILES_BYTES)} for all of them together",
                )
            )
    return problems


def _mib(size: int) -> str:
    """A size in bytes, in MiB (KiB and bytes for small ones)."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.4g} MiB"
    if size >= 1024:
        return f"{size / 1024:.4g} KiB"
    return f"{size} bytes"


def check_source(field: str, source: Any) -> str | None:
    """What is wrong with a field's code, in words (with its line), or None. Never runs it."""
    if source is None or source == "":
        return None
    if not isinstance(source, str):
        return f"must be Python source code (a string) or null; got {type(source).__name__}"
    if len(source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return f"holds more than {MAX_SOURCE_BYTES // 1024} KiB of code"
    try:
        tree = ast.parse(source, filename=f"<manifest {field}>")
    except SyntaxError as exc:
        return f"is not valid Python: {exc.msg} (line {exc.lineno} of the code)"
    except ValueError as exc:  # a NUL byte
        return f"is not valid Python: {exc}"
    defined = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    function = defined.get(field)
    if function is None:
        return f"must define a function `def {field}(…)` at the top level"
    if isinstance(function, ast.AsyncFunctionDef):
        return f"`{field}` must be a plain function, not async"
    positional = function.args.posonlyargs + function.args.args
    if len(positional) < 1 and function.args.vararg is None:
        return f"`{field}` must take one argument ({_ARGUMENT[field]})"
    return None


_ARGUMENT = {"preprocess": "one example", "postprocess": "a batch of outputs"}


class CustomCode:
    """The functions of a manifest's code, compiled in a namespace of their own; `files`
    (the local path of each of its `code_files`, by name) is in each namespace, read-only."""

    def __init__(
        self,
        data: Mapping[str, Any],
        *,
        call_seconds: float = DEFAULT_CALL_SECONDS,
        files: Mapping[str, str] | None = None,
    ):
        self.call_seconds = call_seconds
        self.files: Mapping[str, str] = MappingProxyType(dict(files or {}))
        # The code files may be read, not written (even where they lie in the sandbox folder).
        self.read_only = frozenset(os.path.realpath(path) for path in self.files.values())
        # The outputs postprocess receives by name (`named_outputs`); none: one array.
        self.outputs: tuple[str, ...] = tuple(named_outputs(data))
        self.functions: dict[str, Callable[[Any], Any]] = {}
        for field in fields_with_code(data):
            problem = check_source(field, data[field])
            if problem:
                raise CustomCodeError(f"{field}: {problem}")
            self.functions[field] = self._compile(field, str(data[field]))

    @property
    def fields(self) -> list[str]:
        return list(self.functions)

    def _compile(self, field: str, source: str) -> Callable[[Any], Any]:
        filename = f"<manifest {field}>"
        # Tracebacks show the code's own lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"__name__": f"manifest_{field}", "files": self.files}
        with sandbox(field, self.call_seconds, self.read_only):
            try:
                exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - sandboxed
            except SandboxViolation as exc:
                raise CustomCodeError(f"{field}: {exc}") from None
            except BaseException as exc:
                raise CustomCodeError(_failure(field, "loading the code", exc)) from None
        function = namespace.get(field)
        if not callable(function):
            raise CustomCodeError(f"{field}: the code does not define a function `{field}`")
        return function  # type: ignore[no-any-return]

    def call(self, field: str, value: Any, where: str) -> Any:
        """`field`'s function on `value`; CustomCodeError naming `where` ("input 3") when it
        raises, with its traceback."""
        function = self.functions[field]
        with sandbox(field, self.call_seconds, self.read_only):
            try:
                return function(value)
            except SandboxViolation as exc:
                raise CustomCodeError(f"{field} on {where}: {exc}") from None
            except BaseException as exc:
                raise CustomCodeError(_failure(field, where, exc)) from None


class CustomPreprocessor:
    """The built-in preprocessor of an input, then the manifest's `preprocess` on each example.
    `batch` stacks what the code returns (every example must come out the same shape)."""

    def __init__(self, builtin: Any, code: CustomCode) -> None:
        self.builtin = builtin
        self.code = code

    def batch(self, items: Sequence[Any]) -> np.ndarray:
        examples = []
        for index, item in enumerate(items):
            where = f"input {index} of a batch of {len(items)}"
            value = self.code.call("preprocess", self.builtin(item), where)
            examples.append(_array("preprocess", value, where))
        shapes = sorted({example.shape for example in examples})
        dtypes = sorted({str(example.dtype) for example in examples})
        if len(shapes) > 1 or len(dtypes) > 1:
            raise CustomCodeError(
                f"custom preprocess code returned examples of different shapes or types in one "
                f"batch ({', '.join(map(str, shapes))}; {', '.join(dtypes)}): a batch stacks "
                "them, so every example must come out the same"
            )
        return np.stack(examples)


def _code_input(code: CustomCode, outputs: Any, rows: int) -> tuple[Any, str]:
    """What `postprocess` receives of a batch's outputs, and the words for it in an error:
    the scored output's batch array; or, where the code takes every output by name
    (`code.outputs`), a dict of their batch arrays (`outputs` in that order)."""
    if code.outputs:
        arrays = list(outputs)
        if len(arrays) != len(code.outputs):
            raise CustomCodeError(
                f"custom postprocess code takes the outputs {', '.join(code.outputs)} by name; "
                f"the model gave {len(arrays)}"
            )
        value_in: Any = dict(zip(code.outputs, arrays, strict=True))
        shapes = ", ".join(f"{name} {tuple(np.shape(a))}" for name, a in value_in.items())
        return value_in, f"a batch of {rows} inputs' outputs ({shapes})"
    return outputs, f"a batch of {rows} outputs of shape {tuple(np.shape(outputs))}"


def custom_outputs(code: CustomCode, outputs: Any, rows: int) -> np.ndarray:
    """The manifest's `postprocess` on a batch of outputs: (rows, classes) scores, checked.
    `outputs`: the scored output's batch array; or, where the code takes every output by name
    (`code.outputs`), their batch arrays in that order, handed to it as a dict."""
    value_in, where = _code_input(code, outputs, rows)
    value = _array("postprocess", code.call("postprocess", value_in, where), where)
    if value.ndim != 2 or value.shape[0] != rows:
        raise CustomCodeError(
            f"custom postprocess code must return (N, classes) scores, one row per input "
            f"({rows} here); it returned shape {value.shape} for {where}"
        )
    if not np.issubdtype(value.dtype, np.number) or np.issubdtype(value.dtype, np.complexfloating):
        raise CustomCodeError(
            f"custom postprocess code must return real numbers; it returned {value.dtype}"
        )
    return value.astype(np.float32, copy=False)


def custom_returns(
    code: CustomCode, outputs: Any, rows: int, names: Sequence[str]
) -> dict[str, list[np.ndarray]]:
    """The manifest's `postprocess` on a batch of a detector's or segmenter's outputs (as
    `custom_outputs` hands them over): what it returns, the manifest's `postprocess_outputs`
    (`names`), each as one array per input. The code returns a dict {name: value}, or with
    one name the value alone; a value is a batch array (N first) or a list of N arrays, one
    per input (a detector's inputs may have different numbers of detections)."""
    value_in, where = _code_input(code, outputs, rows)
    value = code.call("postprocess", value_in, where)
    if len(names) == 1 and not isinstance(value, Mapping):
        value = {names[0]: value}
    if not isinstance(value, Mapping) or sorted(map(str, value)) != sorted(names):
        got = (
            f"a dict of {', '.join(sorted(map(str, value))) or 'nothing'}"
            if isinstance(value, Mapping)
            else type(value).__name__
        )
        raise CustomCodeError(
            f"custom postprocess code must return a dict of {', '.join(names)} (its "
            f"postprocess_outputs), each a batch array or a list of one array per input; it "
            f"returned {got} for {where}"
        )
    returned: dict[str, list[np.ndarray]] = {}
    for name in names:
        item = value[name]
        if isinstance(item, (list, tuple)):
            if len(item) != rows:
                raise CustomCodeError(
                    f"custom postprocess code returned a list of {len(item)} for {name}; it "
                    f"takes one array per input ({rows} here) for {where}"
                )
            returned[name] = [
                _array("postprocess", one, f"{name} of input {index} of {where}")
                for index, one in enumerate(item)
            ]
            continue
        array = _array("postprocess", item, f"{name} of {where}")
        if array.ndim < 1 or array.shape[0] != rows:
            raise CustomCodeError(
                f"custom postprocess code returned {name} of shape {array.shape}; a batch "
                f"array has one row per input ({rows} here) for {where}"
            )
        returned[name] = list(array)
    return returned


def _array(field: str, value: Any, where: str) -> np.ndarray:
    """What the code returned as a numeric array; CustomCodeError when it is not one."""
    try:
        array: np.ndarray = value if isinstance(value, np.ndarray) else np.asarray(value)
    except Exception as exc:
        problem = str(exc)
    else:
        if array.dtype.kind in "biuf":
            return array
        problem = f"its dtype is {array.dtype}"
    raise CustomCodeError(
        f"custom {field} code returned {type(value).__name__} for {where}, which is not a "
        f"numeric array ({problem})"
    )


def _failure(field: str, where: str, exc: BaseException) -> str:
    """The error and the traceback lines of the code itself (not the loop's frames)."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename.startswith("<manifest ")
        or not frame.filename.startswith(_PACKAGE_DIR)
        and not frame.filename.startswith(_STDLIB_DIR)
    ]
    lines = "".join(traceback.format_list(frames)).rstrip()
    head = f"custom {field} code failed on {where}: {type(exc).__name__}: {exc}"
    return f"{head}\nTraceback (most recent call last):\n{lines}" if lines else head


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIR = os.path.dirname(os.__file__)


# -- the sandbox -----------------------------------------------------------------------------

_state = threading.local()
_hook_lock = threading.Lock()
_hook_installed = False
# Audit events (https://docs.python.org/3/library/audit_events.html) refused while code runs.
_NETWORK = {
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
}
_PROCESSES = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "ctypes.dlopen",
    "ctypes.dlsym",
}
# The audit event's arguments that name a path it changes.
_WRITES: dict[str, tuple[int, ...]] = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.mkdir": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.link": (1,),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


_OUTSIDE = (
    f" outside its sandbox; it may write only under {SANDBOX_DIR} (private to the run, gone "
    "when it ends)"
)


def _write_refused(path: Any) -> str | None:
    """Why the code may not write or change `path`, in words that follow the path; None
    where it may."""
    if isinstance(path, int):
        return None  # an open file descriptor: it was opened under these rules
    try:
        resolved = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return _OUTSIDE
    if resolved in getattr(_state, "read_only", ()):
        return (
            ", one of the manifest's code files, which are read-only (copy it under "
            f"{SANDBOX_DIR} to change it)"
        )
    if resolved == SANDBOX_DIR or resolved.startswith(SANDBOX_DIR + os.sep):
        return None
    return _OUTSIDE


def _audit(event: str, args: tuple[Any, ...]) -> None:
    field = getattr(_state, "field", None)
    if field is None:
        return
    who = f"custom {field} code"
    if event in _NETWORK:
        raise SandboxViolation(
            f"{who} tried to use the network ({event}); the sandbox has none: the data it "
            "needs must come with the job (the manifest's files)"
        )
    if event in _PROCESSES:
        raise SandboxViolation(
            f"{who} tried to start or signal a process or load a native library ({event}); "
            "the sandbox allows neither"
        )
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        why = _write_refused(path) if writes else None
        if why:
            raise SandboxViolation(
                f"{who} tried to write {os.fsdecode(path) if path is not None else 'a file'}{why}"
            )
        return
    for index in _WRITES.get(event, ()):
        why = _write_refused(args[index]) if index < len(args) else None
        if why:
            raise SandboxViolation(
                f"{who} tried to change {os.fsdecode(args[index])} ({event}){why}"
            )


def _install_hook() -> None:
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True


@contextmanager
def sandbox(field: str, seconds: float, read_only: frozenset[str] = frozenset()) -> Iterator[None]:
    """While the block runs, on this thread: refusals (`SandboxViolation`) of network,
    processes and writes outside SANDBOX_DIR or to the `read_only` paths (resolved: the code
    files); and, where `on_timeout` is set (in a container), a watchdog that ends the process
    when the block takes more than `seconds` (a loop the code never leaves cannot be
    interrupted otherwise). The code runs in this process, so none of this is a boundary: the
    container is (and the agent stops a container whose custom code holds the interpreter past
    its limit, `predictors.agent.relay.Deadline`); these give the clear messages."""
    _install_hook()
    _start_watchdog()  # before the refusals apply: they refuse new threads
    previous = getattr(_state, "field", None)
    previous_read_only: frozenset[str] = getattr(_state, "read_only", frozenset())
    _state.field = field
    _state.read_only = read_only
    key = threading.get_ident()
    with _deadlines_lock:
        _deadlines[key] = (field, seconds, time.monotonic() + seconds)
    try:
        yield
    finally:
        with _deadlines_lock:
            _deadlines.pop(key, None)
        _state.field = previous
        _state.read_only = previous_read_only


# Called with the message when a call runs past its limit, before the process ends; None
# (outside a container) leaves calls unbounded. The container's entry point sets it to send
# the message to the agent as the run's failure.
on_timeout: Callable[[str], None] | None = None
_deadlines: dict[int, tuple[str, float, float]] = {}
_deadlines_lock = threading.Lock()
_watchdog: threading.Thread | None = None
WATCH_SECONDS = 0.25


def _start_watchdog() -> None:
    global _watchdog
    with _deadlines_lock:
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch, name="custom-code-watchdog", daemon=True)
            _watchdog.start()


def _watch() -> None:
    while True:
        time.sleep(WATCH_SECONDS)
        if on_timeout is None:
            continue
        now = time.monotonic()
        with _deadlines_lock:
            late = [entry for entry in _deadlines.values() if entry[2] < now]
        if not late:
            continue
        field, seconds, _ = late[0]
        message = (
            f"custom {field} code ran for more than {seconds:g} s in one call and was "
            "stopped; make it faster, or run it on a host that allows longer calls "
            "(`mlms agent --custom-code-seconds`)"
        )
        try:
            on_timeout(message)
        except Exception as exc:  # the channel is gone: end anyway
            print(f"{message} (not reported: {exc})", file=sys.stderr)
        os._exit(3)
