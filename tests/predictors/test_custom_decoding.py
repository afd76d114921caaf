"""Detectors and segmenters decoded by custom postprocess code (`postprocess_outputs`): real
ONNX models built here whose raw output is the image itself, decoded by code into boxes, or
into per-pixel scores, whose right answer is known by construction; run through the
evaluation loop in this process as a predictor container runs it (`custom_code=True`). And the
rules: what the manifest must declare, and what the code must return."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from onnx import TensorProto, helper
from PIL import Image

from predictors import manifests
from predictors.evaluation import EvaluationError
from predictors.manifests import Manifest
from predictors.manifests.errors import ManifestError
from predictors.processing.custom_code import CustomCodeError
from predictors.tasks import scored_output, unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.test_custom_outputs import IMAGE as GRAY_IMAGE

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

# Images of HEIGHT x WIDTH, black, with bright rectangles (the objects); run at twice the size.
HEIGHT, WIDTH = 30, 40
RECTANGLES = [
    [(2, 3, 10, 6)],  # (x, y, width, height) of each rectangle, per image
    [(1, 1, 5, 5), (20, 10, 15, 12)],
    [],
    [(30, 20, 9, 9), (5, 15, 12, 4), (18, 2, 3, 20)],
    [(0, 0, 40, 30)],
]
NAMESPACE = "models/identity/1.0.0"

# The gray-image input of test_custom_outputs, resized to twice the size, pixels as they are.
IMAGE = {**GRAY_IMAGE, "resize_size": [2 * HEIGHT, 2 * WIDTH], "mean": [0.0], "std": [1.0]}

# Each bright rectangle's box, in the model input's pixels: found by OpenCV, a list per image
# (as many boxes as the image holds), scored 1 - 1 / (1 + area) so that larger come first.
BOXES = """
import cv2
import numpy as np

def page(pixels):
    contours, _ = cv2.findContours(
        (pixels > 0.5).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE
    )
    boxes = [cv2.boundingRect(contour) for contour in contours]
    xyxy = np.array([[x, y, x + w, y + h] for x, y, w, h in boxes], np.float32).reshape(-1, 4)
    areas = (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])
    return xyxy, 1 - 1 / (1 + areas)

def postprocess(outputs):
    found = [page(image[0]) for image in outputs]
    return {
        "found_boxes": [boxes for boxes, _ in found],
        "found_scores": [scores for _, scores in found],
        "found_classes": [np.zeros(len(scores)) for _, scores in found],
    }
"""

# The same, as batch arrays of K = 4 detections an image, padded with scores of -1.
PADDED = (
    BOXES
    + """
def postprocess(outputs):
    boxes = np.zeros((len(outputs), 4, 4), np.float32)
    scores = np.full((len(outputs), 4), -1.0, np.float32)
    for index, image in enumerate(outputs):
        found, score = page(image[0])
        boxes[index, : len(found)] = found
        scores[index, : len(found)] = score
    return {"found_boxes": boxes, "found_scores": scores, "found_classes": np.zeros_like(scores)}
"""
)

DECODED = [
    {"name": "found_boxes", "type": "boxes", "parameters": {"format": "xyxy", "units": "pixels"}},
    {"name": "found_scores", "type": "scores", "parameters": {"min_score": 0.0}},
    {"name": "found_classes", "type": "classes", "parameters": {"labels": ["rectangle"]}},
]


def _identity() -> bytes:
    """A model whose one output is its input: the decoding is all the code's."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["image"], ["raw"])],
        "identity",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])],
        [helper.make_tensor_value_info("raw", TensorProto.FLOAT, ["N", 1, "H", "W"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _drawn(rectangles: list[tuple[int, int, int, int]]) -> np.ndarray:
    pixels = np.zeros((HEIGHT, WIDTH), np.uint8)
    for x, y, width, height in rectangles:
        pixels[y : y + height, x : x + width] = 255
    return pixels


@pytest.fixture
def store(tmp_path: Path) -> Path:
    images = [_png(_drawn(rectangles)) for rectangles in RECTANGLES]
    boxes = [[[float(v) for v in r] for r in rectangles] for rectangles in RECTANGLES]
    classes = [[0] * len(rectangles) for rectangles in RECTANGLES]
    folder = tmp_path / "datasets/rectangles/1.0.0"
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "image": pa.array(images, pa.binary()),
            "boxes": pa.array(boxes, pa.list_(pa.list_(pa.float64(), 4))),
            "classes": pa.array(classes, pa.list_(pa.int64())),
        }
    )
    pq.write_table(table, folder / "validation.parquet")
    # The masks: 1 inside a rectangle, 0 outside.
    masks = [_png((_drawn(rectangles) > 0).astype(np.uint8)) for rectangles in RECTANGLES]
    folder = tmp_path / "datasets/rectangle-masks/1.0.0"
    folder.mkdir(parents=True)
    table = pa.table({"image": pa.array(images, pa.binary()), "mask": pa.array(masks)})
    pq.write_table(table, folder / "validation.parquet")
    graph = tmp_path / NAMESPACE / "identity.onnx"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(_identity())
    return tmp_path


def _dataset(task: str) -> Manifest:
    name = "rectangles" if task == "object_detection" else "rectangle-masks"
    labels = ["rectangle"] if task == "object_detection" else ["outside", "rectangle"]
    return manifests.load(
        yaml.safe_dump(
            {
                "kind": "dataset",
                "name": name,
                "version": "1.0.0",
                "description": "Bright rectangles on black.",
                "license": "MIT",
                "task": task,
                "format": "parquet",
                "encoding": "png",
                "labels": labels,
                "splits": {
                    "validation": {
                        "path": f"repo://datasets/{name}/1.0.0/validation.parquet",
                        "count": len(RECTANGLES),
                    }
                },
            }
        )
    )


def _data(task: str = "object_detection", **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": "model",
        "name": "identity",
        "version": "1.0.0",
        "description": "Its output is its input; custom code decodes it.",
        "license": "MIT",
        "task": task,
        "framework": {"name": "onnxruntime", "version": "*"},
        "inputs": [{"name": "image", "type": "image", "parameters": dict(IMAGE)}],
        "outputs": [{"name": "raw", "type": "tensor"}],
        "model": {"graph_path": f"repo://{NAMESPACE}/identity.onnx"},
        **extra,
    }
    return data


def _model(task: str = "object_detection", **extra: Any) -> Manifest:
    return manifests.load(yaml.safe_dump(_data(task, **extra)), kind="model")


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "dataset": _dataset("object_detection"),
        "batch_sizes": (1, 2),
        "warmup": 1,
        "repeat": 1,
        "threads": 1,
        "custom_code": True,
    }


@pytest.mark.parametrize("code", [BOXES, PADDED], ids=["a list per image", "batch arrays"])
def test_a_detector_decoded_by_custom_code_finds_every_box_exactly(
    code: str, run_evaluation: RunEvaluation
) -> None:
    model = _model(postprocess=code, postprocess_outputs=DECODED)
    evaluation = run_evaluation(model)

    # Every rectangle found, at twice the size in the input, mapped back to its own pixels.
    for found, rectangles in zip(evaluation.detections, RECTANGLES, strict=True):
        expected = sorted(rectangles, key=lambda r: -(r[2] * r[3]))
        assert found[:, :4].tolist() == [[float(v) for v in r] for r in expected]
        assert found[:, 5].tolist() == [0.0] * len(rectangles)
    for entry in evaluation.result["batch_sizes"]:
        assert entry["accuracy"]["map"] == pytest.approx(1.0)
        assert entry["accuracy"]["objects"] == sum(map(len, RECTANGLES))
        assert entry["accuracy"]["detections"] == sum(map(len, RECTANGLES))


def test_a_detector_code_whose_boxes_are_off_scores_what_it_returns(
    run_evaluation: RunEvaluation,
) -> None:
    """Half-size boxes (the code forgets that the input is the image at twice its size): the
    loop maps back what the code returns, as it returns it, and no box reaches IoU .5 (the
    whole-image rectangle keeps a quarter of its area, IoU .25): COCO's mAP is 0."""
    halved = BOXES.replace("[[x, y, x + w, y + h]", "[[x / 2, y / 2, (x + w) / 2, (y + h) / 2]")
    evaluation = run_evaluation(
        _model(postprocess=halved, postprocess_outputs=DECODED), batch_sizes=(2,)
    )
    accuracy = evaluation.result["accuracy"]
    assert accuracy["map"] == 0.0
    assert accuracy["detections"] == sum(map(len, RECTANGLES))


def test_decoded_boxes_are_clipped_to_the_image_and_infinite_scores_are_no_detections(
    run_evaluation: RunEvaluation,
) -> None:
    """Two more detections an image: one reaching past the top left corner (clipped to the
    image, as a yolo output's are), one scored inf (dropped, as a NaN is)."""
    extra = (
        BOXES
        + """
found_by_opencv = page

def page(pixels):
    boxes, scores = found_by_opencv(pixels)
    boxes = np.concatenate([boxes, [[-10, -10, 10, 10], [0, 0, 4, 4]]]).astype(np.float32)
    return boxes, np.concatenate([scores, [0.25, np.inf]])
"""
    )
    evaluation = run_evaluation(
        _model(postprocess=extra, postprocess_outputs=DECODED), batch_sizes=(2,)
    )
    for found, rectangles in zip(evaluation.detections, RECTANGLES, strict=True):
        assert np.isfinite(found).all()
        assert len(found) == len(rectangles) + 1
        # (-10, -10)-(10, 10) in the input at twice the size: (-5, -5)-(5, 5) in the image.
        assert [0.0, 0.0, 5.0, 5.0, 0.25] in found[:, :5].tolist()


def test_a_segmenter_decoded_by_custom_code_scores_its_known_masks(
    run_evaluation: RunEvaluation,
) -> None:
    scores = """
import numpy as np

def postprocess(outputs):
    bright = outputs[:, 0] > 0.5
    return np.stack([~bright, bright], axis=1).astype(np.float32)
"""
    decoded = [
        {
            "name": "classes",
            "type": "logits",
            "parameters": {"layout": "NCHW", "top_k": 1, "labels": ["outside", "rectangle"]},
        }
    ]
    model = _model("semantic_segmentation", postprocess=scores, postprocess_outputs=decoded)
    evaluation = run_evaluation(model, dataset=_dataset("semantic_segmentation"))
    accuracy = evaluation.result["accuracy"]
    assert accuracy["miou"] == 1.0
    assert accuracy["pixel_accuracy"] == 1.0

    # The classes swapped: every pixel wrong, no IoU.
    swapped = scores.replace("[~bright, bright]", "[bright, ~bright]")
    model = _model("semantic_segmentation", postprocess=swapped, postprocess_outputs=decoded)
    evaluation = run_evaluation(model, dataset=_dataset("semantic_segmentation"), batch_sizes=(2,))
    assert evaluation.result["accuracy"]["miou"] == 0.0
    assert evaluation.result["accuracy"]["pixel_accuracy"] == 0.0


def test_what_the_code_returns_is_checked(run_evaluation: RunEvaluation) -> None:
    model = _model(
        postprocess="def postprocess(outputs):\n    return {'boxes': outputs}\n",
        postprocess_outputs=DECODED,
    )
    with pytest.raises(CustomCodeError, match="must return a dict of found_boxes, found_scores"):
        run_evaluation(model, batch_sizes=(1,))
    short = BOXES.replace('"found_classes": [np.zeros', '"found_classes": [np.zeros(1) + 0 * ')
    with pytest.raises(EvaluationError, match="expected one class per detection"):
        run_evaluation(_model(postprocess=short, postprocess_outputs=DECODED), batch_sizes=(1,))
    dropped = BOXES.replace('"found_boxes": [boxes for boxes, _ in found]', '"found_boxes": [0]')
    with pytest.raises(CustomCodeError, match="a list of 1 for found_boxes"):
        run_evaluation(_model(postprocess=dropped, postprocess_outputs=DECODED), batch_sizes=(2,))


def test_the_manifest_declares_what_the_code_returns() -> None:
    # The labels and the box format are read from what the code returns.
    data = _data(postprocess=BOXES, postprocess_outputs=DECODED)
    assert unsupported(data) is None
    assert scored_output(data)["name"] == "found_classes"

    def refused(data: dict[str, Any]) -> dict[str, str]:
        with pytest.raises(ManifestError) as caught:
            manifests.load(yaml.safe_dump(data), kind="model")
        return {error["path"]: error["message"] for error in caught.value.errors}

    problems = refused(_data(postprocess=BOXES))
    assert "declare it in postprocess_outputs" in problems["postprocess"]
    problems = refused(_data(postprocess_outputs=DECODED))
    assert "has no postprocess code" in problems["postprocess_outputs"]
    problems = refused(_data(postprocess=BOXES, postprocess_outputs=DECODED[:2]))
    assert "one each of boxes, scores and classes" in problems["postprocess_outputs"]
    segmenter = _data("semantic_segmentation", postprocess=BOXES, postprocess_outputs=DECODED)
    assert "one output of per-pixel logits" in refused(segmenter)["postprocess_outputs"]
    classifier = _data("image_classification", postprocess=BOXES, postprocess_outputs=DECODED)
    assert "is read for object_detection" in refused(classifier)["postprocess_outputs"]
    twice = [*DECODED[:2], {**DECODED[2], "name": "found_boxes"}]
    problems = refused(_data(postprocess=BOXES, postprocess_outputs=twice))
    assert "declared twice" in problems["postprocess_outputs.2.name"]

    # Preprocess code still moves pixels the loop maps back: refused for these tasks.
    preprocess = "def preprocess(example):\n    return example\n"
    data = _data(postprocess=BOXES, postprocess_outputs=DECODED, preprocess=preprocess)
    assert "custom preprocess code" in (unsupported(data) or "")
