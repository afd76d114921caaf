"""The zoo's stateful streaming model and its dataset: a switch that clicks on and off.

A *stream* is a noisy signal cut into chunks of CHUNK samples. Now and then one chunk holds a
click (a loud burst); each click flips a switch, on or off. Every chunk is labelled with the
switch's position after it. Only the click chunks show anything: between two clicks the chunks
are noise alike whether the switch is on or off, so a model that sees one chunk at a time can
tell them apart only by carrying what it saw before, its *state*. That is what the model
`toggle-gru` does: a GRU whose hidden state is an input and an output of every call
(`state` in, `next_state` out, batch axis 1, as a GRU's hidden state has it), and a constant
input `gain` (the signal's scale, 1.0 for this data). Carrying the state scores nearly every
chunk; resetting it at every call leaves it guessing between clicks.

The files, as ``predictors.zoo.build`` writes them:

- ``datasets/toggle-clicks/1.0.0/{train,validation}.parquet``: one row per chunk, with the
  columns ``stream`` (int64), ``position`` (int64, the chunk's index in its stream), ``input``
  (the chunk as ``.npy`` bytes, float32, shape (CHUNK,)) and ``label`` (0 off, 1 on), ordered
  by stream and position;
- ``models/toggle-gru/1.0.0/{toggle-gru.pt,toggle-gru.onnx,labels.txt}``: the same weights as
  TorchScript and ONNX, checked to agree at build time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.zoo.common import Column, build_generated, labels_text, npy_bytes, store_model
from predictors.zoo.store import Staging

DATASET = "toggle-clicks"
MODEL = "toggle-gru"
LABELS = ("off", "on")
CHUNK = 16
HIDDEN = 24
SEED = 20261125
STREAMS = {"train": 512, "validation": 128}
LENGTH = (24, 64)  # chunks per stream, from..to
GAP = (3, 10)  # chunks between two clicks, from..to
NOISE = 0.35
ROW_GROUP_SIZE = 1024
INPUT_NAMES = ("chunk", "gain", "state")
OUTPUT_NAMES = ("logits", "next_state")


@dataclass(frozen=True)
class Streams:
    """One split: every chunk in stream order (`chunks` (rows, CHUNK) float32), its stream id,
    position and label."""

    chunks: np.ndarray
    stream: np.ndarray
    position: np.ndarray
    labels: np.ndarray


def _stream(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    length = int(rng.integers(LENGTH[0], LENGTH[1] + 1))
    chunks = (rng.standard_normal((length, CHUNK)) * NOISE).astype(np.float32)
    labels = np.zeros(length, dtype=np.int64)
    on = False  # every stream starts off, as the state starts at zero
    at = int(rng.integers(0, GAP[1]))
    click = np.sign(np.sin(np.arange(CHUNK) * 1.7)).astype(np.float32) * 2.5
    for index in range(length):
        if index == at:
            chunks[index] += click * float(rng.uniform(0.8, 1.2))
            on = not on
            at += int(rng.integers(GAP[0], GAP[1] + 1))
        labels[index] = int(on)
    return chunks, labels


def make_streams(split: str) -> Streams:
    rng = np.random.default_rng(SEED + (0 if split == "train" else 1))
    chunks, stream, position, labels = [], [], [], []
    for index in range(STREAMS[split]):
        values, classes = _stream(rng)
        chunks.append(values)
        labels.append(classes)
        stream.append(np.full(len(classes), index, dtype=np.int64))
        position.append(np.arange(len(classes), dtype=np.int64))
    return Streams(
        np.concatenate(chunks),
        np.concatenate(stream),
        np.concatenate(position),
        np.concatenate(labels),
    )


def split_columns(name: str) -> list[Column]:
    import pyarrow as pa

    split = make_streams(name)
    return [
        ("stream", split.stream, pa.int64()),
        ("position", split.position, pa.int64()),
        ("input", [npy_bytes(chunk) for chunk in split.chunks], pa.binary()),
        ("label", split.labels, pa.int64()),
    ]


def build_dataset(store: str) -> dict:
    return build_generated(store, DATASET, LABELS, "npy", split_columns, STREAMS, ROW_GROUP_SIZE)


# --- the model ------------------------------------------------------------------------------


def _module():  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    class ToggleGRU(nn.Module):
        """(chunk (N, CHUNK), gain (), state (1, N, HIDDEN)) -> (logits (N, 2), next_state)."""

        def __init__(self) -> None:
            super().__init__()
            self.encode = nn.Sequential(nn.Linear(CHUNK, HIDDEN), nn.Tanh())
            self.gru = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
            self.head = nn.Linear(HIDDEN, len(LABELS))

        def forward(
            self, chunk: torch.Tensor, gain: torch.Tensor, state: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            features = self.encode(chunk * gain).unsqueeze(1)
            out, next_state = self.gru(features, state)
            return self.head(out[:, 0]), next_state

        def sequences(self, chunks: torch.Tensor) -> torch.Tensor:
            """Training: whole streams (N, T, CHUNK) at once, from the zero state."""
            out, _ = self.gru(self.encode(chunks))
            result: torch.Tensor = self.head(out)
            return result

    return ToggleGRU()


def _padded(split: Streams) -> tuple[np.ndarray, np.ndarray]:
    """The streams as (N, T, CHUNK) chunks and (N, T) labels, padded with label -100."""
    ends = np.flatnonzero(np.diff(split.stream)) + 1
    starts = np.concatenate([[0], ends])
    stops = np.concatenate([ends, [len(split.stream)]])
    longest = int((stops - starts).max())
    chunks = np.zeros((len(starts), longest, CHUNK), dtype=np.float32)
    labels = np.full((len(starts), longest), -100, dtype=np.int64)
    for row, (start, stop) in enumerate(zip(starts, stops, strict=True)):
        chunks[row, : stop - start] = split.chunks[start:stop]
        labels[row, : stop - start] = split.labels[start:stop]
    return chunks, labels


def train(epochs: int = 20, batch_size: int = 32, learning_rate: float = 0.01):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    from predictors.zoo.training import TrainingPlan, fit, make_deterministic

    make_deterministic(SEED)
    model = _module()
    chunks, labels = _padded(make_streams("train"))
    inputs, targets = torch.from_numpy(chunks), torch.from_numpy(labels)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)

    def batch_loss(index: torch.Tensor) -> torch.Tensor:
        scores = model.sequences(inputs[index])
        loss: torch.Tensor = loss_fn(scores.reshape(-1, len(LABELS)), targets[index].reshape(-1))
        return loss

    plan = TrainingPlan(epochs, batch_size, learning_rate, SEED)
    return model, fit(model, len(inputs), batch_loss, plan, MODEL, log_every=10)


def _run_both(paths: dict, split: Streams, *, carry: bool) -> dict[str, np.ndarray]:
    """The logits of both files, stream by stream in lockstep batches of 16 streams."""
    import torch

    from predictors.zoo import export

    session = export.onnx_session(paths["onnxruntime"])
    module = export.load_torchscript(paths["pytorch"])
    results: dict[str, list[np.ndarray]] = {"onnxruntime": [], "pytorch": []}
    gain = np.asarray(1.0, dtype=np.float32)
    state = {name: np.zeros((1, 1, HIDDEN), np.float32) for name in results}
    with torch.no_grad():
        for index in range(len(split.labels)):
            chunk = split.chunks[index : index + 1]
            if split.position[index] == 0 or not carry:
                state = {name: np.zeros((1, 1, HIDDEN), np.float32) for name in results}
            logits, state["onnxruntime"] = session.run(
                None, {"chunk": chunk, "gain": gain, "state": state["onnxruntime"]}
            )
            results["onnxruntime"].append(logits)
            out, next_state = module(
                torch.from_numpy(chunk), torch.from_numpy(gain), torch.from_numpy(state["pytorch"])
            )
            results["pytorch"].append(out.numpy())
            state["pytorch"] = next_state.numpy()
    return {name: np.concatenate(values) for name, values in results.items()}


def build_model(store: str) -> dict:
    """Train the model, export it as TorchScript and ONNX, check that both agree and score
    as they should on the validation streams (state carried), and store them."""
    import torch

    from predictors.zoo import export

    model, training = train()
    validation = make_streams("validation")
    example = (
        torch.from_numpy(validation.chunks[:2]),
        torch.tensor(1.0),
        torch.zeros(1, 2, HIDDEN),
    )

    def stage(staging: Staging) -> dict[str, Any]:
        # Traced before the ONNX export, which traces the model too.
        script = export.torchscript_bytes(model, example)
        onnx = export.onnx_bytes(
            model,
            example,
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes={
                "chunk": {0: "batch"},
                "state": {1: "batch"},
                "logits": {0: "batch"},
                "next_state": {1: "batch"},
            },
        )
        paths = {
            "pytorch": staging.write(f"{MODEL}.pt", script),
            "onnxruntime": staging.write(f"{MODEL}.onnx", onnx),
        }
        staging.write("labels.txt", labels_text(LABELS))
        carried = _run_both(paths, validation, carry=True)
        delta = float(np.abs(carried["pytorch"] - carried["onnxruntime"]).max())
        if not delta < 1e-3:
            raise RuntimeError(f"{MODEL}: exports disagree (max |Δ logits| {delta:.3g})")
        accuracy = {
            "carried": float(np.mean(carried["onnxruntime"].argmax(1) == validation.labels)),
            "reset": float(
                np.mean(
                    _run_both(paths, validation, carry=False)["onnxruntime"].argmax(1)
                    == validation.labels
                )
            ),
        }
        if accuracy["carried"] < 0.97:
            raise RuntimeError(f"{MODEL}: validation accuracy {accuracy['carried']:.4f} < 0.97")
        return {
            "validation_count": len(validation.labels),
            "validation_accuracy": accuracy,
            "max_abs_logit_diff": delta,
        }

    return store_model(store, MODEL, DATASET, model, training, stage)
