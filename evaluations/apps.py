from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "evaluations"

    def ready(self) -> None:
        from evaluations.events import on_spans_received
        from evaluations.permissions import agent_may_fetch
        from hub.access import allow_agent_fetch
        from traces.signals import spans_received

        # An agent fetches the (private) files of the jobs its host runs.
        allow_agent_fetch(agent_may_fetch)
        # Spans of an evaluation's trace arrived: its live `spans` event.
        spans_received.connect(on_spans_received, dispatch_uid="evaluations.spans_received")
