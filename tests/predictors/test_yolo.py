"""A YOLO-style detector's raw output (type yolo) decoded by the loop: score threshold,
non-maximum suppression by OpenCV class by class or across classes, objectness, logits, both
layouts, the best kept; checked on candidates worked by hand, and end to end on a Keras head
whose candidates are known (an exact box, a near duplicate NMS suppresses, and a box past the
image's edges, clipped to it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from predictors import manifests
from predictors.manifests.rules import validate
from predictors.processing import ProcessingError
from predictors.processing.yolo import YoloDecoder
from predictors.tasks import unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.test_tf_by_name import (  # noqa: F401 (one_thread: a fixture)
    SIDE,
    _dataset,
    _images,
    _manifest,
    one_thread,
    square_corners,
)

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

PARAMETERS = {
    "layout": "anchors_first",
    "box_format": "cxcywh",
    "units": "pixels",
    "score_threshold": 0.25,
    "iou_threshold": 0.5,
}
# Candidates (cx, cy, w, h, score of class 0, score of class 1), worked by hand: A; B overlaps
# A by IoU 56/72 = 0.78 in A's class (suppressed by A); C is B's box in class 1 (kept class
# by class); D scores under the threshold.
CANDIDATES = np.array(
    [
        [10, 10, 8, 8, 0.9, 0.0],
        [11, 10, 8, 8, 0.8, 0.0],
        [11, 10, 8, 8, 0.0, 0.7],
        [30, 30, 4, 4, 0.1, 0.0],
    ],
    np.float32,
)


def test_candidates_worked_by_hand() -> None:
    boxes, scores, classes = YoloDecoder.of(PARAMETERS).decode(CANDIDATES[None], 2)
    assert scores[0].tolist() == pytest.approx([0.9, 0.7])
    assert classes[0].tolist() == [0, 1]
    np.testing.assert_allclose(boxes[0], [[6, 6, 14, 14], [7, 6, 15, 14]])
    # Across classes, C goes with B; at IoU 0.8, B stays.
    _, scores, _ = YoloDecoder.of({**PARAMETERS, "class_agnostic": True}).decode(
        CANDIDATES[None], 2
    )
    assert scores[0].tolist() == pytest.approx([0.9])
    _, scores, _ = YoloDecoder.of({**PARAMETERS, "iou_threshold": 0.8}).decode(CANDIDATES[None], 2)
    assert scores[0].tolist() == pytest.approx([0.9, 0.8, 0.7])
    # The same in the other layout; the best one only; an image with nothing is padding.
    first = YoloDecoder.of({**PARAMETERS, "layout": "channels_first", "max_detections": 1})
    batch = np.stack([CANDIDATES, np.zeros_like(CANDIDATES)])
    boxes, scores, classes = first.decode(np.swapaxes(batch, 1, 2), 2)
    np.testing.assert_allclose(scores, [[0.9], [-1.0]], rtol=1e-6)
    # Objectness multiplies (0.5 x 0.9 passes, 0.5 x 0.7 does not at 0.4); logits go through
    # a sigmoid.
    with_objectness = np.insert(CANDIDATES, 4, 0.5, axis=1)
    _, scores, _ = YoloDecoder.of(
        {**PARAMETERS, "objectness": True, "score_threshold": 0.4}
    ).decode(with_objectness[None], 2)
    assert scores[0].tolist() == pytest.approx([0.45])
    logits = CANDIDATES.copy()
    logits[:, 4:] = np.log(CANDIDATES[:, 4:] + 1e-9) - np.log(1 - CANDIDATES[:, 4:] + 1e-9)
    _, scores, _ = YoloDecoder.of({**PARAMETERS, "scores": "logits"}).decode(logits[None], 2)
    assert scores[0].tolist() == pytest.approx([0.9, 0.7], abs=1e-6)
    with pytest.raises(ProcessingError, match="check the output's layout, objectness and labels"):
        YoloDecoder.of(PARAMETERS).decode(CANDIDATES[None], 3)
    # A score right at the threshold stays; a box of no width, or inverted, is none.
    at = np.array([[10, 10, 8, 8, 0.25, 0.0], [20, 20, 0, 8, 0.9, 0.0]], np.float32)
    _, scores, _ = YoloDecoder.of(PARAMETERS).decode(at[None], 2)
    assert scores[0].tolist() == pytest.approx([0.25])
    inverted = np.array([[14, 14, 6, 6, 0.9, 0.0], [5, 5, 10, 10, 0.8, 0.0]], np.float32)
    boxes, scores, _ = YoloDecoder.of({**PARAMETERS, "box_format": "xyxy"}).decode(
        inverted[None], 2
    )
    assert scores[0].tolist() == pytest.approx([0.8]) and boxes[0, 0].tolist() == [5, 5, 10, 10]
    # At most MAX_CANDIDATES go into the suppression: the best of them.
    from predictors.processing import yolo

    many = np.zeros((40_000, 6), np.float32)
    many[:, 0] = np.arange(40_000) * 10.0  # far apart: none suppresses another
    many[:, 2:4] = 4
    many[:, 4] = np.linspace(0.3, 0.9, 40_000)
    _, scores, _ = YoloDecoder.of({**PARAMETERS, "max_detections": 100_000}).decode(many[None], 2)
    assert (scores[0] > 0).sum() == yolo.MAX_CANDIDATES
    assert scores[0].min() >= np.sort(many[:, 4])[-yolo.MAX_CANDIDATES]


def _head(path: Path, width: float, normalized: bool = False) -> None:
    """A Keras head of three candidates a square: its exact box (0.9), the box one pixel to
    the right (0.85, suppressed by the exact one at IoU 0.5), and a box `width` wide centred on
    the square, past the image's edges (0.3), channels first."""
    import keras
    from keras import ops

    image = keras.Input((SIDE, SIDE, 3), name="image")
    x1, y1, x2, y2 = square_corners(image)
    cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
    one = ops.ones_like(cx)
    exact = ops.stack([cx, cy, w, h, one * 0.9], axis=1)
    shifted = ops.stack([cx + 1, cy, w, h, one * 0.85], axis=1)
    wide = ops.stack([cx, cy, one * width, one * width, one * 0.3], axis=1)
    head = ops.stack([exact, shifted, wide], axis=2)  # (N, 5, 3)
    if normalized:  # boxes as fractions of the input's width and height
        head = ops.concatenate([head[:, :4] / SIDE, head[:, 4:]], axis=1)
    keras.Model(image, keras.layers.Identity(name="output0")(head)).save(path)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"threads": 1, "repeat": 1}


def _yolo_manifest(name: str, **changes: Any) -> manifests.Manifest:
    data = dict(_manifest(name).data)
    data["outputs"] = [
        {
            "name": "output0",
            "type": "yolo",
            "parameters": {
                **PARAMETERS,
                "layout": "channels_first",
                "labels": ["square"],
                **changes,
            },
        }
    ]
    return manifests.load(yaml.safe_dump(data), kind="model")


def test_a_raw_yolo_head_is_decoded_suppressed_and_clipped(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    images, boxes = _images(24)
    dataset = _dataset(store, images, boxes)
    folder = store / "models/square-head/1.0.0"
    folder.mkdir(parents=True)
    _head(folder / "square-head.keras", width=3 * SIDE)
    model = _yolo_manifest("square-head")
    assert unsupported(model.data) is None
    evaluation = run_evaluation(model, framework="tensorflow", dataset=dataset, batch_sizes=(1, 8))
    accuracy = evaluation.result["accuracy"]
    # The exact box first in every image: mAP 1; the duplicate suppressed, the wide box kept.
    assert accuracy["map"] == pytest.approx(1.0)
    assert accuracy["detections"] == 2 * 24
    assert evaluation.detections is not None
    for found in evaluation.detections:
        wide = found[found[:, 4] < 0.5][0]
        assert wide[:4].tolist() == [0.0, 0.0, SIDE, SIDE]  # clipped to the 32 x 32 image
    # Suppressing only above IoU 0.95 lets the duplicate through (its IoU with the exact box
    # is (w - 1) / (w + 1), at most 0.875 for these squares): three a square.
    loose = _yolo_manifest("square-head", iou_threshold=0.95)
    evaluation = run_evaluation(loose, framework="tensorflow", dataset=dataset, batch_sizes=(8,))
    assert evaluation.result["accuracy"]["detections"] == 3 * 24
    # The same head giving fractions of the input: the same detections.
    folder = store / "models/square-fractions/1.0.0"
    folder.mkdir(parents=True)
    _head(folder / "square-fractions.keras", width=3 * SIDE, normalized=True)
    fractions = _yolo_manifest("square-fractions", units="normalized")
    evaluation = run_evaluation(
        fractions, framework="tensorflow", dataset=dataset, batch_sizes=(8,)
    )
    assert evaluation.result["accuracy"]["map"] == pytest.approx(1.0)
    assert evaluation.result["accuracy"]["detections"] == 2 * 24


def test_a_yolo_output_is_a_detectors_only() -> None:
    data = dict(_yolo_manifest("square-head").data)
    assert validate(data, "model", {}) == []
    problems = {
        p["path"]: p["message"] for p in validate({**data, "task": "regression"}, "model", {})
    }
    assert "for object_detection models" in problems["outputs.0.type"], problems
    missing = dict(data)
    missing["outputs"] = [
        {
            **data["outputs"][0],
            "parameters": {
                k: v for k, v in data["outputs"][0]["parameters"].items() if k != "iou_threshold"
            },
        }
    ]
    problems = {p["path"]: p["message"] for p in validate(missing, "model", {})}
    assert any("iou_threshold" in message for message in problems.values()), problems


@pytest.mark.parametrize("decoder", ["pillow", "opencv"])
def test_pad_then_resize_is_padding_to_a_square_before_the_resize(decoder: str) -> None:
    """A 200x100 image padded to a 200x200 square of gray 114 (centred: 50 rows above), then
    resized to 64x64: the pixels are those of the square resized, and a box maps back."""
    import io

    import cv2
    from PIL import Image

    from predictors.processing import ImagePreprocessor

    rng = np.random.default_rng(13)
    pixels = rng.integers(0, 256, (100, 200, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    square = np.full((200, 200, 3), 114, np.uint8)
    square[50:150] = pixels
    parameters = {
        "decoder": decoder,
        "jpeg_dct_method": "islow",
        "color_mode": "RGB",
        "layout": "NHWC",
        "resize_method": "bilinear",
        "resize_size": [64, 64],
        "keep_aspect_ratio": False,
        "crop_method": "none",
        "crop_size": None,
        "element_type": "float32",
        "normalization_order": "convert_then_normalize",
        "scale": 1.0,
        "mean": [0.0, 0.0, 0.0],
        "std": [1.0, 1.0, 1.0],
        "pad_square": {"position": "center", "value": 114},
    }
    preprocessor = ImagePreprocessor(parameters)
    made = preprocessor(buffer.getvalue())
    if decoder == "pillow":
        expected = np.asarray(Image.fromarray(square).resize((64, 64), Image.Resampling.BILINEAR))
    else:
        expected = cv2.resize(square, (64, 64), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(made, expected.astype(np.float32))
    # The input's (0, 16) is the image's top-left corner; (64, 48) its bottom-right.
    scale_x, scale_y, left, top = preprocessor.to_image(buffer.getvalue())
    assert (scale_x, scale_y, left, top) == (200 / 64, 200 / 64, 0.0, 16.0)
    assert ((64 - left) * scale_x, (48 - top) * scale_y) == (200.0, 100.0)
    with pytest.raises(ProcessingError, match="pad_square.value") as raised:
        ImagePreprocessor({**parameters, "pad_square": {"position": "center", "value": 300}})
    assert raised.value.parameter == "pad_square.value"
    # With a resize by the longer side and a padding after it too: a 300x100 image, squared
    # (100 rows above), its longer side to 60, padded centred to 80x100 (10 rows, 20 columns).
    wide = io.BytesIO()
    Image.fromarray(np.zeros((100, 300, 3), np.uint8)).save(wide, format="PNG")
    both = ImagePreprocessor(
        {
            **parameters,
            "resize_size": None,
            "resize_side": {
                "side": "longer",
                "size": 60,
                "max_size": None,
                "multiple_of": 1,
                "rounding": "half_even",
            },
            "pad": {"size": [80, 100], "multiple_of": None, "position": "center", "value": 0.0},
        }
    )
    scale_x, scale_y, left, top = both.to_image(wide.getvalue())
    assert (scale_x, scale_y, left, top) == (5.0, 5.0, 20.0, 30.0)
    assert ((left + 60 - left) * scale_x, (top + 20 - top) * scale_y) == (300.0, 100.0)
    assert both(wide.getvalue()).shape == (80, 100, 3)
    # A square past Pillow's bound on a decoded image is refused before it is made.
    from predictors.processing.geometry import PadSquare

    with pytest.raises(ProcessingError, match="more than 89,478,485 pixels"):
        PadSquare("center", 114).placed(10, 10_000)
