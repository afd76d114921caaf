"""Which tasks, inputs and outputs the evaluation loop supports, and how each task is scored.

The hub and the loop ask the same questions of a model manifest (its data) here: whether the loop
can run it as it says (`unsupported`), timed only (`latency_only_problem`), driven by LoadGen
(`loadgen_problem`), traced at a level (`trace_level_problem`) or fed a dataset
(`dataset_problem`); which input it feeds and which output it scores (`data_input_name`,
`scored_output_name`), and which outputs custom postprocess code takes by name
(`named_outputs`); and what a result's two headline metrics are called and hold
(`metric_names`, `metric_text`, `metrics_text`, `metric_problem`, `LOWER_IS_BETTER`). No Django.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BOTH_METRICS",
    "CLIP_TASKS",
    "COLUMN_INPUTS",
    "COLUMN_TASKS",
    "DATA_INPUTS",
    "DECODED_TASKS",
    "DETECTION_OUTPUTS",
    "LOADGEN_TASKS",
    "LOWER_IS_BETTER",
    "METRIC_NAMES",
    "PERCENT_ERRORS",
    "SCORED_TASKS",
    "TEXT_FEATURE",
    "column_entries_problem",
    "columns_problem",
    "data_input_name",
    "data_inputs",
    "dataset_problem",
    "decoded_outputs",
    "input_columns",
    "latency_only_problem",
    "loadgen_problem",
    "metric_names",
    "metric_problem",
    "metric_text",
    "metrics_text",
    "named_outputs",
    "scored_output",
    "scored_output_name",
    "trace_level_problem",
    "unsupported",
]

# The tasks the evaluation loop scores, and the data inputs (fed from the dataset) it knows.
SCORED_TASKS = (
    "image_classification",
    "multi_label_classification",
    "regression",
    "sequence_labelling",
    "object_detection",
    "semantic_segmentation",
    "text_recognition",
    "feature_extraction",
)
DETECTION_OUTPUTS = ("boxes", "scores", "classes")
# Tasks whose headline metrics (a result's `top1` and `top5`) are errors (in the target's units,
# or error rates), lower is better (every other task's are fractions from 0 to 1, higher is better).
LOWER_IS_BETTER = ("regression", "text_recognition")
# Of those, the tasks whose errors are rates shown in percent (a text's character and word
# error rates: 0 is perfect, and insertions can take them past 100 %).
PERCENT_ERRORS = ("text_recognition",)


# What a result's two headline metrics (`top1`, `top5`) hold, by task (top-1 and top-5 accuracy
# for every other).
METRIC_NAMES = {
    "sequence_labelling": ("Accuracy", "Top-5"),
    "object_detection": ("mAP", "mAP@.5"),
    "semantic_segmentation": ("mIoU", "Pixel accuracy"),
    "multi_label_classification": ("mAP", "F1 (micro)"),
    "regression": ("MAE", "RMSE"),
    "text_recognition": ("CER", "WER"),
    "feature_extraction": ("Recall@1", "Recall@5"),
}
# Tasks whose scored results hold both metrics (where `top5` is never null).
BOTH_METRICS = (
    "object_detection",
    "semantic_segmentation",
    "multi_label_classification",
    "regression",
    "text_recognition",
    "feature_extraction",
)


def metric_names(task: str) -> tuple[str, str]:
    """The names of a task's two headline metrics (`METRIC_NAMES`)."""
    return METRIC_NAMES.get(task, ("Top-1", "Top-5"))


def metric_text(task: str, value: float | None) -> str:
    """A headline metric in words: a percentage (an error rate too), or a regression's error as
    the number it is; "-" where there is none."""
    if value is None:
        return "-"
    if task in PERCENT_ERRORS:
        return f"{value:.2%}"
    return f"{value:.4g}" if task in LOWER_IS_BETTER else f"{value:.2%}"


def metrics_text(task: str, top1: float | None, top5: float | None) -> str:
    """A result's headline metrics in words, named by its task ("top-1 96.20%, top-5 99.10%",
    "MAE 46.82, RMSE 59.11"); a latency-only result's "latency only (not scored)"."""
    if top1 is None:
        return "latency only (not scored)"
    first, second = (n.lower() if n.startswith("Top") else n for n in metric_names(task))
    words = f"{first} {metric_text(task, top1)}"
    if top5 is not None:
        words += f", {second} {metric_text(task, top5)}"
    return words


def metric_problem(task: str, name: str, value: float | None) -> str | None:
    """Why a result's headline metric `name` (top1, top5) cannot be what its task reports."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        return f"{name} must be a finite number >= 0; got {value!r}"
    if task not in LOWER_IS_BETTER and value > 1:
        return f"{name} of a {task} result is a fraction from 0 to 1; got {value!r}"
    return None


# The scored output's types each task reads (detection and segmentation: see their checks).
_SCORED_OUTPUTS = {
    "image_classification": ("logits", "probabilities", "binary_probability", "binary_logit"),
    "sequence_labelling": ("logits", "probabilities", "binary_probability", "binary_logit"),
    # Each class through its own sigmoid (logits), or its own probability.
    "multi_label_classification": ("logits", "probabilities"),
    "regression": ("values",),
    # Per-timestep class scores decoded by CTC into a text (`predictors.processing.ctc`), or
    # the token ids a sequence-to-sequence model emits, decoded by a tokenizer file
    # (`predictors.processing.token_ids`).
    "text_recognition": ("ctc", "token_ids"),
    # One vector per input, compared by cosine similarity (retrieval and verification).
    "feature_extraction": ("embedding",),
}
DATA_INPUTS = ("image", "tensor", "audio", "bytes", "text")
# An input fed what the tokenizer gives of the text input's text besides its ids (an attention
# mask, type ids: `predictors.processing.text.TextFeeds`).
TEXT_FEATURE = "text_feature"
# The tasks whose custom postprocess code returns outputs the manifest declares apart
# (`postprocess_outputs`, `decoded_outputs`): a detector's boxes, a segmenter's class scores.
DECODED_TASKS = ("object_detection", "semantic_segmentation")
# The tasks whose inputs may be whole audio clips (an audio input without chunk).
CLIP_TASKS = ("feature_extraction", "multi_label_classification")


# The tasks LoadGen scenarios drive (one batched input per call; inputs of one shape):
# performance mode for these, accuracy mode for image classification alone.
LOADGEN_TASKS = ("image_classification", "multi_label_classification", "regression")


def loadgen_problem(
    data: Mapping[str, Any], scenario: str, mode: str = "performance", latency_only: bool = False
) -> str | None:
    """Why LoadGen cannot drive a model manifest (its data) in `scenario`, or None (also for
    the fixed scenario). The hub asks this at launch, and the loop again."""
    if scenario == "fixed":
        return None
    name, task = data.get("name"), data.get("task")
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    if any(i.get("type") in ("state", "constant") for i in inputs):
        return (
            f"{name} has state or constant inputs: LoadGen scenarios drive models of one "
            "batched input (scenario fixed runs streams)"
        )
    if len(data_inputs(data)) > 1:
        return (
            f"{name} takes several inputs from the dataset, each from its own column: LoadGen "
            "scenarios drive samples of one input (scenario fixed feeds several)"
        )
    if any(i.get("type") == "audio" for i in inputs):
        return (
            f"{name} reads audio clips (a stream's chunks, or whole clips of any length and "
            "their windows): LoadGen scenarios drive samples of one shape (scenario fixed "
            "runs clips)"
        )
    if not latency_only and task not in LOADGEN_TASKS:
        return (
            f"LoadGen scenarios drive {', '.join(LOADGEN_TASKS)} models (or any, latency only); "
            f"{name} is a {task} model"
        )
    if mode == "accuracy" and (latency_only or task != "image_classification"):
        return (
            "loadgen_mode accuracy scores image classification; "
            f"{name} is {'timed only' if latency_only else f'a {task} model'}"
        )
    binary = any(
        isinstance(o, Mapping) and o.get("type") in ("binary_logit", "binary_probability")
        for o in data.get("outputs") or []
    )
    if mode == "accuracy" and binary:
        return f"loadgen_mode accuracy scores multi-class outputs; {name} is a binary classifier"
    return None


def dataset_problem(model: Mapping[str, Any], dataset: Mapping[str, Any]) -> str | None:
    """Why a model's input cannot be fed from a dataset's rows, or None: a text input reads a
    dataset of encoding text, and only a text input does (its rows are strings). The hub asks
    this at launch, and the loop again before it runs."""
    inputs = [i for i in model.get("inputs") or [] if isinstance(i, Mapping)]
    # An input that reads a column of its own takes what the column holds (checked as it is
    # read); the dataset's encoding is its input column's.
    fed = next((i for i in inputs if i.get("type") in DATA_INPUTS and "column" not in i), None)
    if fed is None:
        return None
    text_input, text_rows = fed.get("type") == "text", dataset.get("encoding") == "text"
    if text_input == text_rows:
        return None
    if text_input:
        return (
            f"{model.get('name')}'s input {fed.get('name')} is text, tokenised from a dataset "
            f"of encoding text; {dataset.get('name')}'s encoding is {dataset.get('encoding')}"
        )
    return (
        f"{dataset.get('name')} holds text (encoding text), which only a text input reads; "
        f"{model.get('name')}'s input {fed.get('name')} is {fed.get('type')}"
    )


def unsupported(data: Mapping[str, Any], *, latency_only: bool = False) -> str | None:
    """Why the evaluation loop cannot run a model manifest (its data) as it says, or None;
    `latency_only`: timed without scoring (`latency_only_problem`). The hub asks this at launch
    (a 400 rather than a run that fails), and the loop again before it runs."""
    name, kind, task = data.get("name"), data.get("kind"), data.get("task")
    if kind != "model":
        return f"{name} is a {kind} manifest, not a model"
    if latency_only:
        return latency_only_problem(data)
    outputs = [o for o in data.get("outputs") or [] if isinstance(o, Mapping)]
    tensors = all(o.get("type") in ("tensor", "state") for o in outputs)
    if outputs and tensors and not decoded_outputs(data):
        return (
            f"{name}'s outputs are tensors, which are not scored (no labels): evaluate it for "
            "latency only (latency_only, mlms evaluate --latency-only)"
        )
    if task not in SCORED_TASKS:
        return (
            f"{name} is {'an' if str(task)[:1] in 'aeiou' else 'a'} {task} model; the "
            "evaluation loop scores "
            f"{', '.join(SCORED_TASKS[:-1])} and {SCORED_TASKS[-1]} models (instance "
            "segmentation scoring is not built yet); time it with latency_only"
        )
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    fed = [str(i.get("name")) for i in inputs if i.get("type") in DATA_INPUTS]
    if not fed:
        return (
            f"{name} declares no input fed from the dataset (type image, tensor, audio, bytes "
            "or text); the evaluation loop feeds one, or several from columns of their own"
        )
    problem = columns_problem(data)
    if problem:
        return problem
    decoded = decoded_outputs(data)
    if data.get("postprocess_outputs") is not None and not decoded:
        return (
            f"{name} declares postprocess_outputs, what custom postprocess code returns, "
            "which object_detection and semantic_segmentation models read; "
            + (
                "this one has no postprocess code"
                if task in DECODED_TASKS
                else f"a {task} model's code returns the scores its first output's type names"
            )
        )
    if task == "object_detection":
        problem = _image_task_problem(str(name), task, "boxes", data, inputs)
        return problem or _unsupported_detector(str(name), data, decoded or outputs)
    if task == "semantic_segmentation":
        problem = _image_task_problem(str(name), task, "masks", data, inputs)
        return problem or _unsupported_segmenter(str(name), data, decoded or outputs)
    # Custom postprocess code takes every output that is not a state by name where there are
    # several (`named_outputs`): its scores are read as the first one's type.
    read = [o for o in outputs if o.get("type") != "state"]
    code = data.get("postprocess")
    by_name = bool(named_outputs(data))
    scored = (
        read[:1] if by_name else [o for o in outputs if o.get("type") not in ("state", "tensor")]
    )
    if len(scored) != 1:
        names = ", ".join(str(o.get("name")) for o in scored)
        return (
            f"{name} declares {len(scored)} scored outputs ({names}); the evaluation loop reads "
            "one: declare the others as state outputs, or leave them out"
        )
    stateful = [str(i.get("name")) for i in inputs if i.get("type") in ("state", "constant")]
    features = [str(i.get("name")) for i in inputs if i.get("type") == TEXT_FEATURE]
    if features and task == "sequence_labelling":
        return (
            f"{name}'s inputs {', '.join(features)} are features of a text, fed with its ids "
            "in batches; a sequence_labelling model runs on streams"
        )
    if features and data.get("preprocess"):
        return _features_preprocessed(str(name), features)
    contexts = [
        str(i.get("name"))
        for i in inputs
        if isinstance(i.get("parameters"), Mapping) and "context" in i["parameters"]
    ]
    audio = [i for i in inputs if i.get("type") == "audio"]
    if audio and data.get("preprocess"):
        return (
            f"{name}'s input {audio[0].get('name')} is audio, decoded by the loop: custom "
            "preprocess code does not run on it (describe the processing with parameters)"
        )
    streamed = audio and "chunk" in (audio[0].get("parameters") or {})
    if streamed and task != "sequence_labelling":
        return (
            f"{name}'s input {audio[0].get('name')} is audio framed into chunks of a stream "
            "(parameter chunk): only sequence_labelling models run on streams; a "
            "feature_extraction model reads whole clips (leave chunk and tail out)"
        )
    if audio and not streamed and task not in ("sequence_labelling", *CLIP_TASKS):
        return (
            f"{name}'s input {audio[0].get('name')} is whole audio clips: the loop scores "
            "those for feature_extraction models (embeddings) and multi_label_classification "
            "ones, and streams of chunks for sequence_labelling ones"
        )
    if audio and not streamed and task == "sequence_labelling":
        return (
            f"{name}'s input {audio[0].get('name')} is audio of a sequence_labelling model, "
            "which runs on streams: give the parameters chunk and tail"
        )
    if contexts and task != "sequence_labelling":
        return (
            f"{name}'s input {contexts[0]} has a context window, which takes the input before "
            "it in a stream: only sequence_labelling models run on streams"
        )
    if task != "sequence_labelling":
        # Outputs of type tensor are not read: they may stand beside the scored one.
        untyped = [o for o in outputs if o.get("type") != "tensor"]
        if stateful or len(untyped if not by_name else outputs) != (len(read) if by_name else 1):
            return (
                f"{name} is an {task} model with constant or state inputs or state outputs "
                f"({', '.join(stateful) or 'outputs'}); the loop feeds those to "
                "sequence_labelling models, which run on ordered streams"
            )
    if task == "text_recognition" and isinstance(code, str) and code.strip():
        return (
            f"{name} is a text_recognition model with custom postprocess code, which returns "
            "(N, classes) scores; its ctc or token_ids output is decoded as the model gives it: "
            "leave the code out"
        )
    output_type = str(scored[0].get("type"))
    readable = _SCORED_OUTPUTS.get(str(task), _SCORED_OUTPUTS["image_classification"])
    if output_type not in readable:
        kinds = (
            readable[0] if len(readable) == 1 else f"{', '.join(readable[:-1])} or {readable[-1]}"
        )
        what = ", an object_detection output" if output_type in DETECTION_OUTPUTS else ""
        return (
            f"{name}'s output {scored[0].get('name')} is {output_type}{what}; "
            f"{'an' if str(task)[:1] in 'aeiou' else 'a'} {task} model's scored output is {kinds}"
        )
    return None


def _features_preprocessed(name: str, features: list[str]) -> str:
    return (
        f"{name}'s inputs {', '.join(features)} are features of its text, tokenised with its "
        "ids by the loop: custom preprocess code does not run on such a model (the tokenizer "
        "file and the parameters say the processing)"
    )


# The tasks whose models may take several inputs from the dataset, each from a column of its
# own (`data_inputs`, `predictors.processing.columns`): scored a batch at a time, one output.
COLUMN_TASKS = (
    "image_classification",
    "multi_label_classification",
    "regression",
    "text_recognition",
    "feature_extraction",
)
# The input types that may read a column of their own (a row's bytes or string, whole).
COLUMN_INPUTS = ("image", "tensor", "bytes", "text")
# The columns that hold what a row is scored against, never an input.
TARGET_COLUMNS = ("label", "target", "boxes", "classes", "segments", "segment_classes")


def data_inputs(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The inputs fed from the dataset (image, tensor, audio, bytes or text), in the
    manifest's order."""
    return [
        i
        for i in data.get("inputs") or []
        if isinstance(i, Mapping) and i.get("type") in DATA_INPUTS
    ]


def input_columns(data: Mapping[str, Any]) -> list[str] | None:
    """The dataset columns a model's data inputs read, in their order, where they name
    theirs; None where they do not (the one input reads the dataset's input column)."""
    fed = data_inputs(data)
    if not any("column" in entry for entry in fed):
        return None
    return [str(entry.get("column")) for entry in fed]


def column_entries_problem(data: Mapping[str, Any]) -> str | None:
    """Why an input's `column` cannot be read as it says, or None: only image, tensor, bytes
    and text inputs read a column of their own (audio reads the dataset's audio column; a
    constant, a state or a text's feature reads none), and none reads a column of what rows
    are scored against."""
    name, task = data.get("name"), data.get("task")
    targets = (*TARGET_COLUMNS, "text") if task == "text_recognition" else TARGET_COLUMNS
    for entry in data.get("inputs") or []:
        if not isinstance(entry, Mapping) or entry.get("column") is None:
            continue
        kind, column = entry.get("type"), entry.get("column")
        if kind not in COLUMN_INPUTS:
            reads = (
                "the dataset's audio column"
                if kind == "audio"
                else "no column"
                if kind in ("constant", "state")
                else "what its text gives"
            )
            return (
                f"{name}'s input {entry.get('name')} is {kind}, which reads {reads}: a column "
                "of its own is for image, tensor, bytes and text inputs (leave column out)"
            )
        if column in targets:
            return (
                f"{name}'s input {entry.get('name')} reads the column {column!r}, which holds "
                "what each row is scored against, not an input"
            )
    return None


def columns_problem(data: Mapping[str, Any]) -> str | None:
    """Why a model's data inputs cannot be fed as they say, or None: one input (reading its
    column, or the dataset's input column), or several, each naming a column of its own, of
    a task scored a batch at a time, without audio, text features or custom preprocessing."""
    name, task = data.get("name"), data.get("task")
    fed = data_inputs(data)
    problem = column_entries_problem(data)
    if problem:
        return problem
    names = ", ".join(str(entry.get("name")) for entry in fed)
    article = "an" if str(task)[:1] in "aeiou" else "a"
    if task not in COLUMN_TASKS and len(fed) > 1:
        return (
            f"{name} declares {len(fed)} inputs fed from the dataset (type image, tensor, "
            f"audio, bytes or text: {names}); the evaluation loop feeds one to {article} {task} model "
            f"(several, each from a column of its own, to {', '.join(COLUMN_TASKS)} models)"
        )
    if task not in COLUMN_TASKS and any("column" in entry for entry in fed):
        return (
            f"{name}'s input {names} reads the column {fed[0].get('column')!r}: inputs read "
            f"columns of their own in {', '.join(COLUMN_TASKS)} models; {article} {task} model's "
            "reads the dataset's input column (leave column out)"
        )
    if len(fed) == 1:
        return None
    unnamed = [str(entry.get("name")) for entry in fed if "column" not in entry]
    if unnamed:
        return (
            f"{name} declares {len(fed)} inputs fed from the dataset ({names}): each names the "
            f"dataset column it reads (column), and {', '.join(unnamed)} names none"
        )
    columns = [str(entry["column"]) for entry in fed]
    twice = sorted({column for column in columns if columns.count(column) > 1})
    if twice:
        return (
            f"{name}'s inputs {names} read the column {twice[0]!r} more than once: each input "
            "reads a column of its own"
        )
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    if any(i.get("type") == TEXT_FEATURE for i in inputs):
        return (
            f"{name} takes features of a text (text_feature) and several columns: the loop "
            "feeds one or the other"
        )
    if data.get("preprocess"):
        return (
            f"{name}'s inputs {names} are preprocessed each by its own parameters: custom "
            "preprocess code does not run on a model fed several columns"
        )
    return None


def named_outputs(data: Mapping[str, Any]) -> list[str]:
    """The outputs custom `postprocess` code receives by name, in the manifest's order: every
    output that is not a state output, where the manifest has postprocess code and declares
    more than one; none otherwise (postprocess receives the scored output's batch array)."""
    code = data.get("postprocess")
    if not (isinstance(code, str) and code.strip()):
        return []
    names = [
        str(entry.get("name"))
        for entry in data.get("outputs") or []
        if isinstance(entry, Mapping) and entry.get("type") != "state"
    ]
    return names if len(names) > 1 else []


def trace_level_problem(
    data: Mapping[str, Any], level: str, latency_only: bool = False
) -> str | None:
    """Why a model cannot be traced at trace level `level`, or None: the PyTorch and TensorFlow
    predictors trace the layers of calls of one input and one output, so the layers of a model
    fed several inputs from each text (`text_feature` inputs), or whose custom postprocess
    takes several outputs by name (when it is scored), are traced by ONNX Runtime alone. The
    hub asks this at launch, and the loop again."""
    from predictors.protocol.vocabulary import TRACE_LEVELS, at_least

    framework = (data.get("framework") or {}).get("name")
    if level not in TRACE_LEVELS or not at_least(level, "framework") or framework == "onnxruntime":
        return None
    what = f"trace level {level}: {data.get('name')} {data.get('version')}"
    advice = "ask for trace level model or coarser (ONNX Runtime traces them)"
    inputs = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    fed = [str(i.get("name")) for i in inputs if i.get("type") in ("text", TEXT_FEATURE)]
    if len(fed) > 1:
        return (
            f"{what} takes several inputs from each text ({', '.join(fed)}), and the "
            f"{framework} predictor traces the layers of one-input calls only; {advice}"
        )
    columns = [str(i.get("name")) for i in data_inputs(data)]
    if len(columns) > 1:
        return (
            f"{what} takes several inputs from the dataset's columns ({', '.join(columns)}), "
            f"and the {framework} predictor traces the layers of one-input calls only; {advice}"
        )
    named = [] if latency_only else named_outputs(data)
    if named:
        return (
            f"{what}'s custom postprocess takes its outputs by name ({', '.join(named)}), and "
            f"the {framework} predictor traces the layers of one-output calls only; {advice}"
        )
    return None


def latency_only_problem(data: Mapping[str, Any]) -> str | None:
    """Why a model cannot be timed without scoring, or None. A latency-only evaluation feeds
    one input from the dataset (an image or a tensor, in batches) and computes every output,
    whatever its task or its outputs' types; it reads no labels and scores nothing (a text
    input's features, `text_feature` inputs, come with its batches)."""
    name = data.get("name")
    problem = column_entries_problem(data)
    if problem:
        return problem
    declared = [i for i in data.get("inputs") or [] if isinstance(i, Mapping)]
    features = [str(i.get("name")) for i in declared if i.get("type") == TEXT_FEATURE]
    if features and data.get("preprocess"):
        return _features_preprocessed(str(name), features)
    inputs = [i for i in declared if i.get("type") != TEXT_FEATURE]
    if len(data_inputs(data)) > 1 and all(i.get("type") in COLUMN_INPUTS for i in inputs):
        # Several columns, batched together: timed as they are scored.
        problem = columns_problem({**data, "task": "image_classification"})
        if problem:
            return problem
        if data.get("postprocess"):
            return (
                f"{name}'s custom postprocess code reads the outputs for scoring, which a "
                "latency-only evaluation does not do: leave it out to time the model"
            )
        return None
    clips = (
        len(inputs) == 1
        and inputs[0].get("type") == "audio"
        and "chunk" not in (inputs[0].get("parameters") or {})
    )
    batched = ("image", "tensor", "bytes", "text")
    if len(inputs) != 1 or not clips and inputs[0].get("type") not in batched:
        kinds = ", ".join(f"{i.get('name')} ({i.get('type')})" for i in inputs) or "none"
        return (
            f"{name} takes the inputs {kinds}; a latency-only evaluation feeds one image, "
            "tensor, bytes, text or whole-clip audio input in batches (streams, with their "
            "constant and state inputs, are timed by their sequence_labelling evaluation)"
        )
    if data.get("postprocess"):
        return (
            f"{name}'s custom postprocess code reads the outputs for scoring, which a "
            "latency-only evaluation does not do: leave it out to time the model"
        )
    return None


def data_input_name(data: Mapping[str, Any]) -> str:
    """The name of the input fed from the dataset (the first of type image or tensor)."""
    inputs = data.get("inputs") or []
    fed = [i for i in inputs if isinstance(i, Mapping) and i.get("type") in DATA_INPUTS]
    return str((fed or inputs)[0]["name"])


def decoded_outputs(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """What a detector's or segmenter's custom postprocess code returns, in the form its task's
    loop reads (the manifest's `postprocess_outputs`: boxes, scores and classes; or per-pixel
    logits or probabilities), where the model is one of those and has postprocess code; none
    otherwise (the loop reads the model's own outputs)."""
    declared = data.get("postprocess_outputs")
    code = data.get("postprocess")
    if (
        data.get("task") not in DECODED_TASKS
        or not isinstance(declared, list)
        or not (isinstance(code, str) and code.strip())
    ):
        return []
    return [entry for entry in declared if isinstance(entry, Mapping)]


def scored_output(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The output entry whose type and parameters (labels, a detector's box format) the loop
    reads: of what custom postprocess code returns where the manifest says
    (`decoded_outputs`), else of the model's outputs (`scored_output_name`)."""
    decoded = decoded_outputs(data)
    entries = decoded or [o for o in data.get("outputs") or [] if isinstance(o, Mapping)]
    name = scored_output_name({"outputs": entries})
    return next(entry for entry in entries if str(entry.get("name")) == name)


def scored_output_name(data: Mapping[str, Any]) -> str:
    """The name of the output that is scored (the first that is neither a state nor a tensor,
    which is not read; a detector's classes, which name the labels); of a model whose outputs
    are all tensors (timed only), the first that is not a state."""
    outputs = data.get("outputs") or []
    entries = [o for o in outputs if isinstance(o, Mapping)]
    scored = (
        [o for o in entries if o.get("type") == "classes"]
        or [o for o in entries if o.get("type") not in ("state", "tensor")]
        or [o for o in entries if o.get("type") != "state"]
    )
    return str((scored or outputs)[0]["name"])


def _image_task_problem(
    name: str, task: str, what: str, data: Mapping[str, Any], inputs: list[Mapping[str, Any]]
) -> str | None:
    """The rules the detection and segmentation loops share: one image input, whose `what`
    (boxes, masks) is mapped back to the whole image through a resize and padding, not through
    a crop; no custom preprocess code (it could move the pixels); custom postprocess code only
    with what it returns declared (`postprocess_outputs`), and no state."""
    if len(inputs) != 1 or inputs[0].get("type") != "image":
        return f"{name} is an {task} model; the loop feeds it one image input"
    parameters = inputs[0].get("parameters")
    if isinstance(parameters, Mapping) and (
        parameters.get("crop_method") != "none" or parameters.get("keep_aspect_ratio")
    ):
        return (
            f"{name} is an {task} model whose input is cropped (crop_method or "
            f"keep_aspect_ratio): its {what} could not be mapped back to the whole image; "
            "resize (resize_side or resize_size) and pad instead"
        )
    if data.get("preprocess"):
        return (
            f"{name} is an {task} model with custom preprocess code, which the loop of its "
            f"task does not run (its {what} are mapped back to the image through the input's "
            "parameters): describe the preprocessing with parameters"
        )
    code = data.get("postprocess")
    if isinstance(code, str) and code.strip() and not decoded_outputs(data):
        returns = (
            "boxes, scores and classes"
            if task == "object_detection"
            else "per-pixel logits or probabilities"
        )
        return (
            f"{name} is an {task} model with custom postprocess code: declare what the code "
            f"returns ({returns}) in postprocess_outputs"
        )
    states = [
        str(o.get("name"))
        for o in data.get("outputs") or []
        if isinstance(o, Mapping) and o.get("type") == "state"
    ]
    if states:
        return (
            f"{name} is an {task} model with state outputs ({', '.join(states)}); the loop "
            "feeds state to sequence_labelling models, which run on ordered streams"
        )
    return None


def _unsupported_detector(
    name: str, data: Mapping[str, Any], outputs: list[Mapping[str, Any]]
) -> str | None:
    """What the detection loop cannot run, past its input (`_image_task_problem`): it reads
    one output of each type boxes, scores and classes, by name (every framework's `run`), or
    one raw yolo output it decodes; or those three as custom postprocess code returns them
    (`outputs`: `decoded_outputs`)."""
    kinds = sorted(str(o.get("type")) for o in outputs)
    if decoded_outputs(data):
        if kinds != sorted(DETECTION_OUTPUTS):
            return (
                f"{name}'s postprocess_outputs are of types {', '.join(kinds)}; a detector's "
                "custom postprocess code returns one each of boxes, scores and classes"
            )
        return None
    if kinds != sorted(DETECTION_OUTPUTS) and kinds != ["yolo"]:
        return (
            f"{name} is an object_detection model with outputs of types {', '.join(kinds)}; "
            "the loop reads exactly one each of boxes, scores and classes, or one raw yolo "
            "output it decodes, or what custom postprocess code returns (postprocess_outputs)"
        )
    return None


def _unsupported_segmenter(
    name: str, data: Mapping[str, Any], outputs: list[Mapping[str, Any]]
) -> str | None:
    """What the segmentation loop cannot run, past its input (`_image_task_problem`): it reads
    one output of per-pixel logits or probabilities, with its layout: the model's, or what
    custom postprocess code returns (`outputs`: `decoded_outputs`)."""
    field = "postprocess_outputs" if decoded_outputs(data) else "outputs"
    if len(outputs) != 1 or outputs[0].get("type") not in ("logits", "probabilities"):
        kinds = ", ".join(str(o.get("type")) for o in outputs)
        return (
            f"{name} is a semantic_segmentation model with {field} of types {kinds}; the loop "
            "reads one output of per-pixel logits or probabilities"
            + (
                ", or what custom postprocess code returns (postprocess_outputs)"
                if field == "outputs"
                else ""
            )
        )
    parameters = outputs[0].get("parameters")
    if not isinstance(parameters, Mapping) or parameters.get("layout") not in ("NCHW", "NHWC"):
        return (
            f"{name}'s {field[:-1]} {outputs[0].get('name')} needs parameters.layout (NCHW or "
            "NHWC): where a semantic_segmentation model's per-pixel class axis is"
        )
    return None
