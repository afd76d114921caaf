"""Object detection: the scenario of `object_detection` models, scored with COCO's mAP as
pycocotools computes it.

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans),
with each call feeding the image input and reading the three outputs the manifest declares:
`boxes` (N, K, 4), `scores` (N, K) and `classes` (N, K), the model's K detections per image;
or its one raw output of type `yolo`, decoded here (score threshold, non-maximum suppression,
`predictors.processing.yolo`); or every output it has, handed to the manifest's custom
postprocess code, which returns the three as `postprocess_outputs` declares them (a list per
image where images have different numbers of detections). Decoded boxes (yolo, code) are
clipped to each image once mapped back to it.
A detector of dynamic input size (no `resize_size`, or `resize_side` and `pad` to multiples) is
timed at each image's own size; the result says which sizes ran (`input_sizes`).

Each image's detections scoring at least `min_score` are mapped back to the image's own pixels
(through the resize and the padding, `ImagePreprocessor.to_image`), as COCO's [x, y, width,
height], and evaluated with the dataset's boxes by pycocotools' `COCOeval` (iouType `bbox`,
its 100 detections per image): `map` is AP at IoU .50:.05:.95 (COCO's primary metric), with
`map_50`, `map_75`, by object size (`map_small`, `map_medium`, `map_large`, -1 where the split
has no such object, as pycocotools says) and the recall `mar_100`. `top1` is `map` and `top5`
is `map_50` (the result's two accuracy columns, labelled by task where they are shown).
"""

from __future__ import annotations

import contextlib
import io
import math
from typing import Any

import numpy as np

from predictors.data import DetectionReader
from predictors.evaluation.base import FirstPass, Staged
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import PerImage
from predictors.manifests import Manifest
from predictors.processing import ProcessingError
from predictors.processing.custom_code import custom_returns
from predictors.processing.yolo import YoloDecoder
from predictors.tasks import data_input_name, decoded_outputs, scored_output_name

# COCOeval's `stats`, by name.
_STATS = (
    "map",
    "map_50",
    "map_75",
    "map_small",
    "map_medium",
    "map_large",
    "mar_1",
    "mar_10",
    "mar_100",
    "mar_small",
    "mar_medium",
    "mar_large",
)


def output_names(model: Manifest) -> dict[str, dict[str, Any]]:
    """The detector's outputs the loop reads, by type: {"boxes": entry, "scores": entry,
    "classes": entry} (the model's, or what its custom postprocess code returns,
    `decoded_outputs`), or {"yolo": entry}."""
    entries = decoded_outputs(model.data) or model.data["outputs"]
    return {str(entry["type"]): dict(entry) for entry in entries}


def to_xywh(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """(K, 4) boxes in `box_format` as COCO's [x, y, width, height]."""
    boxes = boxes.astype(np.float64)
    if box_format == "xyxy":
        return np.stack(
            [boxes[:, 0], boxes[:, 1], boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], 1
        )
    if box_format == "cxcywh":
        return np.stack(
            [
                boxes[:, 0] - boxes[:, 2] / 2,
                boxes[:, 1] - boxes[:, 3] / 2,
                boxes[:, 2],
                boxes[:, 3],
            ],
            1,
        )
    return boxes


def coco_metrics(
    annotations: list[dict[str, np.ndarray]],
    sizes: list[tuple[int, int]],
    detections: list[np.ndarray],
    classes: int,
) -> dict[str, Any]:
    """COCO's bbox metrics by pycocotools: `annotations` per image ({"boxes" (n, 4) xywh,
    "classes" (n,)}), each image's (height, width), and its detections (m, 6): x, y, w, h,
    score, class."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    truth: dict[str, Any] = {
        "images": [{"id": i, "height": h, "width": w} for i, (h, w) in enumerate(sizes)],
        "annotations": [],
        "categories": [{"id": c} for c in range(classes)],
    }
    for image, annotation in enumerate(annotations):
        for box, kind in zip(annotation["boxes"], annotation["classes"], strict=True):
            truth["annotations"].append(
                {
                    "id": len(truth["annotations"]) + 1,
                    "image_id": image,
                    "bbox": [float(v) for v in box],
                    "area": float(box[2] * box[3]),
                    "category_id": int(kind),
                    "iscrowd": 0,
                }
            )
    found = [
        {
            "image_id": image,
            "bbox": [float(v) for v in row[:4]],
            "score": float(row[4]),
            "category_id": int(row[5]),
        }
        for image, rows in enumerate(detections)
        for row in rows
    ]
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints as it goes
        ground = COCO()
        ground.dataset = truth
        ground.createIndex()
        if not found:
            stats = np.zeros(len(_STATS))
        else:
            evaluation = COCOeval(ground, ground.loadRes(found), "bbox")
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
            stats = evaluation.stats
    metrics: dict[str, Any] = {
        name: float(value) for name, value in zip(_STATS, stats, strict=True)
    }
    return {
        # pycocotools gives -1 where nothing is to be found (a split without objects): no
        # accuracy to speak of, 0 in the result's columns (the metrics keep the -1).
        "top1": max(metrics["map"], 0.0),
        "top5": max(metrics["map_50"], 0.0),
        "count": len(annotations),
        **metrics,
        "objects": len(truth["annotations"]),
        "detections": len(found),
        "library": "pycocotools COCOeval (bbox)",
    }


@register("detection", tasks=("object_detection",))
class Detections(PerImage):
    """The detection scenario; see the module docstring."""

    reader_type = DetectionReader

    def configure(self) -> None:
        super().configure()
        outputs = output_names(self.model)
        # A YOLO-style raw output, decoded here (`predictors.processing.yolo`), its boxes
        # clipped to each image; or the model's own three outputs.
        self.decoder: YoloDecoder | None = None
        # Custom postprocess code, which takes the model's outputs (by name where it has
        # several) and returns boxes, scores and classes (`decoded_outputs`): their names.
        self.returns: list[str] = []
        code = self.custom_postprocess
        if code is not None:
            self.returns = [str(outputs[kind]["name"]) for kind in ("boxes", "scores", "classes")]
            self.names = list(code.outputs) or [scored_output_name(self.model.data)]
        elif "yolo" in outputs:
            parameters = outputs["yolo"]["parameters"]
            self.decoder = YoloDecoder.of(parameters)
            self.names = [str(outputs["yolo"]["name"])]
            self.box_format, self.box_units = "xyxy", self.decoder.units
            self.min_score = self.decoder.score_threshold
        else:
            self.names = [str(outputs[kind]["name"]) for kind in ("boxes", "scores", "classes")]
        if self.decoder is None:
            boxes = outputs["boxes"]["parameters"]
            self.box_format, self.box_units = str(boxes["format"]), str(boxes["units"])
            self.min_score = float(outputs["scores"]["parameters"]["min_score"])
        feed, names, run = data_input_name(self.model.data), self.names, self.predictor.run
        self.call = lambda batch: run({feed: batch}, names)
        self.detections: list[np.ndarray] = []

    def output_type(self) -> str:
        return "detections"

    def _check_classes(self, kinds: np.ndarray) -> None:
        count = len(self.labels)
        wrong = ~np.isfinite(kinds) | (kinds < 0) | (kinds >= count) | (kinds != np.round(kinds))
        if kinds.size and wrong.any():
            raise EvaluationError(
                f"{self.model.name} gave class {kinds[wrong][0]!r} for a detection scoring at "
                f"least min_score {self.min_score}; its classes index {count} labels (0 to "
                f"{count - 1}): raise min_score above the score of its padding detections"
            )

    def start_collecting(self) -> None:
        self._annotations: list[dict[str, np.ndarray]] = []
        self._sizes: list[tuple[int, int]] = []
        self._found: list[np.ndarray] = []
        self._shapes: set[tuple[int, ...]] = set()

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        for batch, truth, images, outputs in zip(
            stage.batches, stage.labels, stage.images, stage_outputs, strict=True
        ):
            self._shapes.add(tuple(batch.shape[1:]))
            found_by_image = self._detections(outputs, len(images))
            nchw = self.preprocessor.layout == "NCHW"
            height, width = batch.shape[2:4] if nchw else batch.shape[1:3]
            for encoded, (boxes, scores, classes) in zip(images, found_by_image, strict=True):
                try:
                    scale_x, scale_y, left, top = self.preprocessor.to_image(encoded)
                except ProcessingError as error:
                    raise EvaluationError(str(error)) from error
                # Non-finite detections (a model's NaN) are no detections; a kept detection's
                # class must name a label.
                finite = np.isfinite(scores) & np.isfinite(boxes).all(axis=1)
                keep = finite & (scores >= self.min_score)
                self._check_classes(classes[keep])
                xywh = to_xywh(boxes[keep], self.box_format)
                if self.box_units == "normalized":
                    xywh = xywh * [width, height, width, height]
                xywh[:, 0] = (xywh[:, 0] - left) * scale_x
                xywh[:, 1] = (xywh[:, 1] - top) * scale_y
                xywh[:, 2] *= scale_x
                xywh[:, 3] *= scale_y
                size = _image_size(encoded)
                found = np.column_stack([xywh, scores[keep], classes[keep].astype(np.float64)])
                if self.decoder is not None or self.returns:
                    # Clipped to the image; a box wholly outside it (in a padding) is none.
                    found[:, :4] = _clipped(xywh, size)
                    found = found[(found[:, 2] > 0) & (found[:, 3] > 0)]
                self._found.append(found[np.argsort(-found[:, 4], kind="stable")])
                self._sizes.append(size)
            self._annotations.extend(truth)

    def _detections(
        self, outputs: Any, images: int
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """A batch's detections, image by image: boxes (K, 4), scores (K,) and classes (K,),
        K of each image's own where custom postprocess code returns them so."""
        if self.returns:
            code = self.custom_postprocess
            assert code is not None
            given = outputs if code.outputs else outputs[0]
            returned = custom_returns(code, given, images, self.returns)
            found = []
            for index in range(images):
                boxes, scores, classes = (returned[name][index] for name in self.returns)
                if boxes.size == 0:
                    boxes = boxes.reshape(0, 4)
                if boxes.ndim != 2 or boxes.shape[1] != 4 or scores.shape != boxes.shape[:1]:
                    shapes = f"boxes {boxes.shape}, scores {scores.shape}"
                    raise EvaluationError(
                        f"{self.model.name}'s custom postprocess code returned, for input "
                        f"{index} of a batch, {shapes}, classes {classes.shape}; expected "
                        "(K, 4), (K,), (K,) for K detections"
                    )
                if classes.shape != scores.shape:
                    raise EvaluationError(
                        f"{self.model.name}'s custom postprocess code returned, for input "
                        f"{index} of a batch, {len(scores)} scores and classes of shape "
                        f"{classes.shape}; expected one class per detection"
                    )
                found.append((boxes, scores, classes))
            return found
        if self.decoder is not None:
            try:
                boxes, scores, classes = self.decoder.decode(outputs[0], len(self.labels))
            except ProcessingError as error:
                raise EvaluationError(f"{self.what}'s yolo output: {error}") from error
        else:
            boxes, scores, classes = (np.asarray(o) for o in outputs)
        if (
            boxes.ndim != 3
            or boxes.shape[-1] != 4
            or scores.shape != boxes.shape[:2]
            or classes.shape != boxes.shape[:2]
            or len(boxes) != images
        ):
            raise EvaluationError(
                f"{self.model.name}'s detections have shapes boxes {boxes.shape}, scores "
                f"{scores.shape}, classes {classes.shape}; expected (N, K, 4), (N, K), (N, K)"
            )
        return [(boxes[i], scores[i], classes[i]) for i in range(images)]

    def score(self) -> tuple[dict[str, Any], int]:
        accuracy = coco_metrics(self._annotations, self._sizes, self._found, len(self.labels))
        if self.first is None:
            predictions = [
                [(int(row[5]), self.labels[int(row[5])], float(row[4])) for row in found]
                for found in self._found
            ]
            # Compared input by input (`summaries.compare`): each image's best detection.
            best = np.zeros((len(self._found), 6), np.float32)
            for index, found in enumerate(self._found):
                if len(found):
                    best[index] = found[0]
            self.first = FirstPass.unlabelled(best, predictions)
            self.detections = self._found
        return accuracy, len(self._annotations)

    def extras(self) -> dict[str, Any]:
        """The input sizes the batches ran at (a dynamic-size detector runs each at its own)."""
        shapes = sorted(self._shapes)
        return {
            "input_sizes": {
                "distinct": len(shapes),
                "smallest": list(min(shapes, key=math.prod)),
                "largest": list(max(shapes, key=math.prod)),
            }
        }


def _clipped(xywh: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[x, y, width, height] boxes clipped to an image of `size` (height, width)."""
    height, width = size
    x1 = np.clip(xywh[:, 0], 0, width)
    y1 = np.clip(xywh[:, 1], 0, height)
    x2 = np.clip(xywh[:, 0] + xywh[:, 2], 0, width)
    y2 = np.clip(xywh[:, 1] + xywh[:, 3], 0, height)
    return np.column_stack([x1, y1, x2 - x1, y2 - y1])


def _image_size(encoded: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(encoded)) as image:
        width, height = image.size
    return height, width
