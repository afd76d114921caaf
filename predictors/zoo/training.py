"""Deterministic training of the zoo's small models (CPU, one thread, fixed seed and data order)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

BatchLoss = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainingPlan:
    epochs: int
    batch_size: int
    learning_rate: float
    seed: int = 0


def make_deterministic(seed: int) -> None:
    """Seed torch and pin it to deterministic kernels on one thread (process-wide settings)."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def supervised_loss(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> BatchLoss:
    """The batch loss of `model` on the examples `x` with the targets `y`, by `loss_fn`."""
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)

    def batch_loss(index: torch.Tensor) -> torch.Tensor:
        return loss_fn(model(inputs[index]), targets[index])

    return batch_loss


def _epochs(
    model: nn.Module,
    count: int,
    batch_loss: BatchLoss,
    plan: TrainingPlan,
    label: str,
    one_cycle: bool,
    log_every: int,
) -> float:
    """Train `model` in place (see `fit`); the mean loss of the last epoch."""
    generator = torch.Generator().manual_seed(plan.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=plan.learning_rate)
    steps = plan.epochs * -(-count // plan.batch_size)
    schedule: torch.optim.lr_scheduler.LRScheduler = (
        torch.optim.lr_scheduler.OneCycleLR(optimizer, plan.learning_rate, total_steps=steps)
        if one_cycle
        else torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    )
    model.train()
    total = 0.0
    for epoch in range(plan.epochs):
        order = torch.randperm(count, generator=generator)
        total = 0.0
        for start in range(0, count, plan.batch_size):
            index = order[start : start + plan.batch_size]
            optimizer.zero_grad()
            loss = batch_loss(index)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(index)
        if epoch == 0 or (epoch + 1) % log_every == 0:
            print(
                f"[zoo]   {label}: epoch {epoch + 1}/{plan.epochs} loss {total / count:.4f}",
                file=sys.stderr,
                flush=True,
            )
    model.eval()
    return total / count


def fit(
    model: nn.Module,
    count: int,
    batch_loss: BatchLoss,
    plan: TrainingPlan,
    label: str,
    *,
    one_cycle: bool = False,
    log_every: int = 5,
) -> dict:
    """Train `model` in place with Adam over `count` examples in batches of `plan.batch_size`,
    in an order drawn from a generator seeded with `plan.seed`; `batch_loss(index)` is the loss
    of the examples `index`. The learning rate decays as a cosine, or rises and falls once
    (`one_cycle`). The caller seeds torch first (`make_deterministic`), so that the initial
    weights are fixed too."""
    started = time.perf_counter()
    _epochs(model, count, batch_loss, plan, label, one_cycle, log_every)
    return {"epochs": plan.epochs, "seconds": round(time.perf_counter() - started, 2)}


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, plan: TrainingPlan, label: str) -> dict:
    """Train the classifier ``model`` in place on `x` and the classes `y` (`fit`, a cross
    entropy, cosine decay); returns a summary."""
    started, cpu_started = time.perf_counter(), time.process_time()
    batch_loss = supervised_loss(model, x, y, nn.CrossEntropyLoss())
    final_loss = _epochs(model, len(x), batch_loss, plan, label, False, 5)
    return {
        "epochs": plan.epochs,
        "batch_size": plan.batch_size,
        "learning_rate": plan.learning_rate,
        "optimizer": "Adam, cosine decay",
        "seed": plan.seed,
        "train_count": len(x),
        "final_loss": round(final_loss, 6),
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_seconds": round(time.process_time() - cpu_started, 2),
    }
