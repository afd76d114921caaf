"""The zoo's regression model and its dataset: disease progression from ten measurements.

``diabetes``: scikit-learn's diabetes data as its wheel ships it (Efron et al., 2004, "Least
Angle Regression": 442 patients; ten baseline measurements, age, sex, body mass index, blood
pressure and six blood serum values, each centred and scaled as scikit-learn gives them; the
target is a quantitative measure of disease progression one year later, 25 to 346). The rows
are split once by a seeded permutation: 342 to train on, 100 to validate.

``diabetes-mlp``: a small perceptron (10 → 32 → 1) that standardises its input and gives the
target in its own units, trained with a mean squared error; exported to ONNX and TorchScript
from the same weights and checked to agree on every validation row. On the validation rows its
mean absolute error is about an ordinary least-squares fit's (46.8 against 46.2;
`build_model` checks it is within 10 %): about what these ten values can tell.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/diabetes/1.0.0/{train,validation}.parquet``: the columns ``input`` (a float32
  .npy of the ten values) and ``target`` (float64), one row per patient;
- ``models/diabetes-mlp/1.0.0/{diabetes-mlp.onnx,diabetes-mlp.pt,labels.txt}``.
"""

from __future__ import annotations

import numpy as np

from predictors.zoo.common import Column, build_generated, npy_bytes

DATASET = "diabetes"
MODEL = "diabetes-mlp"
LABELS = ("progression",)
SEED = 20261125
VALIDATION = 100
HIDDEN = 32


def make_splits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (x, y), "validation": (x, y)}: x (N, 10) float32, y (N,) float64."""
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    order = np.random.default_rng(SEED).permutation(len(data.target))
    x = np.asarray(data.data, np.float32)
    y = np.asarray(data.target, np.float64)
    validation, train = order[:VALIDATION], order[VALIDATION:]
    return {"train": (x[train], y[train]), "validation": (x[validation], y[validation])}


def columns(x: np.ndarray, y: np.ndarray) -> list[Column]:
    import pyarrow as pa

    return [("input", [npy_bytes(row) for row in x], pa.binary()), ("target", y, pa.float64())]


def build_dataset(store: str) -> dict:
    splits = make_splits()
    return build_generated(
        store, DATASET, LABELS, "npy", lambda split: columns(*splits[split]), splits
    )


# --- the model ------------------------------------------------------------------------------


def _module(x: np.ndarray, y: np.ndarray):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    class DiabetesMLP(nn.Module):
        """(N, 10) measurements -> (N, 1) progression, in the target's units."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.from_numpy(x.mean(axis=0)))
            self.register_buffer("std", torch.from_numpy(x.std(axis=0)))
            self.register_buffer("target_mean", torch.tensor([float(y.mean())]))
            self.register_buffer("target_std", torch.tensor([float(y.std())]))
            self.net = nn.Sequential(nn.Linear(x.shape[1], HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))

        def standardised(self, measurements: torch.Tensor) -> torch.Tensor:
            mean, std = self.get_buffer("mean"), self.get_buffer("std")
            out: torch.Tensor = self.net((measurements - mean) / std)
            return out

        def forward(self, measurements: torch.Tensor) -> torch.Tensor:
            scale, shift = self.get_buffer("target_std"), self.get_buffer("target_mean")
            return self.standardised(measurements) * scale + shift

    return DiabetesMLP()


def train(epochs: int = 15, batch_size: int = 32, learning_rate: float = 0.01):  # type: ignore[no-untyped-def]
    import torch

    from predictors.zoo.training import TrainingPlan, fit, make_deterministic

    make_deterministic(SEED)
    x, y = make_splits()["train"]
    model = _module(x, y)
    inputs = torch.from_numpy(x)
    targets = torch.from_numpy(((y - y.mean()) / y.std()).astype(np.float32))[:, None]

    def batch_loss(index: torch.Tensor) -> torch.Tensor:
        error = model.standardised(inputs[index]) - targets[index]
        return (error**2).mean()

    plan = TrainingPlan(epochs, batch_size, learning_rate, SEED)
    return model, fit(model, len(inputs), batch_loss, plan, MODEL, log_every=5)


def least_squares_mae() -> float:
    """The validation MAE of an ordinary least-squares fit on the training rows (scikit-learn):
    the yardstick `build_model` holds the perceptron to."""
    from sklearn.linear_model import LinearRegression

    splits = make_splits()
    fitted = LinearRegression().fit(*splits["train"])
    x, y = splits["validation"]
    return float(np.abs(fitted.predict(x) - y).mean())


def build_model(store: str) -> dict:
    """Train the perceptron, export it as ONNX and TorchScript, check that both agree and that
    it fits about as well as least squares, and store them."""
    from predictors.zoo.export import store_exports

    model, training = train()
    x, y = make_splits()["validation"]

    def check(onnx: np.ndarray) -> dict[str, float]:
        mae = float(np.abs(onnx[:, 0] - y).mean())
        baseline = least_squares_mae()
        if not mae < baseline * 1.1:
            raise RuntimeError(
                f"{MODEL}: validation MAE {mae:.2f}, more than 10 % above least squares' "
                f"{baseline:.2f}"
            )
        return {"validation_mae": mae, "least_squares_mae": baseline}

    return store_exports(
        store, MODEL, DATASET, model, training, LABELS, x, check, difference="max_abs_diff"
    )
