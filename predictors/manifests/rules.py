"""The validation of a manifest's document: its kind's JSON Schema, then the cross-field rules.

The cross-field rules are those a schema cannot express: semver versions and npm version
ranges, repo:// paths inside the manifest's own folder, sha256 for https:// files, custom code,
crop, resize and per-channel rules of image inputs, the slices and padding of bytes inputs, a
text input's tokenizer file, labels of outputs (a ctc output's charset), what a detector's or
segmenter's postprocess code returns, state and constant inputs. docs/manifest.md describes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, TypeGuard
from urllib.parse import urlsplit

import numpy as np

from predictors.manifests import formats, versioning
from predictors.manifests.errors import (
    FieldPath,
    by_line,
    dotted,
    error_at,
    item_count,
    show,
)
from predictors.manifests.json_schema import KINDS, schema_problems, validator
from predictors.processing import custom_code
from predictors.tasks import DECODED_TASKS, DETECTION_OUTPUTS

__all__ = [
    "MAX_CONSTANT_ELEMENTS",
    "MAX_REPO_PATH",
    "REPO",
    "file_refs",
    "file_urls",
    "namespace_of",
    "validate",
]

MAX_REPO_PATH = 255  # characters after repo://


def validate(data: dict[str, Any], expected: str | None, lines: dict[str, int]) -> list[dict]:
    """Every problem of `data`, sorted by line (`lines` maps field paths to YAML lines).

    `expected`, when given, is the kind the document must be.
    """
    problems: list[tuple[FieldPath, str]] = []
    kind = data.get("kind")
    if "kind" not in data:
        problems.append((("kind",), "'kind' is required: model or dataset"))
        kind = expected
    elif kind not in KINDS:
        problems.append((("kind",), f"{show(kind)} is not one of model, dataset"))
        kind = None
    elif expected is not None and kind != expected:
        problems.append((("kind",), f"expected a {expected} manifest, got a {kind} manifest"))
        kind = None
    if kind is not None:
        for error in validator(kind).iter_errors(data):
            problems.extend(schema_problems(error))
        problems.extend(_semantic_problems(data, kind))
    seen: set[tuple[FieldPath, str]] = set()
    errors = []
    for path, message in problems:
        if (path, message) not in seen:
            seen.add((path, message))
            errors.append(error_at(path, _line(lines, path), message))
    return by_line(errors)


def _line(lines: dict[str, int], path: FieldPath) -> int | None:
    """The line of `path`, or of its nearest parent that exists in the document."""
    for end in range(len(path), -1, -1):
        line = lines.get(dotted(path[:end]))
        if line is not None:
            return line
    return None


# -- cross-field rules -----------------------------------------------------------------------

REPO = "repo://"
_HTTPS = "https://"
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_CHANNELS = {"GRAY": 1, "RGB": 3, "BGR": 3}


def namespace_of(kind: str, name: str, version: str) -> str:
    """A manifest's folder in the artifact store: models/<name>/<version> or datasets/…."""
    return f"{kind}s/{name}/{version}"


def _nul_problems(value: Any, path: FieldPath = ()) -> Iterator[tuple[FieldPath, str]]:
    """Strings (keys included) holding a NUL character, which no database stores."""
    if isinstance(value, str):
        if "\x00" in value:
            yield path, "contains a NUL character (\\0), which is not allowed"
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                yield path, "has a key containing a NUL character (\\0), which is not allowed"
            yield from _nul_problems(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nul_problems(item, (*path, index))


def _semantic_problems(data: dict[str, Any], kind: str) -> Iterator[tuple[FieldPath, str]]:
    yield from _nul_problems(data)
    name, version = data.get("name"), data.get("version")
    version_ok = False
    if isinstance(version, str):
        if not versioning.is_valid_version(version):
            message = (
                f"{show(version)} is not a semantic version: expected MAJOR.MINOR.PATCH "
                "with no leading zeros, e.g. 1.0.0 or 2.1.0-rc.1"
            )
            yield ("version",), message
        elif "+" in version:
            message = (
                f"{show(version)} has build metadata (+…), which semver ignores when "
                "comparing versions; use a pre-release (-…) or a new version instead"
            )
            yield ("version",), message
        else:
            version_ok = True
    framework = data.get("framework")
    if kind == "model" and isinstance(framework, dict):
        spec = framework.get("version")
        if isinstance(spec, str):
            try:
                versioning.validate_range(spec)
            except versioning.InvalidRange as exc:
                detail = str(exc).rpartition("': ")[2]  # drop the range, quoted again
                message = (
                    f"{show(spec)} is not a valid version range ({detail}); write an npm range "
                    'such as ">=2.0.0 <3.0.0" or "^1.16"'
                )
                yield ("framework", "version"), message
    if kind == "model":
        for field in custom_code.FIELDS:
            problem = custom_code.check_source(field, data.get(field))
            if problem:
                yield (field,), problem
        for index, entry in _entries(data.get("inputs")):
            parameters = entry.get("parameters")
            if entry.get("type") == "image" and isinstance(parameters, dict):
                yield from _image_problems(parameters, ("inputs", index, "parameters"))
            if entry.get("type") == "bytes" and isinstance(parameters, dict):
                yield from _bytes_problems(parameters, ("inputs", index, "parameters"))
            if entry.get("type") == "audio" and isinstance(parameters, dict):
                yield from _audio_problems(parameters, ("inputs", index, "parameters"))
        yield from _decoded_problems(data)
        for field, index, entry in _output_entries(data):
            parameters = entry.get("parameters")
            if entry.get("type") == "ctc":  # a charset, not labels
                yield from _ctc_problems(data, parameters, (field, index))
                continue
            if entry.get("type") == "token_ids":  # a tokenizer file, not labels
                yield from _token_ids_problems(data, parameters, (field, index))
                continue
            if entry.get("type") == "yolo" and data.get("task") != "object_detection":
                yield (
                    (field, index, "type"),
                    "yolo is a detector's raw output, decoded into its detections: for "
                    f"object_detection models; this is a {data.get('task')} model",
                )
            if isinstance(parameters, dict) and entry.get("type") not in _UNLABELLED_OUTPUTS:
                yield from _labels_problems(parameters, (field, index, "parameters"))
                for key, task, what in _TASK_PARAMETERS:
                    # A yolo output's layout is its own (its candidates' axis).
                    if (
                        key in parameters
                        and data.get("task") != task
                        and entry.get("type") != "yolo"
                    ):
                        yield (
                            (field, index, "parameters", key),
                            f"is read for {task} models only ({what}); this is a "
                            f"{data.get('task')} model",
                        )
                if "frames" in parameters:
                    yield from _frames_problems(data, (field, index, "parameters", "frames"))
                labels = parameters.get("labels")
                if (
                    str(entry.get("type")).startswith("binary_")
                    and isinstance(labels, list)
                    and len(labels) != 2
                ):
                    message = (
                        f"has {item_count(len(labels)).replace('item', 'label')}; a "
                        f"{entry.get('type')} output reads two classes (the second is the "
                        "positive one)"
                    )
                    yield (field, index, "parameters", "labels"), message
        yield from _port_problems(data)
        yield from formats.format_problems(data)
        yield from _code_file_problems(data.get("code_files"))
        if data.get("code_files") and not custom_code.fields_with_code(data):
            yield (
                ("code_files",),
                "lists files for custom code to read, but the manifest has no preprocess or "
                "postprocess code",
            )
    elif data.get("task") == "text_recognition":
        for key in ("labels", "labels_path"):
            if key in data:
                yield (
                    (key,),
                    "a text_recognition dataset names no labels: each row's text column holds "
                    "its truth (leave labels and labels_path out)",
                )
    else:
        yield from _labels_problems(data, ())
    namespace = None
    if isinstance(name, str) and _SLUG.fullmatch(name) and version_ok:
        namespace = namespace_of(kind, name, str(version))
    for path, uri, sha_path, sha in file_refs(data, kind):
        yield from _file_problems(path, uri, sha_path, sha, namespace)


# Output parameters that one task reads: (key, task, what it says).
_TASK_PARAMETERS = (
    ("layout", "semantic_segmentation", "where the per-pixel class axis is"),
    ("threshold", "multi_label_classification", "the probability from which a class is predicted"),
)
# Outputs that carry no class names: states, a detector's boxes and scores, tensors and
# embeddings.
_UNLABELLED_OUTPUTS = ("state", "boxes", "scores", "tensor", "embedding")
# The most elements a constant input's value may hold.
MAX_CONSTANT_ELEMENTS = 4096
_INTEGER_TYPES = ("uint8", "int8", "int32", "int64")


def _port_problems(data: dict[str, Any]) -> Iterator[tuple[FieldPath, str]]:
    """The rules across inputs and outputs: every state input takes a state output and every
    state output goes to one state input; a constant's value is a rectangular array of numbers
    of its element type; a state's batch axis fits its shape; a text_feature input is of the
    model's one text input."""
    outputs = list(_entries(data.get("outputs")))
    state_outputs = {
        str(entry.get("name")): index for index, entry in outputs if entry.get("type") == "state"
    }
    carried: dict[str, int] = {}
    inputs = list(_entries(data.get("inputs")))
    texts = [str(entry.get("name")) for _, entry in inputs if entry.get("type") == "text"]
    for index, entry in inputs:
        if entry.get("type") == "text_feature" and len(texts) != 1:
            yield (
                ("inputs", index, "type"),
                (
                    "text_feature: a feature of the text the model's text input tokenises, which "
                    f"needs exactly one text input; this model has {len(texts)}"
                ),
            )
        parameters = entry.get("parameters")
        if not isinstance(parameters, dict):
            continue
        where: FieldPath = ("inputs", index, "parameters")
        if entry.get("type") == "state":
            source = parameters.get("from_output")
            if isinstance(source, str):
                if source not in state_outputs:
                    names = ", ".join(state_outputs) or "none"
                    yield (
                        (*where, "from_output"),
                        (
                            f"{show(source)} is not a state output of this model (its state "
                            f"outputs: {names})"
                        ),
                    )
                elif source in carried:
                    yield (
                        (*where, "from_output"),
                        (
                            f"{show(source)} is already carried to input {carried[source]}; a state "
                            "output goes to one state input"
                        ),
                    )
                else:
                    carried[source] = index
            shape, axis = parameters.get("shape"), parameters.get("batch_axis")
            if isinstance(shape, list) and isinstance(axis, int) and axis > len(shape):
                yield (
                    (*where, "batch_axis"),
                    (
                        f"{axis} is past the tensor's last axis: the state has shape {show(shape)} "
                        f"without the batch axis, so the batch axis is 0 to {len(shape)}"
                    ),
                )
        elif entry.get("type") == "constant" and "value" in parameters:
            problem = _constant_problem(parameters.get("value"), parameters.get("element_type"))
            if problem:
                yield (*where, "value"), problem
    for name, index in state_outputs.items():
        if name not in carried:
            yield (
                ("outputs", index),
                (
                    f"state output {show(name)} is carried to no input: name it in a state input's "
                    "from_output"
                ),
            )


def _code_file_problems(entries: Any) -> Iterator[tuple[FieldPath, str]]:
    """Each name of `code_files` once: the code opens a file by its name."""
    seen: dict[str, int] = {}
    for index, entry in _entries(entries):
        name = entry.get("name")
        if isinstance(name, str):
            if name in seen:
                yield (
                    ("code_files", index, "name"),
                    f"'{name}' names code_files.{seen[name]} already; each file has its own name",
                )
            seen.setdefault(name, index)


def _constant_problem(value: Any, element_type: Any) -> str | None:
    def numbers(item: Any) -> bool:
        if isinstance(item, list):
            return all(numbers(v) for v in item)
        return _is_number(item)

    if not numbers(value):
        return "must be a number or a nested list of numbers"
    try:
        array = np.asarray(value, dtype=np.float64)
    except ValueError:
        return "the lists of one level must all have the same length"
    except OverflowError:
        return "holds a number too large for any element type"
    if array.size > MAX_CONSTANT_ELEMENTS:
        return f"holds {array.size} numbers; a constant holds at most {MAX_CONSTANT_ELEMENTS}"
    if not np.all(np.isfinite(array)):
        return "must hold finite numbers"
    if element_type in _INTEGER_TYPES:
        if not np.all(array == np.round(array)):
            return f"must hold whole numbers for element type {element_type}"
        limits = np.iinfo(element_type)
        if array.size and (array.min() < limits.min or array.max() > limits.max):
            return f"holds numbers outside {element_type}'s {limits.min}..{limits.max}"
    elif element_type in ("float16", "float32") and array.size:
        largest = float(np.finfo(element_type).max)
        if np.abs(array).max() > largest:
            return f"holds numbers beyond {element_type}'s largest, {largest:g}"
    return None


def _output_entries(data: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(field, index, entry) of a model's outputs, then of what its custom postprocess code
    returns (`postprocess_outputs`), which are read alike (labels, parameters)."""
    for field in ("outputs", "postprocess_outputs"):
        for index, entry in _entries(data.get(field)):
            yield field, index, entry


def _decoded_problems(data: dict[str, Any]) -> Iterator[tuple[FieldPath, str]]:
    """`postprocess_outputs`: what a detector's or segmenter's postprocess code returns, so
    with postprocess code, of those tasks, in the form the task's loop reads; and a detector
    or segmenter with postprocess code declares it."""
    declared = data.get("postprocess_outputs")
    task = data.get("task")
    code = "postprocess" in custom_code.fields_with_code(data)
    if declared is None:
        if code and task in DECODED_TASKS:
            returns = (
                "boxes, scores and classes"
                if task == "object_detection"
                else "per-pixel logits or probabilities, with their layout"
            )
            yield (
                ("postprocess",),
                f"an {task} model's postprocess code returns what its loop reads: declare it "
                f"in postprocess_outputs ({returns})",
            )
        return
    if task not in DECODED_TASKS:
        yield (
            ("postprocess_outputs",),
            f"is read for {' and '.join(DECODED_TASKS)} models (what their postprocess code "
            f"returns); a {task} model's postprocess code returns the scores its first "
            "output's type names",
        )
        return
    if not code:
        yield (
            ("postprocess_outputs",),
            "declares what postprocess code returns, but the manifest has no postprocess code",
        )
        return
    kinds = sorted(str(entry.get("type")) for _, entry in _entries(declared))
    if task == "object_detection" and kinds != sorted(DETECTION_OUTPUTS):
        yield (
            ("postprocess_outputs",),
            f"holds outputs of types {', '.join(kinds) or 'none'}; a detector's postprocess "
            "code returns one each of boxes, scores and classes",
        )
    if task == "semantic_segmentation" and kinds not in (["logits"], ["probabilities"]):
        yield (
            ("postprocess_outputs",),
            f"holds outputs of types {', '.join(kinds) or 'none'}; a segmenter's postprocess "
            "code returns one output of per-pixel logits or probabilities",
        )
    names = [str(entry.get("name")) for _, entry in _entries(declared)]
    for index, name in enumerate(names):
        if name in names[:index]:
            yield ("postprocess_outputs", index, "name"), f"{show(name)} is declared twice"


def _entries(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for index, entry in enumerate(value):
            if isinstance(entry, dict):
                yield index, entry


def _labels_problems(where: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, str]]:
    if "labels" in where and "labels_path" in where:
        message = "labels and labels_path are exclusive: give the labels inline or in a file"
        yield (*path, "labels_path"), message
    elif "labels" not in where and "labels_path" not in where:
        message = "'labels' (or 'labels_path') is required: the class names, by class index"
        yield (*path, "labels"), message


def _ctc_problems(
    data: dict[str, Any], parameters: Any, path: FieldPath
) -> Iterator[tuple[FieldPath, str]]:
    """The rules of a ctc output beyond the schema: a text_recognition model's; exactly one of
    its charset and charset file; its blank within the charset's classes; beam_width read with
    beam decoding only."""
    if data.get("task") != "text_recognition":
        yield (
            (*path, "type"),
            "is read by text_recognition models only (per-timestep scores decoded by CTC into "
            f"text); this is a {data.get('task')} model",
        )
    if not isinstance(parameters, dict):
        return
    where = (*path, "parameters")
    if "charset" in parameters and "charset_path" in parameters:
        message = "charset and charset_path are exclusive: give the symbols inline or in a file"
        yield (*where, "charset_path"), message
    elif "charset_sha256" in parameters and "charset_path" not in parameters:
        message = "is the checksum of charset_path, which this output does not give"
        yield (*where, "charset_sha256"), message
    elif "charset" not in parameters and "charset_path" not in parameters:
        message = (
            "'charset' (or 'charset_path') is required: the symbols of the classes other than "
            "the blank, in class-index order"
        )
        yield (*where, "charset"), message
    charset, blank = parameters.get("charset"), parameters.get("blank")
    if isinstance(charset, list) and isinstance(blank, int) and blank > len(charset):
        yield (
            (*where, "blank"),
            f"is {blank}, but the charset's {len(charset)} symbols and the blank make "
            f"{len(charset) + 1} classes: the blank is a class index from 0 to {len(charset)}",
        )
    if "beam_width" in parameters and parameters.get("decoding") != "beam":
        yield (*where, "beam_width"), "is read with decoding beam only"


def _token_ids_problems(
    data: dict[str, Any], parameters: Any, path: FieldPath
) -> Iterator[tuple[FieldPath, str]]:
    """The rules of a token_ids output beyond the schema: a text_recognition model's, its
    tokenizer file's checksum given with the file."""
    if data.get("task") != "text_recognition":
        yield (
            (*path, "type"),
            "is read by text_recognition models only (emitted token ids decoded into text by "
            f"a tokenizer file); this is a {data.get('task')} model",
        )
    if isinstance(parameters, dict) and "tokenizer_sha256" in parameters:
        if "tokenizer_path" not in parameters:
            yield (
                (*path, "parameters", "tokenizer_sha256"),
                "is the checksum of tokenizer_path, which this output does not give",
            )


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _geometry_problems(
    parameters: dict[str, Any], path: FieldPath
) -> Iterator[tuple[FieldPath, str]]:
    """The rules of the optional geometry steps (`resize_side`, `pad`) beyond the schema."""
    side, pad = parameters.get("resize_side"), parameters.get("pad")
    if isinstance(side, dict):
        where = (*path, "resize_side")
        if parameters.get("resize_size") is not None or parameters.get("keep_aspect_ratio"):
            yield where, "resizes by one side: resize_size must be null and keep_aspect_ratio false"
        size, cap, step = side.get("size"), side.get("max_size"), side.get("multiple_of")
        if side.get("side") == "longer" and cap is not None:
            yield (*where, "max_size"), "must be null with side longer (that side is size)"
        if isinstance(cap, int) and isinstance(step, int) and step > 0 and cap % step:
            yield (*where, "max_size"), f"{show(cap)} is not a multiple of multiple_of {step}"
        if _is_number(size) and _is_number(cap) and cap < size:
            yield (*where, "max_size"), f"{show(cap)} is smaller than size {show(size)}"
        if (
            side.get("side") in ("height", "width")
            and isinstance(size, int)
            and isinstance(step, int)
            and step > 0
            and size % step
        ):
            yield (*where, "size"), f"{show(size)} is not a multiple of multiple_of {step}"
    if isinstance(pad, dict):
        where = (*path, "pad")
        if (pad.get("size") is None) == (pad.get("multiple_of") is None):
            yield (*where, "size"), "give exactly one of size and multiple_of"
        channels = _CHANNELS.get(str(parameters.get("color_mode")))
        value = pad.get("value")
        if channels is not None and isinstance(value, list) and len(value) not in (1, channels):
            yield (*where, "value"), f"give one value, or one per channel ({channels})"


def _image_problems(parameters: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, str]]:
    get = parameters.get
    crop_method, crop_size, resize_size = get("crop_method"), get("crop_size"), get("resize_size")
    if crop_method == "center" and crop_size is None:
        yield (*path, "crop_size"), "must be [height, width] when crop_method is center"
    if crop_method == "none" and crop_size is not None:
        yield (*path, "crop_size"), "must be null when crop_method is none"
    if (
        crop_method == "center"
        and _is_size(crop_size)
        and _is_size(resize_size)
        and (crop_size[0] > resize_size[0] or crop_size[1] > resize_size[1])
    ):
        message = f"{show(crop_size)} is larger than resize_size {show(resize_size)}"
        yield (*path, "crop_size"), message
    if (
        get("keep_aspect_ratio") is True
        and "resize_size" in parameters
        and resize_size is None
        and get("resize_side") is None
    ):
        message = "must be false when resize_size is null (there is no resize)"
        yield (*path, "keep_aspect_ratio"), message
    yield from _geometry_problems(parameters, path)
    channels = _CHANNELS.get(str(get("color_mode")))
    if channels is not None:
        for key in ("mean", "std"):
            values = get(key)
            if isinstance(values, list) and values and len(values) != channels:
                unit = "channel" if channels == 1 else "channels"
                message = (
                    f"has {item_count(len(values)).replace('item', 'value')} but color_mode "
                    f"{get('color_mode')} has {channels} {unit}: give one value per channel"
                )
                yield (*path, key), message
    mean, scale = get("mean"), get("scale")
    if (
        get("normalization_order") == "normalize_then_convert"
        and isinstance(mean, list)
        and _is_number(scale)
        and scale > 0
    ):
        for index, value in enumerate(mean):
            if _is_number(value) and not 0 <= round(value * scale) <= 255:
                message = (
                    f"{show(value)} times scale {show(scale)} is outside 0..255: "
                    "normalize_then_convert subtracts the mean in byte space"
                )
                yield (*path, "mean", index), message


# The tasks whose scored output may have a time axis pooled (`frames`): one score per class
# per input.
_FRAMES_TASKS = ("image_classification", "multi_label_classification")


def _frames_problems(data: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, str]]:
    """An output's `frames`: a classifier's or multi-label classifier's, without postprocess
    code (which reads the outputs as the model gives them)."""
    if data.get("task") not in _FRAMES_TASKS:
        yield (
            path,
            f"pools a time axis into one score per class, for {' and '.join(_FRAMES_TASKS)} "
            f"models; this is a {data.get('task')} model",
        )
    elif data.get("postprocess"):
        yield (
            path,
            "pools the output's frames, and custom postprocess code reads the outputs as the "
            "model gives them: do one or the other",
        )


def _audio_problems(parameters: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, str]]:
    """An audio input's parameters as its preprocessor reads them: a stream's (with chunk) or
    whole clips' (a spectrogram's keys within their ranges, windows within their size)."""
    from predictors.processing.audio import AudioPreprocessor
    from predictors.processing.clips import ClipPreprocessor
    from predictors.processing.parameters import ProcessingError

    try:
        if "chunk" in parameters:
            extra = sorted({"spectrogram", "windows"} & set(parameters))
            if extra:
                yield (
                    (*path, extra[0]),
                    "is read from whole clips (a feature_extraction model's); chunk frames a "
                    "stream, whose chunks are fed as they are",
                )
                return
            AudioPreprocessor(parameters)
        else:
            ClipPreprocessor(parameters)
    except ProcessingError as error:
        where = tuple(str(error.parameter).split(".")) if error.parameter else ()
        yield (*path, *where), str(error)


def _bytes_problems(parameters: dict[str, Any], path: FieldPath) -> Iterator[tuple[FieldPath, str]]:
    """A bytes input's slices within its block, and its pad value within its element type."""
    from predictors.processing.raw_bytes import BYTES_ELEMENT_TYPES

    block = parameters.get("block_size")
    if isinstance(block, int) and not isinstance(block, bool):
        for index, entry in _entries(parameters.get("slices")):
            size = entry.get("size")
            if isinstance(size, int) and not isinstance(size, bool) and size > block:
                yield (
                    (*path, "slices", index, "size"),
                    f"is {size}, more than block_size ({block}): a slice is taken from the "
                    "block_size bytes read at its end of the file",
                )
    pad, element_type = parameters.get("pad_value"), parameters.get("element_type")
    if element_type in BYTES_ELEMENT_TYPES and isinstance(pad, int) and not isinstance(pad, bool):
        info = np.iinfo(BYTES_ELEMENT_TYPES[element_type])
        if not info.min <= pad <= info.max:
            yield (
                (*path, "pad_value"),
                f"is {pad}, which element_type {element_type} cannot hold ({info.min} to "
                f"{info.max})",
            )


def _is_size(value: Any) -> TypeGuard[list[Any]]:
    return isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)


def file_urls(data: dict[str, Any], kind: str) -> set[str]:
    """Every file URL (`repo://…`, `https://…`) a manifest's document names."""
    return {uri for _, uri, _, _ in file_refs(data, kind) if isinstance(uri, str)}


def file_refs(
    data: dict[str, Any], kind: str
) -> Iterator[tuple[FieldPath, Any, FieldPath | None, Any]]:
    """(field path, uri, sha256 field path or None, sha256) for every file a manifest names."""
    if kind == "model":
        files = data.get("model")
        if isinstance(files, dict):
            for stem in ("graph", "weights"):
                if files.get(f"{stem}_path") is not None:
                    yield (
                        ("model", f"{stem}_path"),
                        files[f"{stem}_path"],
                        ("model", f"{stem}_sha256"),
                        files.get(f"{stem}_sha256"),
                    )
        for index, entry in _entries(data.get("inputs")):
            parameters = entry.get("parameters")
            if entry.get("type") == "text" and isinstance(parameters, dict):
                if "tokenizer_path" in parameters:
                    where = ("inputs", index, "parameters")
                    yield (
                        (*where, "tokenizer_path"),
                        parameters["tokenizer_path"],
                        (*where, "tokenizer_sha256"),
                        parameters.get("tokenizer_sha256"),
                    )
        for field, index, entry in _output_entries(data):
            parameters = entry.get("parameters")
            if isinstance(parameters, dict) and "labels_path" in parameters:
                path = (field, index, "parameters", "labels_path")
                yield path, parameters["labels_path"], None, None
            if isinstance(parameters, dict) and "charset_path" in parameters:
                where = (field, index, "parameters")
                yield (
                    (*where, "charset_path"),
                    parameters["charset_path"],
                    (*where, "charset_sha256"),
                    parameters.get("charset_sha256"),
                )
            if (
                entry.get("type") == "token_ids"
                and isinstance(parameters, dict)
                and "tokenizer_path" in parameters
            ):
                where = (field, index, "parameters")
                yield (
                    (*where, "tokenizer_path"),
                    parameters["tokenizer_path"],
                    (*where, "tokenizer_sha256"),
                    parameters.get("tokenizer_sha256"),
                )
        for index, entry in _entries(data.get("code_files")):
            if "path" in entry:
                yield (
                    ("code_files", index, "path"),
                    entry["path"],
                    ("code_files", index, "sha256"),
                    entry.get("sha256"),
                )
    else:
        if "labels_path" in data:
            yield ("labels_path",), data["labels_path"], None, None
        splits = data.get("splits")
        if isinstance(splits, dict):
            for split, entry in splits.items():
                if isinstance(entry, dict) and "path" in entry:
                    yield (
                        ("splits", split, "path"),
                        entry["path"],
                        ("splits", split, "sha256"),
                        entry.get("sha256"),
                    )


def _file_problems(
    path: FieldPath, uri: Any, sha_path: FieldPath | None, sha: Any, namespace: str | None
) -> Iterator[tuple[FieldPath, str]]:
    if not isinstance(uri, str):
        return
    if uri.startswith(REPO):
        problem = _repo_path_problem(uri[len(REPO) :], namespace)
        if problem:
            yield path, f"{show(uri)} {problem}"
    elif uri.startswith(_HTTPS):
        try:
            parts = urlsplit(uri)
            host = parts.hostname
        except ValueError:  # e.g. an unclosed [IPv6] host
            host = None
        if not host or any(c.isspace() for c in uri):
            yield path, f"{show(uri)} is not a valid https:// URL"
        elif parts.username is not None or parts.password is not None:
            yield path, f"{show(uri)} holds credentials; a manifest must not"
        if sha_path is not None and sha is None:
            message = (
                f"'{sha_path[-1]}' is required when '{path[-1]}' is an https:// URL "
                "(the download is checked against it)"
            )
            yield sha_path, message


def _repo_path_problem(relative: str, namespace: str | None) -> str | None:
    where = f"repo://{namespace}/" if namespace else "repo://<kind>s/<name>/<version>/"
    if "\\" in relative:
        return "contains a backslash; separate path segments with '/'"
    if relative.startswith("/"):
        return f"is absolute; a repo:// path is relative to the artifact store, e.g. {where}…"
    if len(relative) > MAX_REPO_PATH:
        return f"is longer than {MAX_REPO_PATH} characters"
    for segment in relative.split("/"):
        if segment == "":
            return "has an empty path segment"
        if segment in (".", ".."):
            return f"has a '{segment}' segment; repo:// paths cannot leave their folder"
        if not _SEGMENT.fullmatch(segment):
            return f"has the segment {show(segment)}: use only letters, digits, '.', '_' and '-'"
    if namespace is not None and not relative.startswith(namespace + "/"):
        return f"is outside this manifest's folder: its files must be under {where}"
    return None
