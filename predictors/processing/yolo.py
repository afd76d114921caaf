"""A YOLO-style detector's raw output decoded into its detections (an output of type `yolo`).

Anchor-free YOLO heads (YOLOv8 and later as exported to ONNX, and YOLOv5-style heads with an
objectness score) give one tensor per batch: for every candidate (anchor point) its box and
its classes' scores, `(N, 4 + C, A)` (`layout: channels_first`, as YOLOv8 exports) or
`(N, A, 4 + C)` (`anchors_first`), with one objectness score after the box where
`objectness: true` (4 + 1 + C). Decoding, per image:

- each candidate's score is its best class's score (times its objectness), its class that
  class; `scores: logits` puts each through a sigmoid first;
- candidates under `score_threshold`, and boxes of no width or height, are dropped (of the
  rest, the `MAX_CANDIDATES` best go on);
- non-maximum suppression by OpenCV (`cv2.dnn.NMSBoxesBatched`, class by class; or
  `cv2.dnn.NMSBoxes` over all classes with `class_agnostic: true`) at `iou_threshold`;
- the `max_detections` best are kept, best first.

Boxes are `box_format` (`cxcywh` or `xyxy`) in `units` (`pixels` or `normalized`) of the
model's input; the detection scenario maps them back to each image and clips them to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError

__all__ = ["YOLO_KEYS", "YoloDecoder"]

# The most values a batch's raw output may hold, and the best candidates of an image that go
# into the suppression (as Ultralytics keeps 30,000).
MAX_VALUES = 64 * 1024 * 1024
MAX_CANDIDATES = 30_000

YOLO_KEYS = (
    "layout",
    "box_format",
    "units",
    "objectness",
    "scores",
    "score_threshold",
    "iou_threshold",
    "max_detections",
    "class_agnostic",
)


@dataclass(frozen=True)
class YoloDecoder:
    """The decoding of the module docstring, with a `yolo` output's parameters."""

    layout: str
    box_format: str
    units: str
    objectness: bool
    logits: bool
    score_threshold: float
    iou_threshold: float
    max_detections: int
    class_agnostic: bool

    @classmethod
    def of(cls, parameters: Mapping[str, Any]) -> YoloDecoder:
        """The decoder of an output's parameters (the schema checked their types)."""
        return cls(
            layout=str(parameters["layout"]),
            box_format=str(parameters["box_format"]),
            units=str(parameters["units"]),
            objectness=bool(parameters.get("objectness", False)),
            logits=parameters.get("scores", "probabilities") == "logits",
            score_threshold=float(parameters["score_threshold"]),
            iou_threshold=float(parameters["iou_threshold"]),
            max_detections=int(parameters.get("max_detections", 300)),
            class_agnostic=bool(parameters.get("class_agnostic", False)),
        )

    def candidates(self, raw: Any, classes: int) -> np.ndarray:
        """(N, A, 4 + [1] + C) of a raw output, checked against the number of classes."""
        values = np.asarray(raw)
        if values.size > MAX_VALUES:
            raise ProcessingError(
                f"a yolo output of shape {values.shape} holds more than {MAX_VALUES:,} values",
                parameter="layout",
            )
        values = values.astype(np.float32, copy=False)
        if values.ndim != 3:
            raise ProcessingError(
                f"a yolo output is (N, 4 + C, A) or (N, A, 4 + C); the model gives shape "
                f"{values.shape}",
                parameter="layout",
            )
        if self.layout == "channels_first":
            values = np.swapaxes(values, 1, 2)
        width = 4 + int(self.objectness) + classes
        if values.shape[2] != width:
            raise ProcessingError(
                f"a yolo output of {classes} classes has {width} values a candidate (4 for "
                f"its box{', 1 objectness' if self.objectness else ''} and one a class) on its "
                f"{'second' if self.layout == 'channels_first' else 'last'} axis; the model "
                f"gives {values.shape[2]}: check the output's layout, objectness and labels",
                parameter="layout",
            )
        return values

    def decode(self, raw: Any, classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each image's detections, best first, padded to the batch's most: boxes (N, K, 4)
        as `box_format` in `units`, scores (N, K) (padding: -1) and classes (N, K)."""
        import cv2

        values = self.candidates(raw, classes)
        kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for image in values:
            boxes = image[:, :4].astype(np.float64)
            class_scores = image[:, 4 + int(self.objectness) :].astype(np.float64)
            if self.logits:
                class_scores = 1.0 / (1.0 + np.exp(-class_scores))
            kinds = class_scores.argmax(axis=1)
            scores = class_scores[np.arange(len(kinds)), kinds]
            if self.objectness:
                objectness = image[:, 4].astype(np.float64)
                if self.logits:
                    objectness = 1.0 / (1.0 + np.exp(-objectness))
                scores = scores * objectness
            # A box of no width or height (or inverted) is no detection.
            sized = (
                (boxes[:, 2] > 0) & (boxes[:, 3] > 0)
                if self.box_format == "cxcywh"
                else (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
            )
            keep = np.flatnonzero(
                (scores >= self.score_threshold) & np.isfinite(boxes).all(1) & sized
            )
            if len(keep) > MAX_CANDIDATES:  # the best only go into the suppression
                best = np.argpartition(-scores[keep], MAX_CANDIDATES - 1)[:MAX_CANDIDATES]
                keep = keep[best]
            boxes, scores, kinds = boxes[keep], scores[keep], kinds[keep]
            xywh = (
                np.stack(
                    [
                        boxes[:, 0] - boxes[:, 2] / 2,
                        boxes[:, 1] - boxes[:, 3] / 2,
                        boxes[:, 2],
                        boxes[:, 3],
                    ],
                    1,
                )
                if self.box_format == "cxcywh"
                else np.stack(
                    [
                        boxes[:, 0],
                        boxes[:, 1],
                        boxes[:, 2] - boxes[:, 0],
                        boxes[:, 3] - boxes[:, 1],
                    ],
                    1,
                )
            )
            if len(keep):
                # Filtered above already: OpenCV keeps scores strictly above its threshold.
                arguments = (
                    xywh.tolist(),
                    scores.tolist(),
                    float(np.nextafter(np.float32(self.score_threshold), np.float32(-1.0))),
                    self.iou_threshold,
                )
                chosen = (
                    cv2.dnn.NMSBoxes(*arguments)
                    if self.class_agnostic
                    else cv2.dnn.NMSBoxesBatched(
                        arguments[0], arguments[1], kinds.tolist(), *arguments[2:]
                    )
                )
                order = np.asarray(chosen, dtype=np.int64).reshape(-1)
                order = order[np.argsort(-scores[order], kind="stable")][: self.max_detections]
            else:
                order = np.zeros(0, np.int64)
            corners = np.column_stack([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]])[order]
            kept.append((corners, scores[order], kinds[order]))
        most = max([len(scores) for _, scores, _ in kept] + [1])
        boxes_out = np.zeros((len(kept), most, 4), np.float64)
        scores_out = np.full((len(kept), most), -1.0)
        classes_out = np.zeros((len(kept), most), np.float64)
        for index, (corners, scores, kinds) in enumerate(kept):
            boxes_out[index, : len(scores)] = corners
            scores_out[index, : len(scores)] = scores
            classes_out[index, : len(scores)] = kinds
        return boxes_out, scores_out, classes_out
