"""Deterministic training of the zoo's small CNNs (CPU, one thread, fixed seed and data order)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


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


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, plan: TrainingPlan, label: str) -> dict:
    """Train ``model`` in place with Adam and a cosine learning-rate decay; returns a summary.

    The caller seeds torch (``make_deterministic``) before building the model, so that the
    initial weights are fixed too. The data order comes from a generator seeded with plan.seed.
    """
    inputs = torch.from_numpy(x)
    targets = torch.from_numpy(y)
    generator = torch.Generator().manual_seed(plan.seed)
    steps_per_epoch = -(-len(inputs) // plan.batch_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=plan.learning_rate)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=plan.epochs * steps_per_epoch
    )
    loss_fn = nn.CrossEntropyLoss()
    started, cpu_started = time.perf_counter(), time.process_time()
    model.train()
    loss = torch.zeros(())
    for epoch in range(plan.epochs):
        order = torch.randperm(len(inputs), generator=generator)
        total = 0.0
        for start in range(0, len(order), plan.batch_size):
            index = order[start : start + plan.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(inputs[index]), targets[index])
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(index)
        if epoch == 0 or (epoch + 1) % 5 == 0:
            print(
                f"[zoo]   {label}: epoch {epoch + 1}/{plan.epochs} loss {total / len(inputs):.4f}",
                file=sys.stderr,
                flush=True,
            )
    model.eval()
    return {
        "epochs": plan.epochs,
        "batch_size": plan.batch_size,
        "learning_rate": plan.learning_rate,
        "optimizer": "Adam, cosine decay",
        "seed": plan.seed,
        "train_count": len(inputs),
        "final_loss": round(total / len(inputs), 6),
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_seconds": round(time.process_time() - cpu_started, 2),
    }


def fit(
    model: nn.Module,
    count: int,
    batch_loss: Callable[[torch.Tensor], torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    label: str,
    one_cycle: bool = False,
    log_every: int = 5,
) -> dict:
    """Train `model` in place with Adam over `count` examples in batches of `batch_size`, in an
    order drawn from a generator seeded with `seed`; `batch_loss(index)` is the loss of the
    examples `index`. The learning rate decays as a cosine, or rises and falls once
    (`one_cycle`). The caller seeds torch first (`make_deterministic`)."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    steps = epochs * -(-count // batch_size)
    schedule: torch.optim.lr_scheduler.LRScheduler = (
        torch.optim.lr_scheduler.OneCycleLR(optimizer, learning_rate, total_steps=steps)
        if one_cycle
        else torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    )
    started = time.perf_counter()
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(count, generator=generator)
        total = 0.0
        for start in range(0, count, batch_size):
            index = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = batch_loss(index)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(index)
        if epoch == 0 or (epoch + 1) % log_every == 0:
            print(
                f"[zoo]   {label}: epoch {epoch + 1}/{epochs} loss {total / count:.4f}",
                file=sys.stderr,
                flush=True,
            )
    model.eval()
    return {"epochs": epochs, "seconds": round(time.perf_counter() - started, 2)}
