"""The manifest format: parsing, validation, errors, the corpus and the built-in manifests.

Pure Python: no Django, no database. The corpus lives in tests/fixtures/manifests/: every file in
valid/ must load; every file in invalid/ must fail, and its first line `# expect: PATH` names the
path of the first error (`<root>` for the whole document). Optional header lines: `# status: N`
(the HTTP status, 400 unless said) and `# line: N` (the line of the first error).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from predictors import manifests
from predictors.manifests import Manifest, ManifestError, loader

pytestmark = pytest.mark.database_free

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "manifests"
VALID = sorted((CORPUS / "valid").glob("*.yaml"))
INVALID = sorted((CORPUS / "invalid").glob("*.yaml"))
BUILTIN = sorted((REPO / "manifests").glob("**/*.yaml"))
PWNED = Path("/tmp/mlmodelscope-pwned")  # what the python-tag payloads in the corpus would create

IMAGE_PARAMETERS = (
    "decoder",
    "jpeg_dct_method",
    "color_mode",
    "layout",
    "resize_method",
    "resize_size",
    "keep_aspect_ratio",
    "crop_method",
    "crop_size",
    "element_type",
    "normalization_order",
    "scale",
    "mean",
    "std",
)


def header(path: Path) -> dict[str, str]:
    """The leading `# key: value` comment lines of a corpus file."""
    found = {}
    for line in path.read_bytes().decode("utf-8", "replace").splitlines():
        if not line.startswith("# ") or ": " not in line:
            break
        key, _, value = line[2:].partition(": ")
        found[key] = value.strip()
    return found


def errors_of(text: str | bytes, **kwargs) -> list[dict]:
    with pytest.raises(ManifestError) as caught:
        manifests.load(text, **kwargs)
    return caught.value.errors


def minimal_model() -> str:
    return (CORPUS / "valid" / "model-minimal.yaml").read_text()


# -- the corpus --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_corpus_file_loads_and_matches_the_published_schema(path: Path) -> None:
    manifest = manifests.load_file(path)
    assert manifest.source == path.read_text()
    jsonschema.Draft202012Validator(manifests.published_schema()).validate(manifest.data)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_corpus_file_fails_naming_the_expected_path(path: Path) -> None:
    expected = header(path)
    assert "expect" in expected, f"{path.name} lacks its '# expect: PATH' line"
    with pytest.raises(ManifestError) as caught:
        manifests.load(path.read_bytes())
    error = caught.value
    assert error.status == int(expected.get("status", 400))
    assert error.errors, "a ManifestError lists at least one error"
    first = error.errors[0]
    want = "" if expected["expect"] == "<root>" else expected["expect"]
    assert first["path"] == want, error.errors
    if "line" in expected:
        assert first["line"] == int(expected["line"])
    for item in error.errors:
        assert set(item) == {"path", "line", "message"}
        assert isinstance(item["path"], str)
        assert item["line"] is None or (isinstance(item["line"], int) and item["line"] >= 1)
        assert item["message"] and "Traceback" not in item["message"]
        assert "<class" not in item["message"] and "deque(" not in item["message"]


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML was built without libyaml")
@pytest.mark.parametrize("path", VALID + INVALID, ids=lambda p: p.name)
def test_pure_python_and_libyaml_loaders_agree(path: Path, monkeypatch) -> None:
    def outcome() -> object:
        try:
            return manifests.load(path.read_bytes()).data
        except ManifestError as error:
            return [(e["path"], e["message"].split(":")[0]) for e in error.errors]

    fast = outcome()
    monkeypatch.setattr(loader, "LOADER", loader.PythonLoader)
    assert outcome() == fast


def test_every_invalid_file_points_at_a_line_when_the_document_has_lines() -> None:
    for path in INVALID:
        with pytest.raises(ManifestError) as caught:
            manifests.load(path.read_bytes())
        first = caught.value.errors[0]
        if path.name != "yaml-empty.yaml":
            assert first["line"] is not None, path.name


def test_corpus_covers_a_bad_value_for_every_processing_parameter() -> None:
    expected = {header(path)["expect"] for path in INVALID}
    for parameter in IMAGE_PARAMETERS:
        prefix = f"inputs.0.parameters.{parameter}"
        assert any(p == prefix or p.startswith(prefix + ".") for p in expected), parameter


def test_corpus_covers_missing_required_fields() -> None:
    expected = {header(path)["expect"] for path in INVALID if path.name.startswith("missing-")}
    for field in ("kind", "name", "version", "task", "framework", "framework.name", "inputs"):
        assert field in expected
    for field in ("outputs", "model", "model.graph_path", "framework.version"):
        assert field in expected


def test_python_tags_in_the_corpus_never_run() -> None:
    PWNED.unlink(missing_ok=True)
    tagged = [path for path in INVALID if path.name.startswith("yaml-python")]
    assert len(tagged) >= 4
    for path in tagged:
        with pytest.raises(ManifestError) as caught:
            manifests.load_file(path)
        assert "is not allowed" in caught.value.errors[0]["message"]
    assert not PWNED.exists()


# -- the built-in manifests --------------------------------------------------------------------

ZOO = {
    ("model", "digits-cnn", "pytorch"),
    ("model", "digits-cnn", "tensorflow"),
    ("model", "digits-cnn", "onnxruntime"),
    ("model", "shapes-color", "pytorch"),
    ("model", "shapes-color", "tensorflow"),
    ("model", "shapes-color", "onnxruntime"),
    *{
        ("model", name, framework)
        for name in ("alexnet", "resnet-18", "resnet-50", "mobilenet-v2")
        for framework in ("pytorch", "onnxruntime")
    },
    ("dataset", "digits", ""),
    ("dataset", "shapes-color", ""),
    # Pretrained, from a PyPI package's wheel (docs/models.md).
    ("model", "text-direction", "onnxruntime"),
    ("dataset", "text-lines", ""),
    # Stateful streaming (predictors/zoo/streams.py).
    ("model", "toggle-gru", "onnxruntime"),
    ("model", "toggle-gru", "pytorch"),
    ("dataset", "toggle-clicks", ""),
    # Pretrained, from a PyPI package's wheel, on clips spoken locally (predictors/zoo/speech.py).
    ("model", "silero-vad", "onnxruntime"),
    ("dataset", "speech-clips", ""),
    # Object detection (predictors/zoo/detection.py).
    ("model", "shapes-detector", "onnxruntime"),
    ("model", "shapes-detector", "pytorch"),
    ("dataset", "shapes-boxes", ""),
    # Semantic segmentation (predictors/zoo/segmentation.py).
    ("model", "shapes-segmenter", "onnxruntime"),
    ("model", "shapes-segmenter", "pytorch"),
    ("dataset", "shapes-masks", ""),
    # Multi-label classification (predictors/zoo/multilabel.py).
    ("model", "shapes-tagger", "onnxruntime"),
    ("model", "shapes-tagger", "pytorch"),
    ("dataset", "shapes-sets", ""),
    # Regression, on scikit-learn's diabetes data (predictors/zoo/regression.py).
    ("model", "diabetes-mlp", "onnxruntime"),
    ("model", "diabetes-mlp", "pytorch"),
    ("dataset", "diabetes", ""),
    # Pretrained, from a PyPI package's wheel, reading raw bytes (predictors/zoo/filetypes.py).
    ("model", "file-type", "onnxruntime"),
    ("dataset", "file-types", ""),
    # Pretrained, from a PyPI package's wheel, a text recognizer (predictors/zoo/ocr.py).
    ("model", "text-recognizer", "onnxruntime"),
    ("dataset", "text-transcripts", ""),
    # Pretrained, from a PyPI package's wheel, a state dict: a speaker encoder on whole clips
    # (predictors/zoo/speakers.py).
    ("model", "speaker-encoder", "pytorch"),
    ("dataset", "speaker-clips", ""),
    # Pretrained, from a PyPI package's wheel, a TFLite file of three outputs on whole clips
    # cut into windows (predictors/zoo/notes.py).
    ("model", "basic-pitch", "tensorflow"),
    ("dataset", "piano-chords", ""),
    # Pretrained, from a PyPI package's wheel, a detector decoded by custom postprocess code
    # (predictors/zoo/textboxes.py).
    ("model", "text-detector", "onnxruntime"),
    ("dataset", "text-pages", ""),
    # A text classifier over the ids of its tokenizer file (predictors/zoo/reviews.py).
    ("model", "review-sentiment", "onnxruntime"),
    ("model", "review-sentiment", "pytorch"),
    ("dataset", "short-reviews", ""),
}
SEQUENCE_LABELLING = {"toggle-gru", "toggle-clicks", "silero-vad", "speech-clips"}
OBJECT_DETECTION = {"shapes-detector", "shapes-boxes", "text-detector", "text-pages"}
SEMANTIC_SEGMENTATION = {"shapes-segmenter", "shapes-masks"}
MULTI_LABEL = {"shapes-tagger", "shapes-sets", "basic-pitch", "piano-chords"}
REGRESSION = {"diabetes-mlp", "diabetes"}
EXTENSIONS = {"pytorch": "pt", "tensorflow": "keras", "onnxruntime": "onnx"}
# A file format's own extension, where it is not the framework's default.
FORMAT_EXTENSIONS = {"tflite": "tflite"}
RANGES = {
    "pytorch": ">=2.0.0 <3.0.0",
    "tensorflow": ">=2.15.0 <3.0.0",
    "onnxruntime": ">=1.16.0 <2.0.0",
}


def builtin() -> list[Manifest]:
    return [manifests.load_file(path) for path in BUILTIN]


def test_builtin_manifests_are_exactly_the_zoo() -> None:
    loaded = builtin()
    assert {(m.kind, m.name, m.framework) for m in loaded} == ZOO
    assert len(loaded) == len(ZOO)
    for manifest in loaded:
        assert manifest.version == "1.0.0"
        assert manifest.visibility == "public"
        assert manifest.task == (
            "sequence_labelling"
            if manifest.name in SEQUENCE_LABELLING
            else "object_detection"
            if manifest.name in OBJECT_DETECTION
            else "semantic_segmentation"
            if manifest.name in SEMANTIC_SEGMENTATION
            else "multi_label_classification"
            if manifest.name in MULTI_LABEL
            else "regression"
            if manifest.name in REGRESSION
            else "text_recognition"
            if manifest.name in ("text-recognizer", "text-transcripts")
            else "feature_extraction"
            if manifest.name in ("speaker-encoder", "speaker-clips")
            else "image_classification"
        )


def test_builtin_model_files_follow_the_store_layout() -> None:
    for manifest in builtin():
        if manifest.kind != "model":
            continue
        assert manifest.framework_range == RANGES[manifest.framework]
        files = manifest.data["model"]
        namespace = f"models/{manifest.name}/1.0.0"
        # A state dict's graph is its module's source; the weights are the model's file.
        weights = "weights_path" if files.get("format") == "state_dict" else "graph_path"
        extension = FORMAT_EXTENSIONS.get(files.get("format"), EXTENSIONS[manifest.framework])
        assert files[weights] == f"repo://{namespace}/{manifest.name}.{extension}"
        assert "graph_sha256" not in files  # the hub records it when the zoo is built
        assert all(path.startswith(namespace + "/") for _, path in manifest.repo_paths())


def test_builtin_processing_parameters() -> None:
    for manifest in builtin():
        if manifest.kind != "model" or manifest.name in (
            "text-direction",
            "toggle-gru",
            "silero-vad",
            "shapes-detector",
            "shapes-segmenter",
            "shapes-tagger",
            "diabetes-mlp",
            "file-type",
            "text-recognizer",
            "speaker-encoder",
            "basic-pitch",
            "text-detector",
            "review-sentiment",
        ):
            continue  # text-direction, text-recognizer, speaker-encoder, basic-pitch,
            # text-detector: their package's own processing (test_pretrained.py,
            # test_pretrained_ocr.py, test_pretrained_speakers.py, test_pretrained_basic_pitch.py,
            # test_pretrained_text_detector.py);
            # toggle-gru: tensor, constant and state inputs (test_streams.py); the others:
            # their task's tests; file-type: a bytes input (test_pretrained_magika.py);
            # review-sentiment: a text input (test_text_inputs.py)
        (image,) = manifest.data["inputs"]
        parameters = image["parameters"]
        assert image["type"] == "image"
        assert parameters["layout"] == ("NHWC" if manifest.framework == "tensorflow" else "NCHW")
        assert parameters["decoder"] == "pillow"
        assert parameters["jpeg_dct_method"] == "islow"
        assert parameters["element_type"] == "float32"
        assert parameters["normalization_order"] == "convert_then_normalize"
        assert parameters["scale"] == 255.0
        common = {k: v for k, v in parameters.items() if k != "layout"}
        if manifest.name == "digits-cnn":
            assert common["color_mode"] == "GRAY"
            assert common["resize_size"] == [8, 8]
            assert (common["mean"], common["std"]) == ([0.5], [0.5])
            assert common["crop_method"] == "none"
            assert manifest.data["attributes"]["trained"] is True
        elif manifest.name == "shapes-color":
            assert common["color_mode"] == "RGB"
            assert common["resize_size"] == [32, 32]
            assert (common["mean"], common["std"]) == ([0.5] * 3, [0.5] * 3)
            assert manifest.data["attributes"]["trained"] is True
        else:
            assert common["resize_size"] == [256, 256] and common["keep_aspect_ratio"] is True
            assert common["crop_method"] == "center" and common["crop_size"] == [224, 224]
            assert common["mean"] == [0.485, 0.456, 0.406]
            assert common["std"] == [0.229, 0.224, 0.225]
            assert manifest.data["attributes"]["trained"] is False
            labels = manifest.data["outputs"][0]["parameters"]["labels_path"]
            assert labels == f"repo://models/{manifest.name}/1.0.0/labels.txt"


def test_builtin_models_agree_with_their_dataset_on_labels() -> None:
    loaded = {(m.kind, m.name): m for m in builtin()}
    text = loaded[("model", "text-direction")].data["outputs"][0]["parameters"]["labels"]
    assert text == loaded[("dataset", "text-lines")].data["labels"] == ["0", "180"]
    for name in ("digits", "shapes-color"):
        dataset = loaded[("dataset", name)]
        model_name = "digits-cnn" if name == "digits" else name
        for framework in ("pytorch", "tensorflow", "onnxruntime"):
            path = REPO / "manifests" / "models" / model_name / f"{framework}.yaml"
            model = manifests.load_file(path)
            assert model.data["outputs"][0]["parameters"]["labels"] == dataset.data["labels"]
            assert model.data["attributes"]["training_dataset"] == name


# -- the API -----------------------------------------------------------------------------------


def test_load_returns_the_manifest_fields() -> None:
    manifest = manifests.load(minimal_model())
    assert manifest.kind == "model"
    assert (manifest.name, manifest.version, manifest.task) == (
        "example",
        "1.0.0",
        "image_classification",
    )
    assert manifest.framework == "onnxruntime"
    assert manifest.framework_range == ">=1.16.0 <2.0.0"
    assert manifest.visibility is None  # the document does not say
    assert manifest.namespace() == "models/example/1.0.0"
    assert manifest.data["inputs"][0]["parameters"]["mean"] == [0.5, 0.5, 0.5]


def test_load_accepts_bytes_and_a_byte_order_mark() -> None:
    text = minimal_model()
    assert manifests.load(text.encode()).data == manifests.load(text).data
    assert manifests.load(b"\xef\xbb\xbf" + text.encode()).data == manifests.load(text).data


def test_dataset_manifest_has_no_framework() -> None:
    manifest = manifests.load_file(CORPUS / "valid" / "dataset-full.yaml")
    assert (manifest.kind, manifest.framework, manifest.framework_range) == ("dataset", "", "")
    assert manifest.visibility == "private"
    assert manifest.namespace() == "datasets/example-data-full/1.2.3"


def test_manifest_is_frozen() -> None:
    manifest = manifests.load(minimal_model())
    with pytest.raises(AttributeError):
        manifest.name = "other"  # type: ignore[misc]


def test_load_with_a_kind_refuses_the_other_kind() -> None:
    errors = errors_of(minimal_model(), kind="dataset")
    assert errors[0]["path"] == "kind"
    assert errors[0]["message"] == "expected a dataset manifest, got a model manifest"
    assert manifests.load(minimal_model(), kind="model").kind == "model"
    with pytest.raises(ValueError):
        manifests.load(minimal_model(), kind="widget")


def test_every_error_is_listed_sorted_by_line() -> None:
    text = (
        minimal_model()
        .replace("layout: NCHW", "layout: XYZ")
        .replace("version: 1.0.0", "version: one")
        .replace("top_k: 1", "top_k: 0")
    )
    errors = errors_of(text)
    assert [e["path"] for e in errors] == [
        "version",
        "inputs.0.parameters.layout",
        "outputs.0.parameters.top_k",
    ]
    assert [e["line"] for e in errors] == sorted(e["line"] for e in errors)
    assert errors[1]["message"] == "'XYZ' is not one of NCHW, NHWC"


def test_a_missing_field_points_at_its_parent_line() -> None:
    text = minimal_model().replace("  name: onnxruntime\n", "")
    (error,) = errors_of(text)
    assert error == {
        "path": "framework.name",
        "line": text.splitlines().index("framework:") + 1,
        "message": "'name' is required",
    }


def test_a_missing_top_level_field_points_at_the_first_line() -> None:
    text = minimal_model().replace("version: 1.0.0\n", "")
    (error,) = errors_of(text)
    assert error["path"] == "version" and error["message"] == "'version' is required"
    assert error["line"] == 2  # the root mapping starts after the corpus comment


def test_yaml_syntax_error_reports_the_line() -> None:
    (error,) = errors_of("kind: model\nname: [x\nversion: 1.0.0\n")
    assert error["path"] == ""
    assert error["line"] == 3
    assert error["message"].startswith("YAML syntax error:")


def test_error_message_names_the_line_and_the_path() -> None:
    text = minimal_model().replace("layout: NCHW", "layout: XYZ")
    line = text.splitlines().index("      layout: XYZ") + 1
    with pytest.raises(ManifestError) as caught:
        manifests.load(text)
    assert (
        str(caught.value)
        == f"line {line}: inputs.0.parameters.layout: 'XYZ' is not one of NCHW, NHWC"
    )


def test_oversized_body_is_refused_before_parsing() -> None:
    body = "kind: [" * (manifests.MAX_MANIFEST_BYTES // 7 + 1)  # invalid YAML, never parsed
    for text in (body, body.encode()):
        with pytest.raises(ManifestError) as caught:
            manifests.load(text)
        assert caught.value.status == 413
        assert [e["path"] for e in caught.value.errors] == [""]
        assert "limit is 262,144 bytes" in caught.value.errors[0]["message"]


def test_size_limit_counts_bytes_not_characters() -> None:
    text = minimal_model() + "description: " + "é" * 100 + "\n"
    size = len(text.encode())
    assert manifests.load(text, max_bytes=size).name == "example"
    with pytest.raises(ManifestError) as caught:
        manifests.load(text, max_bytes=size - 1)
    assert caught.value.status == 413


def test_load_file_refuses_an_oversized_file(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(minimal_model() + "#" * manifests.MAX_MANIFEST_BYTES)
    with pytest.raises(ManifestError) as caught:
        manifests.load_file(path)
    assert caught.value.status == 413


def test_a_document_of_exactly_the_limit_loads() -> None:
    text = minimal_model()
    text += "#" * (manifests.MAX_MANIFEST_BYTES - len(text.encode()) - 1) + "\n"
    assert len(text.encode()) == manifests.MAX_MANIFEST_BYTES
    assert manifests.load(text).name == "example"


def test_non_utf8_body_is_a_400_naming_the_line() -> None:
    (error,) = errors_of(b"kind: model\nname: caf\xe9\n")
    assert error == {"path": "", "line": 2, "message": "the manifest is not UTF-8 text"}


def test_billion_laughs_fails_fast() -> None:
    laughs = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        laughs.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 10) + "]")
    text = "\n".join(laughs) + "\n"  # 10**10 strings once expanded
    started = time.perf_counter()
    (error,) = errors_of(text)
    elapsed = time.perf_counter() - started
    assert error["path"] == ""
    assert "expands to more than" in error["message"]
    assert error["line"] == 5  # the first anchor past the limit: 10**5 nodes
    assert elapsed < 1.0  # the document is never expanded


def test_alias_fan_out_is_counted_even_when_each_alias_is_small() -> None:
    anchor = "[" + ", ".join(["1"] * 100) + "]"
    text = f"a: &a {anchor}\nb: [" + ", ".join(["*a"] * 2000) + "]\n"  # 200,000 nodes
    assert "expands to more than" in errors_of(text)[0]["message"]


def test_deep_nesting_fails_cleanly() -> None:
    text = "a: " + "[" * 20000 + "]" * 20000 + "\n"
    (error,) = errors_of(text)
    assert error["path"] == "" and "deeper than 64 levels" in error["message"]
    (error,) = errors_of("a: " + "{b: " * 100 + "1" + "}" * 100 + "\n")
    assert "deeper than 64 levels" in error["message"]


def test_an_alias_cannot_make_the_document_deeper_than_the_limit() -> None:
    deep = "[" * 40 + "]" * 40
    text = f"a: &a {deep}\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    assert "deeper than 64 levels" in errors_of(text)[0]["message"]


def test_python_payload_does_not_run() -> None:
    PWNED.unlink(missing_ok=True)
    payloads = [
        f'description: !!python/object/apply:os.system ["touch {PWNED}"]',
        f'description: !!python/object/new:subprocess.check_call [["touch", "{PWNED}"]]',
        f"!!python/object/apply:os.system\nargs: ['touch {PWNED}']",
    ]
    for payload in payloads:
        errors = errors_of(
            minimal_model() + payload + "\n" if "description" in payload else payload
        )
        assert "is not allowed" in errors[0]["message"]
    assert not PWNED.exists()


def test_every_non_json_tag_is_refused_with_its_line() -> None:
    text = (
        "kind: model\nname: !custom x\nversion: !!binary aGk=\ntask: !!str image_classification\n"
    )
    errors = errors_of(text)
    assert [(e["path"], e["line"]) for e in errors] == [("name", 2), ("version", 3)]
    assert errors[0]["message"].startswith("the tag !custom is not allowed")
    assert errors[1]["message"].startswith("the tag !!binary is not allowed")


def test_duplicate_keys_are_refused() -> None:
    (error,) = errors_of(minimal_model().replace("task: ", "name: again\ntask: "))
    assert error["path"] == "name"
    assert error["message"] == "duplicate key 'name' (first on line 3)"


def test_scalars_follow_the_yaml_1_2_core_schema() -> None:
    text = minimal_model() + (
        "attributes:\n  a: yes\n  b: 1e-3\n  c: 0o17\n  d: 1:20\n  e: 0x1F\n  f: ~\n"
        "  g: No\n  h: TRUE\n  i: 012\n  j: '3'\n"
    )
    attributes = manifests.load(text).data["attributes"]
    assert attributes == {
        "a": "yes",
        "b": 0.001,
        "c": 15,
        "d": "1:20",
        "e": 31,
        "f": None,
        "g": "No",
        "h": True,
        "i": 12,
        "j": "3",
    }


def test_errors_are_human_sentences() -> None:
    cases = {
        "color_mode: RGB": (
            "color_mode: rgb",
            "'rgb' is not one of RGB, BGR, GRAY (did you mean RGB?)",
        ),
        "scale: 255.0": ("scale: 0", "must be greater than 0, not 0"),
        "resize_size: [32, 32]": ("resize_size: 32", "must be a list or null, not the number 32"),
        "keep_aspect_ratio: false": (
            "keep_aspect_ratio: 'no'",
            "must be true or false, not the string 'no'",
        ),
        "mean: [0.5, 0.5, 0.5]": (
            "mean: [0.5]",
            "has 1 value but color_mode RGB has 3 channels: give one value per channel",
        ),
    }
    for old, (new, message) in cases.items():
        errors = errors_of(minimal_model().replace(old, new))
        assert errors[0]["message"] == message


def test_unknown_field_suggests_the_close_one() -> None:
    (error,) = errors_of(minimal_model().replace("visibility", "x") + "visibilty: public\n")
    assert error["path"] == "visibilty"
    assert error["message"] == "unknown field 'visibilty' (did you mean visibility?)"


def test_mean_and_std_count_channels_by_color_mode() -> None:
    gray = minimal_model().replace("color_mode: RGB", "color_mode: GRAY")
    errors = errors_of(gray)
    assert [e["path"] for e in errors] == ["inputs.0.parameters.mean", "inputs.0.parameters.std"]
    ok = gray.replace("mean: [0.5, 0.5, 0.5]", "mean: [0.5]").replace(
        "std: [0.5, 0.5, 0.5]", "std: [0.5]"
    )
    assert manifests.load(ok).data["inputs"][0]["parameters"]["color_mode"] == "GRAY"


def test_crop_size_is_required_exactly_when_cropping() -> None:
    center = minimal_model().replace("crop_method: none", "crop_method: center")
    assert errors_of(center)[0]["message"] == "must be [height, width] when crop_method is center"
    assert manifests.load(center.replace("crop_size: null", "crop_size: [16, 16]"))
    sized = minimal_model().replace("crop_size: null", "crop_size: [16, 16]")
    assert errors_of(sized)[0]["message"] == "must be null when crop_method is none"


def test_https_files_need_a_sha256_and_repo_files_do_not() -> None:
    https = minimal_model().replace(
        "repo://models/example/1.0.0/example.onnx", "https://example.com/example.onnx"
    )
    (error,) = errors_of(https)
    assert error["path"] == "model.graph_sha256"
    good = https + f'  graph_sha256: "{"ab" * 32}"\n'
    assert manifests.load(good).repo_paths() == []
    for url in ("https:///no-host.onnx", "https://[::1/x.onnx", "https://a b/x.onnx"):
        (error,) = errors_of(good.replace("https://example.com/example.onnx", url))
        assert error["path"] == "model.graph_path"
        assert error["message"].endswith("is not a valid https:// URL")


def test_repo_paths_lists_every_store_file() -> None:
    model = manifests.load_file(CORPUS / "valid" / "model-full.yaml")
    assert model.repo_paths() == [
        ("model.weights_path", "models/example-full/2.1.0-rc.1/weights/example-full.bin"),
        ("outputs.0.parameters.labels_path", "models/example-full/2.1.0-rc.1/labels.txt"),
    ]
    dataset = manifests.load_file(CORPUS / "valid" / "dataset-full.yaml")
    assert dataset.repo_paths() == [
        ("labels_path", "datasets/example-data-full/1.2.3/labels.txt"),
        ("splits.train.path", "datasets/example-data-full/1.2.3/train.parquet"),
        ("splits.validation.path", "datasets/example-data-full/1.2.3/splits/validation.parquet"),
    ]


def test_content_hash_is_the_sha256_of_canonical_json() -> None:
    manifest = manifests.load(minimal_model())
    canonical = json.dumps(manifest.data, sort_keys=True, separators=(",", ":"))
    assert manifest.content_hash() == hashlib.sha256(canonical.encode()).hexdigest()
    reformatted = manifests.load(
        "# another layout, same content\n" + manifest.source.replace("top_k: 1", "top_k:    1")
    )
    assert reformatted.content_hash() == manifest.content_hash()
    changed = manifests.load(manifest.source.replace("top_k: 1", "top_k: 2"))
    assert changed.content_hash() != manifest.content_hash()


def test_content_hash_ignores_key_order() -> None:
    text = minimal_model()
    lines = text.splitlines(keepends=True)
    swapped = "".join([lines[0], lines[2], lines[1], *lines[3:]])  # name before kind
    assert swapped != text
    assert manifests.load(swapped).content_hash() == manifests.load(text).content_hash()


# -- schemas -----------------------------------------------------------------------------------


def walk_properties(node: object, where: str = "") -> list[tuple[str, dict]]:
    found = []
    if isinstance(node, dict):
        for name, value in node.get("properties", {}).items():
            found.append((f"{where}.{name}", value))
        for key, value in node.items():
            if key != "if":  # a condition, not a declaration
                found.extend(walk_properties(value, f"{where}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(walk_properties(value, f"{where}/{index}"))
    return found


@pytest.mark.parametrize("kind", manifests.KINDS)
def test_schema_is_draft_2020_12_with_titles_and_descriptions(kind: str) -> None:
    document = manifests.schema(kind)
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["additionalProperties"] is False
    properties = walk_properties(document)
    assert len(properties) > 10
    for where, definition in properties:
        if "$ref" in definition and len(definition) == 1:
            continue  # the conditional branches refer to a titled definition
        assert definition.get("title") and definition.get("description"), where


def test_schema_returns_a_copy() -> None:
    manifests.schema("model")["title"] = "changed"
    assert manifests.schema("model")["title"] == "MLModelScope model manifest"
    with pytest.raises(ValueError):
        manifests.schema("widget")


def test_image_parameters_are_all_required_and_closed() -> None:
    parameters = manifests.schema("model")["$defs"]["imageParameters"]
    assert tuple(parameters["required"]) == IMAGE_PARAMETERS
    assert parameters["additionalProperties"] is False


def test_published_schema_holds_both_kinds() -> None:
    document = manifests.published_schema()
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["$id"] == manifests.PUBLISHED_SCHEMA_ID
    assert document["title"]
    validator = jsonschema.Draft202012Validator(document)
    model = manifests.load(minimal_model()).data
    dataset = manifests.load_file(CORPUS / "valid" / "dataset-minimal.yaml").data
    assert validator.is_valid(model) and validator.is_valid(dataset)
    assert not validator.is_valid({**model, "kind": "dataset"})
    assert not validator.is_valid({k: v for k, v in model.items() if k != "kind"})
    broken = copy.deepcopy(model)
    broken["inputs"][0]["parameters"]["layout"] = "XYZ"
    assert not validator.is_valid(broken)
    json.dumps(document)  # serializable as it is served


# -- overrides ---------------------------------------------------------------------------------


def test_apply_overrides_changes_a_copy_and_validates() -> None:
    original = manifests.load(minimal_model())
    before = copy.deepcopy(original.data)
    changed = manifests.apply_overrides(
        original.data,
        [
            "inputs.0.parameters.color_mode=BGR",
            "inputs.0.parameters.scale=1",
            "inputs.0.parameters.resize_size=[64, 48]",
            "outputs.0.parameters.labels=[yes, no]",
            "visibility = private",
        ],
    )
    assert original.data == before
    parameters = changed.data["inputs"][0]["parameters"]
    assert parameters["color_mode"] == "BGR"
    assert parameters["scale"] == 1 and isinstance(parameters["scale"], int)
    assert parameters["resize_size"] == [64, 48]
    assert changed.data["outputs"][0]["parameters"]["labels"] == ["yes", "no"]
    assert changed.visibility == "private"
    assert changed.content_hash() != original.content_hash()
    assert manifests.load(changed.source).data == changed.data  # the source reads back the same


def test_apply_overrides_names_an_unknown_path() -> None:
    data = manifests.load(minimal_model()).data
    cases = {
        "inputs.3.parameters.layout=NHWC": "inputs.3",
        "nothing.here=1": "nothing",
        "name.first=x": "name.first",
        "inputs.0.parameters.colour_mode=BGR": "inputs.0.parameters.colour_mode",
    }
    for assignment, path in cases.items():
        with pytest.raises(ManifestError) as caught:
            manifests.apply_overrides(data, [assignment])
        assert caught.value.errors[0]["path"] == path, assignment
        assert caught.value.errors[0]["line"] is None


def test_apply_overrides_validates_the_result() -> None:
    data = manifests.load(minimal_model()).data
    with pytest.raises(ManifestError) as caught:
        manifests.apply_overrides(data, ["inputs.0.parameters.layout=XYZ", "license=2"])
    assert {(e["path"], e["message"]) for e in caught.value.errors} == {
        ("inputs.0.parameters.layout", "'XYZ' is not one of NCHW, NHWC"),
        ("license", "must be a string, not the number 2"),
    }


@pytest.mark.parametrize(
    ("assignment", "words"),
    [
        ('preprocess="def preprocess(x):\n  return x"', "custom code runs only where"),
        ("postprocess=null", "custom code runs only where"),
        ("version=2.0.0", "version cannot be overridden"),
        ("attributes.trained=false", "attributes cannot be overridden"),
        ("container.amd64.cpu=evil:latest", "container cannot be overridden"),
        ("model.graph_path=repo://models/other/1.0.0/x.onnx", "model cannot be overridden"),
    ],
)
def test_what_routes_or_marks_a_job_cannot_be_overridden(assignment: str, words: str) -> None:
    data = manifests.load(minimal_model()).data
    with pytest.raises(ManifestError) as caught:
        manifests.apply_overrides(data, [assignment])
    assert words in caught.value.errors[0]["message"]


def test_apply_overrides_refuses_a_malformed_assignment() -> None:
    data = manifests.load(minimal_model()).data
    for assignment in ("no equals sign", "=value", "description=!!python/name:os.system"):
        with pytest.raises(ManifestError):
            manifests.apply_overrides(data, [assignment])


# -- boundaries --------------------------------------------------------------------------------


def test_the_annotated_examples_in_the_docs_are_valid() -> None:
    text = (REPO / "docs" / "manifest.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", text, re.S)
    loaded = [manifests.load(example) for example in examples]
    assert [m.kind for m in loaded] == ["model", "dataset"]
    model = manifests.load_file(REPO / "manifests" / "models" / "digits-cnn" / "onnxruntime.yaml")
    documented = loaded[0].data["inputs"][0]["parameters"]
    assert documented == model.data["inputs"][0]["parameters"]


def test_manifests_module_does_not_import_django() -> None:
    code = (
        "import sys, predictors.manifests as m; m.load_file(sys.argv[1]); "
        "assert not [n for n in sys.modules if n.split('.')[0] == 'django'], 'django imported'"
    )
    path = REPO / "manifests" / "datasets" / "digits.yaml"
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
