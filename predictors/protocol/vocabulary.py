"""The words hub and agents share: refusal codes, the task and its queues, devices, host
scopes, statuses, trace levels, span attributes, latency keys."""

from __future__ import annotations

from predictors.protocol.errors import ProtocolError

# -- refusals ----------------------------------------------------------------------------------


class Code:
    """The codes of the hub's refusals that an agent acts on (an error body's `code`)."""

    HOST_NOT_TRUSTED = "host_not_trusted"  # the launcher does not run jobs on this host
    HOST_NOT_YOURS = "host_not_yours"  # the host is registered with another agent token
    CLAIM_TAKEN = "claim_taken"  # another claim holds the job, or it finished, or moved
    CLAIM_SUPERSEDED = "claim_superseded"  # a report under a claim that is no longer current
    NOT_FOUND = "not_found"  # the evaluation does not exist (deleted)


# The refusals that mean the job is not, or no longer, this agent's: it drops the message.
NOT_OURS = frozenset(
    {
        Code.HOST_NOT_TRUSTED,
        Code.HOST_NOT_YOURS,
        Code.CLAIM_TAKEN,
        Code.CLAIM_SUPERSEDED,
        Code.NOT_FOUND,
    }
)


# -- the task and its queues --------------------------------------------------------------------

# The Celery task the hub sends (by name) and agents run: args [evaluation id, dispatch number].
TASK_NAME = "mlmodelscope.evaluate"

# -- devices ------------------------------------------------------------------------------------

# The hub's device kinds: what a job asks for and a host offers.
CPU = "cpu"
GPU = "gpu"
DEVICES = (CPU, GPU)
# A predictor's own spelling of a device: `cpu`, `cuda` (the first GPU) or `cuda:N`.
CUDA = "cuda"
LOCAL_DEVICES = (CPU, CUDA)


def device_kind(device: str) -> str:
    """The hub's name (`cpu`, `gpu`) of a predictor's device (`cpu`, `cuda`, `cuda:N`)."""
    if device == CPU:
        return CPU
    if device == CUDA or device.startswith(f"{CUDA}:") or device == GPU:
        return GPU
    raise ProtocolError("device", f"must be cpu, gpu, cuda or cuda:N; got {device!r}")


def local_device(kind: str) -> str:
    """The predictor's device string for the hub's device kind."""
    if kind not in DEVICES:
        raise ProtocolError("device", f"must be one of {', '.join(DEVICES)}; got {kind!r}")
    return CUDA if kind == GPU else CPU


def cuda_index(device: str) -> int:
    """The device index of "cuda" (0) or "cuda:N" (N); ValueError for anything else."""
    if device == CUDA:
        return 0
    prefix, _, index = device.partition(":")
    if prefix == CUDA and index.isdigit():
        return int(index)
    raise ValueError(f"not a CUDA device name: {device!r}")


def capability(framework: str, device: str) -> str:
    """What an agent offers, as the hub registers it: `onnxruntime.cpu`, `pytorch.gpu`."""
    return f"{framework}.{device_kind(device)}"


# The scopes of hosts and their queues: the operators' shared pool, a group's hosts, a user's.
POOL_SCOPE = "pool"
GROUP_SCOPE = "group"
USER_SCOPE = "user"


def host_scope(*, pool: bool, group_id: int | None, owner_id: int) -> str:
    """The scope of a host, the prefix of its queues: `pool`, `group-<id>` or `user-<id>`."""
    if pool:
        return POOL_SCOPE
    if group_id is not None:
        return f"{GROUP_SCOPE}-{group_id}"
    return f"{USER_SCOPE}-{owner_id}"


def scope_owner(scope: str) -> tuple[str, int | None]:
    """A scope read back: (`pool`, None), (`group`, its id) or (`user`, their id)."""
    if scope == POOL_SCOPE:
        return POOL_SCOPE, None
    kind, _, number = scope.partition("-")
    if kind in (GROUP_SCOPE, USER_SCOPE) and number.isdigit():
        return kind, int(number)
    raise ProtocolError("scope", f"must be pool, group-<id> or user-<id>; got {scope!r}")


def host_queue(scope: str, host: str) -> str:
    """The queue only the agent of `host` consumes. `scope` is the host's (`host_scope`)."""
    return f"{scope}.host.{host}"


def capability_queue(scope: str, framework: str, device: str) -> str:
    """The queue every agent of `scope` that runs `framework` on `device` consumes
    (`pool.onnxruntime.cpu`, `user-7.pytorch.gpu`), so that Celery balances jobs among equal
    hosts that the same users trust. An agent never consumes another scope's queues."""
    return f"{scope}.{capability(framework, device)}"


def queue_scope(queue: str) -> str:
    """The scope a queue named by `host_queue` or `capability_queue` belongs to."""
    return queue.split(".", 1)[0]


# -- statuses -----------------------------------------------------------------------------------

QUEUED = "queued"
DISPATCHED = "dispatched"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STATUSES = (QUEUED, DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
ACTIVE = (QUEUED, DISPATCHED, RUNNING)
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
# Not a status an evaluation takes: a claimant's status report that gives the job back (its
# container was killed mid-run), for the hub to dispatch it again as it does for a lost agent.
LOST = "lost"

# -- trace levels -------------------------------------------------------------------------------

# Each level records what the ones before it do, and adds its own.
TRACE_LEVEL_MEANINGS: dict[str, str] = {
    "none": "no spans: the fastest run",
    "application": "pipeline stages: read, decode, preprocess, predict, postprocess",
    "model": "+ one span per batch inference",
    "framework": "+ one span per layer",
    "ml_library": "+ framework ops and kernels",
    "system_library": "+ CUDA runtime calls, GPU kernels, copies",
    "hardware": "+ GPU and CPU counters",
    "full": "everything",
}
TRACE_LEVELS = tuple(TRACE_LEVEL_MEANINGS)
# The levels a span can have (`Attr.LEVEL`), outermost first: a timeline track each.
SPAN_LEVELS = TRACE_LEVELS[1:-1]
# The levels whose spans are kernels and ops rather than layers.
KERNEL_LEVELS = ("ml_library", "system_library", "hardware")


def at_least(level: str, threshold: str) -> bool:
    """Whether trace level `level` records what level `threshold` records."""
    return TRACE_LEVELS.index(level) >= TRACE_LEVELS.index(threshold)


class Attr:
    """Span attribute keys."""

    LEVEL = "mlms.level"  # the trace level that records the span
    CLOCK = "mlms.clock"  # what its times were read from
    OP_TYPE = "mlms.op_type"
    LAYER_INDEX = "mlms.layer_index"
    LAYER_NAME = "mlms.layer_name"
    OUTPUT_SHAPE = "mlms.output_shape"
    INPUT_SHAPES = "mlms.input_shapes"
    DEVICE = "mlms.device"
    PROVIDER = "mlms.provider"
    PREDICTORS = "mlms.predictors"
    EVALUATION = "mlms.evaluation"
    ATTEMPT = "mlms.attempt"
    HOST = "mlms.host"
    CALL = "mlms.call"
    MODULE = "mlms.module"
    THREADS = "mlms.threads"
    MERGED = "mlms.merged"
    SHAPES = "mlms.shapes"
    CORRELATION_ID = "mlms.correlation_id"
    STREAM = "mlms.stream"
    LAUNCH = "mlms.launch"
    GRID = "mlms.grid"
    BLOCK = "mlms.block"
    SHARED_MEMORY = "mlms.shared_memory"
    REGISTERS_PER_THREAD = "mlms.registers_per_thread"
    ACHIEVED_OCCUPANCY_PCT = "mlms.achieved_occupancy_pct"
    BYTES = "mlms.bytes"
    BANDWIDTH_GBPS = "mlms.bandwidth_gbps"
    PARAMETER_BYTES = "mlms.parameter_bytes"
    OUTPUT_BYTES = "mlms.output_bytes"
    ACTIVATION_BYTES = "mlms.activation_bytes"
    MAIN_THREAD_WAIT_US = "mlms.main_thread_wait_us"
    MAIN_THREAD_RUN_US = "mlms.main_thread_run_us"
    # The batch size a span was measured at: on stage, batch, layer and kernel spans (the
    # evaluation loop's own attribute, without the `mlms.` prefix).
    BATCH_SIZE = "batch_size"
    # A hardware counter sample: a span of level `hardware` and op type `counter` whose numeric
    # attributes `mlms.counter.<name>` (the name ends in its unit: `gpu.power_w`) are the values
    # read at its start.
    COUNTER_PREFIX = "mlms.counter."


COUNTER_OP_TYPE = "counter"
COUNTER_LEVEL = "hardware"


# The longest reason a status report may give (a failure's message, with custom code's
# traceback); `fit_reason` cuts a longer one in the middle.
MAX_REASON = 4000


def fit_reason(reason: str) -> str:
    """`reason`, cut in the middle to MAX_REASON characters when longer: its first lines say
    what failed, its last ones where."""
    if len(reason) <= MAX_REASON:
        return reason
    marker = "\n[… cut …]\n"
    keep = (MAX_REASON - len(marker)) // 2
    return reason[:keep] + marker + reason[-keep:]


# -- the result ---------------------------------------------------------------------------------

LATENCY_KEYS = ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms")
# Each latency key in words (where pages name what they sort or show by).
LATENCY_WORDS = dict(
    zip(
        LATENCY_KEYS,
        (
            "mean latency",
            "median latency (p50)",
            "p90 latency",
            "p99 latency",
            "fastest batch",
            "slowest batch",
            "latency spread (std)",
        ),
        strict=True,
    )
)
