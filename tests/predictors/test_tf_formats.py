"""The TensorFlow predictor loads every format a Keras model is saved in (`model.format`): the
Keras 3 file, a legacy HDF5 file, a SavedModel archive (tar.gz or zip), a float TFLite file and
a full-integer (int8) TFLite file, and gives the outputs of the Keras model it came from, by
the names the manifest declares; broken and misdeclared files are refused naming the format.

One tiny functional model (an 8x8 grayscale image, two outputs: logits and their softmax) is
built, saved and converted once for the module.
"""

from __future__ import annotations

import copy
import json
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors import manifests
from predictors.frameworks.predictor import PredictorError, PredictorOptions
from predictors.manifests import Manifest
from predictors.manifests.catalog import Catalog
from predictors.manifests.graph_check import Port

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

SIDE = 8
CLASSES = 5
LABELS = [f"class {index}" for index in range(CLASSES)]
# The names each format gives the model's two outputs (logits, probabilities).
KERAS_NAMES = ("logits", "probs")
EXPORT_NAMES = ("output_0", "output_1")


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> None:
    """TensorFlow sizes its thread pools once per process: as the loads below ask (threads=1),
    before a model is built."""
    from predictors.frameworks.tensorflow import _apply_threads

    _apply_threads(1)


@dataclass(frozen=True)
class Files:
    keras: Path
    h5: Path
    saved_model_tgz: Path
    saved_model_zip: Path
    tflite: Path
    tflite_int8: Path
    tflite_unsigned: Path  # the float TFLite file without its signature: tensor names only
    batch: np.ndarray
    logits: np.ndarray
    probs: np.ndarray


def _without_signatures(flat_buffer: bytes) -> bytes:
    """The TFLite flat buffer with its signature definitions taken out."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(flat_buffer, 0)
    model.signatureDefs = []
    builder = flatbuffers.Builder(len(flat_buffer))
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    import keras
    import tensorflow as tf

    folder = tmp_path_factory.mktemp("tf-formats")
    keras.utils.set_random_seed(0)
    image = keras.Input((SIDE, SIDE, 1), name="image")
    x = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(image)
    x = keras.layers.Flatten(name="flat")(x)
    logits = keras.layers.Dense(CLASSES, name="logits")(x)
    probs = keras.layers.Softmax(name="probs")(logits)
    model = keras.Model(image, [logits, probs], name="tiny")

    model.save(folder / "tiny.keras")
    model.save(folder / "tiny.h5")
    exported = folder / "exported"
    model.export(exported, verbose=False)
    with tarfile.open(folder / "tiny.tar.gz", "w:gz") as archive:
        archive.add(exported, arcname="tiny")  # the SavedModel in one top-level folder
    with zipfile.ZipFile(folder / "tiny-saved-model.zip", "w") as zipped:
        for path in sorted(exported.rglob("*")):  # the SavedModel at the archive's root
            zipped.write(path, path.relative_to(exported).as_posix())

    rng = np.random.default_rng(0)
    batch = rng.random((64, SIDE, SIDE, 1), dtype=np.float32)
    float_model = tf.lite.TFLiteConverter.from_saved_model(str(exported)).convert()
    (folder / "tiny.tflite").write_bytes(float_model)
    (folder / "tiny-unsigned.tflite").write_bytes(_without_signatures(float_model))

    def representative() -> Iterator[list[np.ndarray]]:
        for row in batch:
            yield [row[None]]

    converter = tf.lite.TFLiteConverter.from_saved_model(str(exported))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    (folder / "tiny-int8.tflite").write_bytes(converter.convert())

    outputs = model(batch, training=False)
    return Files(
        keras=folder / "tiny.keras",
        h5=folder / "tiny.h5",
        saved_model_tgz=folder / "tiny.tar.gz",
        saved_model_zip=folder / "tiny-saved-model.zip",
        tflite=folder / "tiny.tflite",
        tflite_int8=folder / "tiny-int8.tflite",
        tflite_unsigned=folder / "tiny-unsigned.tflite",
        batch=batch,
        logits=np.asarray(outputs[0]),
        probs=np.asarray(outputs[1]),
    )


def manifest(
    model_format: str, outputs: tuple[str, str], *, input_name: str = "image", **model: Any
) -> Manifest:
    """A valid model manifest of the tiny model in `model_format` (checked by the manifest
    rules), its inputs and outputs named as given."""
    data = copy.deepcopy(Catalog().find_model("digits-cnn", "*", "tensorflow").data)
    data["name"] = "tiny"
    data["inputs"][0]["name"] = input_name
    data["outputs"] = [
        {"name": outputs[0], "type": "logits", "parameters": {"top_k": 1, "labels": LABELS}},
        {
            "name": outputs[1],
            "type": "probabilities",
            "parameters": {"top_k": 1, "labels": LABELS},
        },
    ]
    data["model"] = {
        "graph_path": "repo://models/tiny/1.0.0/tiny.bin",
        "format": model_format,
        **model,
    }
    return manifests.load(json.dumps(data))


@contextmanager
def loaded(
    model_format: str, path: Path, outputs: tuple[str, str], **options: Any
) -> Iterator[Any]:
    from predictors.frameworks.tensorflow import TensorFlowPredictor

    predictor = TensorFlowPredictor()
    predictor.load(
        manifest(model_format, outputs, **options.pop("model", {})),
        PredictorOptions(graph_file=path, threads=1, **options),
    )
    try:
        yield predictor
    finally:
        predictor.close()


FLOAT_FORMATS = [
    ("keras", "keras", KERAS_NAMES),
    ("h5", "h5", KERAS_NAMES),
    ("saved_model", "saved_model_tgz", EXPORT_NAMES),
    ("saved_model", "saved_model_zip", EXPORT_NAMES),
    ("tflite", "tflite", EXPORT_NAMES),
]


@pytest.mark.parametrize(("model_format", "file", "names"), FLOAT_FORMATS)
def test_every_float_format_gives_the_keras_models_outputs_by_the_manifests_names(
    files: Files, model_format: str, file: str, names: tuple[str, str]
) -> None:
    with loaded(model_format, getattr(files, file), names) as predictor:
        # Two batch sizes: a TFLite input is resized to each.
        small = predictor.predict(files.batch[:3])
        whole = predictor.predict(files.batch)
        probs, logits = predictor.run({"image": files.batch}, [names[1], names[0]])
        settings = predictor.settings()
        signature = predictor.signature()

    np.testing.assert_allclose(small, files.logits[:3], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(whole, files.logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits, files.logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(probs, files.probs, rtol=1e-5, atol=1e-5)
    assert whole.dtype == np.float32 and whole.shape == (64, CLASSES)
    assert settings["format"] == model_format
    assert signature is not None
    assert signature.inputs == (Port("image", "float32", 4),)
    assert signature.outputs == tuple(Port(name, "float32", 2) for name in names)


def test_a_tflite_file_without_a_signature_is_fed_and_read_by_its_tensor_names(
    files: Files,
) -> None:
    from predictors.frameworks.tensorflow import TensorFlowPredictor

    names = ("StatefulPartitionedCall_1:0", "StatefulPartitionedCall_1:1")
    predictor = TensorFlowPredictor()
    predictor.load(
        manifest("tflite", names, input_name="serving_default_image:0"),
        PredictorOptions(graph_file=files.tflite_unsigned, threads=1),
    )
    try:
        small = predictor.predict(files.batch[:2])
        outputs = predictor.run({"serving_default_image:0": files.batch}, list(names))
        signature = predictor.signature()
        settings = predictor.settings()
    finally:
        predictor.close()

    np.testing.assert_allclose(small, files.logits[:2], rtol=1e-5, atol=1e-5)
    # The tensors are named in the converter's order, here the Keras model's.
    np.testing.assert_allclose(outputs[0], files.logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs[1], files.probs, rtol=1e-5, atol=1e-5)
    assert settings["signature"] is None
    assert signature is not None
    assert {port.name for port in signature.outputs} == set(names)


def test_an_int8_tflite_model_quantizes_its_float_input_and_dequantizes_its_outputs(
    files: Files,
) -> None:
    import tensorflow as tf

    with loaded("tflite", files.tflite_int8, EXPORT_NAMES) as predictor:
        logits = predictor.predict(files.batch)
        logits_again, probs = predictor.run({"image": files.batch}, list(EXPORT_NAMES))
        expected_input = predictor.expected_input()
        signature = predictor.signature()
        quantization = predictor.settings()["quantization"]

    interpreter = tf.lite.Interpreter(model_path=str(files.tflite_int8))
    runner = interpreter.get_signature_runner("serving_default")
    (input_scale, input_zero) = runner.get_input_details()["image"]["quantization"]
    outputs = runner.get_output_details()
    assert quantization["inputs"] == {
        "image": {"type": "int8", "scale": input_scale, "zero_point": input_zero}
    }
    for name in EXPORT_NAMES:
        scale, zero = outputs[name]["quantization"]
        assert quantization["outputs"][name] == {"type": "int8", "scale": scale, "zero_point": zero}

    # The predictor's quantization of the float batch is the one the converter describes.
    quantized = np.clip(np.round(files.batch / input_scale) + input_zero, -128, 127)
    raw = runner(image=quantized.astype(np.int8))
    step = outputs["output_0"]["quantization"][0]
    np.testing.assert_array_equal(
        logits, (raw["output_0"].astype(np.float32) - outputs["output_0"]["quantization"][1]) * step
    )
    np.testing.assert_array_equal(logits, logits_again)
    assert logits.dtype == np.float32 and probs.dtype == np.float32
    # Against the float model: within a few quantization steps, and the same top-1 class.
    assert np.abs(logits - files.logits).max() <= 4 * step
    assert np.abs(probs - files.probs).max() <= 4 * outputs["output_1"]["quantization"][0]
    agreement = np.mean(logits.argmax(axis=1) == files.logits.argmax(axis=1))
    assert agreement >= 0.95, agreement
    # It takes float batches (quantized) or int8 batches (fed as they are).
    assert expected_input == ((None, SIDE, SIDE, 1), "float32")
    assert signature is not None and signature.inputs == (Port("image", None, 4),)
    with loaded("tflite", files.tflite_int8, EXPORT_NAMES) as predictor:
        fed_as_is = predictor.predict(quantized.astype(np.int8))
    np.testing.assert_array_equal(fed_as_is, logits)


def test_a_signature_the_saved_model_lacks_is_refused_naming_its_signatures(
    files: Files,
) -> None:
    with pytest.raises(PredictorError) as refused:
        with loaded(
            "saved_model", files.saved_model_tgz, EXPORT_NAMES, model={"signature": "predict"}
        ):
            pass
    message = str(refused.value)
    assert "tensorflow cannot load tiny.tar.gz as a SavedModel archive" in message
    assert "no signature 'predict'; its signatures: serve, serving_default" in message

    with loaded(
        "saved_model", files.saved_model_tgz, EXPORT_NAMES, model={"signature": "serve"}
    ) as predictor:
        np.testing.assert_allclose(
            predictor.predict(files.batch), files.logits, rtol=1e-5, atol=1e-5
        )
        assert predictor.settings()["signature"] == "serve"


@pytest.mark.parametrize(
    ("model_format", "file"),
    [("saved_model", "saved_model_tgz"), ("tflite", "tflite")],
)
def test_output_names_the_model_does_not_have_are_refused_when_it_loads(
    files: Files, model_format: str, file: str
) -> None:
    with pytest.raises(PredictorError) as refused:
        with loaded(model_format, getattr(files, file), KERAS_NAMES):
            pass
    message = str(refused.value)
    assert "tiny 1.0.0: the manifest does not fit its model (" in message
    assert (
        "outputs.0.name: 'logits' is not an output of the graph (its outputs: "
        "output_0 (float32, rank 2), output_1 (float32, rank 2))"
    ) in message


@pytest.mark.parametrize(("model_format", "file"), [("keras", "keras"), ("h5", "h5")])
def test_a_keras_model_in_either_keras_format_is_run_by_its_output_layer_names(
    files: Files, model_format: str, file: str
) -> None:
    with loaded(model_format, getattr(files, file), KERAS_NAMES) as predictor:
        with pytest.raises(PredictorError, match=r"no output 'scores' \(its outputs, by the"):
            predictor.run({"image": files.batch}, ["scores", "probs"])
        captured = predictor.layer_outputs(files.batch[:2])
    assert [layer.name for layer in captured] == ["conv", "flat", "logits", "probs"]
    np.testing.assert_allclose(captured[2].array, files.logits[:2], rtol=1e-5, atol=1e-5)


def _garbage(path: Path) -> Path:
    path.write_bytes(b"this is not a model at all" * 4)
    return path


def _truncated(source: Path, path: Path) -> Path:
    path.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    return path


def _archive_without_saved_model(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        readme = path.with_suffix(".txt")
        readme.write_text("no model here")
        archive.add(readme, arcname="model/README.txt")
    return path


BROKEN = [
    ("tflite", lambda f, d: _garbage(d / "model.tflite"), "as a TFLite model: "),
    ("tflite", lambda f, d: _truncated(f.tflite, d / "model.tflite"), "as a TFLite model: "),
    (
        "tflite",
        lambda f, d: shutil.copy(f.keras, d / "model.tflite"),
        "as a TFLite model: it is a Keras 3 file: give model.format: keras",
    ),
    (
        "saved_model",
        lambda f, d: _garbage(d / "model.tar.gz"),
        "as a SavedModel archive: it is not a tar, tar.gz or zip archive",
    ),
    (
        "saved_model",
        lambda f, d: _truncated(f.saved_model_tgz, d / "model.tar.gz"),
        "as a SavedModel archive: the tar archive cannot be read",
    ),
    (
        "saved_model",
        lambda f, d: _archive_without_saved_model(d / "model.tar.gz"),
        "as a SavedModel archive: the archive holds no saved_model.pb",
    ),
    (
        "saved_model",
        lambda f, d: shutil.copy(f.keras, d / "model.zip"),
        "as a SavedModel archive: the archive holds no saved_model.pb, at its root or in a "
        "top-level folder; it is a Keras 3 file: give model.format: keras",
    ),
    (
        "saved_model",
        lambda f, d: shutil.copy(f.tflite, d / "model.tar"),
        "as a SavedModel archive: it is not a tar, tar.gz or zip archive; it is a TFLite model: "
        "give model.format: tflite",
    ),
    ("keras", lambda f, d: _truncated(f.keras, d / "model.keras"), "as a Keras 3 file: "),
    (
        "keras",
        lambda f, d: shutil.copy(f.h5, d / "model.keras"),
        "as a Keras 3 file: it is a Keras HDF5 file: give model.format: h5",
    ),
    (
        "keras",
        lambda f, d: shutil.copy(f.saved_model_tgz, d / "model.keras"),
        "as a Keras 3 file: it is a tar archive (an archive of a SavedModel folder is "
        "model.format: saved_model)",
    ),
    ("h5", lambda f, d: _truncated(f.h5, d / "model.h5"), "as a Keras HDF5 file: "),
    (
        "h5",
        lambda f, d: shutil.copy(f.tflite, d / "model.h5"),
        "as a Keras HDF5 file: it is a TFLite model: give model.format: tflite",
    ),
]


@pytest.mark.parametrize(("model_format", "make", "words"), BROKEN)
def test_a_broken_or_misdeclared_file_is_refused_naming_its_format(
    files: Files, tmp_path: Path, model_format: str, make: Any, words: str
) -> None:
    path = Path(make(files, tmp_path))
    with pytest.raises(PredictorError) as refused:
        with loaded(model_format, path, EXPORT_NAMES):
            pass
    assert f"tensorflow cannot load {path.name} {words}" in str(refused.value), str(refused.value)


def _tar_with(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    import io

    with tarfile.open(path, "w") as archive:
        archive.addfile(member, io.BytesIO(data) if data else None)
    return path


def test_an_unsafe_archive_is_refused_before_anything_is_unpacked(tmp_path: Path) -> None:
    from predictors.frameworks.tf_formats import unpack_saved_model

    link = tarfile.TarInfo("model/saved_model.pb")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    escape = tarfile.TarInfo("../saved_model.pb")
    escape.size = 4
    zipped = tmp_path / "escape.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("../../saved_model.pb", b"data")
    big = tarfile.TarInfo("saved_model.pb")
    big.size = 2048
    cases = [
        (_tar_with(tmp_path / "link.tar", link), "holds a link (model/saved_model.pb)"),
        (_tar_with(tmp_path / "escape.tar", escape, b"data"), "cannot be read"),
        (zipped, "holds ../../saved_model.pb, a path outside the folder"),
        (_tar_with(tmp_path / "big.tar", big, b"x" * 2048), "unpacks to more than"),
    ]
    for archive_path, words in cases:
        into = tmp_path / f"into-{archive_path.name}"
        into.mkdir()
        with pytest.raises(ValueError, match=None) as refused:
            unpack_saved_model(archive_path, into, max_bytes=1024)
        assert words in str(refused.value), str(refused.value)
        assert not any(into.iterdir())
    assert not (tmp_path / "saved_model.pb").exists()


def test_close_removes_the_unpacked_saved_model(
    files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with loaded("saved_model", files.saved_model_tgz, EXPORT_NAMES):
        assert [p.name.startswith("mlms-saved-model-") for p in tmp_path.iterdir()] == [True]
    assert list(tmp_path.iterdir()) == []


def test_a_tflite_model_refuses_layer_tracing_and_capture_naming_its_format(
    files: Files,
) -> None:
    with pytest.raises(PredictorError, match=r"TFLite interpreter records nothing .*tflite"):
        with loaded("tflite", files.tflite, EXPORT_NAMES, trace_level="framework"):
            pass
    for model_format, file in (("tflite", "tflite"), ("saved_model", "saved_model_tgz")):
        with loaded(model_format, getattr(files, file), EXPORT_NAMES) as predictor:
            with pytest.raises(PredictorError, match=f"model.format {model_format}"):
                predictor.layer_outputs(files.batch[:1])
            assert predictor.state_reset() is None


@pytest.mark.parametrize("level", ["framework", "ml_library"])
def test_a_saved_model_is_traced_by_the_profiler_one_layer_per_name_scope(
    files: Files, level: str
) -> None:
    with loaded("saved_model", files.saved_model_tgz, EXPORT_NAMES, trace_level=level) as (
        predictor
    ):
        predictor.predict(files.batch[:4])  # a warm-up call, before tracing starts
        predictor.start_tracing()
        for _ in range(2):
            outputs = predictor.predict(files.batch[:4])
        predictor.stop_tracing()
        calls = predictor.take_layers()
        summary = predictor.trace_summary()

    np.testing.assert_allclose(outputs, files.logits[:4], rtol=1e-5, atol=1e-5)
    assert calls is not None and len(calls) == 3 and calls[0] == []
    assert summary is not None and summary["calls"] == 2
    for steps in calls[1:]:
        layers = [step.name for step in steps if step.level == "framework"]
        assert {"conv_1", "logits_1", "probs_1"} <= set(layers), layers
        ops = [step for step in steps if step.level == "ml_library"]
        if level == "framework":
            assert ops == []
        else:
            assert ops and all(steps[op.parent].level == "framework" for op in ops)
