"""The hub's side of Celery: evaluations go to the agents' queues by task *name*.

The hub defines no task: the agents (`predictors.agent`) run `predictors.hub_client.TASK_NAME`
with the arguments [evaluation id, dispatch number]; everything else the agent learns from the
hub over HTTP when it claims the job.
"""

from __future__ import annotations

from mlmodelscope.celery import app
from predictors.broker import prepare_exchanges
from predictors.hub_client import TASK_NAME

# A broker that does not answer fails the send within a few seconds instead of hanging a request.
_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def send_evaluation(evaluation_id: str, dispatch: int, queue: str) -> None:
    prepare_exchanges(app.conf.broker_url, app.conf.broker_transport_options or {}, [queue])
    app.send_task(
        TASK_NAME,
        args=[evaluation_id, dispatch],
        queue=queue,
        retry=True,
        retry_policy=_RETRY_POLICY,
    )
