"""Which scenario drives a job: the registry of scenarios, by name and by task.

A scenario (`predictors.evaluation.base.Scenario`) runs one batch size's share of an
evaluation: it reads and preprocesses the inputs, calls the predictor, times what it measures,
writes its spans to the sink, and answers that batch size's summary (latency, throughput,
accuracy). Each registers itself here (`register`) under its name and the tasks it scores;
`evaluate` asks `predictors.evaluation.scenarios.scenario_for`, which holds them all, for the
one of a job: the latency-only scenario for a `latency_only` job, else its task's, else the
fixed-batch closed loop.

After the scenario, a job whose option `scenario` names one of MLPerf LoadGen's (SingleStream,
MultiStream, Server, Offline) has LoadGen drive the same loaded model: a follow-up, registered
by those names (`follows`), whose answer the result keeps under its own key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from predictors.evaluation.base import Scenario

__all__ = [
    "BY_NAME",
    "BY_TASK",
    "DEFAULT",
    "FOLLOW_UPS",
    "LATENCY_ONLY",
    "FollowUp",
    "Drive",
    "follows",
    "register",
]

# The scenario of the tasks no other scenario registers, and that of a latency-only job.
DEFAULT = "fixed_batches"
LATENCY_ONLY = "latency_only"

BY_NAME: dict[str, type[Scenario]] = {}
BY_TASK: dict[str, type[Scenario]] = {}

S = TypeVar("S", bound=type[Scenario])


def register(name: str, tasks: tuple[str, ...] = ()) -> Callable[[S], S]:
    """A class decorator: the scenario named `name`, which scores `tasks`."""

    def add(scenario: S) -> S:
        if name in BY_NAME:
            raise ValueError(f"a scenario is already registered as {name!r}")
        BY_NAME[name] = scenario
        for task in tasks:
            if task in BY_TASK:
                raise ValueError(f"the {task} task already has a scenario")
            BY_TASK[task] = scenario
        return scenario

    return add


Drive = Callable[..., dict[str, Any]]
"""A follow-up's run of the loaded model, after the scenario: `drive(loop, reader,
preprocessor, options, *, start_qps, measured_qps, cancelled)` over `reader`'s inputs, with
`start_qps` half the scenario's throughput at the smallest batch size and `measured_qps` its
best; its answer, JSON-able."""


class FollowUp(NamedTuple):
    """A registered follow-up: its run, and the key of the result that keeps its answer."""

    key: str
    drive: Drive


FOLLOW_UPS: dict[str, FollowUp] = {}

D = TypeVar("D", bound=Drive)


def follows(key: str, scenarios: tuple[str, ...]) -> Callable[[D], D]:
    """A function decorator: the follow-up of the job option `scenario`'s `scenarios`, whose
    answer the result keeps as `result[key]`."""

    def add(drive: D) -> D:
        for name in scenarios:
            if name in FOLLOW_UPS:
                raise ValueError(f"the {name} scenario already has a follow-up")
            FOLLOW_UPS[name] = FollowUp(key, drive)
        return drive

    return add
