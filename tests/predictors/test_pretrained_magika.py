"""A pretrained model that reads a file's raw bytes, brought in with a manifest: Google's Magika
file-type classifier as the magika wheel ships it. Its top-1 on `file-types` is the package's own
pipeline's on the same locally made files, and so is its prediction file by file
(docs/models.md writes down the procedure).

The package's `Magika().identify_bytes` is the reference: its feature extraction, its ONNX
Runtime session and its model's label (`prediction.dl`, before the thresholds and overwrites
that give `prediction.output`). The `type: bytes` input's parameters are checked on hand-made
byte strings, and against the package's own feature extraction.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from predictors.manifests.catalog import Catalog
from predictors.manifests.rules import validate
from predictors.processing import ProcessingError, preprocessor_for
from predictors.processing.raw_bytes import RawBytesPreprocessor
from predictors.zoo.filetypes import CLASSIFIER, MAKERS, MIN_SIZE, model_labels
from predictors.zoo.pretrained import package_file
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

MAGIKA = {
    "block_size": 4096,
    "strip": "whitespace",
    "slices": [{"from": "start", "size": 1024}, {"from": "end", "size": 1024}],
    "pad_value": 256,
    "element_type": "int32",
}


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("file-type", "file-types"))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "model": "file-type",
        "framework": "onnxruntime",
        "dataset": "file-types",
        "threads": 1,
        "repeat": 1,
    }


def _files(store: Path) -> tuple[list[bytes], list[int]]:
    table = pq.read_table(store / "datasets/file-types/1.0.0/validation.parquet")
    return table.column("image").to_pylist(), table.column("label").to_pylist()


def test_top1_and_every_prediction_are_the_packages_own(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    from magika import Magika

    files, classes = _files(store)
    labels = model_labels()
    magika = Magika()
    theirs = [str(magika.identify_bytes(data).prediction.dl.label) for data in files]
    their_top1 = float(np.mean([labels[c] == t for c, t in zip(classes, theirs, strict=True)]))

    for batch_size in (1, 8):
        evaluation = run_evaluation(batch_sizes=(batch_size,))
        ours = [prediction[0][1] for prediction in evaluation.predictions]
        accuracy = evaluation.result["accuracy"]
        assert accuracy["count"] == len(files) == 320
        assert abs(accuracy["top1"] - their_top1) <= 0.005, (accuracy["top1"], their_top1)
        agreement = float(np.mean([a == b for a, b in zip(ours, theirs, strict=True)]))
        assert agreement >= 0.99, agreement
        # And the top-1 MLModelScope reports is that of its own predictions.
        ours_top1 = np.mean([labels[c] == o for c, o in zip(classes, ours, strict=True)])
        assert accuracy["top1"] == pytest.approx(ours_top1, abs=1e-12)
    # A file-type classifier worth its name on these 16 common types.
    assert their_top1 >= 0.95


def test_the_model_and_its_labels_are_the_wheels(store: Path) -> None:
    graph = (store / "models/file-type/1.0.0" / CLASSIFIER.file).read_bytes()
    assert graph == package_file(CLASSIFIER)
    assert hashlib.sha256(graph).hexdigest() == CLASSIFIER.sha256
    stored = (store / "models/file-type/1.0.0/labels.txt").read_text(encoding="utf-8")
    from magika import Magika

    # The package's own order of the model's outputs.
    assert (
        stored.splitlines()
        == model_labels()
        == [str(label) for label in Magika()._model_config.target_labels_space]
    )
    dataset = Catalog().find_dataset("file-types")
    assert dataset.data["labels"] == model_labels()
    files, classes = _files(store)
    assert sorted({model_labels()[c] for c in classes}) == sorted(MAKERS)
    assert min(len(data.strip()) for data in files) >= MIN_SIZE


def test_the_input_is_the_packages_feature_extraction(store: Path) -> None:
    from magika import Magika
    from magika.types.seekable import Seekable

    files, _ = _files(store)
    hand_made = [
        b"  \n\tshort \r\n",
        b"\n" * 5000 + b"x" * 3000 + b" " * 5000,  # whitespace beyond a block
        bytes(range(256)) * 40,
        b"\x00 \x0b" * 900,
    ]
    preprocessor = RawBytesPreprocessor(MAGIKA)
    for data in files[::7] + hand_made:
        features = Magika._extract_features_from_seekable(
            Seekable(io.BytesIO(data)), 1024, 0, 1024, 256, 4096, False
        )
        expected = np.asarray(features.beg + features.end, dtype=np.int32)
        np.testing.assert_array_equal(preprocessor(data), expected)


def _bytes_input(**changes: Any) -> RawBytesPreprocessor:
    return RawBytesPreprocessor({**MAGIKA, **changes})


def test_bytes_input_strips_slices_and_pads_away_from_the_files_edges() -> None:
    small = _bytes_input(
        block_size=6,
        slices=[{"from": "start", "size": 4}, {"from": "end", "size": 3}],
        pad_value=256,
    )
    # Leading whitespace of the first block and trailing of the last are left out.
    assert small(b"  abcdefgh\n").tolist() == [97, 98, 99, 100, 102, 103, 104]
    # Not stripped: the whitespace is read as bytes.
    unstripped = _bytes_input(
        block_size=6,
        strip="none",
        slices=[{"from": "start", "size": 4}, {"from": "end", "size": 3}],
    )
    assert unstripped(b"  abcdefgh\n").tolist() == [32, 32, 97, 98, 103, 104, 10]
    # A short file: a start slice padded after its bytes, an end slice before them; the start
    # block keeps its trailing whitespace and the end block its leading, as Magika's do.
    assert small(b"\tab\n").tolist() == [97, 98, 10, 256, 9, 97, 98]
    assert small(b"xy").tolist() == [120, 121, 256, 256, 256, 120, 121]
    # Only whitespace: all padding.
    assert small(b" \t\r\n\x0b\x0c").tolist() == [256] * 7
    # Slices in the manifest's order; a batch is (N, features).
    reordered = _bytes_input(
        block_size=8,
        slices=[{"from": "end", "size": 2}, {"from": "start", "size": 2}],
        pad_value=0,
        element_type="int64",
    )
    batch = reordered.batch([b"0123456789", b"x"])
    assert batch.dtype == np.int64 and batch.shape == (2, 4)
    assert batch.tolist() == [[56, 57, 48, 49], [0, 120, 120, 0]]
    # Through the dispatch of a manifest input.
    spec = {"name": "bytes", "type": "bytes", "parameters": MAGIKA}
    assert preprocessor_for(spec)(b"%PDF" * 100).shape == (2048,)


@pytest.mark.parametrize(
    ("changes", "parameter", "words"),
    [
        ({"strip": "spaces"}, "strip", "whitespace, none"),
        ({"block_size": 0}, "block_size", "from 1 to"),
        ({"slices": []}, "slices", "non-empty list"),
        ({"slices": [{"from": "middle", "size": 4}]}, "slices.0.from", "start, end"),
        ({"slices": [{"from": "end", "size": 5000}]}, "slices.0.size", "block_size (4096)"),
        ({"pad_value": 256, "element_type": "uint8"}, "pad_value", "0 to 255"),
        ({"element_type": "float32"}, "element_type", "integer type"),
        ({"mean": 0.5}, "mean", "unknown bytes input parameter"),
    ],
)
def test_bytes_input_refuses_a_bad_parameter_naming_it(
    changes: dict[str, Any], parameter: str, words: str
) -> None:
    with pytest.raises(ProcessingError) as raised:
        _bytes_input(**changes)
    assert raised.value.parameter == parameter
    assert parameter in str(raised.value) and words in str(raised.value)


def test_a_missing_bytes_parameter_is_named() -> None:
    parameters = {key: value for key, value in MAGIKA.items() if key != "pad_value"}
    with pytest.raises(ProcessingError, match="'pad_value' is missing") as raised:
        RawBytesPreprocessor(parameters)
    assert raised.value.parameter == "pad_value"


def test_the_manifest_refuses_slices_beyond_the_block_and_a_pad_its_type_cannot_hold() -> None:
    data = dict(Catalog().find_model("file-type", "*", "onnxruntime").data)
    parameters = {
        **MAGIKA,
        "block_size": 512,
        "pad_value": 256,
        "element_type": "uint8",
    }
    data["inputs"] = [{"name": "bytes", "type": "bytes", "parameters": parameters}]
    problems = {problem["path"]: problem["message"] for problem in validate(data, "model", {})}
    assert "more than block_size (512)" in problems["inputs.0.parameters.slices.0.size"]
    assert "cannot hold (0 to 255)" in problems["inputs.0.parameters.pad_value"]
