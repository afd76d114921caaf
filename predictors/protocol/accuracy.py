"""A result's accuracy, typed per task: `Accuracy` (the two headline metrics and the inputs
scored, a classification's whole accuracy) and a record per task that adds its own metrics
(`SequenceAccuracy`, `DetectionAccuracy`, `SegmentationAccuracy`, `MultiLabelAccuracy`,
`RegressionAccuracy`, `TextAccuracy`, `EmbeddingAccuracy`). The JSON is flat, the task's metrics beside the headline ones; a
`TaskAccuracy` is read as the first of its records whose fields hold every key given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from predictors.protocol.records import ABSENT, Maybe, Record

__all__ = [
    "Accuracy",
    "DetectionAccuracy",
    "EmbeddingAccuracy",
    "MultiLabelAccuracy",
    "RegressionAccuracy",
    "SegmentationAccuracy",
    "SequenceAccuracy",
    "TaskAccuracy",
    "TextAccuracy",
    "ValueErrors",
]


@dataclass(frozen=True)
class Accuracy(Record):
    """The accuracy every scored task gives: its two headline metrics (`top1`, `top5`: what
    they hold is the task's, `predictors.tasks.metric_names`) and the inputs scored; a
    classification's whole accuracy."""

    top1: Maybe[float | None] = ABSENT
    top5: Maybe[float | None] = ABSENT
    count: Maybe[int] = ABSENT


@dataclass(frozen=True)
class SequenceAccuracy(Accuracy):
    """A sequence labelling's or a binary classifier's (`summaries.sequence_metrics`)."""

    accuracy: Maybe[float] = ABSENT
    precision: Maybe[float] = ABSENT
    recall: Maybe[float] = ABSENT
    f1: Maybe[float] = ABSENT
    roc_auc: Maybe[float | None] = ABSENT
    average: Maybe[str] = ABSENT


@dataclass(frozen=True)
class DetectionAccuracy(Accuracy):
    """An object detector's: COCO's twelve numbers (pycocotools, bbox), the objects to find
    and the detections made."""

    map: Maybe[float] = ABSENT
    map_50: Maybe[float] = ABSENT
    map_75: Maybe[float] = ABSENT
    map_small: Maybe[float] = ABSENT
    map_medium: Maybe[float] = ABSENT
    map_large: Maybe[float] = ABSENT
    mar_1: Maybe[float] = ABSENT
    mar_10: Maybe[float] = ABSENT
    mar_100: Maybe[float] = ABSENT
    mar_small: Maybe[float] = ABSENT
    mar_medium: Maybe[float] = ABSENT
    mar_large: Maybe[float] = ABSENT
    objects: Maybe[int] = ABSENT
    detections: Maybe[int] = ABSENT
    library: Maybe[str] = ABSENT


@dataclass(frozen=True)
class SegmentationAccuracy(Accuracy):
    """A semantic segmentation's: mIoU, pixel accuracy, each label's IoU (None where the label
    was never seen)."""

    miou: Maybe[float] = ABSENT
    pixel_accuracy: Maybe[float] = ABSENT
    mean_class_accuracy: Maybe[float] = ABSENT
    iou: Maybe[dict[str, float | None]] = ABSENT
    pixels: Maybe[int] = ABSENT
    library: Maybe[str] = ABSENT


@dataclass(frozen=True)
class MultiLabelAccuracy(Accuracy):
    """A multi-label classification's: mAP, F1, exact match, each label's average precision."""

    map: Maybe[float] = ABSENT
    map_micro: Maybe[float] = ABSENT
    f1_micro: Maybe[float] = ABSENT
    f1_macro: Maybe[float] = ABSENT
    precision_micro: Maybe[float] = ABSENT
    recall_micro: Maybe[float] = ABSENT
    exact_match: Maybe[float] = ABSENT
    hamming_loss: Maybe[float] = ABSENT
    threshold: Maybe[float] = ABSENT
    classes_scored: Maybe[int] = ABSENT
    average_precision: Maybe[dict[str, float | None]] = ABSENT
    labels_per_input: Maybe[float] = ABSENT
    library: Maybe[str] = ABSENT


@dataclass(frozen=True)
class ValueErrors(Record):
    """A regression's errors on one of its values."""

    mae: Maybe[float] = ABSENT
    rmse: Maybe[float] = ABSENT
    r2: Maybe[float | None] = ABSENT
    max_error: Maybe[float] = ABSENT


@dataclass(frozen=True)
class RegressionAccuracy(Accuracy):
    """A regression's: its errors over every value, and each value's own (`per_value`)."""

    mae: Maybe[float] = ABSENT
    rmse: Maybe[float] = ABSENT
    r2: Maybe[float | None] = ABSENT
    max_error: Maybe[float] = ABSENT
    per_value: Maybe[dict[str, ValueErrors]] = ABSENT
    target_mean: Maybe[float] = ABSENT
    target_std: Maybe[float] = ABSENT
    library: Maybe[str] = ABSENT


@dataclass(frozen=True)
class TextAccuracy(Accuracy):
    """A text recognition's: the character and word error rates over the split (jiwer's, of
    every line's true text against its decoded text), the share of lines decoded exactly, and
    how the model's output was decoded (greedy, or beam with its width)."""

    cer: Maybe[float] = ABSENT
    wer: Maybe[float] = ABSENT
    exact_match: Maybe[float] = ABSENT
    decoding: Maybe[str] = ABSENT
    beam_width: Maybe[int] = ABSENT
    library: Maybe[str] = ABSENT


@dataclass(frozen=True)
class EmbeddingAccuracy(Accuracy):
    """A feature extractor's, of its embeddings' cosine similarities: retrieval (the share of
    inputs whose nearest 1 or 5 others hold one of the same identity, of the inputs that have
    another), verification (the equal error rate over every pair of inputs, and the similarity
    at which it is reached), and what was compared."""

    recall_at_1: Maybe[float] = ABSENT
    recall_at_5: Maybe[float] = ABSENT
    eer: Maybe[float | None] = ABSENT
    eer_threshold: Maybe[float | None] = ABSENT
    queries: Maybe[int] = ABSENT
    identities: Maybe[int] = ABSENT
    pairs: Maybe[int] = ABSENT
    similarity: Maybe[str] = ABSENT
    library: Maybe[str] = ABSENT


# The accuracy of each kind of task, read as the first whose fields hold every key given.
TaskAccuracy: TypeAlias = (
    Accuracy
    | SequenceAccuracy
    | DetectionAccuracy
    | SegmentationAccuracy
    | MultiLabelAccuracy
    | RegressionAccuracy
    | TextAccuracy
    | EmbeddingAccuracy
)
