"""Several inputs from one text (`type: text_feature`, `predictors.processing.text.TextFeeds`):
a BERT-style model that takes its ids, its attention mask and its token type ids, each as the
`tokenizers` library gives them, fed by the evaluation loop as the graph fed them by hand
takes them, in ONNX Runtime and in PyTorch; and what is refused, naming it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from predictors.evaluation import EvaluationError, compare
from predictors.manifests import ManifestError, load
from predictors.manifests.graph_check import onnx_problems
from predictors.processing import ProcessingError
from predictors.processing.text import TextFeeds, TextPreprocessor
from predictors.tasks import latency_only_problem, unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

NAME, LENGTH = "review-bert", 24
FOLDER = f"models/{NAME}/1.0.0"
DATASET = "datasets/short-reviews/1.0.0"
FEATURES = ("attention_mask", "token_type_ids")


def _tokenizer(store: Path) -> Any:
    """The zoo's review tokenizer, its template giving the text's own tokens segment 1: type
    ids that are not all zeros, so that a model fed the wrong ones gives other outputs."""
    from tokenizers import Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(store / "models/review-sentiment/1.0.0/tokenizer.json"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:1 [SEP]:1",
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in ("[CLS]", "[SEP]")],
    )
    return tokenizer


def _module(vocabulary: int) -> Any:
    import torch
    from torch import nn

    class ReviewBert(nn.Module):
        """ids, mask, type ids (N, T) → (N, 2): token and segment embeddings, their mean over
        the tokens the mask keeps, a linear layer; with `pooled`, the mean too, after the
        logits (as Hugging Face models return more than the manifest reads)."""

        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocabulary, 16)
            self.segments = nn.Embedding(2, 16)
            self.classify = nn.Linear(16, 2)
            self.pooled = False

        def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> Any:
            hidden = self.tokens(ids) + self.segments(types)
            kept = mask.unsqueeze(2).to(hidden.dtype)
            pooled = (hidden * kept).sum(1) / kept.sum(1).clamp(min=1.0)
            out = self.classify(pooled)
            return (out, pooled) if self.pooled else out

    torch.manual_seed(7)
    return ReviewBert().eval()


def model_files(zoo: Path) -> dict[str, bytes]:
    """The BERT-style model over the zoo's review tokenizer: its tokenizer file, as ONNX
    (`model.onnx`: rows of any length; `fixed.onnx`: rows of LENGTH) and as TorchScript."""
    import torch

    from predictors.zoo.export import onnx_bytes, torchscript_bytes

    tokenizer = _tokenizer(zoo)
    module = _module(tokenizer.get_vocab_size())
    example = tuple(torch.ones((2, LENGTH), dtype=torch.int64) for _ in range(3))
    names = ("input_ids", *FEATURES)
    free = {**{name: {0: "batch", 1: "length"} for name in names}, "logits": {0: "batch"}}
    files = {
        "tokenizer.json": tokenizer.to_str().encode(),
        "model.onnx": onnx_bytes(
            module, example, input_names=names, output_names=("logits",), dynamic_axes=free
        ),
        # Rows of LENGTH only (the batch alone is free).
        "fixed.onnx": onnx_bytes(module, example, input_names=names, output_names=("logits",)),
    }
    module.pooled = True  # the TorchScript module returns (logits, pooled)
    return {**files, "model.pt": torchscript_bytes(module, example)}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zoo's short-reviews and the BERT-style model (`model_files`), in a store of their
    own."""
    zoo = zoo_store(("review-sentiment",))
    root = tmp_path_factory.mktemp("text-features")
    shutil.copytree(zoo / DATASET, root / DATASET)
    folder = root / FOLDER
    folder.mkdir(parents=True)
    for name, content in model_files(zoo).items():
        (folder / name).write_bytes(content)
    return root


def document(framework: str = "onnxruntime", **changes: Any) -> dict[str, Any]:
    graph = "model.onnx" if framework == "onnxruntime" else "model.pt"
    document: dict[str, Any] = {
        "kind": "model",
        "name": NAME,
        "version": "1.0.0",
        "task": "image_classification",
        "framework": {
            "name": framework,
            "version": ">=1.16.0 <2.0.0" if framework == "onnxruntime" else ">=2.0.0",
        },
        "inputs": [
            {
                "name": "input_ids",
                "type": "text",
                "parameters": {
                    "tokenizer_path": f"repo://{FOLDER}/tokenizer.json",
                    "max_length": LENGTH,
                },
            },
            {
                "name": "attention_mask",
                "type": "text_feature",
                "parameters": {"feature": "attention_mask"},
            },
            {
                "name": "token_type_ids",
                "type": "text_feature",
                "parameters": {"feature": "type_ids", "element_type": "int64"},
            },
        ],
        "outputs": [
            {
                "name": "logits",
                "type": "logits",
                "parameters": {"top_k": 2, "labels": ["negative", "positive"]},
            }
        ],
        "model": {"graph_path": f"repo://{FOLDER}/{graph}"},
        "attributes": {"trained": False},
    }
    document.update(changes)
    return document


def _manifest(document: dict[str, Any]) -> Any:
    return load(yaml.safe_dump(document))


def _library(store: Path, texts: list[str]) -> dict[str, np.ndarray]:
    """What `tokenizers` itself gives the texts: ids, mask and type ids, padded to LENGTH."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(store / FOLDER / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=LENGTH)
    tokenizer.enable_padding(length=LENGTH, pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    return {
        name: np.array([getattr(e, attribute) for e in encodings], np.int64)
        for name, attribute in (
            ("input_ids", "ids"),
            ("attention_mask", "attention_mask"),
            ("token_type_ids", "type_ids"),
        )
    }


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"dataset": "short-reviews", "threads": 1, "repeat": 1}


def test_each_review_is_fed_its_ids_mask_and_type_ids_as_the_library_gives_them(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    import onnxruntime as ort

    onnx = run_evaluation(model=_manifest(document()), batch_sizes=[1, 32])
    texts = [
        row["input"] for row in pq.read_table(store / DATASET / "validation.parquet").to_pylist()
    ]
    feeds = _library(store, texts)
    # The features are not trivial: padding is masked, and the text's tokens are segment 1.
    assert 0 < feeds["attention_mask"].mean() < 1 and feeds["token_type_ids"].any()
    session = ort.InferenceSession(
        str(store / FOLDER / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (logits,) = session.run(None, feeds)
    np.testing.assert_allclose(onnx.outputs, logits, rtol=1e-5, atol=1e-5)
    # Fed anything else, the graph answers otherwise: the comparison above can fail.
    for name in FEATURES:
        (other,) = session.run(None, {**feeds, name: np.ones_like(feeds[name])})
        assert np.abs(other - logits).max() > 1e-3
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in onnx.result["batch_sizes"]}
    assert by_size[1]["top1"] == by_size[32]["top1"] == onnx.result["accuracy"]["top1"]
    # Counted at the shape fed: three rows of 24 per input.
    theoretical = onnx.result["theoretical"]
    assert theoretical["counted"], theoretical.get("reason")
    assert theoretical["input_shapes"] == dict.fromkeys(("input_ids", *FEATURES), [LENGTH])

    # TorchScript takes the inputs in the manifest's order, and agrees input by input.
    torchscript = run_evaluation(model=_manifest(document("pytorch")), batch_sizes=[8])
    agreement = compare(onnx, torchscript)
    assert agreement["top1_agreement"] == 1.0 and agreement["max_abs_diff"] < 1e-4
    assert torchscript.result["theoretical"]["counted"]


def test_a_latency_only_run_and_layers_traced_in_onnx_runtime(
    run_evaluation: RunEvaluation,
) -> None:
    timed = run_evaluation(model=_manifest(document()), latency_only=True, batch_sizes=[16])
    assert timed.result["accuracy"] is None and timed.outputs.shape == (300, 2)
    traced = run_evaluation(
        model=_manifest(document()), trace_level="framework", batch_sizes=[32], limit=64
    )
    assert traced.result["accuracy"]["top1"] is not None
    # Each call's nodes, within their batch's span: the mask's and the type ids' among them.
    levels = [span.attributes["mlms.level"] for span in traced.spans]
    assert levels.count("model") == 2 and "framework" in levels
    ops = {span.attributes.get("mlms.op_type") for span in traced.spans}
    assert {"Gather", "ReduceSum"} <= ops


def test_the_preprocessor_packs_the_library_features_row_for_row(store: Path) -> None:
    inputs = document()["inputs"]
    feeds = TextFeeds.of(inputs)
    assert feeds is not None and feeds.names == ["input_ids", *FEATURES]
    text = TextPreprocessor(
        inputs[0]["parameters"],
        lambda url, sha: store / FOLDER / "tokenizer.json",
        feeds,
    )
    reviews = ["the kettle is great", "not bad at all, honestly"]
    packed = text.batch(reviews)
    assert packed.shape == (2, 3, LENGTH) and packed.dtype == np.int64
    unpacked = feeds.unpack(packed)
    expected = _library(store, reviews)
    for name in expected:
        assert unpacked[name].tolist() == expected[name].tolist()
        assert unpacked[name].flags.c_contiguous
    # Each feature in its own element type.
    small = TextFeeds.of(
        [
            {
                **inputs[0],
                "parameters": {**inputs[0]["parameters"], "element_type": "int32"},
            },
            inputs[1],
            inputs[2],
        ]
    )
    assert small is not None
    types = {name: array.dtype for name, array in small.unpack(packed).items()}
    assert types == {"input_ids": np.int32, "attention_mask": np.int32, "token_type_ids": np.int64}
    # A batch that is not the packed rows is named (custom code could not make one).
    with pytest.raises(ProcessingError, match=r"is \(N, 3, length\)"):
        feeds.unpack(packed[:, 0])
    # The padding's type id is the tokenizer file's own.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(store / FOLDER / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", pad_type_id=3)
    padded_file = store / FOLDER / "pad-type.json"
    tokenizer.save(str(padded_file))
    three = TextPreprocessor(inputs[0]["parameters"], lambda url, sha: padded_file, feeds)
    row = feeds.unpack(three.batch(["great"]))
    types, mask = row["token_type_ids"][0].tolist(), row["attention_mask"][0].tolist()
    assert [t for t, m in zip(types, mask, strict=True) if not m] == [3] * mask.count(0)
    assert mask.count(0) > 0
    # Without features, a text input's batch is its ids alone.
    assert TextFeeds.of(inputs[:1]) is None


def _fields(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ManifestError) as raised:
        _manifest(document)
    return {str(error["path"]): str(error["message"]) for error in raised.value.errors}


def test_bad_text_features_are_refused_naming_the_field(store: Path) -> None:
    valid = document()
    assert unsupported(valid) is None and latency_only_problem(valid) is None
    unknown = document()
    unknown["inputs"][1]["parameters"] = {"feature": "position_ids"}
    assert "inputs.1.parameters.feature" in _fields(unknown)
    extra = document()
    extra["inputs"][1]["parameters"] = {"feature": "attention_mask", "pad_id": 0}
    assert any(field.startswith("inputs.1.parameters") for field in _fields(extra))
    # A feature of a text the model does not tokenise.
    orphan = document()
    orphan["inputs"][0] = {
        "name": "input_ids",
        "type": "tensor",
        "parameters": {"element_type": "int64", "shape": [LENGTH]},
    }
    assert _fields(orphan)["inputs.1.type"] == (
        "text_feature: a feature of the text the model's text input tokenises, which needs "
        "exactly one text input; this model has 0"
    )
    # A sequence_labelling model runs on streams, not batches of texts.
    streamed = document(task="sequence_labelling")
    assert "are features of a text" in str(unsupported(streamed))
    # The graph's inputs are checked one by one: their types, and a length the graph fixes.
    assert onnx_problems(valid, store / FOLDER / "model.onnx") == []
    typed = document()
    typed["inputs"][1]["parameters"]["element_type"] = "int32"
    found = dict(onnx_problems(typed, store / FOLDER / "model.onnx"))
    assert found["inputs.1.parameters.element_type"] == (
        "is int32, but the graph's input 'attention_mask' takes int64"
    )
    # A feature takes the ids' type unless it says: the message says where it came from.
    narrow = document()
    narrow["inputs"][0]["parameters"]["element_type"] = "int32"
    found = dict(onnx_problems(narrow, store / FOLDER / "model.onnx"))
    assert found["inputs.1.parameters.element_type"] == (
        "is int32 (the text input's, by default), but the graph's input 'attention_mask' takes "
        "int64"
    )
    assert "inputs.2.parameters.element_type" not in found  # it says int64
    # Custom preprocess code does not run on a text tokenised with its features.
    coded = document(preprocess="def preprocess(value):\n    return value\n")
    for problem in (unsupported(coded), latency_only_problem(coded)):
        assert "custom preprocess code does not run on such a model" in str(problem)
    short = document()
    short["inputs"][0]["parameters"]["max_length"] = 16
    found = dict(onnx_problems(short, store / FOLDER / "fixed.onnx"))
    assert found["inputs.0.parameters.max_length"] == (
        "the text input's max_length is 16, but the graph's input 'input_ids' takes rows of 24"
    )
    assert found["inputs.2"] == (
        "the text input's max_length is 16, but the graph's input 'token_type_ids' takes rows of 24"
    )
    assert onnx_problems(short, store / FOLDER / "model.onnx") == []  # rows of any length


def test_what_the_loop_cannot_do_with_such_a_model_is_refused(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    # Refused before the model is fetched (its graph file here is not in the store).
    missing = document("pytorch")
    missing["model"]["graph_path"] = f"repo://{FOLDER}/absent.pt"
    with pytest.raises(EvaluationError, match="traces the layers of one-input calls only"):
        run_evaluation(model=_manifest(missing), trace_level="framework")
    with pytest.raises(EvaluationError, match="capture_inputs: the layer outputs are captured"):
        run_evaluation(model=_manifest(document()), capture_inputs=[0])
