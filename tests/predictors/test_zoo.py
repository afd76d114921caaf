"""The offline model zoo: datasets and models built for real into a temporary store.

The digits dataset and the digits-cnn model are built once per session (about 20 s on two
cores); every test checks files on disk in their own runtime, with the preprocessing the
manifests document, written out here again rather than imported from the zoo.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from predictors.zoo import build
from predictors.zoo.build import UnknownEntry
from predictors.zoo.store import Staging

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

REPO_ROOT = Path(__file__).resolve().parents[2]
DIGITS = "datasets/digits/1.0.0"
DIGITS_CNN = "models/digits-cnn/1.0.0"
FRAMEWORKS = ("pytorch", "onnxruntime", "tensorflow")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    store = tmp_path_factory.mktemp("zoo-store")
    return store, build(store, only=["digits", "digits-cnn"])


@pytest.fixture(scope="module")
def validation(built: tuple[Path, dict]) -> tuple[list[bytes], np.ndarray]:
    import pyarrow.parquet as pq

    store, _ = built
    table = pq.read_table(store / DIGITS / "validation.parquet")
    return table.column("image").to_pylist(), table.column("label").to_numpy()


def documented_digits_input(images: list[bytes]) -> np.ndarray:
    """The digits-cnn manifests: Pillow, GRAY, 8x8, x = (x / 255 - 0.5) / 0.5, NCHW float32."""
    from PIL import Image

    batch = []
    for data in images:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG" and image.size == (8, 8)
            pixels = np.asarray(image.convert("L"), dtype=np.float32)
        batch.append((pixels / 255.0 - 0.5) / 0.5)
    return np.stack(batch)[:, None, :, :].astype(np.float32)


@pytest.fixture(scope="module")
def logits(built: tuple[Path, dict], validation) -> dict[str, np.ndarray]:
    """Each export loaded by its own runtime, run on the whole validation split."""
    import keras
    import onnxruntime
    import torch

    store, _ = built
    x = documented_digits_input(validation[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated upstream
        module = torch.jit.load(str(store / DIGITS_CNN / "digits-cnn.pt"))
    with torch.inference_mode():
        from_torch = module(torch.from_numpy(x)).numpy()
    session = onnxruntime.InferenceSession(
        str(store / DIGITS_CNN / "digits-cnn.onnx"), providers=["CPUExecutionProvider"]
    )
    from_onnx = session.run(["logits"], {"input": x})[0]
    model = keras.models.load_model(store / DIGITS_CNN / "digits-cnn.keras", compile=False)
    from_keras = np.asarray(model(x.transpose(0, 2, 3, 1), training=False))  # NHWC
    return {"pytorch": from_torch, "onnxruntime": from_onnx, "tensorflow": from_keras}


def entry(summary: dict, kind: str, name: str) -> dict:
    return next(e for e in summary["entries"] if e["kind"] == kind and e["name"] == name)


def tree(store: Path) -> dict[str, bytes]:
    return {
        path.relative_to(store).as_posix(): path.read_bytes()
        for path in sorted(store.rglob("*"))
        if path.is_file()
    }


def test_build_writes_exactly_the_digits_files_and_records_them(built):
    store, summary = built
    assert [(e["kind"], e["name"], e["status"]) for e in summary["entries"]] == [
        ("dataset", "digits", "built"),
        ("model", "digits-cnn", "built"),
    ]
    on_disk = tree(store)
    assert sorted(on_disk) == [
        f"{DIGITS}/train.parquet",
        f"{DIGITS}/validation.parquet",
        f"{DIGITS_CNN}/digits-cnn.keras",
        f"{DIGITS_CNN}/digits-cnn.onnx",
        f"{DIGITS_CNN}/digits-cnn.pt",
        f"{DIGITS_CNN}/labels.txt",
    ]  # and no temporary file left behind
    import hashlib

    for record in (f for e in summary["entries"] for f in e["files"]):
        data = on_disk[record["path"]]
        assert record["bytes"] == len(data)
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert on_disk[f"{DIGITS_CNN}/labels.txt"].decode().splitlines() == [str(d) for d in range(10)]


def test_digits_splits_stream_in_batches_with_the_recorded_counts(built):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store, summary = built
    counts = {f["path"]: f["count"] for f in entry(summary, "dataset", "digits")["files"]}
    assert counts == {f"{DIGITS}/train.parquet": 1437, f"{DIGITS}/validation.parquet": 360}
    for path, count in counts.items():
        parquet = pq.ParquetFile(store / path)
        assert parquet.schema_arrow.field("image").type == pa.binary()
        assert parquet.schema_arrow.field("label").type == pa.int64()
        assert parquet.metadata.num_row_groups == -(-count // 256)
        sizes, labels = [], []
        for batch in parquet.iter_batches(batch_size=256):
            sizes.append(batch.num_rows)
            labels.extend(batch.column("label").to_pylist())
        assert sum(sizes) == count and max(sizes) == 256
        assert sorted(set(labels)) == list(range(10))


def test_digits_cnn_exports_reach_top1_in_their_own_runtimes(built, validation, logits):
    _, summary = built
    labels = validation[1]
    reported = entry(summary, "model", "digits-cnn")["validation_top1"]
    for framework in FRAMEWORKS:
        top1 = float(np.mean(logits[framework].argmax(1) == labels))
        assert top1 >= 0.95, framework
        assert top1 == pytest.approx(reported[framework]), framework
        assert reported[framework] >= 0.97


def test_digits_cnn_exports_agree_on_every_validation_input(built, logits):
    _, summary = built
    for framework in ("onnxruntime", "tensorflow"):
        delta = np.abs(logits[framework] - logits["pytorch"]).max(axis=1)
        assert delta.max() < 1e-3, framework
        assert (logits[framework].argmax(1) == logits["pytorch"].argmax(1)).all()
    assert max(entry(summary, "model", "digits-cnn")["max_abs_logit_diff"].values()) < 1e-3


def test_onnx_export_has_named_io_and_a_dynamic_batch(built, validation):
    import onnxruntime

    store, _ = built
    session = onnxruntime.InferenceSession(
        str(store / DIGITS_CNN / "digits-cnn.onnx"), providers=["CPUExecutionProvider"]
    )
    [model_input], [model_output] = session.get_inputs(), session.get_outputs()
    assert (model_input.name, model_output.name) == ("input", "logits")
    assert not isinstance(model_input.shape[0], int) and model_input.shape[1:] == [1, 8, 8]
    for size in (1, 7):
        x = documented_digits_input(validation[0][:size])
        assert session.run(["logits"], {"input": x})[0].shape == (size, 10)


def test_second_build_skips_existing_files(built):
    store, first = built
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in store.rglob("*") if p.is_file()}
    again = build(store, only=["digits-cnn"])
    assert [(e["name"], e["status"]) for e in again["entries"]] == [
        ("digits", "skipped"),
        ("digits-cnn", "skipped"),
    ]
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in store.rglob("*") if p.is_file()}
    assert after == before
    assert again["entries"][1]["files"] == first["entries"][1]["files"]


def test_datasets_are_byte_identical_across_builds(built, tmp_path):
    store, _ = built
    summary = build(tmp_path, only=["datasets/digits", "datasets/shapes-color"])
    assert [e["status"] for e in summary["entries"]] == ["built", "built"]
    first = tree(tmp_path)
    assert {p: d for p, d in first.items() if p.startswith(DIGITS)} == {
        p: d for p, d in tree(store).items() if p.startswith(DIGITS)
    }
    rebuilt = build(tmp_path, only=["datasets/shapes-color"], force=True)
    assert rebuilt["entries"][0]["status"] == "built"
    assert tree(tmp_path) == first


def test_shapes_color_dataset_is_balanced_rgb_jpeg(tmp_path):
    import pyarrow.parquet as pq
    from PIL import Image

    summary = build(tmp_path, only=["datasets/shapes-color"])
    files = entry(summary, "dataset", "shapes-color")["files"]
    assert [f["count"] for f in files] == [2000, 500]
    table = pq.read_table(tmp_path / "datasets/shapes-color/1.0.0/validation.parquet")
    labels = json.loads(table.schema.metadata[b"mlmodelscope.labels"])
    assert labels[0] == "red-circle" and len(labels) == 9
    counts = np.bincount(table.column("label").to_numpy(), minlength=9)
    assert counts.min() >= 55 and counts.max() <= 56
    for data in table.column("image").to_pylist()[:20]:
        with Image.open(io.BytesIO(data)) as image:
            assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (32, 32))


@pytest.mark.skipif(
    not os.environ.get("ZOO_TEST_SHAPES"),
    reason="trains shapes-color (about a minute more); set ZOO_TEST_SHAPES=1 to run",
)
def test_shapes_color_model_reaches_top1_and_pitfalls_hurt(tmp_path):
    summary = build(tmp_path, only=["shapes-color"])
    model = entry(summary, "model", "shapes-color")
    assert min(model["validation_top1"].values()) >= 0.95
    assert max(model["max_abs_logit_diff"].values()) < 1e-3
    assert max(model["pitfall_top1_onnxruntime"].values()) < 0.5


def zoo_cli(store: Path, only: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """``python -m predictors.zoo build --store <store> --only <only>``, run in the repository."""
    return subprocess.run(
        [sys.executable, "-m", "predictors.zoo", "build", "--store", str(store), "--only", only],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_prints_a_json_summary_and_progress(built):
    store, _ = built
    result = zoo_cli(store, "digits-cnn", timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["store"] == str(store)
    assert [e["status"] for e in summary["entries"]] == ["skipped", "skipped"]
    assert "models/digits-cnn: present, skipped" in result.stderr


def test_unknown_entries_are_refused(tmp_path):
    with pytest.raises(UnknownEntry, match="nope"):
        build(tmp_path, only=["nope"])
    result = zoo_cli(tmp_path, "nope", timeout=60)
    assert result.returncode == 2 and "unknown zoo entry 'nope'" in result.stderr
    assert not any(tmp_path.iterdir())


def test_staging_leaves_nothing_behind_when_a_check_fails(tmp_path):
    with pytest.raises(RuntimeError), Staging(tmp_path, "models/m/1.0.0") as staging:
        staging.write("m.onnx", b"graph")
        staging.write("labels.txt", b"a\n")
        raise RuntimeError("exports disagree")
    assert list((tmp_path / "models/m/1.0.0").iterdir()) == []


def test_importing_the_zoo_does_not_import_the_frameworks():
    code = (
        "import sys, predictors.zoo; "
        "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_standard_architectures_have_torchvision_shapes():
    import torch

    from predictors.zoo.architectures import STANDARD, TORCHVISION_PARAMETERS

    for name, make in STANDARD.items():
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = make().eval()
            logits = model(torch.empty(2, 3, 224, 224))
        assert sum(p.numel() for p in model.parameters()) == TORCHVISION_PARAMETERS[name], name
        assert logits.shape == (2, 1000), name
