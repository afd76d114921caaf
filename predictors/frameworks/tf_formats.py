"""The TensorFlow model formats other than a Keras model: a SavedModel archive, unpacked safely
and called through one signature, and a TensorFlow Lite flat buffer, run by its interpreter;
and what a file is by its content, to say which `model.format` a misdeclared file needs.

The TensorFlow predictor (`predictors.frameworks.tensorflow`) loads the format a manifest's
`model.format` names (`predictors.manifests.formats`):

- `keras` (a Keras 3 `.keras` file) and `h5` (a legacy Keras HDF5 file) load as a Keras model;
- `saved_model`: `graph_path` is an archive (.tar, .tar.gz or .zip, told apart by content) of
  a SavedModel folder (`saved_model.pb` at the archive's root or in one top-level folder). It
  is unpacked into a temporary folder (`unpack_saved_model`: no links, no path outside the
  folder, at most `MAX_UNPACKED_BYTES` in all), loaded with `tf.saved_model.load`, and one of
  its signatures (`model.signature`, default `serving_default`) is called, fed and read by the
  signature's input and output names (`SavedModelGraph`);
- `tflite`: run by `tf.lite.Interpreter` on the CPU (`TFLiteGraph`), by the input and output
  names of the file's signature where it has one (TensorFlow's converter writes
  `serving_default`), else by its tensor names. The input is resized to each batch. A
  quantized input (an integer tensor with a scale and zero point) takes float batches,
  quantized as `round(x / scale) + zero_point` clipped to its type's range, or batches of its
  own integer type, fed as they are; a quantized output is dequantized, `(q - zero_point) *
  scale`, to float32.

Load failures raise `ValueError` with the problem in words; the predictor names the file and
the format around it.
"""

from __future__ import annotations

import stat
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np
import tensorflow as tf

from predictors.frameworks.predictor import PredictorError, first_line
from predictors.manifests.formats import DEFAULT_SIGNATURE, FORMAT_NAMES
from predictors.manifests.graph_check import Port, Signature

__all__ = [
    "MAX_UNPACKED_BYTES",
    "SavedModelGraph",
    "TFLiteGraph",
    "content_format",
    "first_line",
    "format_hint",
    "keras_signature",
    "unpack_saved_model",
]

# The most a SavedModel archive may unpack to, in bytes.
MAX_UNPACKED_BYTES = 8 * 2**30
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def content_format(path: Path) -> str | None:
    """The format `path` holds, as far as its first bytes or its zip directory tell: `h5` (the
    HDF5 signature), `tflite` (the `TFL3` flat buffer identifier), `keras` (a zip holding a
    `config.json`), `saved_model` (a zip holding a `saved_model.pb`), `archive` (a tar
    archive, compressed or not: what it holds is read when it is unpacked); None otherwise."""
    try:
        with path.open("rb") as file:
            head = file.read(8)
        if head.startswith(_HDF5_MAGIC):
            return "h5"
        if head[4:8] == b"TFL3":
            return "tflite"
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            if any(PurePosixPath(name).name in _SAVED_MODEL_FILES for name in names):
                return "saved_model"
            return "keras" if "config.json" in names else None
        return "archive" if tarfile.is_tarfile(path) else None
    except (OSError, zipfile.BadZipFile):
        return None


def format_hint(path: Path, declared: str) -> str:
    """Where `path` holds another format than `declared`: which, and the `model.format` that
    reads it (a sentence starting with "it is"); "" otherwise."""
    found = content_format(path)
    if found is None or found == declared:
        return ""
    if found == "archive":
        return (
            "it is a tar archive (an archive of a SavedModel folder is model.format: saved_model)"
        )
    return f"it is {FORMAT_NAMES[found]}: give model.format: {found}"


def unpack_saved_model(path: Path, into: Path, max_bytes: int = MAX_UNPACKED_BYTES) -> Path:
    """Unpack the SavedModel archive `path` (tar, compressed or not, or zip) into the folder
    `into`; the SavedModel folder in it (`into` itself, or its one top-level folder that holds
    `saved_model.pb`). ValueError, before anything is written, for an archive with a link, a
    member outside the folder, or more than `max_bytes` of files in all."""
    if zipfile.is_zipfile(path):
        _unzip(path, into, max_bytes)
    elif tarfile.is_tarfile(path):
        _untar(path, into, max_bytes)
    else:
        hint = format_hint(path, "saved_model")
        raise ValueError("it is not a tar, tar.gz or zip archive" + (f"; {hint}" if hint else ""))
    if any((into / name).is_file() for name in _SAVED_MODEL_FILES):
        return into
    folders = [
        folder
        for folder in sorted(into.iterdir())
        if folder.is_dir() and any((folder / name).is_file() for name in _SAVED_MODEL_FILES)
    ]
    if len(folders) == 1:
        return folders[0]
    if folders:
        raise ValueError(
            "the archive holds several SavedModel folders ("
            + ", ".join(folder.name for folder in folders)
            + "); give an archive of one"
        )
    hint = format_hint(path, "saved_model")
    raise ValueError(
        "the archive holds no saved_model.pb, at its root or in a top-level folder"
        + (f"; {hint}" if hint else "")
    )


# The largest saved_model.pb read at upload (its graph and signatures; the weights lie beside).
MAX_GRAPH_BYTES = 512 * 2**20


def saved_model_signature(path: Path, signature: str) -> Signature:
    """The inputs and outputs of the signature `signature` of the SavedModel archive `path`,
    read from its `saved_model.pb` without loading it (loading runs the graph's initializers,
    which may read and write files): what the hub checks at upload. ValueError naming the
    problem where the archive holds no readable SavedModel or no such signature."""
    from tensorflow.core.protobuf import saved_model_pb2

    data = _saved_model_pb(path)
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"its saved_model.pb is not a SavedModel: {first_line(exc)}") from None
    graphs = [g for g in saved.meta_graphs if "serve" in g.meta_info_def.tags] or list(
        saved.meta_graphs
    )
    if not graphs:
        raise ValueError("its saved_model.pb holds no graph")
    # `__saved_model_init_op` and its kind are TensorFlow's own, not callable signatures.
    signatures = {
        name: value for name, value in graphs[0].signature_def.items() if not name.startswith("__")
    }
    if signature not in signatures:
        raise ValueError(
            f"it has no signature {signature!r}; its signatures: "
            + (", ".join(sorted(signatures)) or "none (export it with signatures)")
            + " (model.signature names the one to call)"
        )
    chosen = signatures[signature]

    def port(name: str, info: Any) -> Port:
        shape = info.tensor_shape
        rank = None if shape.unknown_rank else len(shape.dim)
        dims = (
            None
            if shape.unknown_rank
            else tuple(d.size if d.size >= 0 else None for d in shape.dim)
        )
        try:
            element = _element_type(tf.dtypes.as_dtype(info.dtype).as_numpy_dtype)
        except TypeError:
            element = None
        return Port(name, element, rank, dims)

    return Signature(
        tuple(port(name, info) for name, info in sorted(chosen.inputs.items())),
        tuple(port(name, info) for name, info in sorted(chosen.outputs.items())),
    )


def _saved_model_pb(path: Path) -> bytes:
    """The bytes of the archive's saved_model.pb (at its root or in one top-level folder)."""

    def wanted(name: str) -> bool:
        parts = PurePosixPath(name.replace("\\", "/").lstrip("./")).parts
        return bool(parts) and parts[-1] == "saved_model.pb" and len(parts) <= 2

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                found = [m for m in archive.infolist() if wanted(m.filename)]
                if len(found) == 1 and found[0].file_size <= MAX_GRAPH_BYTES:
                    return archive.read(found[0])
        elif tarfile.is_tarfile(path):
            with tarfile.open(path, "r:*") as tar:
                members = [m for m in tar if m.isfile() and wanted(m.name)]
                if len(members) == 1 and members[0].size <= MAX_GRAPH_BYTES:
                    file = tar.extractfile(members[0])
                    assert file is not None
                    return file.read()
        else:
            hint = format_hint(path, "saved_model")
            raise ValueError(
                "it is not a tar, tar.gz or zip archive" + (f"; {hint}" if hint else "")
            )
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"the archive cannot be read: {exc}") from exc
    raise ValueError(
        "the archive holds no saved_model.pb (of at most "
        f"{MAX_GRAPH_BYTES // 2**20} MiB), at its root or in one top-level folder"
    )


def _too_large(total: int, max_bytes: int) -> ValueError:
    return ValueError(
        f"the archive unpacks to more than {max_bytes / 2**30:g} GiB ({total} bytes or more)"
    )


def _untar(path: Path, into: Path, max_bytes: int) -> None:
    try:
        with tarfile.open(path, "r:*") as archive:
            members = archive.getmembers()
            total = 0
            for member in members:
                if member.issym() or member.islnk():
                    raise ValueError(
                        f"the archive holds a link ({member.name}); a SavedModel archive holds "
                        "folders and files only"
                    )
                if not (member.isfile() or member.isdir()):
                    raise ValueError(
                        f"the archive holds {member.name}, which is neither a file nor a folder"
                    )
                total += member.size
                if total > max_bytes:
                    raise _too_large(total, max_bytes)
            # The "data" filter refuses absolute paths and paths that leave `into` too.
            archive.extractall(into, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"the tar archive cannot be read: {exc}") from exc


def _unzip(path: Path, into: Path, max_bytes: int) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            total = 0
            for member in members:
                name = member.filename
                parts = PurePosixPath(name.replace("\\", "/")).parts
                if name.startswith(("/", "\\")) or PureWindowsPath(name).drive or ".." in parts:
                    raise ValueError(
                        f"the archive holds {name}, a path outside the folder it unpacks to"
                    )
                if stat.S_ISLNK(member.external_attr >> 16):
                    raise ValueError(
                        f"the archive holds a link ({name}); a SavedModel archive holds "
                        "folders and files only"
                    )
                total += member.file_size  # a member is never read past its stated size
                if total > max_bytes:
                    raise _too_large(total, max_bytes)
            archive.extractall(into)  # noqa: S202 - every member's path is checked above
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError) as exc:
        raise ValueError(f"the zip archive cannot be read: {exc}") from exc


def _element_type(dtype: Any) -> str | None:
    try:
        return str(np.dtype(dtype))
    except TypeError:
        return None


def keras_signature(model: Any) -> Signature | None:
    """A Keras model's inputs (by the names of its `keras.Input`s) and outputs (by the names
    of the layers that make them); None for a model whose inputs Keras does not record (a
    subclassed model never called)."""
    try:
        inputs, outputs, names = model.inputs, model.outputs, model.output_names
    except (AttributeError, ValueError):
        return None
    if not inputs or not outputs or len(names) != len(outputs):
        return None
    return Signature(
        tuple(Port(t.name, _element_type(t.dtype), len(t.shape)) for t in inputs),
        tuple(
            Port(str(name), _element_type(t.dtype), len(t.shape))
            for name, t in zip(names, outputs, strict=True)
        ),
    )


def _spec_port(name: str, spec: Any) -> Port:
    rank = spec.shape.rank if hasattr(spec, "shape") else None
    return Port(name, spec.dtype.name if hasattr(spec, "dtype") else None, rank)


def _unknown_names(what: str, given: Sequence[str], known: Sequence[str]) -> PredictorError:
    return PredictorError(
        f"{what}: {', '.join(repr(n) for n in given)} "
        f"({'is' if len(given) == 1 else 'are'} not among its names: {', '.join(known)})"
    )


class SavedModelGraph:
    """One signature of a SavedModel folder, loaded on `device` (a TensorFlow device name)."""

    def __init__(self, directory: Path, signature: str, device: str) -> None:
        with tf.device(device):
            try:
                self._loaded = tf.saved_model.load(str(directory))
            except (OSError, ValueError, TypeError, KeyError, tf.errors.OpError) as exc:
                raise ValueError(first_line(exc)) from exc
        signatures = dict(getattr(self._loaded, "signatures", {}))
        if signature not in signatures:
            raise ValueError(
                f"it has no signature {signature!r}; its signatures: "
                + (", ".join(sorted(signatures)) or "none (export it with signatures)")
                + " (model.signature names the one to call)"
            )
        self.name = signature
        self._function = signatures[signature]
        self._device = device
        _, specs = self._function.structured_input_signature
        # A signature's inputs and outputs are maps: by name.
        self._inputs: dict[str, Any] = dict(sorted(specs.items()))
        self._outputs: dict[str, Any] = dict(sorted(self._function.structured_outputs.items()))
        self.signature = Signature(
            tuple(_spec_port(name, spec) for name, spec in self._inputs.items()),
            tuple(_spec_port(name, spec) for name, spec in self._outputs.items()),
        )

    def expected(self, name: str) -> tuple[tuple[int | None, ...], str] | None:
        """The input `name`'s shape and element type; None where the signature leaves its rank
        open."""
        spec = self._inputs[name]
        if spec.shape.rank is None:
            return None
        return tuple(spec.shape.as_list()), spec.dtype.name

    def call(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Every output of the signature, by name, for `feeds` (every input, by name)."""
        if set(feeds) != set(self._inputs):
            raise PredictorError(
                f"the SavedModel signature {self.name!r} takes the inputs "
                f"{', '.join(self._inputs)}; fed {', '.join(feeds) or 'none'}"
            )
        tensors = {}
        for name, value in feeds.items():
            dtype = self._inputs[name].dtype
            if np.dtype(value.dtype) != dtype.as_numpy_dtype:
                raise PredictorError(
                    f"the SavedModel signature {self.name!r} takes {dtype.name} for its input "
                    f"{name!r}, not {value.dtype}"
                )
            tensors[name] = tf.convert_to_tensor(value)
        with tf.device(self._device):
            outputs: dict[str, Any] = self._function(**tensors)
        return outputs

    def check_outputs(self, names: Sequence[str]) -> None:
        unknown = [name for name in names if name not in self._outputs]
        if unknown:
            raise _unknown_names(
                f"the SavedModel signature {self.name!r} has no output",
                unknown,
                list(self._outputs),
            )

    def scopes(self) -> set[str]:
        """The name scopes one below the top scope of the signature's graph functions, which
        the profiler's op names carry (a Keras model's layers: `model/conv_1/Conv2D`)."""
        found = set()
        for function in self._function.graph.as_graph_def().library.function:
            for node in function.node_def:
                parts = node.name.split("/")
                if len(parts) >= 3:
                    found.add(parts[1])
        return found

    def settings(self) -> dict[str, Any]:
        return {"signature": self.name}


@dataclass(frozen=True)
class Quantization:
    """The affine quantization of one TFLite tensor: `real = (q - zero_point) * scale`, per
    tensor (one scale) or per slice along `axis`."""

    dtype: np.dtype[Any]
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int

    def _shaped(self, values: np.ndarray, ndim: int) -> np.ndarray:
        if values.size == 1:
            return values.reshape(())
        shape = [1] * ndim
        shape[self.axis] = values.size
        return values.reshape(shape)

    def quantize(self, batch: np.ndarray) -> np.ndarray:
        """round(x / scale) + zero_point, clipped to the type's range."""
        scale = self._shaped(self.scale, batch.ndim)
        zero = self._shaped(self.zero_point, batch.ndim)
        info = np.iinfo(self.dtype)
        quantized = np.round(batch.astype(np.float64) / scale) + zero
        return np.clip(quantized, info.min, info.max).astype(self.dtype)

    def dequantize(self, values: np.ndarray) -> np.ndarray:
        """(q - zero_point) * scale, as float32."""
        scale = self._shaped(self.scale, values.ndim)
        zero = self._shaped(self.zero_point, values.ndim)
        return ((values.astype(np.float64) - zero) * scale).astype(np.float32)

    def record(self) -> dict[str, Any]:
        one = self.scale.size == 1
        return {
            "type": str(self.dtype),
            "scale": float(self.scale[0]) if one else [float(s) for s in self.scale],
            "zero_point": int(self.zero_point[0]) if one else [int(z) for z in self.zero_point],
            **({} if one else {"axis": self.axis}),
        }


def _quantization(details: Mapping[str, Any]) -> Quantization | None:
    """The quantization of a tensor, None for one that is not quantized (a float tensor, or an
    integer tensor without a scale, such as token ids)."""
    dtype = np.dtype(details["dtype"])
    parameters = details.get("quantization_parameters") or {}
    scales = np.asarray(parameters.get("scales", []), dtype=np.float64).ravel()
    if dtype.kind not in "iu" or not scales.size or not np.any(scales):
        return None
    zeros = np.asarray(parameters.get("zero_points", []), dtype=np.int64).ravel()
    if zeros.size != scales.size:
        zeros = np.resize(zeros if zeros.size else np.zeros(1, np.int64), scales.size)
    return Quantization(dtype, scales, zeros, int(parameters.get("quantized_dimension", 0)))


def _check_flat_buffer(path: Path) -> None:
    """ValueError unless `path` is a whole TFLite flat buffer: every table and vector of its
    model within the file, and every buffer stored past the flat buffer too. TensorFlow's
    interpreter reads the file unchecked (a truncated file can crash the process); reading it
    here with the schema's Python classes costs milliseconds for a model of megabytes."""
    from tensorflow.lite.python import schema_py_generated as schema

    data = path.read_bytes()
    try:
        model = schema.ModelT.InitFromPackedBuf(data, 0)
    except Exception as exc:  # any read past the end or through a bad offset
        raise ValueError(
            f"it is not a whole TFLite flat buffer ({len(data)} bytes; reading it fails: "
            f"{first_line(exc)})"
        ) from exc
    for index, buffer in enumerate(model.buffers or []):
        if buffer.offset > 1 and buffer.offset + buffer.size > len(data):
            raise ValueError(
                f"its buffer {index} lies past the end of the file ({len(data)} bytes)"
            )


class TFLiteGraph:
    """A TFLite model in TensorFlow's interpreter, fed and read by name."""

    def __init__(self, path: Path, threads: int | None) -> None:
        _check_flat_buffer(path)
        try:
            with warnings.catch_warnings():
                # Its notice that the interpreter moves to the LiteRT package.
                warnings.simplefilter("ignore")
                interpreter = tf.lite.Interpreter(model_path=str(path), num_threads=threads)
            signatures = interpreter.get_signature_list()
            self._runner: Any = None
            self.name: str | None = None
            if signatures:
                if DEFAULT_SIGNATURE in signatures or len(signatures) == 1:
                    self.name = (
                        DEFAULT_SIGNATURE
                        if DEFAULT_SIGNATURE in signatures
                        else (next(iter(signatures)))
                    )
                else:
                    raise ValueError(
                        f"it has several signatures ({', '.join(sorted(signatures))}) and none "
                        f"is {DEFAULT_SIGNATURE}; convert it with one signature"
                    )
                self._runner = interpreter.get_signature_runner(self.name)
                inputs = dict(self._runner.get_input_details())
                outputs = dict(self._runner.get_output_details())
            else:
                interpreter.allocate_tensors()
                inputs = {d["name"]: d for d in interpreter.get_input_details()}
                outputs = {d["name"]: d for d in interpreter.get_output_details()}
        except (ValueError, RuntimeError) as exc:
            raise ValueError(first_line(exc)) from exc
        self._interpreter = interpreter
        self._threads = threads
        self._inputs: dict[str, Mapping[str, Any]] = inputs
        self._outputs: dict[str, Mapping[str, Any]] = outputs
        self._shapes = {name: tuple(d["shape"]) for name, d in inputs.items()}
        self._quantized_inputs = {
            name: q for name, d in inputs.items() if (q := _quantization(d)) is not None
        }
        self._quantized_outputs = {
            name: q for name, d in outputs.items() if (q := _quantization(d)) is not None
        }

        def port(name: str, details: Mapping[str, Any], element_type: str | None) -> Port:
            return Port(name, element_type, len(details["shape_signature"]))

        # A quantized input takes float batches or its own integer type (no one type); a
        # quantized output is read dequantized, as float32.
        self.signature = Signature(
            tuple(
                port(n, d, None if n in self._quantized_inputs else _element_type(d["dtype"]))
                for n, d in inputs.items()
            ),
            tuple(
                port(n, d, "float32" if n in self._quantized_outputs else _element_type(d["dtype"]))
                for n, d in outputs.items()
            ),
        )

    def expected(self, name: str, declared: str | None) -> tuple[tuple[int | None, ...], str]:
        """The input `name`'s shape (the batch axis free: the input is resized to each batch)
        and the element type it takes: a quantized input the manifest's `declared` type where
        it takes it (float, or its own integer type), else float32."""
        details = self._inputs[name]
        shape = tuple(None if d < 0 else int(d) for d in details["shape_signature"])
        shape = (None, *shape[1:]) if shape else shape
        quantization = self._quantized_inputs.get(name)
        if quantization is None:
            return shape, str(np.dtype(details["dtype"]))
        takes = declared is not None and (
            declared == str(quantization.dtype) or declared.startswith(("float", "bfloat"))
        )
        return shape, declared if takes and declared is not None else "float32"

    def _prepared(self, name: str, value: np.ndarray) -> np.ndarray:
        dtype = np.dtype(self._inputs[name]["dtype"])
        quantization = self._quantized_inputs.get(name)
        if value.dtype == dtype:
            return value
        if quantization is not None and value.dtype.kind == "f":
            return quantization.quantize(value)
        takes = f"{dtype} or float" if quantization is not None else str(dtype)
        raise PredictorError(f"the TFLite model's input {name!r} takes {takes}, not {value.dtype}")

    def call(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output, by name (quantized ones dequantized), for `feeds` (every input, by
        name; each resized to, and the tensors allocated for, a shape it did not have)."""
        if set(feeds) != set(self._inputs):
            raise PredictorError(
                f"the TFLite model takes the inputs {', '.join(self._inputs)}; fed "
                f"{', '.join(feeds) or 'none'}"
            )
        prepared = {name: self._prepared(name, value) for name, value in feeds.items()}
        try:
            if self._runner is not None:
                raw: dict[str, np.ndarray] = self._runner(**prepared)
            else:
                raw = self._invoke(prepared)
        except (ValueError, RuntimeError) as exc:
            shapes = ", ".join(f"{n} {tuple(v.shape)}" for n, v in prepared.items())
            raise PredictorError(
                f"the TFLite model cannot run on inputs of shape {shapes}: {first_line(exc)}"
            ) from exc
        return {
            name: (
                self._quantized_outputs[name].dequantize(value)
                if name in self._quantized_outputs
                else value
            )
            for name, value in raw.items()
        }

    def _invoke(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        interpreter = self._interpreter
        resized = False
        for name, value in feeds.items():
            if tuple(value.shape) != self._shapes[name]:
                interpreter.resize_tensor_input(
                    self._inputs[name]["index"], list(value.shape), strict=False
                )
                self._shapes[name] = tuple(value.shape)
                resized = True
        if resized:
            interpreter.allocate_tensors()
        for name, value in feeds.items():
            interpreter.set_tensor(self._inputs[name]["index"], value)
        interpreter.invoke()
        return {name: interpreter.get_tensor(d["index"]) for name, d in self._outputs.items()}

    def check_outputs(self, names: Sequence[str]) -> None:
        unknown = [name for name in names if name not in self._outputs]
        if unknown:
            raise _unknown_names("the TFLite model has no output", unknown, list(self._outputs))

    def settings(self) -> dict[str, Any]:
        return {
            "signature": self.name,
            # The interpreter's own threads (TensorFlow's pools do not run it); 0: its default.
            "intra_op_threads": self._threads if self._threads is not None else 0,
            "quantization": {
                "inputs": {n: q.record() for n, q in self._quantized_inputs.items()},
                "outputs": {n: q.record() for n, q in self._quantized_outputs.items()},
            },
        }
