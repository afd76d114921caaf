"""The hub's side of Celery: evaluations go to the agents' queues by task *name*.

The hub defines no task: the agents (`predictors.agent.daemon`) run `predictors.protocol.TASK_NAME`
with the arguments [evaluation id, dispatch number]; everything else the agent learns from the
hub over HTTP when it claims the job. A job is sent with the transport options of its host
scope (with Redis: the scope's key prefix; see `evaluations.broker_access`). The Celery app is
the project's (`mlmodelscope.celery`), which sets itself as the default of every thread
(`app.set_default()`): `celery.current_app`.
"""

from __future__ import annotations

from celery import current_app as app
from kombu import Exchange, Queue

from evaluations import broker_access
from predictors.broker import prepare_exchanges
from predictors.protocol import TASK_NAME, queue_scope

# A broker that does not answer fails the send within a few seconds instead of hanging a request.
_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def send_evaluation(evaluation_id: str, dispatch: int, queue: str) -> None:
    scope = queue_scope(queue)
    options = dict(app.conf.broker_transport_options or {})
    options.update(broker_access.scope_options(app.conf.broker_url, scope))
    prepare_exchanges(app.conf.broker_url, options, [queue])
    with app.connection_for_write(transport_options=options) as connection:
        connection.ensure_connection(max_retries=_RETRY_POLICY["max_retries"])
        # Declared as the agents' workers declare it (a direct exchange named as the queue),
        # so that a message sent before any agent of the scope started waits for one.
        Queue(queue, Exchange(queue, type="direct"), routing_key=queue).bind(
            connection.default_channel
        ).declare()
        app.send_task(
            TASK_NAME,
            args=[evaluation_id, dispatch],
            queue=queue,
            connection=connection,
            retry=True,
            retry_policy=_RETRY_POLICY,
        )
