"""A pretrained text recognizer that ships inside a PyPI package, brought in with a manifest and
the charset its graph carries: the character and word error rates MLModelScope reports are
the package's own pipeline's on the same locally made lines, and so is every decoded line
(docs/models.md writes down the procedure).

The recognizer is PaddleOCR's PP-OCRv4 as rapidocr-onnxruntime's wheel ships it; the package's
`TextRecognizer` (its preprocessing, its batching of six sorted by width, its ONNX Runtime
session and its CTC decoder) is the reference, on `text-transcripts`.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from predictors.agent.results import result_upload
from predictors.protocol import Job, JobOptions, ManifestRef
from predictors.zoo.ocr import RECOGNIZER, charset_of
from predictors.zoo.pretrained import package_file
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("text-recognizer", "text-transcripts"))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "model": "text-recognizer",
        "framework": "onnxruntime",
        "dataset": "text-transcripts",
        "threads": 1,
        "repeat": 1,
    }


def _lines(store: Path) -> tuple[list[bytes], list[str]]:
    table = pq.read_table(store / "datasets/text-transcripts/1.0.0/validation.parquet")
    return table.column("image").to_pylist(), table.column("text").to_pylist()


def _package_texts(images: list[bytes]) -> list[str]:
    """The package's own pipeline on the images, decoded as it decodes a file (cv2.imread)."""
    import cv2
    from rapidocr_onnxruntime.ch_ppocr_rec import TextRecognizer

    root = resources.files("rapidocr_onnxruntime")
    config = yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8"))["Rec"]
    config["model_path"] = str(root / config["model_path"])
    config["intra_op_num_threads"] = 1
    recognizer = TextRecognizer(config)
    decoded = [cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) for data in images]
    results, _ = recognizer(decoded)
    return [text for text, _score in results]


def test_the_error_rates_and_every_line_are_the_packages_own(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    import jiwer

    images, texts = _lines(store)
    theirs = _package_texts(images)
    their_cer, their_wer = jiwer.cer(texts, theirs), jiwer.wer(texts, theirs)

    for batch_size in (1, 8):
        evaluation = run_evaluation(batch_sizes=(batch_size,))
        ours = [prediction[0][1] for prediction in evaluation.predictions]
        accuracy = evaluation.result["accuracy"]
        assert accuracy["count"] == len(texts) == 300
        # The same rates, and the same text line by line: the manifest is the package's pipeline.
        assert abs(accuracy["cer"] - their_cer) <= 0.005, (accuracy["cer"], their_cer)
        assert abs(accuracy["wer"] - their_wer) <= 0.005, (accuracy["wer"], their_wer)
        agreement = float(np.mean([a == b for a, b in zip(ours, theirs, strict=True)]))
        assert agreement >= 0.99, agreement
        # And jiwer's own rates of what MLModelScope decoded.
        assert accuracy["cer"] == pytest.approx(jiwer.cer(texts, ours), abs=1e-12)
        assert accuracy["wer"] == pytest.approx(jiwer.wer(texts, ours), abs=1e-12)
        # What an agent posts: every decoded line, as decoded.
        ref = ManifestRef(1, "text-recognizer", "1.0.0", "onnxruntime", "0" * 64, "")
        upload = result_upload(Job("e", "c" * 32, 1, "cpu", ref, ref, JobOptions()), evaluation)
        assert upload.predictions.texts == ours
    # A recognizer worth its name on printed English: under 2 % of characters wrong.
    assert their_cer < 0.02


def test_the_charset_is_the_one_the_graph_carries_with_the_space_last(store: Path) -> None:
    graph = (store / "models/text-recognizer/1.0.0" / RECOGNIZER.file).read_bytes()
    assert graph == package_file(RECOGNIZER)
    assert hashlib.sha256(graph).hexdigest() == RECOGNIZER.sha256
    stored = (store / "models/text-recognizer/1.0.0/charset.txt").read_text(encoding="utf-8")
    symbols = stored.split("\n")[:-1]
    assert symbols == charset_of(graph)
    assert len(symbols) == 6624 and symbols[-1] == " "
    # The graph's 6,625 classes: the blank, then every symbol.
    import onnxruntime as ort

    session = ort.InferenceSession(str(store / "models/text-recognizer/1.0.0" / RECOGNIZER.file))
    assert session.get_outputs()[0].shape[-1] == len(symbols) + 1
