"""How a manifest reads on a page: processing parameters in words, files with their checksums.

The templates only lay out what these functions return; the wording of every parameter lives
here, once, next to the manifest key it explains.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from hub.models import Artifact, Manifest
from predictors import processing
from predictors.manifests import rules
from predictors.tasks import metric_names

REPO = "repo://"

# What each processing parameter of an input is: key → (label, what it means) (docs/manifest.md).
PARAMETERS: dict[str, tuple[str, str]] = {
    "decoder": ("Decoder", "library that decodes the encoded image"),
    "jpeg_dct_method": ("JPEG inverse DCT", "libjpeg's inverse DCT; ignored for PNG"),
    "color_mode": ("Color mode", "channel order fed to the model"),
    "resize_method": ("Resize method", "interpolation of the resize"),
    "resize_size": ("Resize to", "height × width after resizing"),
    "keep_aspect_ratio": ("Keep aspect ratio", "scale both axes alike, then cut the center"),
    "crop_method": ("Crop", "window cut after resizing"),
    "crop_size": ("Crop size", "height × width of the crop"),
    "element_type": ("Element type", "type of the tensor's elements"),
    "normalization_order": ("Normalization order", "when bytes become numbers"),
    "scale": ("Scale", "a byte is divided by this"),
    "mean": ("Mean", "subtracted, per channel"),
    "std": ("Standard deviation", "divided by, per channel"),
    "layout": ("Layout", "order of the tensor's axes"),
    "shape": ("Shape", "dimensions of one example (? = dynamic)"),
    "value": ("Value", "the same in every call, not batched"),
    "batch_axis": ("Batch axis", "where the streams' rows are stacked (0 first)"),
    "initial": ("Initial value", "every element's value at the start of a stream"),
    "from_output": ("From output", "the output whose value the next call of the stream takes"),
    "tokenizer_path": ("Tokenizer", "tokenizers JSON file that turns the text into ids"),
    "tokenizer_sha256": ("Tokenizer SHA-256", "checksum of the tokenizer file"),
    "max_length": ("Length", "ids per text: longer ones truncated, shorter ones padded"),
    "pad_id": ("Padding id", "the id padding takes (default: the tokenizer's own)"),
    "add_special_tokens": ("Special tokens", "the tokenizer's [CLS], [SEP], … added"),
    "feature": ("Feature of the text", "what the tokenizer gives beside the ids, row for row"),
}

# The parameters of an image input and of a tensor input, in the order the pipeline applies them
# (PARAMETERS' order).
IMAGE_PARAMETERS = tuple(key for key in PARAMETERS if key in processing.IMAGE_PARAMETERS)
TENSOR_PARAMETERS = ("element_type", "shape", "value", "batch_axis", "initial", "from_output")
# A text input's, in the order its tokenizer applies them (`predictors.processing.text`).
TEXT_PARAMETERS = (
    "tokenizer_path",
    "tokenizer_sha256",
    "add_special_tokens",
    "max_length",
    "pad_id",
    "element_type",
)
# A text_feature input's (`predictors.processing.text.TextFeeds`).
TEXT_FEATURE_PARAMETERS = ("feature", "element_type")

_WORDS = {
    "pillow": "Pillow",
    "opencv": "OpenCV",
    "islow": "islow (accurate integer)",
    "ifast": "ifast (fast integer)",
    "float": "float",
    "convert_then_normalize": "convert, then normalize (in float space)",
    "normalize_then_convert": "normalize, then convert (in byte space, wraps around)",
    "none": "none",
    "center": "center",
    "attention_mask": "attention mask (1 for a token, 0 for padding)",
    "type_ids": "type ids (each token's segment)",
    "special_tokens_mask": "special-tokens mask (1 for a special token or padding)",
}

_CHANNELS = {"RGB": ["R", "G", "B"], "BGR": ["B", "G", "R"], "GRAY": ["Y"]}

FRAMEWORK_NAMES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "onnxruntime": "ONNX Runtime"}
TASK_NAMES = {
    "image_classification": "Image classification",
    "multi_label_classification": "Multi-label classification",
    "regression": "Regression",
    "text_recognition": "Text recognition",
    "feature_extraction": "Feature extraction",
    "sequence_labelling": "Sequence labelling",
    "object_detection": "Object detection",
    "semantic_segmentation": "Semantic segmentation",
    "instance_segmentation": "Instance segmentation",
}


def framework_name(name: str) -> str:
    return FRAMEWORK_NAMES.get(name, name)


def accuracy_headings(task: str) -> tuple[str, str]:
    """The headings of a result's `top1` and `top5` for a task: top-1 and top-5 accuracy for
    classification, frame accuracy for sequence labelling, COCO's mAP (IoU .50:.95) and mAP at
    IoU .50 for detection, mean IoU and pixel accuracy for segmentation, mAP and micro F1 for
    multi-label classification, the mean absolute and root mean squared errors for regression,
    the character and word error rates for text recognition."""
    return metric_names(task)


def task_name(task: str) -> str:
    return TASK_NAMES.get(task, task.replace("_", " ").capitalize())


def _size(value: Any) -> str:
    if value is None:
        return "—"
    return " × ".join("?" if v is None else str(v) for v in value)


def _per_channel(values: Any, color_mode: Any) -> str:
    if not isinstance(values, list):
        return str(values)
    names = _CHANNELS.get(str(color_mode), [])
    if len(names) != len(values):
        return ", ".join(str(v) for v in values)
    return " · ".join(f"{n} {v}" for n, v in zip(names, values, strict=True))


def _value(key: str, value: Any, parameters: dict[str, Any]) -> str:
    if key == "resize_size":
        return "no resize" if value is None else _size(value)
    if key in ("crop_size", "shape"):
        return _size(value)
    if key == "value":
        return json.dumps(value)
    if key in ("mean", "std"):
        return _per_channel(value, parameters.get("color_mode"))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "—"
    return _WORDS.get(str(value), str(value))


@dataclass
class ParameterRow:
    key: str
    label: str
    value: str
    note: str


def parameter_rows(entry: dict[str, Any]) -> list[ParameterRow]:
    """The processing parameters of one input, in pipeline order, in words."""
    parameters = entry.get("parameters") or {}
    known = {
        "image": IMAGE_PARAMETERS,
        "text": TEXT_PARAMETERS,
        "text_feature": TEXT_FEATURE_PARAMETERS,
    }.get(str(entry.get("type")), TENSOR_PARAMETERS)
    rows = []
    for key in known:
        if key in parameters:
            label, note = PARAMETERS[key]
            rows.append(ParameterRow(key, label, _value(key, parameters[key], parameters), note))
    rows += [
        ParameterRow(key, key, _value(key, value, parameters), "")
        for key, value in parameters.items()
        if key not in known
    ]
    return rows


@dataclass
class FileRow:
    field: str
    path: str
    sha256: str | None
    size: int | None
    url: str | None


def _file_fields(content: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, path, declared sha256) of every file a manifest names (`rules.file_refs`)."""
    kind = "dataset" if content.get("kind") == "dataset" else "model"
    return [
        (".".join(map(str, path)), uri, sha)
        for path, uri, _, sha in rules.file_refs(content, kind)
        if uri
    ]


def file_rows(manifest: Manifest) -> list[FileRow]:
    """Every file the manifest names, with the sha256 the hub recorded (or the one declared)."""
    stored = {a.path: a for a in manifest.artifacts.all()}
    rows = []
    for field, path, declared in _file_fields(manifest.content):
        artifact: Artifact | None = None
        if isinstance(path, str) and path.startswith(REPO):
            artifact = stored.get(path[len(REPO) :])
        rows.append(
            FileRow(
                field=field,
                path=str(path),
                sha256=artifact.sha256 if artifact else declared,
                size=artifact.size if artifact else None,
                url=reverse("api-artifact", kwargs={"path": artifact.path}) if artifact else None,
            )
        )
    return rows


def _attribute(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_attribute(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "—" if value is None else str(value)


def attribute_rows(content: dict[str, Any]) -> list[tuple[str, str]]:
    """The free-form attributes other than the ones the pages show on their own, in words."""
    shown = {"training_dataset", "reported_accuracy", "paper", "trained"}
    attributes = content.get("attributes") or {}
    return [(k, _attribute(v)) for k, v in attributes.items() if k not in shown]


def accuracy_rows(content: dict[str, Any]) -> list[tuple[str, str]]:
    """Reported accuracy as percentages: top1 0.761 → ("top-1", "76.1 %")."""
    reported = (content.get("attributes") or {}).get("reported_accuracy") or {}
    rows = []
    for key, value in reported.items():
        label = f"top-{key[3:]}" if key.startswith("top") and key[3:].isdigit() else key
        shown = f"{value * 100:.1f} %" if isinstance(value, int | float) and value <= 1 else value
        rows.append((label, str(shown)))
    return rows
