"""A state hidden inside a model: checked before timing, refused or reset, never carried.

A model may keep a state inside itself from one call to the next (a TorchScript module whose
`forward` updates a buffer, a Keras recurrent layer made with `stateful=True`). Run as it is,
each call would see what the calls before it left behind, across inputs, batches and streams
alike, and its accuracy would be a number of the order the loop happens to call it in, not of
the model. The loop finds such a model before it times anything: it calls the model twice on
the same input (its first call, as the scenario makes it) and compares the outputs.

- Outputs that agree: the model keeps nothing between calls (`{"stateful": false}`).
- Outputs that differ, and the model's module offers a reset (`Predictor.state_reset`): the
  check is made again with the reset before each call, and must agree then. The scenario resets
  the model before each call (independent inputs) or before each stream (a stream is one call
  at a time, so that the reset concerns its stream only), outside the timed calls; the result
  says so (`{"stateful": true, "handling": "reset before each call via …"}`), and its notes too.
- Outputs that differ, and no reset (or a reset that does not help): the evaluation is refused,
  naming the model and what differed.

With `cold_start` the check comes after the first batch size's timed calls instead, so that
those stay the model's first; a model found to keep a state is then refused, reset or not.

What "agree" means, for floating-point outputs: every value of the second call within
`ATOL + rtol * scale` of the first's, where `scale` is the largest finite magnitude of that
output in either call (NaN equal to NaN); equal, for any other. The tolerance is relative to
the output's scale, not to each value, because the noise of floating-point arithmetic is: a
value near zero (a logit, a mask's edge) computed by a sum of large terms carries the rounding
of those terms. `rtol` is `RTOL_CPU` on a CPU, where a model that keeps no state gives bitwise-
equal outputs for the same input in PyTorch, ONNX Runtime and TensorFlow; `RTOL_GPU` on a GPU,
where kernels may change from call to call (cuDNN picks its convolution algorithms as it goes,
atomic additions sum in any order) and PyTorch's convolutions round to TF32's 10-bit mantissa
by default (2^-10 is about 1e-3); and never less than 8 units in the last place of the
output's type (float16's is about 1e-3). A carried state changes the outputs by a share of
their scale, far above either. A model whose outputs are random (dropout left in training
mode, a random operator) differs too, and is refused likewise: its numbers are no more
defensible. A state that the first input leaves as it was goes unseen by two calls on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from predictors.evaluation.errors import EvaluationError
from predictors.frameworks.predictor import StateReset

__all__ = ["ATOL", "RTOL_CPU", "RTOL_GPU", "check", "difference", "note", "tolerance"]

# The tolerance of two calls' floating-point outputs, relative to the output's scale on a CPU
# and on a GPU, and absolute (see the module docstring).
RTOL_CPU = 1e-5
RTOL_GPU = 1e-3
ATOL = 1e-6
# The least relative tolerance, in units in the last place of the output's type.
_ULPS = 8


def tolerance(device: str) -> float:
    """The relative tolerance on `device` (cpu, cuda[:N])."""
    return RTOL_CPU if device == "cpu" else RTOL_GPU


def _outputs(value: Any) -> list[np.ndarray]:
    """A call's outputs as a list of arrays, copied (an output may be a view of a buffer that
    the next call changes in place)."""
    if isinstance(value, Sequence) and not isinstance(value, np.ndarray):
        return [np.array(item, copy=True) for item in value]
    return [np.array(value, copy=True)]


def difference(first: Any, second: Any, rtol: float = RTOL_CPU) -> str | None:
    """What differs between two calls' outputs (an array, or a sequence of arrays), in words;
    None where they agree (floating-point outputs: within `ATOL + rtol * scale`, see the module
    docstring)."""
    a, b = _outputs(first), _outputs(second)
    if len(a) != len(b):
        return f"{len(a)} outputs on the first call, {len(b)} on the second"
    several = len(a) > 1
    for index, (x, y) in enumerate(zip(a, b, strict=True)):
        which = f"output {index}" if several else "the output"
        if x.shape != y.shape:
            return f"{which} has shape {x.shape} on the first call, {y.shape} on the second"
        floating = np.issubdtype(x.dtype, np.floating) and np.issubdtype(y.dtype, np.floating)
        allowed = 0.0
        if floating:
            magnitudes = np.abs(np.concatenate([x.ravel(), y.ravel()]).astype(np.float64))
            finite = magnitudes[np.isfinite(magnitudes)]
            scale = float(finite.max()) if finite.size else 0.0
            ulps = _ULPS * float(max(np.finfo(x.dtype).eps, np.finfo(y.dtype).eps))
            allowed = ATOL + max(rtol, ulps) * scale
            close = np.isclose(x, y, rtol=0.0, atol=allowed, equal_nan=True)
        else:
            close = x == y
        if bool(np.all(close)):
            continue
        differing = int(np.size(close) - np.count_nonzero(close))
        gaps = np.abs(x.astype(np.float64) - y.astype(np.float64))[~close]
        finite_gaps = gaps[np.isfinite(gaps)]
        largest = (
            f"largest difference {float(finite_gaps.max()):.3g}"
            + (f", {allowed:.2g} allowed" if floating else "")
            if finite_gaps.size
            else "NaN or infinity in different places"
        )
        return f"{which}: {differing} of {np.size(close)} values differ, {largest}"
    return None


def check(
    what: str,
    call: Callable[[], Any],
    offered: Callable[[], StateReset | None],
    unit: str,
    *,
    device: str = "cpu",
    after_cold: bool = False,
) -> tuple[dict[str, Any], Callable[[], None] | None, int]:
    """Call the model (`call()`: its first call, as the scenario makes it) twice and compare.

    `what` names the model in messages; `offered()` is the model's own reset, if any
    (`Predictor.state_reset`), asked for only where the outputs differ; `unit` is what each
    reset comes before (`call` or `stream`); `device` sets the tolerance. `after_cold`: the check comes after the timed
    calls of a cold start, which a state would already have reached, so a model that keeps
    one is refused, reset or not. Answers the result's `state` entry, the reset the scenario
    must make before each `unit` (None for a model that keeps nothing), and the duration of the
    first call (ns; before timing, the model's first call: cold). Raises EvaluationError for a
    model that keeps a state the loop cannot reset."""
    start = time.perf_counter_ns()
    first = _outputs(call())
    first_ns = time.perf_counter_ns() - start
    rtol = tolerance(device)
    differs = difference(first, call(), rtol)
    checked = {
        "checked": "after the cold calls of the first batch size (cold_start)"
        if after_cold
        else "before timing",
        "rtol": rtol,
        "atol": ATOL,
    }
    if differs is None:
        return {"stateful": False, **checked}, None, first_ns
    found = f"{what} returned different outputs for the same input on two calls ({differs})"
    if after_cold:
        raise EvaluationError(
            f"{found}: it keeps a state between calls (or its outputs are random). With "
            "cold_start the check comes after the cold calls, which that state already "
            f"reached, so the evaluation is refused rather than report them; without "
            f"cold_start the check comes first, and a model whose module offers a reset is "
            f"reset before each {unit}"
        )
    reset = offered()
    if reset is None:
        raise EvaluationError(
            f"{found}: it keeps a state between calls (or its outputs are random), so each "
            f"{unit} would see what the ones before it left behind; the evaluation is refused "
            "rather than carry that state. Give the model its state as inputs and outputs "
            "(state inputs, task sequence_labelling), or give its module a reset that takes no "
            "argument (a TorchScript method reset_state() exported with @torch.jit.export; a "
            "Keras recurrent layer's own, with stateful=True)"
        )
    reset.reset()
    again = _outputs(call())
    reset.reset()
    still = difference(again, call(), rtol)
    if still is not None:
        raise EvaluationError(
            f"{found}, and again with {reset.how} before each call ({still}): its reset does "
            "not make its calls repeatable, so the evaluation is refused rather than carry "
            "its state"
        )
    reset.reset()
    return (
        {
            "stateful": True,
            "reset": reset.how,
            "handling": f"reset before each {unit} via {reset.how}",
            "difference": differs,
            **checked,
        },
        reset.reset,
        first_ns,
    )


def note(what: str, state: dict[str, Any] | None) -> list[str]:
    """The result's note on a model found to keep a state (none for one that keeps none)."""
    if not state or not state.get("stateful"):
        return []
    return [
        f"{what} keeps a state inside itself between calls (two calls on the same input "
        f"differed: {state['difference']}); it was {state['handling']}, outside the timed "
        "calls, so that no input or stream saw the state another left behind"
    ]
