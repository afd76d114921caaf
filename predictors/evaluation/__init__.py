"""The evaluation loop: one model, one dataset split, one framework, several batch sizes.

The package: `options` (what to run), `run` (`evaluate`: prepare, load, measure with the job's
scenario, report), `base` (`Scenario`, the base class of every scenario, and the records they
pass), `scenario` (the registry: which scenario runs a job, by task and by name), `scenarios`
(one module each: the fixed-batch closed loop described below, the loops of the other tasks,
latency only, streams, and MLPerf LoadGen after them), `report` (`Evaluation`, the result,
`compare`), `sinks` (where spans go as the loop goes), `summaries` (metrics and notes), `state`
(a state kept inside the model), `target_ci` (timing until the median is known), `study` (one request run N times in fresh
processes), `errors`.
Every latency figure comes from the statistics layer, `predictors.statistics`.
The Chrome trace of an evaluation's spans is `predictors.tracing.chrome`, shared with the hub.

This is the only evaluation loop; every framework runs through it, so warm-up, batching, timing,
repetitions and the result mean the same thing in all of them. For each batch size:

1. *stage*: read the split (`DatasetReader`) and preprocess it batch by batch (`processing`),
   timing the read and the preprocessing apart, until `stage_bytes` of input tensors are staged
   in memory (or the split, or `limit`, ends). Staging keeps the timed predictions back to back,
   as a serving system sees them, with no decoding between them. A split that fits in one stage
   is staged once and reused by every repetition.
   At the first batch size, before anything is timed, the model is called twice on the first
   batch: outputs that differ mean a state kept inside the model between calls, which is reset
   before each call where the model's module offers a reset, and refused otherwise (`state`).
2. *warm up*: `warmup` untimed predictions on the first staged batches, before the first timed
   one (the first calls of a framework allocate, compile and pick kernels).
3. *time*: for each staged batch, `time.perf_counter_ns()` before and after `predictor.predict`;
   on a CUDA device `predictor.synchronize()` runs before the second reading, so the time covers
   the device's work (the result's `clock` says which). The timed predictions run inside the
   predictor's `inference_context()` and with Python's garbage collector paused, as `timeit`
   does.
4. *postprocess* (first pass only): softmax and top-k of the outputs (`processing.postprocess`),
   timed apart; top-1/top-5 accuracy against the dataset's labels.
5. *repeat*: steps 3 (and 1 when the split does not fit in one stage) `repeat` times; the
   latency statistics cover every timed batch of every repetition.

What is traced depends on the trace level (`predictors.protocol.TRACE_LEVELS`), each level adding to
the ones before it; nothing beyond the requested level is recorded:

- `application`: the pipeline's stages as spans: `load`, and per batch size `read` and
  `preprocess` per batch, `warm-up`, `predict` (the timed loop) and `postprocess`;
- `model`: one span per timed batch, nested in its `predict` stage;
- `framework` and finer: what the predictor traces in every call (`Predictor.take_layers`):
  layers, then framework ops (`ml_library`), then CUDA runtime calls and GPU kernels
  (`system_library`), nested in their batch span, after the last batch size;
- `hardware`: counter samples (`predictors.tracing.counters`) while the batch sizes run.

The latency statistics cover full batches only: the last batch of a split is usually smaller,
and its time is not a time for `batch_size` inputs. It is timed and counted in the throughput
(inputs / wall time of the timed loops, which includes the loop's own bookkeeping).

`evaluate` reports progress as `progress(done, total)`, counted in predictions (warm-up
included), and checks `cancelled()`: both at most every 50 ms during the timed predictions (so
that callbacks cost nothing measurable next to a fast model), after every warm-up prediction and
at the end of every stage. Once `cancelled()` is true it stops with `EvaluationCancelled`.
"""

from __future__ import annotations

from predictors.evaluation.base import CLOCK_CUDA, CLOCK_HOST, Progress, Scenario
from predictors.evaluation.errors import USER_ERRORS, EvaluationCancelled, EvaluationError
from predictors.evaluation.options import GRAPH_OPTIMIZATIONS, EvaluationOptions
from predictors.evaluation.report import Evaluation, compare
from predictors.evaluation.run import Fetch, evaluate, split_entry
from predictors.evaluation.scenarios.fixed_batches import FixedBatches
from predictors.evaluation.sinks import SpanList, SpanSink
from predictors.tracing import Span

__all__ = [
    "CLOCK_CUDA",
    "CLOCK_HOST",
    "USER_ERRORS",
    "Evaluation",
    "EvaluationCancelled",
    "EvaluationError",
    "EvaluationOptions",
    "Fetch",
    "FixedBatches",
    "GRAPH_OPTIMIZATIONS",
    "Progress",
    "Scenario",
    "Span",
    "SpanList",
    "SpanSink",
    "compare",
    "evaluate",
    "split_entry",
]
