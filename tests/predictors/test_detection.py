"""Object detection: the zoo's shapes-detector on shapes-boxes, scored with COCO's mAP by
pycocotools (`predictors.evaluation.scenarios.detection`), at each image's own (dynamic) input size;
and the checks of detector manifests and datasets."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from predictors import manifests
from predictors.data import DatasetError, DetectionReader, split_problems
from predictors.evaluation import compare
from predictors.manifests.catalog import Catalog
from predictors.processing import ImagePreprocessor, ProcessingError
from predictors.tasks import unsupported
from predictors.zoo import detection
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("shapes-detector",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "shapes-detector", "dataset": "shapes-boxes", "threads": 1, "repeat": 1}


def _manifest(framework: str = "onnxruntime") -> dict[str, Any]:
    return Catalog().find_model("shapes-detector", "*", framework).data


def _pycocotools_map(store: Path) -> float:
    """COCO's mAP of the ONNX model's raw outputs, computed here from the split and the model
    alone: each image normalized as the manifest says, padded to a multiple of 4, run by ONNX
    Runtime, its xyxy boxes turned into [x, y, w, h], evaluated by pycocotools."""
    import onnxruntime as ort
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    table = pq.read_table(store / "datasets/shapes-boxes/1.0.0/validation.parquet").to_pylist()
    session = ort.InferenceSession(
        str(store / "models/shapes-detector/1.0.0/shapes-detector.onnx"),
        providers=["CPUExecutionProvider"],
    )
    truth: dict[str, Any] = {
        "images": [],
        "annotations": [],
        "categories": [{"id": c} for c in range(3)],
    }
    found = []
    for image_id, row in enumerate(table):
        pixels = np.asarray(Image.open(io.BytesIO(row["image"])).convert("RGB"), np.float32)
        height, width = pixels.shape[:2]
        x = ((pixels / 255.0 - 0.5) / 0.25).transpose(2, 0, 1)[None]
        x = np.pad(x, ((0, 0), (0, 0), (0, -height % 4), (0, -width % 4)))
        boxes, scores, classes = session.run(None, {"image": x.astype(np.float32)})
        truth["images"].append({"id": image_id, "height": height, "width": width})
        for box, kind in zip(row["boxes"], row["classes"], strict=True):
            truth["annotations"].append(
                {
                    "id": len(truth["annotations"]) + 1,
                    "image_id": image_id,
                    "bbox": box,
                    "area": box[2] * box[3],
                    "category_id": kind,
                    "iscrowd": 0,
                }
            )
        for (x1, y1, x2, y2), score, kind in zip(boxes[0], scores[0], classes[0], strict=True):
            found.append(
                {
                    "image_id": image_id,
                    "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                    "score": float(score),
                    "category_id": int(kind),
                }
            )
    with contextlib.redirect_stdout(io.StringIO()):
        ground = COCO()
        ground.dataset = truth
        ground.createIndex()
        evaluation = COCOeval(ground, ground.loadRes(found), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return float(evaluation.stats[0])


def test_the_map_reported_is_pycocotools_on_the_models_own_outputs(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    onnx = run_evaluation(framework="onnxruntime", batch_sizes=[1])
    accuracy = onnx.result["accuracy"]
    assert accuracy["map"] == pytest.approx(_pycocotools_map(store), abs=1e-9)
    assert accuracy["top1"] == accuracy["map"] and accuracy["top5"] == accuracy["map_50"]
    assert accuracy["map"] >= 0.5 and accuracy["map_50"] >= 0.9
    assert accuracy["count"] == 300 and accuracy["objects"] > 300
    # The latency is measured at each image's own size (the manifest pads to multiples of 4).
    entry = onnx.result["batch_sizes"][0]
    assert entry["latency"]["count"] == 300
    assert entry["input_sizes"]["distinct"] > 100
    assert entry["input_sizes"]["smallest"][1:] != entry["input_sizes"]["largest"][1:]
    assert onnx.result["output_type"] == "detections"
    # Each image's predictions are its detections, best first, with their boxes.
    assert onnx.detections is not None and len(onnx.detections) == 300
    first = onnx.predictions[0]
    assert [score for _, _, score in first] == sorted((s for _, _, s in first), reverse=True)
    assert len(first) == len(onnx.detections[0])

    # The TorchScript form, input by input.
    torchscript = run_evaluation(framework="pytorch", batch_sizes=[1])
    assert torchscript.result["accuracy"]["map"] == pytest.approx(accuracy["map"], abs=1e-4)
    agreement = compare(onnx, torchscript)
    assert agreement["top1_agreement"] == 1.0 and agreement["max_abs_diff"] < 1e-3


def test_images_of_different_sizes_in_one_batch_are_refused_naming_the_fix(
    run_evaluation: RunEvaluation,
) -> None:
    with pytest.raises(ProcessingError, match="different sizes"):
        run_evaluation(framework="onnxruntime", batch_sizes=[4], limit=8)


def test_boxes_map_back_through_the_resize_and_the_padding() -> None:
    parameters = {**_manifest()["inputs"][0]["parameters"]}
    parameters["resize_side"] = {
        "side": "longer",
        "size": 64,
        "max_size": None,
        "multiple_of": 1,
        "rounding": "half_up",
    }
    parameters["pad"] = {"size": [64, 64], "multiple_of": None, "position": "center", "value": 0.0}
    preprocessor = ImagePreprocessor(parameters)
    buffer = io.BytesIO()
    Image.new("RGB", (200, 100)).save(buffer, format="PNG")
    # 200x100 -> 64x32, centred in 64x64: 16 rows of padding above.
    scale_x, scale_y, left, top = preprocessor.to_image(buffer.getvalue())
    assert (scale_x, scale_y, left, top) == (200 / 64, 100 / 32, 0, 16)
    cropped = {**parameters, "crop_method": "center", "crop_size": [32, 32]}
    with pytest.raises(ProcessingError, match="cropped"):
        ImagePreprocessor(cropped).to_image(buffer.getvalue())


# -- datasets ----------------------------------------------------------------------------------


def _split(path: Path, boxes: list[Any], classes: list[Any]) -> Path:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="PNG")
    pq.write_table(
        pa.table(
            {
                "image": pa.array([buffer.getvalue()] * len(boxes), pa.binary()),
                "boxes": pa.array(boxes, pa.list_(pa.list_(pa.float64()))),
                "classes": pa.array(classes, pa.list_(pa.int64())),
            }
        ),
        path,
    )
    return path


@pytest.mark.parametrize(
    ("boxes", "classes", "message"),
    [
        ([[[0, 0, 4, 4]]], [[0, 1]], "row 0 has 1 boxes but 2 classes"),
        ([[[0, 0, 0, 4]]], [[0]], "row 0 has box 0 [0.0, 0.0, 0.0, 4.0]: its width and height"),
        ([[[0, 0, 4]]], [[0]], "row 0 has box 0 [0.0, 0.0, 4.0], not [x, y, width, height]"),
        ([[], [[1, 1, 2, 2]]], [[], [3]], "row 1 has class 3 for box 0, but the dataset has 3"),
    ],
)
def test_a_detection_split_is_checked_object_by_object(
    tmp_path: Path, boxes: list[Any], classes: list[Any], message: str
) -> None:
    path = _split(tmp_path / "d.parquet", boxes, classes)
    problems = split_problems(path, labels=3, encoding="png", count=None, detection=True)
    assert any(message in problem for problem in problems), problems


def test_a_detection_split_without_its_columns_is_refused(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"image": pa.array([b"x"]), "label": pa.array([0])}), tmp_path / "c.parquet"
    )
    with pytest.raises(DatasetError, match=r"without the column\(s\) boxes, classes"):
        DetectionReader(tmp_path / "c.parquet", 1)
    path = _split(tmp_path / "ok.parquet", [[[1, 2, 3, 4]], []], [[2], []])
    ((_, annotations),) = list(DetectionReader(path, 2))
    assert annotations[0]["boxes"].tolist() == [[1, 2, 3, 4]] and len(annotations[1]["boxes"]) == 0


# -- manifests and launches --------------------------------------------------------------------


def test_what_the_detection_loop_cannot_run_is_refused_naming_it() -> None:
    data = _manifest()
    assert unsupported(data) is None
    two = {**data, "outputs": data["outputs"][:2]}
    assert "outputs of types boxes, scores; the loop reads exactly one each" in str(
        unsupported(two)
    )
    cropped = {
        **data,
        "inputs": [
            {
                **data["inputs"][0],
                "parameters": {
                    **data["inputs"][0]["parameters"],
                    "crop_method": "center",
                    "crop_size": [32, 32],
                },
            }
        ],
    }
    assert "could not be mapped back" in str(unsupported(cropped))
    classifier = {**data, "task": "image_classification", "outputs": data["outputs"][2:]}
    assert "object_detection output" in str(unsupported(classifier))


def test_detector_outputs_are_checked_naming_the_field() -> None:
    data = _manifest()
    del data["outputs"][2]["parameters"]["labels"]
    data["outputs"][0]["parameters"] = {"format": "ltrb", "units": "pixels"}
    del data["outputs"][1]["parameters"]["min_score"]
    with pytest.raises(manifests.ManifestError) as caught:
        manifests.load(yaml.safe_dump(data))
    errors = {error["path"]: error["message"] for error in caught.value.errors}
    assert "labels" in errors["outputs.2.parameters.labels"]
    assert "ltrb" in errors["outputs.0.parameters.format"]
    assert "min_score" in errors["outputs.1.parameters.min_score"] or any(
        "min_score" in message for message in errors.values()
    )


def test_the_zoo_detector_decodes_in_its_graph_at_any_size(store: Path) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(store / "models/shapes-detector/1.0.0/shapes-detector.onnx"),
        providers=["CPUExecutionProvider"],
    )
    for height, width in ((48, 64), (112, 96)):
        boxes, scores, classes = session.run(
            None, {"image": np.zeros((2, 3, height, width), np.float32)}
        )
        assert boxes.shape == (2, detection.MAX_DETECTIONS, 4)
        assert scores.shape == classes.shape == (2, detection.MAX_DETECTIONS)


def test_a_split_without_objects_scores_zero_not_minus_one() -> None:
    from predictors.evaluation.scenarios.detection import coco_metrics

    found = [np.array([[1.0, 1.0, 4.0, 4.0, 0.9, 0.0]])]
    metrics = coco_metrics(
        [{"boxes": np.zeros((0, 4)), "classes": np.zeros(0, np.int64)}], [(8, 8)], found, 3
    )
    assert metrics["map"] == -1.0 and metrics["top1"] == 0.0 and metrics["top5"] == 0.0
    assert metrics["objects"] == 0 and metrics["detections"] == 1


def test_a_detector_with_custom_code_is_refused_at_launch_unless_it_says_what_it_returns() -> None:
    """Postprocess code that decodes a detector's outputs declares what it returns
    (`postprocess_outputs`, test_custom_decoding.py); preprocess code is refused outright."""
    data = {**_manifest(), "postprocess": "def postprocess(outputs):\n    return outputs\n"}
    assert "declare what the code returns (boxes, scores and classes) in postprocess_outputs" in (
        str(unsupported(data))
    )
    data = {**_manifest(), "preprocess": "def preprocess(example):\n    return example\n"}
    assert "custom preprocess code, which the loop of its task does not run" in str(
        unsupported(data)
    )
