"""Build every built-in dataset and model into the artifact store, deterministically.

The zoo's entries and the files each one writes (paths relative to the store, i.e. the
``repo://`` paths of the manifests):

- ``datasets/digits/1.0.0/{train,validation}.parquet``
- ``models/digits-cnn/1.0.0/{digits-cnn.pt,digits-cnn.onnx,digits-cnn.keras,labels.txt}``
- ``datasets/shapes-color/1.0.0/{train,validation}.parquet``
- ``models/shapes-color/1.0.0/{shapes-color.pt,shapes-color.onnx,shapes-color.keras,labels.txt}``
- ``models/<name>/1.0.0/{<name>.pt,<name>.onnx,labels.txt}`` for alexnet, resnet-18, resnet-50
  and mobilenet-v2 (seeded weights, not trained)
- ``datasets/text-lines/1.0.0/{train,validation}.parquet`` (printed text lines, upright or
  upside down) and ``models/text-direction/1.0.0/text-direction.onnx``, a pretrained model
  taken from a PyPI package's wheel (``pretrained.py``)
- ``datasets/toggle-clicks/1.0.0/{train,validation}.parquet`` (streams of chunks) and
  ``models/toggle-gru/1.0.0/{toggle-gru.pt,toggle-gru.onnx,labels.txt}``, a stateful streaming
  model (``streams.py``)
- ``datasets/speech-clips/1.0.0/validation.parquet`` (clips spoken by eSpeak NG, chunk by chunk,
  ``speech.py``) and ``models/silero-vad/1.0.0/silero-vad.onnx``, Silero VAD as the
  ``silero-vad`` wheel ships it (``pretrained.py``)
- ``datasets/shapes-boxes/1.0.0/{train,validation}.parquet`` (boxed shapes) and
  ``models/shapes-detector/1.0.0/{shapes-detector.onnx,shapes-detector.pt,labels.txt}``, an
  object detector (``detection.py``)
- ``datasets/shapes-masks/1.0.0/{train,validation}.parquet`` (shapes with their masks) and
  ``models/shapes-segmenter/1.0.0/{shapes-segmenter.onnx,shapes-segmenter.pt,labels.txt}``, a
  semantic segmentation model (``segmentation.py``)
- ``datasets/shapes-sets/1.0.0/{train,validation}.parquet`` (images labelled with the kinds of
  shape they hold) and ``models/shapes-tagger/1.0.0/{shapes-tagger.onnx,shapes-tagger.pt,
  labels.txt}``, a multi-label classifier (``multilabel.py``)
- ``datasets/diabetes/1.0.0/{train,validation}.parquet`` (scikit-learn's diabetes data) and
  ``models/diabetes-mlp/1.0.0/{diabetes-mlp.onnx,diabetes-mlp.pt,labels.txt}``, a regression
  model (``regression.py``)
- ``datasets/text-transcripts/1.0.0/validation.parquet`` (printed lines with their text) and
  ``models/text-recognizer/1.0.0/{text-recognizer.onnx,charset.txt}``, PaddleOCR's text
  recognizer as the ``rapidocr-onnxruntime`` wheel ships it, with its charset (``ocr.py``)
- ``datasets/file-types/1.0.0/validation.parquet`` (files of 16 content types, their raw bytes)
  and ``models/file-type/1.0.0/{file-type.onnx,labels.txt}``, Google's Magika file-type
  classifier as the ``magika`` wheel ships it, with its labels (``filetypes.py``)
- ``datasets/speaker-clips/1.0.0/validation.parquet`` (utterances of ten voices, whole clips)
  and ``models/speaker-encoder/1.0.0/{speaker-encoder.pt,voice_encoder.py}``, Resemblyzer's
  speaker encoder as its wheel ships it (a checkpoint), with its module's source
  (``speakers.py``)
- ``datasets/piano-chords/1.0.0/validation.parquet`` (chords of struck tones, the keys that
  sound) and ``models/basic-pitch/1.0.0/basic-pitch.tflite``, Spotify's Basic Pitch as its
  wheel ships it for TensorFlow Lite (``notes.py``)
- ``datasets/text-pages/1.0.0/validation.parquet`` (pages of printed lines, each line boxed)
  and ``models/text-detector/1.0.0/text-detector.onnx``, PaddleOCR's text detector as the
  ``rapidocr-onnxruntime`` wheel ships it, decoded by its manifest's custom postprocess code
  (``textboxes.py``)
- ``datasets/short-reviews/1.0.0/{train,validation}.parquet`` (one-sentence product reviews,
  negative or positive) and ``models/review-sentiment/1.0.0/{review-sentiment.onnx,
  review-sentiment.pt,labels.txt,tokenizer.json}``, a text classifier over the ids of its
  word-level tokenizer (``reviews.py``)

An entry whose files all exist is skipped (unless ``force``); otherwise all of its files are
written again, so that the files of one model always come from the same weights. Datasets are
made in this process; each model is made in a fresh process (``models.py`` says why).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from predictors.zoo.store import VERSION, Unavailable, file_record

STANDARD_MODELS = ("alexnet", "resnet-18", "resnet-50", "mobilenet-v2")


def default_store() -> Path:
    """$ARTIFACT_ROOT, or ``artifacts`` in $MLMS_VAR_DIR (the repository's ``var``): where
    the hub's settings put the artifact store."""
    root = os.environ.get("ARTIFACT_ROOT")
    if root:
        return Path(root)
    var = os.environ.get("MLMS_VAR_DIR") or Path(__file__).resolve().parents[2] / "var"
    return Path(var).resolve() / "artifacts"


@dataclass(frozen=True)
class Entry:
    kind: str  # "dataset" or "model"
    name: str
    files: tuple[str, ...]
    requires: str | None = None  # the key of the dataset a trained model learns from
    pretrained: bool = False  # copied from a PyPI package (`pretrained.py`)
    # The module that builds a dataset or model of its own kind (`streams`: the stateful
    # streaming model and its dataset; `speech`: spoken clips), or "" for the common ones.
    builder: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}s/{self.name}"

    @property
    def directory(self) -> str:
        return f"{self.key}/{VERSION}"

    @property
    def trained(self) -> bool:
        return self.requires is not None


def _dataset(name: str) -> Entry:
    return Entry("dataset", name, ("train.parquet", "validation.parquet"))


def _trained(name: str, dataset: str) -> Entry:
    files = (f"{name}.pt", f"{name}.onnx", f"{name}.keras", "labels.txt")
    return Entry("model", name, files, requires=f"datasets/{dataset}")


def _standard(name: str) -> Entry:
    return Entry("model", name, (f"{name}.pt", f"{name}.onnx", "labels.txt"))


def _built(
    builder: str, dataset: str, model: str, suffixes: tuple[str, ...] = (".onnx", ".pt")
) -> tuple[Entry, Entry]:
    """A dataset and the model trained on it, both made by the module `builder`; the model's
    files are itself in each format (`suffixes`, in that order) and its labels."""
    return (
        Entry("dataset", dataset, ("train.parquet", "validation.parquet"), builder=builder),
        Entry(
            "model",
            model,
            (*(f"{model}{suffix}" for suffix in suffixes), "labels.txt"),
            requires=f"datasets/{dataset}",
            builder=builder,
        ),
    )


def _pretrained(name: str) -> Entry:
    from predictors.zoo.pretrained import PRETRAINED

    return Entry("model", name, (PRETRAINED[name].file,), pretrained=True)


ENTRIES: tuple[Entry, ...] = (
    _dataset("digits"),
    _trained("digits-cnn", "digits"),
    _dataset("shapes-color"),
    _trained("shapes-color", "shapes-color"),
    *(_standard(name) for name in STANDARD_MODELS),
    _dataset("text-lines"),
    _pretrained("text-direction"),
    *_built("streams", "toggle-clicks", "toggle-gru", (".pt", ".onnx")),
    Entry("dataset", "speech-clips", ("validation.parquet",), builder="speech"),
    *_built("detection", "shapes-boxes", "shapes-detector"),
    *_built("segmentation", "shapes-masks", "shapes-segmenter"),
    *_built("multilabel", "shapes-sets", "shapes-tagger"),
    *_built("regression", "diabetes", "diabetes-mlp"),
    _pretrained("silero-vad"),
    Entry("dataset", "text-transcripts", ("validation.parquet",), builder="ocr"),
    Entry("model", "text-recognizer", ("text-recognizer.onnx", "charset.txt"), builder="ocr"),
    Entry("dataset", "file-types", ("validation.parquet",), builder="filetypes"),
    Entry("model", "file-type", ("file-type.onnx", "labels.txt"), builder="filetypes"),
    Entry("dataset", "speaker-clips", ("validation.parquet",), builder="speakers"),
    Entry(
        "model", "speaker-encoder", ("speaker-encoder.pt", "voice_encoder.py"), builder="speakers"
    ),
    Entry("dataset", "piano-chords", ("validation.parquet",), builder="notes"),
    Entry("model", "basic-pitch", ("basic-pitch.tflite",), builder="notes"),
    Entry("dataset", "text-pages", ("validation.parquet",), builder="textboxes"),
    Entry("model", "text-detector", ("text-detector.onnx",), builder="textboxes"),
    Entry("dataset", "short-reviews", ("train.parquet", "validation.parquet"), builder="reviews"),
    Entry(
        "model",
        "review-sentiment",
        ("review-sentiment.onnx", "review-sentiment.pt", "labels.txt", "tokenizer.json"),
        requires="datasets/short-reviews",
        builder="reviews",
    ),
)


class UnknownEntry(ValueError):
    """A name given to ``only`` that is no zoo entry."""


def select(only: Iterable[str] | None) -> tuple[list[Entry], set[str]]:
    """The entries to build, in build order, and the keys the caller asked for.

    A name selects every entry of that name (``shapes-color`` is a dataset and a model);
    ``datasets/<name>`` or ``models/<name>`` selects one. A trained model brings its dataset.
    """
    if not only:
        return list(ENTRIES), {entry.key for entry in ENTRIES}
    asked: set[str] = set()
    for name in only:
        matches = {entry.key for entry in ENTRIES if name in (entry.name, entry.key)}
        if not matches:
            choices = sorted({e.name for e in ENTRIES} | {e.key for e in ENTRIES})
            raise UnknownEntry(f"unknown zoo entry {name!r}; choose from {', '.join(choices)}")
        asked |= matches
    needed = asked | {e.requires for e in ENTRIES if e.key in asked and e.requires}
    return [entry for entry in ENTRIES if entry.key in needed], asked


def _log(message: str) -> None:
    print(f"[zoo] {message}", file=sys.stderr, flush=True)


def _existing(store: Path, entry: Entry) -> dict:
    files = [file_record(store, f"{entry.directory}/{name}") for name in entry.files]
    if entry.kind == "dataset":
        from predictors.zoo.datasets import count_rows

        for record in files:
            record["count"] = count_rows(store / record["path"])
    return {"files": files}


def _build_model(store: str, name: str, trained: bool, builder: str = "") -> dict:
    """Runs in a fresh process: only there are torch and TensorFlow imported."""
    began = time.perf_counter()
    if builder:
        built = importlib.import_module(f"predictors.zoo.{builder}").build_model(store)
        return {**built, "seconds": round(time.perf_counter() - began, 2)}
    from predictors.zoo import models

    built = (models.build_trained_model if trained else models.build_standard_model)(store, name)
    return {**built, "seconds": round(time.perf_counter() - began, 2)}


def build(
    store: Path | str | None = None,
    only: Iterable[str] | None = None,
    force: bool = False,
    jobs: int | None = None,
) -> dict:
    """Build the zoo (or the entries named in ``only``) into ``store``; returns the summary.

    ``force`` rebuilds the named entries even when their files exist (the datasets they only
    depend on are still skipped when present). ``jobs`` models are built at a time, each in a
    fresh process (default: up to two, as many as there are CPUs).
    """
    from predictors.zoo.datasets import DATASETS, build_dataset

    store = Path(store) if store is not None else default_store()
    jobs = jobs or min(2, os.cpu_count() or 1)
    entries, asked = select(only)
    started = time.perf_counter()
    results: dict[str, dict] = {}
    pending: dict[str, Future] = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=spawn, max_tasks_per_child=1) as pool:
        for entry in entries:
            header = {"kind": entry.kind, "name": entry.name, "version": VERSION}
            complete = all((store / entry.directory / name).is_file() for name in entry.files)
            if complete and not (force and entry.key in asked):
                _log(f"{entry.key}: present, skipped")
                results[entry.key] = {**header, "status": "skipped", **_existing(store, entry)}
                continue
            if entry.kind == "dataset":
                _log(f"{entry.key}: building")
                began = time.perf_counter()
                if entry.builder:
                    module = importlib.import_module(f"predictors.zoo.{entry.builder}")
                    try:
                        built = module.build_dataset(str(store))
                    except Unavailable as error:
                        _log(f"{entry.key}: not built: {error}")
                        results[entry.key] = {
                            **header,
                            "status": "unavailable",
                            "reason": str(error),
                        }
                        continue
                else:
                    built = build_dataset(store, DATASETS[entry.name])
                results[entry.key] = {**header, "status": "built", **built}
                results[entry.key]["seconds"] = round(time.perf_counter() - began, 2)
                _log(f"{entry.key}: done in {results[entry.key]['seconds']} s")
                continue
            if entry.pretrained:
                from predictors.zoo.pretrained import build_pretrained

                _log(f"{entry.key}: copying from its package")
                began = time.perf_counter()
                built = build_pretrained(str(store), entry.name)
                results[entry.key] = {**header, "status": "built", **built}
                results[entry.key]["seconds"] = round(time.perf_counter() - began, 2)
                continue
            _log(f"{entry.key}: queued (built in its own process)")
            future = pool.submit(_build_model, str(store), entry.name, entry.trained, entry.builder)
            pending[entry.key] = future
            results[entry.key] = header
        for key, future in pending.items():
            try:
                built = future.result()
            except BaseException:
                for other in pending.values():
                    other.cancel()  # those not started yet; a running one finishes its entry
                raise
            results[key] = {**results[key], "status": "built", **built}
            _log(f"{key}: done in {results[key]['seconds']} s")
    return {
        "store": str(store),
        "seconds": round(time.perf_counter() - started, 2),
        "entries": [results[entry.key] for entry in entries],
    }
