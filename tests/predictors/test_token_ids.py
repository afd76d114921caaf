"""Sequence-to-sequence text (`type: token_ids`, `predictors.processing.token_ids`): the token
ids a model emits, decoded into text by the tokenizer file the output names and scored by
jiwer's character and word error rates, through the real loop on real ONNX graphs made here.

The known answer: a model that emits its input's own ids (the text input tokenised by the
same file) reads every text back as the tokenizer's decoder writes it, so its error rates are
those of the split's inputs against its true texts, counted by hand below."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from predictors import manifests
from predictors.agent.results import result_upload
from predictors.evaluation import EvaluationError, compare
from predictors.manifests import ManifestError
from predictors.manifests.graph_check import onnx_problems
from predictors.processing import ProcessingError
from predictors.processing.token_ids import TokenIdsDecoder
from predictors.protocol import Job, JobOptions, ManifestRef, Report
from predictors.tasks import unsupported
from tests.predictors.conftest import RunEvaluation

pytestmark = pytest.mark.database_free

FOLDER = "models/echo-text/1.0.0"
WORDS = ["hello", "world", "the", "cat", "sat"]
VOCABULARY = {"[PAD]": 0, "[UNK]": 1, "<s>": 2, "</s>": 3} | {
    word: index + 4 for index, word in enumerate(WORDS)
}
LENGTH = 6
# An id no tokenizer here has: what the graph "echo-tail" emits in place of padding.
FOREIGN = 999
# Each input's text and its true text.
ROWS = [
    ("hello world", "hello world"),  # 0 edits; 11 characters, 2 words
    ("the cat sat", "the bat sat"),  # 1 character (c for b), 1 word; 11 characters, 3 words
    ("hello world", "hello"),  # " world" inserted: 6 characters, 1 word; 5 characters, 1 word
    ("cat", "cat"),  # 0 edits; 3 characters, 1 word
]
EXPECTED_CER = 7 / 30
EXPECTED_WER = 2 / 7


def _tokenizer(path: Path) -> None:
    """A word-level tokenizer: whitespace words, <s> and </s> around each text, [PAD] padding."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing

    tokenizer = Tokenizer(WordLevel(VOCABULARY, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "<s>", "</s>"])
    tokenizer.post_processor = TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.save(str(path))


def _graph(path: Path, *, tail: bool = False, output_type: int | None = None) -> None:
    """An ONNX graph that emits its input ids (`tail`: with FOREIGN in place of padding, as a
    generator that keeps emitting past its end; `output_type`: cast to that ONNX type)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Identity", ["input"], ["echoed"])]
    initializers = []
    last = "echoed"
    if tail:
        nodes += [
            helper.make_node("Equal", ["echoed", "pad"], ["padded"]),
            helper.make_node("Where", ["padded", "foreign", "echoed"], ["tailed"]),
        ]
        initializers = [
            numpy_helper.from_array(np.array(0, np.int64), "pad"),
            numpy_helper.from_array(np.array(FOREIGN, np.int64), "foreign"),
        ]
        last = "tailed"
    elem = TensorProto.INT64
    if output_type is not None:
        nodes.append(helper.make_node("Cast", [last], ["ids"], to=output_type))
        elem = output_type
    else:
        nodes.append(helper.make_node("Identity", [last], ["ids"]))
    graph = helper.make_graph(
        nodes,
        "echo",
        [helper.make_tensor_value_info("input", TensorProto.INT64, [None, LENGTH])],
        [helper.make_tensor_value_info("ids", elem, [None, LENGTH])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("token-ids-store")
    folder = root / FOLDER
    folder.mkdir(parents=True)
    _tokenizer(folder / "tokenizer.json")
    _graph(folder / "echo.onnx")
    _graph(folder / "echo-tail.onnx", tail=True)
    _graph(folder / "echo-float.onnx", output_type=1)
    data = root / "datasets/echo-lines/1.0.0"
    data.mkdir(parents=True)
    table = pa.table({"input": [text for text, _ in ROWS], "text": [truth for _, truth in ROWS]})
    pq.write_table(table, data / "validation.parquet")
    return root


def _model(graph: str = "echo.onnx", **parameters: Any) -> manifests.Manifest:
    return manifests.load(yaml.safe_dump(_model_data(graph, **parameters)))


def _model_data(graph: str = "echo.onnx", **parameters: Any) -> dict[str, Any]:
    tokenizer = f"repo://{FOLDER}/tokenizer.json"
    return {
        "kind": "model",
        "name": "echo-text",
        "version": "1.0.0",
        "description": "Emits the ids of the text it reads.",
        "license": "MIT",
        "task": "text_recognition",
        "framework": {"name": "onnxruntime", "version": ">=1.16.0 <2.0.0"},
        "inputs": [
            {
                "name": "input",
                "type": "text",
                "parameters": {"tokenizer_path": tokenizer, "max_length": LENGTH},
            }
        ],
        "outputs": [
            {
                "name": "ids",
                "type": "token_ids",
                "parameters": {"tokenizer_path": tokenizer, **parameters},
            }
        ],
        "model": {"graph_path": f"repo://{FOLDER}/{graph}"},
        "attributes": {"trained": True},
    }


def _dataset() -> manifests.Manifest:
    data = {
        "kind": "dataset",
        "name": "echo-lines",
        "version": "1.0.0",
        "description": "Texts, and the texts they should read as.",
        "license": "MIT",
        "task": "text_recognition",
        "format": "parquet",
        "encoding": "text",
        "splits": {
            "validation": {
                "path": "repo://datasets/echo-lines/1.0.0/validation.parquet",
                "count": len(ROWS),
            }
        },
    }
    return manifests.load(yaml.safe_dump(data))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"framework": "onnxruntime", "threads": 1, "repeat": 1, "warmup": 1}


# -- the loop ------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_a_model_that_emits_its_input_ids_reads_its_texts_back(
    run_evaluation: RunEvaluation,
) -> None:
    echo = run_evaluation(model=_model(), dataset=_dataset(), batch_sizes=[1, 3])
    decoded = [row[0][1] for row in echo.predictions]
    assert decoded == [text for text, _ in ROWS]
    # Emitted ids carry no confidence.
    assert all(row == [(0, row[0][1], None)] for row in echo.predictions)
    accuracy = echo.result["accuracy"]
    truth = [truth for _, truth in ROWS]
    assert accuracy["cer"] == jiwer.cer(truth, decoded)
    assert accuracy["cer"] == pytest.approx(EXPECTED_CER, abs=1e-12)
    assert accuracy["wer"] == pytest.approx(EXPECTED_WER, abs=1e-12)
    assert accuracy["top1"] == accuracy["cer"] and accuracy["top5"] == accuracy["wer"]
    assert accuracy["exact_match"] == 0.5 and accuracy["count"] == len(ROWS)
    assert accuracy["decoding"] == "tokenizer" and "beam_width" not in accuracy
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in echo.result["batch_sizes"]}
    assert by_size[1] == by_size[3]
    # What the result keeps: each input's ids as emitted (<s> 4 5 </s>, padding), no label.
    assert echo.result["output_type"] == "token_ids"
    assert echo.outputs.shape == (len(ROWS), LENGTH) and (echo.labels == -1).all()
    assert echo.outputs[0].tolist() == [2, 4, 5, 3, 0, 0]
    assert not echo.result["notes"]
    assert type(Report.from_dict(echo.result).accuracy).__name__ == "TextAccuracy"
    # What an agent posts: every line's text, and no probability.
    ref = ManifestRef(1, "echo-text", "1.0.0", "onnxruntime", "0" * 64, "")
    upload = result_upload(Job("e", "c" * 32, 1, "cpu", ref, ref, JobOptions()), echo)
    assert upload.predictions.texts == decoded
    assert upload.predictions.classes == [[0]] * len(ROWS)
    assert upload.predictions.probabilities == [[]] * len(ROWS)

    # A generator that emits a foreign id past its end: read up to end_id, the same texts.
    tailed = run_evaluation(model=_model("echo-tail.onnx", end_id=3), dataset=_dataset())
    assert [row[0][1] for row in tailed.predictions] == decoded
    assert tailed.result["accuracy"]["cer"] == accuracy["cer"]
    agreement = compare(echo, tailed)
    assert agreement["top1_agreement"] == 1.0 and agreement["max_abs_diff"] is None

    # Without skipping special tokens, the text holds them as the tokenizer writes them.
    special = run_evaluation(
        model=_model(skip_special_tokens=False), dataset=_dataset(), batch_sizes=[4]
    )
    assert special.predictions[3][0][1] == "<s> cat </s> [PAD] [PAD] [PAD]"
    assert special.result["accuracy"]["cer"] > accuracy["cer"]


@pytest.mark.frameworks
def test_ids_the_tokenizer_does_not_have_are_refused_naming_the_input_and_the_id(
    run_evaluation: RunEvaluation,
) -> None:
    with pytest.raises(EvaluationError) as raised:
        run_evaluation(model=_model("echo-tail.onnx"), dataset=_dataset(), batch_sizes=[2])
    message = str(raised.value)
    assert message.startswith("echo-text 1.0.0 in onnxruntime's token_ids output: ")
    assert f"input 0 emits id {FOREIGN}, which is not one of the tokenizer's ids" in message
    assert "(0 to 8)" in message and "give end_id" in message


def test_a_graph_whose_token_ids_are_not_rank_2_integers_is_refused(store: Path) -> None:
    data = _model_data()
    folder = store / FOLDER
    assert onnx_problems(data, folder / "echo.onnx") == []
    assert onnx_problems(data, folder / "echo-float.onnx") == [
        (
            "outputs.0",
            "the graph's output 'ids' is float32 of rank 2, but a token_ids output is (N, L) "
            "integer ids: rank 2, an integer type",
        )
    ]


# -- the decoder -------------------------------------------------------------------------------


def _decoder(store: Path, **parameters: Any) -> TokenIdsDecoder:
    file = store / FOLDER / "tokenizer.json"
    return TokenIdsDecoder.of(
        {"tokenizer_path": f"repo://{FOLDER}/tokenizer.json", **parameters}, lambda url, _: file
    )


def test_the_decoder_reads_up_to_the_end_and_checks_shape_type_and_ids(store: Path) -> None:
    decoder = _decoder(store, end_id=3)
    # Past the first end nothing is read: not the foreign id, nor the words after it.
    ids = np.array([[2, 4, 3, FOREIGN, 5], [4, 5, 6, 7, 8]], np.int32)
    assert decoder.decode(ids) == ["hello", "hello world the cat sat"]
    assert decoder.ids(ids) == [[2, 4], [4, 5, 6, 7, 8]]
    # An end first: the empty text.
    assert decoder.decode(np.array([[3, 4]])) == [""]
    with pytest.raises(ProcessingError, match=r"is \(N, L\).*got shape \(2, 5, 1\)"):
        decoder.decode(ids[..., None])
    with pytest.raises(ProcessingError, match="holds integer ids; got float32"):
        decoder.decode(ids.astype(np.float32))
    with pytest.raises(ProcessingError, match="input 1 emits id -1"):
        decoder.decode(np.array([[4, 3], [-1, 4]]))
    with pytest.raises(ProcessingError, match="end_id is 9, beyond the tokenizer's ids"):
        _decoder(store, end_id=9)
    for name, value, words in (
        ("end_id", -1, "a token id"),
        ("end_id", True, "a token id"),
        ("skip_special_tokens", "yes", "true or false"),
        ("pad_id", 0, "unknown token_ids parameter 'pad_id'"),
    ):
        with pytest.raises(ProcessingError, match=words) as raised:
            _decoder(store, **{name: value})
        assert raised.value.parameter == name
    not_json = store / "not-a-tokenizer.json"
    not_json.write_text("{}", encoding="utf-8")
    with pytest.raises(ProcessingError, match="not a tokenizers JSON file") as raised:
        TokenIdsDecoder.of({"tokenizer_path": "repo://x.json"}, lambda url, _: not_json)
    assert raised.value.parameter == "tokenizer_path"


# -- the manifest -------------------------------------------------------------------------------


def _errors(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as raised:
        manifests.load(yaml.safe_dump(data))
    return [f"{e['path']}: {e['message']}" for e in raised.value.errors]


def test_the_manifest_rules_of_token_ids_outputs() -> None:
    data = _model_data()
    assert unsupported(data) is None
    loaded = manifests.load(yaml.safe_dump(data))
    # The output's tokenizer file is one of the manifest's files (stored, fetched).
    assert ("outputs.0.parameters.tokenizer_path", f"{FOLDER}/tokenizer.json") in (
        loaded.repo_paths()
    )

    def with_parameters(**parameters: Any) -> dict[str, Any]:
        return {**data, "outputs": [{**data["outputs"][0], "parameters": parameters}]}

    assert any("tokenizer_path" in e for e in _errors(with_parameters(end_id=3)))
    remote = with_parameters(tokenizer_path="https://example.org/tokenizer.json")
    assert (
        "outputs.0.parameters.tokenizer_sha256: 'tokenizer_sha256' is required when "
        "'tokenizer_path' is an https:// URL (the download is checked against it)"
    ) in _errors(remote)
    unknown = with_parameters(tokenizer_path="repo://x/t.json", labels=["a"])
    assert "outputs.0.parameters.labels: unknown field 'labels'" in _errors(unknown)
    negative = with_parameters(tokenizer_path="repo://x/t.json", end_id=-1)
    assert any(e.startswith("outputs.0.parameters.end_id:") for e in _errors(negative))
    classifier = {**data, "task": "image_classification"}
    assert any(
        "outputs.0.type: is read by text_recognition models only" in e for e in _errors(classifier)
    )
    assert "custom postprocess code" in str(unsupported({**data, "postprocess": "x = 1"}))
