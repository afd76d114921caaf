"""Semantic segmentation: the zoo's shapes-segmenter on shapes-masks, scored per pixel with the
ignore label left out (`predictors.evaluation.scenarios.segmentation`); and the checks of
segmentation manifests and datasets."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from sklearn import metrics

from predictors.data import split_problems
from predictors.evaluation import EvaluationError, compare
from predictors.manifests import Manifest
from predictors.manifests.catalog import Catalog
from predictors.tasks import unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("shapes-segmenter",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "shapes-segmenter", "dataset": "shapes-masks", "threads": 1, "repeat": 1}


def _reference(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every scored pixel's truth and the ONNX model's own prediction, computed here."""
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(store / "models/shapes-segmenter/1.0.0/shapes-segmenter.onnx"),
        providers=["CPUExecutionProvider"],
    )
    truth, guess = [], []
    for row in pq.read_table(store / "datasets/shapes-masks/1.0.0/validation.parquet").to_pylist():
        pixels = np.asarray(Image.open(io.BytesIO(row["image"])).convert("RGB"), np.float32)
        x = ((pixels / 255.0 - 0.5) / 0.25).transpose(2, 0, 1)[None].astype(np.float32)
        (logits,) = session.run(None, {"input": x})
        mask = np.asarray(Image.open(io.BytesIO(row["mask"])))
        valid = mask != 255
        truth.append(mask[valid])
        guess.append(logits[0].argmax(axis=0)[valid])
    return np.concatenate(truth), np.concatenate(guess)


def test_miou_and_pixel_accuracy_are_scikit_learns_on_the_models_own_pixels(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    onnx = run_evaluation(framework="onnxruntime", batch_sizes=[1, 8])
    accuracy = onnx.result["accuracy"]
    truth, guess = _reference(store)
    assert accuracy["pixels"] == truth.size  # the ignore label's pixels are left out
    assert accuracy["pixel_accuracy"] == pytest.approx(metrics.accuracy_score(truth, guess))
    assert accuracy["miou"] == pytest.approx(
        metrics.jaccard_score(truth, guess, average="macro"), abs=1e-9
    )
    per_class = metrics.jaccard_score(truth, guess, average=None, labels=[0, 1, 2, 3])
    assert list(accuracy["iou"].values()) == pytest.approx(list(per_class))
    assert accuracy["top1"] == accuracy["miou"] and accuracy["top5"] == accuracy["pixel_accuracy"]
    assert accuracy["pixel_accuracy"] >= 0.9 and accuracy["count"] == 200
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in onnx.result["batch_sizes"]}
    assert by_size[1]["miou"] == by_size[8]["miou"]

    torchscript = run_evaluation(framework="pytorch", batch_sizes=[1])
    assert torchscript.result["accuracy"]["miou"] == pytest.approx(accuracy["miou"], abs=1e-6)
    assert compare(onnx, torchscript)["top1_agreement"] == 1.0


def test_predictions_of_another_size_are_brought_back_to_the_image(
    run_evaluation: RunEvaluation,
) -> None:
    """Resized to 32x32 for the model, the predicted classes are resized back to each image's
    48x48 pixels to be scored (nearest neighbour)."""
    evaluation = run_evaluation(
        framework="onnxruntime",
        batch_sizes=[4],
        limit=20,
        overrides=("inputs.0.parameters.resize_size=[32, 32]",),
    )
    accuracy = evaluation.result["accuracy"]
    full = run_evaluation(framework="onnxruntime", batch_sizes=[4], limit=20)
    assert accuracy["pixels"] == full.result["accuracy"]["pixels"]
    assert 0.5 < accuracy["pixel_accuracy"] < full.result["accuracy"]["pixel_accuracy"] + 0.01


def test_a_mask_value_that_is_no_class_fails_saying_so(run_evaluation: RunEvaluation) -> None:
    data = Catalog().find_dataset("shapes-masks").data
    del data["ignore_label"]
    dataset = Manifest(**{**_fields(Catalog().find_dataset("shapes-masks")), "data": data})
    with pytest.raises(EvaluationError, match="a mask has class 255, but shapes-segmenter reads 4"):
        run_evaluation(framework="onnxruntime", dataset=dataset, limit=4)


def _fields(manifest: Manifest) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(manifest, f.name) for f in dataclasses.fields(manifest)}


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (_png(np.zeros((4, 4), np.uint8)), "row 0 has a mask of 4x4 for an image of 8x8"),
        (
            _png(np.full((8, 8), 7, np.uint8)),
            "row 0 has mask value 7, but the dataset has 4 labels",
        ),
        (b"not a png", "row 0 has a mask that is not a PNG"),
        (_png(np.zeros((8, 8, 3), np.uint8)), "row 0 has a mask of mode RGB"),
    ],
)
def test_a_segmentation_split_is_checked_mask_by_mask(
    tmp_path: Path, mask: bytes, message: str
) -> None:
    path = tmp_path / "m.parquet"
    image = _png(np.zeros((8, 8, 3), np.uint8))
    pq.write_table(pa.table({"image": pa.array([image]), "mask": pa.array([mask])}), path)
    problems = split_problems(path, labels=4, encoding="png", count=1, masks=True, ignore_label=255)
    assert any(message in problem for problem in problems), problems


def test_what_the_segmentation_loop_cannot_run_is_refused_naming_it() -> None:
    data = Catalog().find_model("shapes-segmenter", "*", "onnxruntime").data
    assert unsupported(data) is None
    output = {**data["outputs"][0], "parameters": {**data["outputs"][0]["parameters"]}}
    del output["parameters"]["layout"]
    assert "needs parameters.layout (NCHW or NHWC)" in str(
        unsupported({**data, "outputs": [output]})
    )
    image = {**data["inputs"][0]["parameters"], "crop_method": "center", "crop_size": [32, 32]}
    cropped = {**data, "inputs": [{**data["inputs"][0], "parameters": image}]}
    assert "could not be mapped back" in str(unsupported(cropped))


def test_a_mask_all_of_the_ignore_label_scores_nothing_and_one_of_another_size_fails(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    rows = pq.read_table(store / "datasets/shapes-masks/1.0.0/validation.parquet").slice(0, 4)
    masks = rows.column("mask").to_pylist()
    folder = store / "datasets/shapes-masks-edges/1.0.0"
    folder.mkdir(parents=True, exist_ok=True)

    def dataset(name: str, first_mask: bytes) -> Manifest:
        table = pa.table(
            {"image": rows.column("image"), "mask": pa.array([first_mask, *masks[1:]])}
        )
        pq.write_table(table, folder / f"{name}.parquet")
        data = Catalog().find_dataset("shapes-masks").data
        data = {
            **data,
            "name": "shapes-masks-edges",
            "splits": {name: {"path": f"repo://datasets/shapes-masks-edges/1.0.0/{name}.parquet"}},
        }
        return Manifest(
            **{
                **_fields(Catalog().find_dataset("shapes-masks")),
                "data": data,
                "name": "shapes-masks-edges",
            }
        )

    ignored = dataset("ignored", _png(np.full((48, 48), 255, np.uint8)))
    evaluation = run_evaluation(framework="onnxruntime", dataset=ignored, split="ignored")
    scored = sum(int((np.asarray(Image.open(io.BytesIO(m))) != 255).sum()) for m in masks[1:])
    assert evaluation.result["accuracy"]["pixels"] == scored
    other = dataset("other", _png(np.zeros((24, 24), np.uint8)))
    with pytest.raises(EvaluationError, match="a mask is 24x24, but its image is 48x48"):
        run_evaluation(framework="onnxruntime", dataset=other, split="other")


def test_an_output_layout_is_refused_where_it_would_do_nothing() -> None:
    import yaml

    from predictors import manifests

    data = Catalog().find_model("digits-cnn", "*", "onnxruntime").data
    data["outputs"][0]["parameters"]["layout"] = "NCHW"
    with pytest.raises(manifests.ManifestError) as caught:
        manifests.load(yaml.safe_dump(data))
    (error,) = caught.value.errors
    assert error["path"] == "outputs.0.parameters.layout"
    assert "semantic_segmentation models only" in error["message"]
