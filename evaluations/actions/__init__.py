"""State changes of evaluations. The API views, the agent-facing API and the hub's sweep all call
these; nothing else writes an evaluation's status.

Every transition goes through `record_status`, which stores a StatusChange and sends the
WebSocket event on commit. Lifecycle:

    queued → dispatched → running → succeeded | failed | cancelled
                 ▲           │
                 └───────────┘  the host was lost: dispatched again (a new attempt)

A running evaluation is *lost* when its agent stops reporting on it (the agent reports at least
every few seconds while it works) for HOST_LIVE_SECONDS; `requeue_lost` dispatches it again,
or fails it after EVALUATION_MAX_ATTEMPTS attempts, or when no live host can run it any more.

The actions by who calls them: `launch` (a user launches and cancels), `claims` (the agent
claims a job and reports on it), `results` (the claimant's result), `sweep` (the hub's sweep);
`transitions` holds what they share: `record_status`, dispatching, and losing a job.
"""

from evaluations.actions.claims import (
    claim_evaluation,
    on_agent_restarted,
    record_progress,
    report_status,
)
from evaluations.actions.launch import cancel_evaluation, launch_evaluation
from evaluations.actions.results import record_predictions_page, record_result
from evaluations.actions.sweep import requeue_lost
from evaluations.actions.transitions import record_status

__all__ = [
    "cancel_evaluation",
    "claim_evaluation",
    "launch_evaluation",
    "on_agent_restarted",
    "record_progress",
    "record_predictions_page",
    "record_result",
    "record_status",
    "report_status",
    "requeue_lost",
]
