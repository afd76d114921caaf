"""A model file loaded in a process of its own, to check it before anything runs it.

The hub stores an uploaded model's files, then asks this module whether they load as the
manifest's `model.format` says (`check_model_files`), and whether a text input's tokenizer file
tokenises and a token_ids output's decodes (`check_tokenizer_files`): a child process (`python -m
predictors.frameworks.probe`) loads them in the framework, on the CPU with one thread, and
reports the problems as (field path, message) pairs, or none. What the file declares of its
inputs and outputs (`Predictor.signature`) is checked against the manifest's on the way, so a
misnamed output is refused at upload, not at run time.

The child is the boundary: a framework that crashes or hangs on a crafted file takes the child
with it, not the hub. It sets its own limits before it reads anything (CPU seconds, address
space, the size of any file it writes, no core file), runs in its own temporary folder (its
working directory and TMPDIR) with no GPU, and two run at once at most; the hub waits
`seconds` for it and then ends it. It runs as the hub's user: a format whose loading runs code
is never loaded (a state dict's module source is parsed; a SavedModel's signatures are read
from its graph, `tf_formats.saved_model_signature`; a torch.export program's symbolic shapes
are checked before torch reads them).

Loading runs no code of the manifest's: a state dict's module source (format state_dict) is
custom code and is only parsed here (`torch_formats.state_dict_problems`); the state dict itself
is read with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from predictors.manifests import Manifest, graph_check
from predictors.manifests.formats import DEFAULT_SIGNATURE, FORMAT_NAMES, model_format

# How long a load may take; the most a loading framework may write to one file, and the
# address space the child may take (a framework's own start-up reserves a few GiB of it).
DEFAULT_SECONDS = 180.0
MAX_WRITTEN_BYTES = 1024**3
MAX_ADDRESS_SPACE = 16 * 1024**3
# Checks running at once in this process (each a child that loads a framework): more uploads
# wait their turn rather than take the machine's memory.
_RUNNING = threading.BoundedSemaphore(2)
Problems = list[tuple[str, str]]


class ProbeUnavailable(RuntimeError):
    """The framework the format needs is not installed where the check would run."""


def check_model_files(
    data: Mapping[str, Any],
    graph_file: Path,
    weights_file: Path | None,
    *,
    seconds: float = DEFAULT_SECONDS,
) -> Problems:
    """(field path, message) for every way the model's files do not load as the manifest says,
    found by loading them in a child process; [] when they load and fit."""
    request: dict[str, Any] = {
        "manifest": dict(data),
        "graph_file": str(graph_file),
        "weights_file": str(weights_file) if weights_file is not None else None,
    }
    fmt = f"as {FORMAT_NAMES.get(model_format(data), model_format(data))}"
    return _in_child(request, seconds, "model.graph_path", f"loading it {fmt}")


def check_tokenizer_files(
    data: Mapping[str, Any], files: Mapping[str, Path], *, seconds: float = DEFAULT_SECONDS
) -> Problems:
    """(field path, message) for every tokenizer file `tokenizers` cannot read, or that cannot
    do what its entry says (`files`, by the entry's path: `inputs.<i>`, a text input whose rows
    it makes, `predictors.processing.text`; `outputs.<i>`, a token_ids output whose ids it
    decodes, `predictors.processing.token_ids`), found in a child process as
    `check_model_files` does; [] when each one does its work."""
    if not files:
        return []
    request = {"manifest": dict(data), "tokenizers": {k: str(p) for k, p in files.items()}}
    # A child that ends without an answer is named by the first of the files it was reading.
    order = sorted(files, key=lambda where: (where.partition(".")[0], int(where.split(".")[1])))
    field = f"{order[0]}.parameters.tokenizer_path"
    what = "reading the tokenizer file" + (f"s of {', '.join(order)}" if len(order) > 1 else "")
    return _in_child(request, seconds, field, what)


def _in_child(request: dict[str, Any], seconds: float, field: str, what: str) -> Problems:
    """The problems the child finds for `request`; a child that runs out of time, or ends
    without an answer, is a problem of `field` (`what` it was doing)."""
    with tempfile.TemporaryDirectory(prefix="mlms-probe-") as folder:
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": folder,
            "TMPDIR": folder,
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        request["seconds"] = seconds
        try:
            with _RUNNING:
                finished = subprocess.run(  # noqa: S603 - this interpreter, this module, no shell
                    [sys.executable, "-m", "predictors.frameworks.probe"],
                    input=json.dumps(request),
                    capture_output=True,
                    text=True,
                    cwd=folder,
                    env=environment,
                    timeout=seconds,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            return [(field, f"{what} took more than {seconds:g} s; the check gave up")]
    lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0 or not lines:
        tail = (finished.stderr.strip().splitlines() or ["no message"])[-1]
        if "ProbeUnavailable" in finished.stderr:
            raise ProbeUnavailable(tail.partition(": ")[2] or tail)
        return [
            (
                field,
                f"{what} ended the checking process (exit status {finished.returncode}): "
                f"{tail[:500]}",
            )
        ]
    answer = json.loads(lines[-1])
    return [(str(path), str(message)) for path, message in answer["problems"]]


def _limit(seconds: float) -> None:
    """The child's limits, set by the child itself before it reads anything."""
    import resource

    cpu = int(seconds) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_WRITTEN_BYTES, MAX_WRITTEN_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (MAX_ADDRESS_SPACE, MAX_ADDRESS_SPACE))


def problems_of(data: Mapping[str, Any], graph_file: Path, weights_file: Path | None) -> Problems:
    """What `check_model_files` reports, computed in this process (the child's work)."""
    fmt = model_format(data)
    framework = str((data.get("framework") or {}).get("name"))
    files = data.get("model") or {}
    if fmt == "state_dict":
        try:
            from predictors.frameworks import torch_formats
        except ImportError as exc:
            raise ProbeUnavailable(f"pytorch is not installed here ({exc})") from None
        if weights_file is None:
            return [("model.weights_path", "is required for format state_dict")]
        return [
            (_field_named(message), message)
            for message in torch_formats.state_dict_problems(
                graph_file,
                weights_file,
                str(files.get("entry") or ""),
                files.get("state_key") or None,
            )
        ]
    if fmt == "onnx":
        # What the graph says of itself first, without loading it; its external data next.
        found = graph_check.onnx_problems(data, graph_file) or graph_check.external_data_problems(
            graph_file, weights_file
        )
        if found:
            return found
    if fmt == "saved_model":
        return _saved_model_problems(data, graph_file)
    from predictors.frameworks.predictor import PredictorError, PredictorOptions, predictor_class

    try:
        predictor = predictor_class(framework)()
    except PredictorError as error:  # the framework is not installed here
        raise ProbeUnavailable(str(error)) from None
    options = PredictorOptions(graph_file=graph_file, weights_file=weights_file, threads=1)
    manifest = Manifest.from_document(dict(data), source=json.dumps(dict(data)))
    try:
        predictor.load(manifest, options)
        signature = predictor.signature()
    except PredictorError as error:
        return [("model.graph_path", str(error))]
    except Exception as exc:  # a framework's own error on a file it cannot read
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [
            (
                "model.graph_path",
                f"{framework} cannot load it as {FORMAT_NAMES.get(fmt, fmt)}: {first[:500]}",
            )
        ]
    try:
        if signature is None:
            return []
        return list(graph_check.problems(data, as_fed(fmt, data, signature)))
    finally:
        predictor.close()


def _saved_model_problems(data: Mapping[str, Any], graph_file: Path) -> Problems:
    """A SavedModel archive's signature, read and not loaded (loading runs the graph's
    initializers, which may read and write files), against the manifest."""
    try:
        from predictors.frameworks import tf_formats
    except ImportError as exc:
        raise ProbeUnavailable(f"tensorflow is not installed here ({exc})") from None
    files = data.get("model") or {}
    signature = str(files.get("signature") or DEFAULT_SIGNATURE)
    try:
        found = tf_formats.saved_model_signature(graph_file, signature)
    except ValueError as error:
        field = "model.signature" if "has no signature" in str(error) else "model.graph_path"
        return [(field, f"tensorflow cannot read it as {FORMAT_NAMES['saved_model']}: {error}")]
    return list(graph_check.problems(data, found))


def as_fed(
    fmt: str, data: Mapping[str, Any], signature: graph_check.Signature
) -> graph_check.Signature:
    """The file's signature under the names it is fed and read by: its own, except where the
    framework goes by position. A Keras model of one input and one output is fed and read by
    position (its layers' names need not be the manifest's), and a torch.export program's
    outputs are read in order (they are named after its graph's nodes): those ports take the
    manifest's names, so that what is left to compare is what matters (ranks, types, counts)."""
    declared = {
        side: [
            str(entry.get("name")) for entry in data.get(side) or [] if isinstance(entry, Mapping)
        ]
        for side in ("inputs", "outputs")
    }

    def renamed(
        ports: tuple[graph_check.Port, ...], names: list[str]
    ) -> tuple[graph_check.Port, ...]:
        if len(ports) != len(names):
            return ports  # the count differs: the names say so
        return tuple(
            graph_check.Port(name, port.element_type, port.rank)
            for name, port in zip(names, ports, strict=True)
        )

    inputs, outputs = signature.inputs, signature.outputs
    if fmt in ("keras", "h5") and len(inputs) == len(outputs) == 1:
        inputs = renamed(inputs, declared["inputs"])
        outputs = renamed(outputs, declared["outputs"])
    elif fmt == "torch_export":
        outputs = renamed(outputs, declared["outputs"])
    return graph_check.Signature(inputs, outputs)


def _field_named(message: str) -> str:
    """The field a state dict's problem is about, as its message names it."""
    for field in ("model.state_key", "model.entry", "model.graph_path", "model.weights_path"):
        if field in message:
            return field
    return "model.weights_path"


def tokenizer_problems(data: Mapping[str, Any], files: Mapping[str, Path]) -> Problems:
    """What `check_tokenizer_files` reports, computed in this process (the child's work): each
    text input built on its file, and a text of unknown words, digits and marks tokenised; each
    token_ids output's decoder built on its file, and ids across its vocabulary decoded."""
    try:
        import tokenizers  # noqa: F401 - read by TextPreprocessor; a hub without it skips

        from predictors.processing.text import TextPreprocessor
        from predictors.processing.token_ids import TokenIdsDecoder
    except ImportError as exc:
        raise ProbeUnavailable(f"tokenizers is not installed here ({exc})") from None
    from predictors.processing.parameters import ProcessingError

    found: Problems = []
    for where, file in sorted(files.items()):
        kind, _, index = where.partition(".")
        entries = list(data.get(kind) or [])
        parameters = entries[int(index)].get("parameters") or {}

        def held(_url: str, _sha256: str | None, file: Path = file) -> Path:
            return file

        try:
            if kind == "outputs":
                decoder = TokenIdsDecoder.of(parameters, held)
                step = max(decoder.largest // 64, 1)
                decoder.texts([list(range(0, decoder.largest + 1, step))])
            else:
                TextPreprocessor(parameters, held).batch(["Zyxw 0123, qvpk! ünïcødé 文字"])
        except ProcessingError as error:
            found.append((f"{where}.parameters.{error.parameter or 'tokenizer_path'}", str(error)))
    return found


def main() -> None:
    request = json.loads(sys.stdin.read())
    _limit(float(request.get("seconds") or DEFAULT_SECONDS))
    if "tokenizers" in request:
        files = {str(where): Path(path) for where, path in request["tokenizers"].items()}
        print(json.dumps({"problems": tokenizer_problems(request["manifest"], files)}))
        return
    weights = request.get("weights_file")
    found = problems_of(
        request["manifest"], Path(request["graph_file"]), Path(weights) if weights else None
    )
    print(json.dumps({"problems": found}))


if __name__ == "__main__":
    main()
