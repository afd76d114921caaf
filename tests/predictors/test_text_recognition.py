"""Text recognition: a model's (N, T, C) per-timestep class scores decoded by CTC into text
(`predictors.processing.ctc`), scored by jiwer's character and word error rates
(`predictors.evaluation.scenarios.text_recognition`), through the real loop on a real ONNX
graph made here; and the checks of ctc outputs, charsets and text datasets."""

from __future__ import annotations

import io
import itertools
import math
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from predictors import manifests
from predictors.data import DatasetError, DatasetReader, split_problems, target_of
from predictors.evaluation import EvaluationError, compare
from predictors.evaluation.scenarios.text_recognition import text_metrics
from predictors.manifests import ManifestError
from predictors.manifests.graph_check import onnx_problems
from predictors.processing import ProcessingError
from predictors.processing.ctc import (
    CtcDecoder,
    beam_search,
    charset_from_text,
    greedy_path,
    load_charset,
)
from predictors.protocol import Report
from predictors.tasks import metric_problem, metric_text, metrics_text, unsupported
from tests.predictors.conftest import RunEvaluation

pytestmark = pytest.mark.database_free

# The model's charset (class 0 is the blank), and the texts it reads by the gray level of the
# image: code k for a uniform gray of 50 k.
CHARSET = ["h", "e", "l", "o", " ", "w", "r", "d"]
CODES = ["hello", "world", "hello world", ""]
STEPS = 16
# The split: each row's code (what the model reads) and its true text; rows 3 to 5 differ.
ROWS = [
    (0, "hello"),
    (1, "world"),
    (2, "hello world"),
    (0, "help"),  # "hello": p substituted by l, o inserted (2 character edits, 1 word)
    (1, "word"),  # "world": l inserted (1 character edit, 1 word)
    (3, "hi"),  # "": 2 characters and 1 word deleted
]
# 31 characters and 7 words in the true texts; 5 character edits, 3 word edits.
EXPECTED_CER = 5 / 31
EXPECTED_WER = 3 / 7


def _path(text: str) -> list[int]:
    """An alignment of `text` over STEPS timesteps: its first symbol twice (collapsed), a blank
    between two equal symbols, blanks to the end."""
    path: list[int] = []
    for index, symbol in enumerate(text):
        klass = CHARSET.index(symbol) + 1
        if path and path[-1] == klass:
            path.append(0)
        path.append(klass)
        if index == 0:
            path.append(klass)
    assert len(path) <= STEPS
    return path + [0] * (STEPS - len(path))


def _table() -> np.ndarray:
    """(codes, T, C) logits: 10 at each timestep's class of the code's alignment, 0 elsewhere."""
    table = np.zeros((len(CODES), STEPS, len(CHARSET) + 1), np.float32)
    for code, text in enumerate(CODES):
        table[code, np.arange(STEPS), _path(text)] = 10.0
    return table


def _graph(path: Path, time_first: bool = False) -> None:
    """An ONNX graph that reads an image's code from its mean gray level and gives that code's
    row of `_table` (transposed to (T, N, C) when `time_first`)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("ReduceMean", ["image"], ["level"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Mul", ["level", "scale"], ["scaled"]),
        helper.make_node("Round", ["scaled"], ["rounded"]),
        helper.make_node("Cast", ["rounded"], ["code"], to=TensorProto.INT64),
        helper.make_node("Gather", ["table", "code"], ["scores" if not time_first else "ntc"]),
    ]
    if time_first:
        nodes.append(helper.make_node("Transpose", ["ntc"], ["scores"], perm=[1, 0, 2]))
    graph = helper.make_graph(
        nodes,
        "ctc",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, 1, 4, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, None, None])],
        initializer=[
            numpy_helper.from_array(_table(), "table"),
            numpy_helper.from_array(np.array(255.0 / 50.0, np.float32), "scale"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)


def _png(level: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 8), level, np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def _split(path: Path, rows: list[tuple[int, Any]], text_type: pa.DataType | None = None) -> Path:
    images = pa.array([_png(50 * code) for code, _ in rows])
    texts = pa.array([text for _, text in rows], text_type or pa.string())
    pq.write_table(pa.table({"image": images, "text": texts}), path)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text-store")
    folder = root / "models/ctc-lines/1.0.0"
    folder.mkdir(parents=True)
    _graph(folder / "ctc.onnx")
    _graph(folder / "ctc-tnc.onnx", time_first=True)
    (folder / "charset.txt").write_text("\n".join(CHARSET) + "\n", encoding="utf-8")
    (folder / "short.txt").write_text("\n".join(CHARSET[:-1]) + "\n", encoding="utf-8")
    data = root / "datasets/lines/1.0.0"
    data.mkdir(parents=True)
    _split(data / "validation.parquet", ROWS)
    return root


def _model(graph: str = "ctc.onnx", **parameters: Any) -> manifests.Manifest:
    data: dict[str, Any] = {
        "kind": "model",
        "name": "ctc-lines",
        "version": "1.0.0",
        "description": "Reads a code from an image's gray level and emits its text's scores.",
        "license": "MIT",
        "task": "text_recognition",
        "framework": {"name": "onnxruntime", "version": ">=1.16.0 <2.0.0"},
        "inputs": [
            {
                "name": "image",
                "type": "image",
                "parameters": {
                    "decoder": "pillow",
                    "jpeg_dct_method": "islow",
                    "color_mode": "GRAY",
                    "layout": "NCHW",
                    "resize_method": "bilinear",
                    "resize_size": [4, 8],
                    "keep_aspect_ratio": False,
                    "crop_method": "none",
                    "crop_size": None,
                    "element_type": "float32",
                    "normalization_order": "convert_then_normalize",
                    "scale": 255.0,
                    "mean": [0.0],
                    "std": [1.0],
                },
            }
        ],
        "outputs": [
            {
                "name": "scores",
                "type": "ctc",
                "parameters": parameters or {"charset": CHARSET},
            }
        ],
        "model": {"graph_path": f"repo://models/ctc-lines/1.0.0/{graph}"},
        "attributes": {"trained": True},
    }
    return manifests.load(yaml.safe_dump(data))


def _dataset() -> manifests.Manifest:
    data = {
        "kind": "dataset",
        "name": "lines",
        "version": "1.0.0",
        "description": "Gray images, each naming a text line by its level.",
        "license": "MIT",
        "task": "text_recognition",
        "format": "parquet",
        "encoding": "png",
        "splits": {
            "validation": {"path": "repo://datasets/lines/1.0.0/validation.parquet", "count": 6}
        },
    }
    return manifests.load(yaml.safe_dump(data))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"framework": "onnxruntime", "threads": 1, "repeat": 1, "warmup": 1}


# -- the loop ------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_lines_are_decoded_and_scored_by_jiwer_through_the_loop(
    run_evaluation: RunEvaluation,
) -> None:
    greedy = run_evaluation(model=_model(), dataset=_dataset(), batch_sizes=[1, 4])
    decoded = [row[0][1] for row in greedy.predictions]
    assert decoded == [CODES[code] for code, _ in ROWS]
    assert all(row[0][0] == 0 and 0.99 < row[0][2] <= 1.0 for row in greedy.predictions)
    accuracy = greedy.result["accuracy"]
    truth = [text for _, text in ROWS]
    # Exactly jiwer's, on the same lists, and the edits counted by hand.
    assert accuracy["cer"] == jiwer.cer(truth, decoded)
    assert accuracy["wer"] == jiwer.wer(truth, decoded)
    assert accuracy["cer"] == pytest.approx(EXPECTED_CER, abs=1e-12)
    assert accuracy["wer"] == pytest.approx(EXPECTED_WER, abs=1e-12)
    assert accuracy["top1"] == accuracy["cer"] and accuracy["top5"] == accuracy["wer"]
    assert accuracy["exact_match"] == 0.5 and accuracy["count"] == 6
    assert accuracy["decoding"] == "greedy" and "beam_width" not in accuracy
    assert accuracy["library"] == "jiwer 4.0.0"
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in greedy.result["batch_sizes"]}
    assert by_size[1] == by_size[4]
    # What the result keeps: each line's confidence at every timestep, no label per line.
    assert greedy.outputs.shape == (6, STEPS) and (greedy.labels == -1).all()
    assert greedy.result["output_type"] == "frame_confidences"
    assert not greedy.result["notes"]
    # The report reads back as a text recognition's accuracy.
    read_back = Report.from_dict(greedy.result)
    assert type(read_back.accuracy).__name__ == "TextAccuracy"

    # (T, N, C) with time_axis 0, a charset file and beam decoding read the same texts.
    beam = run_evaluation(
        model=_model(
            "ctc-tnc.onnx",
            charset_path="repo://models/ctc-lines/1.0.0/charset.txt",
            time_axis=0,
            decoding="beam",
            beam_width=4,
        ),
        dataset=_dataset(),
        batch_sizes=[4],
    )
    assert [row[0][1] for row in beam.predictions] == decoded
    assert beam.result["accuracy"]["cer"] == accuracy["cer"]
    assert beam.result["accuracy"]["decoding"] == "beam"
    assert beam.result["accuracy"]["beam_width"] == 4
    agreement = compare(greedy, beam)
    assert agreement["top1_agreement"] == 1.0 and agreement["max_abs_diff"] < 1e-6


@pytest.mark.frameworks
def test_a_charset_that_does_not_fit_the_output_is_refused_naming_both_sizes(
    run_evaluation: RunEvaluation,
) -> None:
    model = _model(charset_path="repo://models/ctc-lines/1.0.0/short.txt")
    with pytest.raises(EvaluationError) as raised:
        run_evaluation(model=model, dataset=_dataset(), batch_sizes=[2])
    message = str(raised.value)
    assert "gives 9 classes per timestep, but the charset has 7 symbols" in message
    assert "with the blank, 8 classes" in message


def test_a_graph_whose_ctc_output_is_not_rank_3_is_refused(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    model = _model()
    _graph(tmp_path / "ctc.onnx")
    assert onnx_problems(model.data, tmp_path / "ctc.onnx") == []
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["image"], ["scores"])],
        "flat",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, 1, 4, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 32])],
    )
    flat = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(flat, tmp_path / "flat.onnx")
    assert onnx_problems(model.data, tmp_path / "flat.onnx") == [
        (
            "outputs.0",
            "the graph's output 'scores' has rank 2, but a ctc output is (N, T, C) or "
            "(T, N, C): rank 3",
        )
    ]


# -- decoding ------------------------------------------------------------------------------------


def _one_hot(path: list[int], classes: int, high: float = 10.0) -> np.ndarray:
    scores = np.zeros((1, len(path), classes))
    scores[0, np.arange(len(path)), path] = high
    return scores


def test_greedy_decoding_collapses_repeats_and_removes_blanks() -> None:
    decoder = CtcDecoder(("h", "e", "l", "o"))
    symbols = {"-": 0, "h": 1, "e": 2, "l": 3, "o": 4}
    # A repeat collapses; a blank between two l's keeps both ("ll" in "hello").
    cases = {"hhe-ll-lo--": "hello", "hel": "hel", "hell": "hel", "-----": "", "h-h": "hh"}
    for path, text in cases.items():
        scores = _one_hot([symbols[c] for c in path], 5)
        assert decoder.decode(scores)[0][0] == text, path
    # Probabilities decode as their logits do; the confidence is the best path's per timestep.
    probabilities = np.full((1, 3, 5), 0.05)
    probabilities[0, [0, 1, 2], [1, 0, 1]] = 0.8
    assert decoder.decode(probabilities) == [("hh", pytest.approx(0.8))]
    assert decoder.decode(np.log(probabilities)) == [("hh", pytest.approx(0.8))]


def test_the_blank_may_be_any_class_and_the_charset_maps_the_others_in_order() -> None:
    last = CtcDecoder(("a", "b"), blank=2)
    assert last.decode(_one_hot([0, 2, 0, 1, 1], 3))[0][0] == "aab"
    assert last.text([0, 1]) == "ab"
    middle = CtcDecoder(("a", "b"), blank=1)
    assert middle.decode(_one_hot([0, 1, 2, 2], 3))[0][0] == "ab"
    time_first = CtcDecoder(("a", "b"), time_axis=0)
    scores = _one_hot([1, 0, 2], 3).transpose(1, 0, 2)  # (T, N, C)
    assert time_first.decode(scores)[0][0] == "ab"


def _text_probabilities(log_probs: np.ndarray, blank: int) -> dict[tuple[int, ...], float]:
    """Every labelling's probability, summed over all its alignments (every path)."""
    steps, classes = log_probs.shape
    found: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(classes), repeat=steps):
        collapsed = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
        labelling = tuple(c for c in collapsed if c != blank)
        probability = math.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
        found[labelling] = found.get(labelling, 0.0) + probability
    return found


def test_beam_search_finds_the_most_probable_text_where_greedy_does_not() -> None:
    # Two timesteps, blank 0.6 and "a" 0.4 at each: the best path is blank-blank (0.36, ""),
    # but "a" has three alignments (aa, a-, -a) worth 0.64.
    scores = np.array([[[0.6, 0.4], [0.6, 0.4]]])
    assert CtcDecoder(("a",)).decode(scores) == [("", pytest.approx(0.6))]
    assert CtcDecoder(("a",), decoding="beam").decode(scores) == [("a", pytest.approx(0.8))]

    # Against every alignment of every text: a beam wide enough is exact.
    generator = np.random.default_rng(7)
    for _ in range(20):
        log_probs = np.log(generator.dirichlet(np.ones(3), size=5))
        exact = _text_probabilities(log_probs, blank=0)
        best = max(exact, key=lambda labelling: exact[labelling])
        labelling, score = beam_search(log_probs, blank=0, width=100)
        assert tuple(labelling) == best
        assert math.exp(score) == pytest.approx(exact[best], rel=1e-9)


def test_beam_and_greedy_agree_on_peaked_outputs() -> None:
    generator = np.random.default_rng(11)
    decoder = CtcDecoder(tuple("abcdefg"), decoding="beam", beam_width=5)
    for _ in range(20):
        path = generator.integers(0, 8, size=24)
        scores = np.full((1, 24, 8), 0.01 / 7)
        scores[0, np.arange(24), path] = 0.99
        log_probs = np.log(scores[0])
        greedy, _ = greedy_path(log_probs, blank=0)
        assert decoder.decode(scores)[0][0] == decoder.text(greedy)


def test_a_charset_file_has_a_symbol_per_line_a_space_line_the_space() -> None:
    assert charset_from_text("a\nb\n \nc\n") == ["a", "b", " ", "c"]
    assert charset_from_text("a\r\n \r\nb") == ["a", " ", "b"]
    with pytest.raises(ProcessingError, match="line 2 of the charset file is empty"):
        charset_from_text("a\n\nb\n")
    with pytest.raises(ProcessingError, match="exactly one of 'charset'"):
        load_charset({}, lambda url, sha: Path(url))
    with pytest.raises(ProcessingError, match="exactly one of 'charset'"):
        load_charset({"charset": ["a"], "charset_path": "repo://x"}, lambda url, sha: Path(url))


def test_an_output_whose_classes_are_not_the_charset_and_blank_is_refused() -> None:
    decoder = CtcDecoder(("a", "b", "c"))
    with pytest.raises(ProcessingError) as raised:
        decoder.decode(np.zeros((2, 5, 5)))
    assert str(raised.value) == (
        "the output gives 5 classes per timestep, but the charset has 3 symbols: with the "
        "blank, 4 classes"
    )
    with pytest.raises(ProcessingError, match=r"a ctc output is \(N, T, C\)"):
        decoder.decode(np.zeros((2, 4)))
    with pytest.raises(ProcessingError, match="blank must be a class index from 0 to 3"):
        CtcDecoder.of({"blank": 4}, ["a", "b", "c"])
    with pytest.raises(ProcessingError, match="decoding must be greedy or beam"):
        CtcDecoder.of({"decoding": "viterbi"}, ["a"])


def test_the_metrics_are_jiwers_over_the_whole_split() -> None:
    references = ["the cat sat", "on the mat", "a line"]
    hypotheses = ["the bat sat", "on mat", "a line"]
    metrics = text_metrics(references, hypotheses, CtcDecoder(("a",), decoding="beam"))
    assert metrics["cer"] == jiwer.cer(references, hypotheses)
    assert metrics["wer"] == jiwer.wer(references, hypotheses)
    assert metrics["wer"] == pytest.approx(2 / 8)  # one substitution, one deletion, 8 words
    assert metrics["exact_match"] == pytest.approx(1 / 3)
    assert metrics["decoding"] == "beam" and metrics["beam_width"] == 10


# -- datasets, manifests and results ------------------------------------------------------------


def test_a_text_split_is_read_and_checked_row_by_row(tmp_path: Path) -> None:
    assert target_of("text_recognition") == "text"
    good = _split(tmp_path / "good.parquet", [(0, "hello"), (1, "wörld")])
    ((_, texts),) = list(DatasetReader(good, 8, target="text"))
    assert texts.tolist() == ["hello", "wörld"]
    assert split_problems(good, labels=None, encoding="png", count=2, target="text") == []

    empty = _split(tmp_path / "empty.parquet", [(0, "a"), (0, " "), (1, "")])
    problems = split_problems(empty, labels=None, encoding="png", count=3, target="text")
    assert problems == [
        "row 1's text ' ' is empty: a text line has at least one character",
        "row 2's text '' is empty: a text line has at least one character",
    ]
    with pytest.raises(DatasetError, match="row 1's text ' ' is empty"):
        list(DatasetReader(empty, 8, target="text"))

    null = _split(tmp_path / "null.parquet", [(0, "a"), (0, None)])
    problems = split_problems(null, labels=None, encoding="png", count=2, target="text")
    assert problems == ["rows 0 to 1 include a null image or text"]

    numbers = _split(tmp_path / "numbers.parquet", [(0, 1), (1, 2)], pa.int64())
    problems = split_problems(numbers, labels=None, encoding="png", count=2, target="text")
    assert problems == ["column 'text' is int64, not a string (the line's text, UTF-8)"]

    path = tmp_path / "unlabelled.parquet"
    pq.write_table(pa.table({"image": pa.array([_png(0)]), "label": pa.array([0])}), path)
    problems = split_problems(path, labels=None, encoding="png", count=1, target="text")
    assert (
        problems and "needs the columns 'image' (or 'audio', or 'input') and 'text'" in problems[0]
    )


def _errors(text: str) -> list[str]:
    with pytest.raises(ManifestError) as raised:
        manifests.load(text)
    return [f"{e['path']}: {e['message']}" for e in raised.value.errors]


def test_the_manifest_rules_of_ctc_outputs_and_text_datasets() -> None:
    data = _model().data
    assert unsupported(data) is None

    def with_output(**changes: Any) -> str:
        output = {**data["outputs"][0], **changes}
        return yaml.safe_dump({**data, "outputs": [output]})

    both = with_output(parameters={"charset": ["a"], "charset_path": "repo://x/y.txt"})
    assert any("charset and charset_path are exclusive" in e for e in _errors(both))
    neither = with_output(parameters={"blank": 0})
    assert any("'charset' (or 'charset_path') is required" in e for e in _errors(neither))
    blank = with_output(parameters={"charset": ["a", "b"], "blank": 3})
    assert (
        "outputs.0.parameters.blank: is 3, but the charset's 2 symbols and the blank make 3 "
        "classes: the blank is a class index from 0 to 2"
    ) in _errors(blank)
    width = with_output(parameters={"charset": ["a"], "beam_width": 4})
    assert "outputs.0.parameters.beam_width: is read with decoding beam only" in _errors(width)
    labels = with_output(parameters={"charset": ["a"], "labels": ["a"]})
    assert "outputs.0.parameters.labels: unknown field 'labels'" in _errors(labels)
    remote = with_output(parameters={"charset_path": "https://example.org/charset.txt"})
    assert (
        "outputs.0.parameters.charset_sha256: 'charset_sha256' is required when 'charset_path' "
        "is an https:// URL (the download is checked against it)"
    ) in _errors(remote)
    axis = with_output(parameters={"charset": ["a"], "time_axis": 2})
    assert "outputs.0.parameters.time_axis: 2 is not one of 0, 1" in _errors(axis)
    classifier = yaml.safe_dump({**data, "task": "image_classification"})
    assert any(
        "outputs.0.type: is read by text_recognition models only" in e for e in _errors(classifier)
    )
    # A ctc output's charset file is one of the manifest's files (stored, fetched).
    on_file = manifests.load(
        with_output(parameters={"charset_path": "repo://models/ctc-lines/1.0.0/c.txt"})
    )
    assert ("outputs.0.parameters.charset_path", "models/ctc-lines/1.0.0/c.txt") in (
        on_file.repo_paths()
    )

    logits = {"name": "scores", "type": "logits", "parameters": {"top_k": 1, "labels": ["a"]}}
    assert "a text_recognition model's scored output is ctc" in str(
        unsupported({**data, "outputs": [logits]})
    )
    assert "custom postprocess code" in str(unsupported({**data, "postprocess": "x = 1"}))

    dataset = dict(_dataset().data)
    assert any(
        "a text_recognition dataset names no labels" in e
        for e in _errors(yaml.safe_dump({**dataset, "labels": ["a"]}))
    )


def test_error_rates_are_lower_is_better_percentages() -> None:
    assert metric_text("text_recognition", 0.0523) == "5.23%"
    assert metrics_text("text_recognition", 0.0523, 0.25) == "CER 5.23%, WER 25.00%"
    # Insertions can take an error rate past 1; it is never negative.
    assert metric_problem("text_recognition", "top1", 1.4) is None
    assert ">= 0" in str(metric_problem("text_recognition", "top5", -0.1))


def test_scores_are_read_timestep_by_timestep() -> None:
    """A timestep of probabilities is logged, a timestep of logits log-softmaxed, in one batch."""
    from predictors.processing.ctc import log_probabilities

    probabilities = np.array([0.7, 0.2, 0.1])
    logits = np.array([2.0, 0.5, -1.0])
    read = log_probabilities(np.stack([probabilities, logits])[None])
    np.testing.assert_allclose(read[0, 0], np.log(probabilities))
    np.testing.assert_allclose(read[0, 1], logits - np.log(np.exp(logits).sum()))
