"""`mlms evaluate --capture-inputs … --capture-file F` and `mlms diverge a.npz b.npz`, locally,
on the zoo's real models: the same model in two frameworks does not diverge; shapes-color with
its channels swapped diverges at the input; every misuse is one line naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from predictors.cli import main
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.frameworks


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", "shapes-color"))


def _mlms(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_two_frameworks_captured_here_do_not_diverge(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "digits.npz"
    status, _, err = _mlms(
        capsys, "evaluate", "digits-cnn", "--framework", "onnxruntime,pytorch", "--dataset",
        "digits", "--store", str(store), "--limit", "8", "--capture-inputs", "0,3",
        "--capture-file", str(capture), "--no-progress", "--format", "json",
    )  # fmt: skip
    assert status == 0, err
    files = [tmp_path / "digits.onnxruntime.npz", tmp_path / "digits.pytorch.npz"]
    assert all(file.is_file() for file in files)
    status, out, err = _mlms(capsys, "diverge", *map(str, files), "--format", "json")
    assert status == 0, err
    report = json.loads(out)
    assert report["first_divergence"] is None
    assert report["layers"] and all(row["relative_error"] < 1e-4 for row in report["layers"])
    status, out, _ = _mlms(capsys, "diverge", *map(str, files))
    assert status == 0 and "no divergence beyond the tolerance" in out


def test_channels_swapped_diverge_at_the_input(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ("evaluate", "shapes-color", "--framework", "onnxruntime", "--dataset",
              "shapes-color", "--store", str(store), "--limit", "4", "--capture-inputs", "0,1",
              "--no-progress")  # fmt: skip
    rgb, bgr = tmp_path / "rgb.npz", tmp_path / "bgr.npz"
    assert _mlms(capsys, *common, "--capture-file", str(rgb))[0] == 0
    swapped = ("--set", "inputs.0.parameters.color_mode=BGR", "--capture-file", str(bgr))
    assert _mlms(capsys, *common, *swapped)[0] == 0
    status, out, err = _mlms(capsys, "diverge", str(rgb), str(bgr))
    assert status == 0, err
    assert "the inputs differ" in out and "preprocessing" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--capture-inputs", "0"], "--capture-inputs: locally the layer outputs need"),
        (["--capture-file", "x.npz"], "--capture-file: name the inputs"),
        (["--capture-inputs", "0,0", "--capture-file", "x.npz"], "--capture-inputs"),
        (["--capture-inputs", "-1", "--capture-file", "x.npz"], "--capture-inputs"),
        (["--capture-inputs", "9999", "--capture-file", "x.npz"], "beyond"),
    ],
)
def test_capture_misuse_is_one_line_naming_the_flag(
    store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    base = ["evaluate", "digits-cnn", "--framework", "onnxruntime", "--dataset", "digits",
            "--store", str(store), "--limit", "4", "--no-progress"]  # fmt: skip
    status, out, err = _mlms(capsys, *base, *argv)
    assert status != 0 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_diverge_refuses_what_it_cannot_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    for argv, message in (
        ([str(junk), "abc"], "must both be evaluation ids or both capture files"),
        ([str(junk), str(junk)], "is not a capture"),
        ([str(tmp_path / "none.npz"), str(junk)], "no capture file"),
        (["a", "b", "--hub", ""], "--hub"),
        ([str(junk), str(junk), "--tolerance", "0"], "--tolerance"),
    ):
        status, out, err = _mlms(capsys, "diverge", *argv)
        assert status != 0 and out == "", argv
        assert message in err, (argv, err)
