"""Text inputs (`type: text`, `predictors.processing.text`): strings tokenised by the tokenizer
file a manifest names, as the `tokenizers` library tokenises them; the zoo's review-sentiment
on short-reviews scored input by input as its own ONNX graph scores the library's ids; and the
checks of text inputs, their tokenizer files and text datasets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictors.data import DatasetReader, split_problems
from predictors.evaluation import compare
from predictors.manifests import ManifestError, apply_overrides, file_urls, load
from predictors.processing import ProcessingError, preprocessor_for
from predictors.processing.text import TextPreprocessor
from predictors.tasks import dataset_problem, latency_only_problem, unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

MODEL_DIR = "models/review-sentiment/1.0.0"


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("review-sentiment",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "review-sentiment", "dataset": "short-reviews", "threads": 1, "repeat": 1}


def _held(file: Path) -> Any:
    def fetch(url: str, sha256: str | None) -> Path:
        return file

    return fetch


def _library_ids(tokenizer_file: Path, texts: list[str], length: int) -> np.ndarray:
    """The ids `tokenizers` itself gives `texts`, truncated and padded to `length`."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.enable_truncation(max_length=length)
    tokenizer.enable_padding(length=length, pad_id=0, pad_token="[PAD]")
    return np.array([encoding.ids for encoding in tokenizer.encode_batch(texts)], np.int64)


def test_every_review_is_scored_as_the_graph_scores_the_librarys_own_ids(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    import onnxruntime as ort

    onnx = run_evaluation(framework="onnxruntime", batch_sizes=[1, 32])
    rows = pq.read_table(store / "datasets/short-reviews/1.0.0/validation.parquet").to_pylist()
    texts = [row["input"] for row in rows]
    truth = np.array([row["label"] for row in rows])
    ids = _library_ids(store / MODEL_DIR / "tokenizer.json", texts, 24)
    session = ort.InferenceSession(
        str(store / MODEL_DIR / "review-sentiment.onnx"), providers=["CPUExecutionProvider"]
    )
    (logits,) = session.run(None, {"input": ids})
    # Input by input, the evaluation's outputs are the graph's on the library's ids.
    np.testing.assert_allclose(onnx.outputs, logits, rtol=1e-5, atol=1e-5)
    assert [p[0][0] for p in onnx.predictions] == logits.argmax(1).tolist()
    accuracy = onnx.result["accuracy"]
    assert accuracy["top1"] == pytest.approx(float((logits.argmax(1) == truth).mean()))
    # One label in twelve is flipped: a model that learnt the reviews misses about those.
    assert 0.8 < accuracy["top1"] < 1.0
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in onnx.result["batch_sizes"]}
    assert by_size[1]["top1"] == by_size[32]["top1"] == accuracy["top1"]

    torchscript = run_evaluation(framework="pytorch", batch_sizes=[8])
    agreement = compare(onnx, torchscript)
    assert agreement["top1_agreement"] == 1.0 and agreement["max_abs_diff"] < 1e-3


def test_a_latency_only_run_times_the_reviews(run_evaluation: RunEvaluation) -> None:
    timed = run_evaluation(framework="onnxruntime", latency_only=True, batch_sizes=[16])
    result = timed.result
    assert result["accuracy"] is None and result["dataset"]["count"] == 300
    assert [entry["inputs"] for entry in result["batch_sizes"]] == [300]
    assert timed.outputs.shape == (300, 2)


def test_the_text_preprocessor_is_the_library_on_strings_and_utf8(
    store: Path, tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    tokenizer_file = store / MODEL_DIR / "tokenizer.json"
    spec = {
        "name": "input",
        "type": "text",
        "parameters": {"tokenizer_path": "repo://t/tokenizer.json", "max_length": 8},
    }
    text = preprocessor_for(spec, _held(tokenizer_file))
    assert isinstance(text, TextPreprocessor) and text.pad_id == 0
    reviews = ["the café grinder is not bad!", "Honestly, THE KETTLE is awful"]
    expected = _library_ids(tokenizer_file, reviews, 8)
    from_bytes = text.batch([review.encode("utf-8") for review in reviews])
    assert from_bytes.dtype == np.int64 and from_bytes.tolist() == expected.tolist()
    assert text.batch(reviews).tolist() == expected.tolist()
    # A long review is cut by the tokenizer's own truncation: [SEP] stays last.
    sep = text.tokenizer.token_to_id("[SEP]")
    long = text(" ".join(["the kettle is great"] * 10))
    assert len(long) == 8 and long[-1] == sep and 0 not in long.tolist()
    # A short one is padded after its [SEP].
    short = text("great")
    cls = text.tokenizer.token_to_id("[CLS]")
    words = [i for i in text.tokenizer.encode("great", add_special_tokens=False).ids if i]
    assert short.tolist() == [cls, *words, sep] + [0] * (6 - len(words))
    # Without special tokens, int32.
    plain = preprocessor_for(
        {**spec, "parameters": {**spec["parameters"], "add_special_tokens": False}},
        _held(tokenizer_file),
    )
    assert sep not in plain("great").tolist()
    # The file's own direction of padding is kept.
    left = Tokenizer.from_file(str(tokenizer_file))
    left.enable_padding(pad_id=0, pad_token="[PAD]", direction="left")
    left_file = tmp_path / "left.json"
    left.save(str(left_file))
    padded_left = TextPreprocessor(spec["parameters"], _held(left_file))("great").tolist()
    assert padded_left == [0] * (6 - len(words)) + [cls, *words, sep]
    small = preprocessor_for(
        {**spec, "parameters": {**spec["parameters"], "element_type": "int32"}},
        _held(tokenizer_file),
    )
    assert small("great").dtype == np.int32 and small("great").tolist() == short.tolist()


def test_bad_text_inputs_and_tokenizer_files_are_refused_naming_the_problem(
    store: Path, tmp_path: Path
) -> None:
    tokenizer_file = store / MODEL_DIR / "tokenizer.json"
    base = {"tokenizer_path": "repo://t/tokenizer.json", "max_length": 8}

    def refused(parameters: dict[str, Any], file: Path = tokenizer_file) -> ProcessingError:
        with pytest.raises(ProcessingError) as raised:
            TextPreprocessor(parameters, _held(file))
        return raised.value

    assert refused({**base, "max_length": 0}).parameter == "max_length"
    assert refused({**base, "max_length": True}).parameter == "max_length"
    assert refused({"max_length": 8}).parameter == "tokenizer_path"
    assert refused({**base, "lowercase": True}).parameter == "lowercase"
    assert refused({**base, "add_special_tokens": "yes"}).parameter == "add_special_tokens"
    assert refused({**base, "element_type": "float32"}).parameter == "element_type"
    beyond = refused({**base, "pad_id": 100000})
    assert beyond.parameter == "pad_id" and "beyond the tokenizer's ids (0 to 72)" in str(beyond)
    # Ids need not be contiguous: a padding id past the vocabulary's size, but one of its ids.
    from tokenizers import Tokenizer as Sparse
    from tokenizers.models import WordLevel

    sparse = Sparse(WordLevel({"[UNK]": 0, "kettle": 5, "[PAD]": 9}, unk_token="[UNK]"))
    sparse_file = tmp_path / "sparse.json"
    sparse.save(str(sparse_file))
    padded = TextPreprocessor({**base, "pad_id": 9}, _held(sparse_file))("kettle")
    assert padded.tolist() == [5] + [9] * 7
    assert refused({**base, "pad_id": 10}, sparse_file).parameter == "pad_id"
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"version": "1.0", "model": {"type": "Nonsense"}}', encoding="utf-8")
    error = refused(base, broken)
    assert error.parameter == "tokenizer_path" and "not a tokenizers JSON file" in str(error)
    # A tokenizer that configures no padding needs pad_id.
    from tokenizers import Tokenizer

    unpadded = Tokenizer.from_file(str(tokenizer_file))
    unpadded.no_padding()
    bare = tmp_path / "bare.json"
    unpadded.save(str(bare))
    error = refused(base, bare)
    assert error.parameter == "pad_id" and "configures no padding" in str(error)
    assert TextPreprocessor({**base, "pad_id": 1}, _held(bare))("x")[-1] == 1

    # A crafted file whose parsing panics in the library's Rust core (a BaseException) is a
    # ProcessingError too, not the end of the process.
    document = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    crafted = tmp_path / "crafted.json"
    document["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}
    crafted.write_text(json.dumps(document), encoding="utf-8")
    error = refused(base, crafted)
    assert error.parameter == "tokenizer_path" and "Cannot parse precompiled_charsmap" in str(error)
    # Rows no longer than the special tokens the tokenizer adds.
    short = refused({**base, "max_length": 2})
    assert short.parameter == "max_length" and "adds 2 special tokens" in str(short)
    assert TextPreprocessor(
        {**base, "max_length": 2, "add_special_tokens": False}, _held(tokenizer_file)
    )

    text = TextPreprocessor(base, _held(tokenizer_file))
    with pytest.raises(ProcessingError, match="UTF-8 text; byte 3 is not UTF-8"):
        text.batch([b"bad\xff"])
    with pytest.raises(ProcessingError, match="takes a string; got int"):
        text.batch([3])


def _document(**parameters: Any) -> dict[str, Any]:
    return {
        "kind": "model",
        "name": "texty",
        "version": "1.0.0",
        "task": "image_classification",
        "framework": {"name": "onnxruntime", "version": "^1.16"},
        "inputs": [
            {
                "name": "input",
                "type": "text",
                "parameters": {
                    "tokenizer_path": "repo://models/texty/1.0.0/tokenizer.json",
                    "max_length": 16,
                    **parameters,
                },
            }
        ],
        "outputs": [
            {"name": "logits", "type": "logits", "parameters": {"top_k": 1, "labels": ["a", "b"]}}
        ],
        "model": {"graph_path": "repo://models/texty/1.0.0/texty.onnx"},
    }


def _fields(document: dict[str, Any]) -> list[str]:
    import yaml

    with pytest.raises(ManifestError) as raised:
        load(yaml.safe_dump(document))
    return [str(error["path"]) for error in raised.value.errors]


def test_the_manifest_rules_of_text_inputs() -> None:
    import yaml

    document = _document()
    load(yaml.safe_dump(document))
    assert "repo://models/texty/1.0.0/tokenizer.json" in file_urls(document, "model")
    assert unsupported(document) is None and latency_only_problem(document) is None
    assert "inputs.0.parameters.max_length" in _fields(_document(max_length=9000))
    # An https:// tokenizer file needs its SHA-256.
    assert "inputs.0.parameters.tokenizer_sha256" in _fields(
        _document(tokenizer_path="https://example.org/tokenizer.json")
    )
    assert "inputs.0.parameters.tokenizer_path" in _fields(
        _document(tokenizer_path="repo://models/other/1.0.0/tokenizer.json")
    )
    assert "inputs.0.parameters.pad" in _fields(_document(pad=0))
    missing = _document()
    del missing["inputs"][0]["parameters"]["tokenizer_path"]
    assert any(field.startswith("inputs.0") for field in _fields(missing))


def test_the_graph_takes_the_ids_the_text_input_makes(store: Path) -> None:
    from predictors.manifests.graph_check import onnx_problems

    graph = store / MODEL_DIR / "review-sentiment.onnx"
    # int64 ids, rank 2, rows of 24: as the graph takes them.
    assert onnx_problems(_document(max_length=24), graph) == []
    found = dict(onnx_problems(_document(element_type="int32", max_length=24), graph))
    assert found["inputs.0.parameters.element_type"] == (
        "is int32, but the graph's input 'input' takes int64"
    )
    # The graph fixes its rows' length: another max_length is named before a run.
    assert dict(onnx_problems(_document(), graph)) == {
        "inputs.0.parameters.max_length": (
            "the text input's max_length is 16, but the graph's input 'input' takes rows of 24"
        )
    }


def test_a_text_input_reads_text_datasets_only_and_overrides_name_no_other_tokenizer() -> None:
    model = _document()
    image_model = {**model, "inputs": [{"name": "x", "type": "image", "parameters": {}}]}
    texts = {"name": "reviews", "encoding": "text"}
    images = {"name": "digits", "encoding": "png"}
    assert dataset_problem(model, texts) is None and dataset_problem(image_model, images) is None
    assert (
        "input input is text, tokenised from a dataset of encoding text; digits's encoding is"
        in (str(dataset_problem(model, images)))
    )
    assert "reviews holds text (encoding text), which only a text input reads" in str(
        dataset_problem(image_model, texts)
    )
    with pytest.raises(ManifestError) as raised:
        apply_overrides(
            model, ["inputs.0.parameters.tokenizer_path=repo://models/texty/1.0.0/other.json"]
        )
    [error] = raised.value.errors
    assert error["path"] == "inputs.0.parameters.tokenizer_path"
    assert "an override cannot name a file the manifest does not name there" in error["message"]
    # Nor one of the manifest's files in another field (the graph read as a tokenizer).
    with pytest.raises(ManifestError) as raised:
        apply_overrides(
            model, ["inputs.0.parameters.tokenizer_path=repo://models/texty/1.0.0/texty.onnx"]
        )
    assert [e["path"] for e in raised.value.errors] == ["inputs.0.parameters.tokenizer_path"]
    # Its other parameters may be overridden.
    longer = apply_overrides(model, ["inputs.0.parameters.max_length=32"])
    assert longer.data["inputs"][0]["parameters"]["max_length"] == 32


def test_a_text_dataset_holds_strings_or_utf8_and_bad_rows_are_named(tmp_path: Path) -> None:
    strings = tmp_path / "strings.parquet"
    pq.write_table(pa.table({"input": ["é bon", "bad"], "label": [1, 0]}), strings)
    assert split_problems(strings, labels=2, encoding="text", count=2) == []
    [(texts, labels)] = list(DatasetReader(strings, batch_size=4))
    assert texts == ["é bon".encode(), b"bad"] and labels.tolist() == [1, 0]

    raw = tmp_path / "raw.parquet"
    values = pa.array([b"fine", b"\xff\xfe", b"ok"], pa.binary())
    pq.write_table(pa.table({"input": values, "label": [0, 1, 0]}), raw)
    assert split_problems(raw, labels=2, encoding="text", count=3) == [
        "row 1's input is not UTF-8 text (byte 0; the manifest's encoding is text)"
    ]
    # Strings whose bytes are not UTF-8 (Arrow does not check them on reading).
    offsets = pa.py_buffer(np.array([0, 2, 4], np.int32).tobytes())
    broken = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"ok\xff\xfe")])
    invalid = tmp_path / "invalid.parquet"
    pq.write_table(pa.table({"input": broken, "label": [0, 1]}), invalid)
    [problem] = split_problems(invalid, labels=2, encoding="text", count=2)
    assert problem.startswith("rows 0 to 1: the input column is not valid UTF-8 text")
    # A text longer than a text input reads is named at upload, as a string or as bytes.
    from predictors.processing.text import MAX_TEXT_CHARACTERS

    long = "é" * (MAX_TEXT_CHARACTERS + 1)
    for column in (pa.array(["ok", long]), pa.array([b"ok", long.encode()], pa.binary())):
        overlong = tmp_path / "long.parquet"
        pq.write_table(pa.table({"input": column, "label": [0, 1]}), overlong)
        assert split_problems(overlong, labels=2, encoding="text", count=2) == [
            f"row 1's input is {MAX_TEXT_CHARACTERS + 1} characters, more than a text input "
            f"reads ({MAX_TEXT_CHARACTERS})"
        ]
    # Strings in a dataset of another encoding.
    [problem] = split_problems(strings, labels=2, encoding="png", count=2)
    assert problem == (
        "column 'input' holds strings, which only a dataset of encoding text may (this one's is "
        "png): store the inputs as binary"
    )
    numbers = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"input": [1, 2], "label": [0, 1]}), numbers)
    [problem] = split_problems(numbers, labels=2, encoding="text", count=2)
    assert "column 'input' is int64, not binary (or, for a text input, string)" in problem
