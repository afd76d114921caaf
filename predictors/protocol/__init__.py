"""The contract between the hub and its agents, written once: importable without Django.

Both sides read every shared name from here:

- the Celery task the hub sends and agents run (`TASK_NAME`), the host scopes (`host_scope`
  makes one, `scope_owner` reads it back) and the queue names (`host_queue`,
  `capability_queue`, `queue_scope`);
- an evaluation's statuses (`STATUSES`, `ACTIVE`, `FINISHED`), and the report `LOST` that
  gives a job back;
- the trace levels, in order, with what each adds (`TRACE_LEVELS`, `TRACE_LEVEL_MEANINGS`,
  `SPAN_LEVELS`, `KERNEL_LEVELS`, `at_least`);
- the span attribute keys (`Attr`);
- one device vocabulary: `cpu` and `gpu` between hub and agent (`DEVICES`); a predictor's own
  device string (`cpu`, `cuda`, `cuda:N`: `LOCAL_DEVICES`) is read with `device_kind` and
  `cuda_index` and made with `local_device`;
- a result's latency statistics, by key (`LATENCY_KEYS`);
- the typed objects that cross the wire: `Job` (the claim's answer, with `JobOptions`) and
  `ResultUpload` (an agent's result, its `details` the loop's typed `Report`), each with
  `to_dict` and a strict `from_dict` that raises `ProtocolError` naming the field at fault.

Which tasks, inputs and outputs the evaluation loop supports, and how each is scored, is
`predictors.tasks`.

`JobOptions` is the one place a job option is written: the hub's launch request takes its
fields (with the bounds and help given here), the claim carries them, and the agent passes them
to the evaluation loop by name. Each option has one default, here (`JOB_DEFAULTS`), that every
entry point takes.

Its modules: `vocabulary` (the shared words), `options` (the job options), `wire` (`Job`,
`ResultUpload`), `report` (the loop's `Report`, section by section), `accuracy` (its accuracy,
per task), `records` (`Record`: a frozen dataclass read strictly by its fields' types),
`errors` (`ProtocolError` and the strict readers); import from the package.
"""

from __future__ import annotations

from predictors.protocol.errors import ProtocolError
from predictors.protocol.options import (
    JOB_DEFAULTS,
    LOADGEN_MODES,
    LOADGEN_SCENARIOS,
    MAX_BATCH_SIZE,
    OPTION_GROUPS,
    SCENARIOS,
    JobOptions,
    cold_start_problem,
    default_warmup,
    describe,
    inert,
    parse_share,
    scenario_problem,
    target_ci_problem,
)
from predictors.protocol.records import ABSENT, Absent, Maybe, Record
from predictors.protocol.report import Report
from predictors.protocol.vocabulary import (
    ACTIVE,
    CANCELLED,
    COUNTER_LEVEL,
    COUNTER_OP_TYPE,
    CPU,
    CUDA,
    DEVICES,
    DISPATCHED,
    FAILED,
    FINISHED,
    GPU,
    GROUP_SCOPE,
    KERNEL_LEVELS,
    LATENCY_KEYS,
    LATENCY_WORDS,
    LOCAL_DEVICES,
    LOST,
    MAX_REASON,
    NOT_OURS,
    POOL_SCOPE,
    QUEUED,
    RUNNING,
    SPAN_LEVELS,
    STATUSES,
    SUCCEEDED,
    TASK_NAME,
    TRACE_LEVEL_MEANINGS,
    TRACE_LEVELS,
    USER_SCOPE,
    Attr,
    Code,
    at_least,
    capability,
    capability_queue,
    cuda_index,
    device_kind,
    fit_reason,
    host_queue,
    host_scope,
    local_device,
    queue_scope,
    scope_owner,
)
from predictors.protocol.wire import (
    MAX_PAGES,
    BatchLatency,
    Headline,
    Job,
    ManifestRef,
    Predictions,
    PredictionsPage,
    ResultUpload,
)

__all__ = [
    "ABSENT",
    "ACTIVE",
    "Absent",
    "BatchLatency",
    "Attr",
    "CANCELLED",
    "COUNTER_LEVEL",
    "COUNTER_OP_TYPE",
    "CPU",
    "CUDA",
    "Code",
    "DEVICES",
    "DISPATCHED",
    "FAILED",
    "FINISHED",
    "GPU",
    "GROUP_SCOPE",
    "Headline",
    "JOB_DEFAULTS",
    "Job",
    "JobOptions",
    "KERNEL_LEVELS",
    "LATENCY_KEYS",
    "LATENCY_WORDS",
    "LOADGEN_MODES",
    "LOADGEN_SCENARIOS",
    "LOCAL_DEVICES",
    "LOST",
    "MAX_BATCH_SIZE",
    "MAX_REASON",
    "Maybe",
    "ManifestRef",
    "NOT_OURS",
    "OPTION_GROUPS",
    "POOL_SCOPE",
    "MAX_PAGES",
    "Predictions",
    "PredictionsPage",
    "ProtocolError",
    "QUEUED",
    "RUNNING",
    "Record",
    "Report",
    "ResultUpload",
    "SCENARIOS",
    "SPAN_LEVELS",
    "STATUSES",
    "SUCCEEDED",
    "TASK_NAME",
    "TRACE_LEVELS",
    "TRACE_LEVEL_MEANINGS",
    "USER_SCOPE",
    "at_least",
    "capability",
    "capability_queue",
    "cold_start_problem",
    "cuda_index",
    "default_warmup",
    "describe",
    "device_kind",
    "fit_reason",
    "host_queue",
    "host_scope",
    "inert",
    "local_device",
    "parse_share",
    "queue_scope",
    "scenario_problem",
    "scope_owner",
    "target_ci_problem",
]
